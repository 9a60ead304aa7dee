//! A simulation of billion-context's measured stream handling.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use shimgate_shim_api::sse::{parse_all, SseEvent};

/// What billion-context does to an OpenAI stream (measured on the real one):
/// content frames (a choice with a delta, no finish, no tool calls) pass byte
/// for byte; finish, usage, `[DONE]`, error and choice-less frames are
/// swallowed; tool-call fragments come back as one frame with whole calls;
/// then its own `stop` finish with the last usage, and its own `[DONE]`.
pub fn bili(openai: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut usage = json!({"total_tokens": 0});
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for ev in parse_all(openai).unwrap_or_default() {
        if ev.data.trim_ascii() == b"[DONE]" {
            break;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&ev.data) else {
            continue;
        };
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            usage = u.clone();
        }
        let Some(choice) = v.pointer("/choices/0") else {
            continue;
        };
        if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
            continue;
        }
        if let Some(list) = choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
        {
            for (pos, t) in list.iter().enumerate() {
                let s = |p: &str| {
                    t.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                let index = t.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                let call = calls.entry(index).or_default();
                if call.0.is_empty() {
                    call.0 = s("/id");
                }
                if call.1.is_empty() {
                    call.1 = s("/function/name");
                }
                call.2.push_str(&s("/function/arguments"));
            }
            continue;
        }
        if choice.get("delta").is_some() {
            pass(&mut out, &ev);
        }
    }
    let head =
        json!({"id":"chatcmpl-proxy-1","object":"chat.completion.chunk","created":1,"model":"m"});
    if !calls.is_empty() {
        let list: Vec<Value> = calls
            .into_iter()
            .map(|(i, (id, name, args))| {
                json!({"index":i,"id":id,"type":"function","function":{"name":name,"arguments":args}})
            })
            .collect();
        let mut frame = head.clone();
        frame["choices"] = json!([{"index":0,"delta":{"tool_calls":list},"finish_reason":null}]);
        data_line(&mut out, &frame);
    }
    let mut finish = head;
    finish["choices"] = json!([{"index":0,"delta":{},"finish_reason":"stop"}]);
    finish["usage"] = usage;
    data_line(&mut out, &finish);
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn pass(out: &mut Vec<u8>, ev: &SseEvent) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&ev.data);
    out.extend_from_slice(b"\n\n");
}

fn data_line(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

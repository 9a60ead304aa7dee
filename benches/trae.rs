//! The trae shim's hot paths against naive `serde_json::Value` versions in
//! the same run: SOLO → OpenAI conversion of a long answer (through
//! `SseParser`, 4 KiB chunks) and fold/restore of a large request body.
//!
//! Run: `cargo bench -p shimgate --bench trae` (short runs: 2 shared cores).
//!
//! Results, 2026-11-29, `nproc` = 2, `lscpu` model "AMD EPYC" (2.0 GHz),
//! rustc 1.95.0, bench profile, quiet machine (load average under 1); both
//! versions run back to back in one process. Median time and throughput of
//! input bytes:
//!
//! | bench | shim | naive `Value` | ratio |
//! |---|---|---|---|
//! | convert (3 600 SOLO events, 360 KiB, 4 KiB chunks) | 2.85 ms, 123.2 MiB/s | 15.52 ms, 22.7 MiB/s | 5.4× |
//! | fold (400 messages, 30 tools, 780 KiB) | 2.25 ms, 336.8 MiB/s | 2.53 ms, 299.6 MiB/s | 1.1× |
//! | restore (same body) | 0.64 ms, 1.16 GiB/s | 2.83 ms, 268.4 MiB/s | 4.4× |
//!
//! Restore was 2.4× (1.25 ms) before its JSON writer stopped testing every
//! byte of a string on its own (a block of 32 at a time now, which the
//! compiler vectorises) and stopped serialising small values into a buffer
//! of their own. Earlier runs on a machine shared with other builds: 5.0×,
//! 1.2×, 2.2× and 5.1×, 1.4×, 2.7×.
//!
//! Fold has to build two owned `Value`s (the contract keeps the parsed
//! original and hands the proxy an OpenAI `Value`), exactly what the naive
//! version builds, so parsing dominates both and there is little to win;
//! restore writes JSON straight from the two bodies instead of cloning the
//! original into a new tree.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Map, Value};
use shimgate_shim_api::sse::{SseParser, DONE_FRAME};
use shimgate_shim_api::{Shim, StreamTranslator};
use shimgate_shim_trae::{ToOpenAi, TraeShim};
use std::time::Duration;

/// A long answer: metadata, reasoning, ~3000 text frames, a tool call in
/// 200 fragments, usage, done.
fn solo_stream() -> Vec<u8> {
    let mut s = String::new();
    s.push_str("id:1\nevent:metadata\ndata:{\"model\":\"\",\"session_id\":\"6f1c2a9e\",\"prompt_completion_id\":0}\n\n");
    s.push_str(
        "id:2\nevent:timing_cost\ndata:{\"name\":\"llm_raw_chat_v2\",\"preprocess_timing\":71}\n\n",
    );
    for i in 0..200 {
        s.push_str(&format!(
            "event:output\ndata:{{\"response\":\"\",\"reasoning_content\":\"step {i}: 先看看 the code\",\"tool_calls\":null}}\n\n"
        ));
    }
    for i in 0..3000 {
        let text = match i % 3 {
            0 => format!("中国的首都是北京。{i} "),
            1 => format!("fn main() {{ println!(\\\"{i}\\\"); }}\\n"),
            _ => "The quick brown fox ".to_owned(),
        };
        s.push_str(&format!(
            "event:output\ndata:{{\"response\":\"{text}\",\"reasoning_content\":\"\",\"tool_calls\":null}}\n\n"
        ));
    }
    s.push_str("event:output\ndata:{\"response\":\"\",\"reasoning_content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function_call\":{\"name\":\"write_file\",\"arguments\":\"\"}}]}\n\n");
    for i in 0..200 {
        s.push_str(&format!(
            "event:output\ndata:{{\"response\":\"\",\"reasoning_content\":null,\"tool_calls\":[{{\"index\":0,\"id\":\"\",\"type\":\"function\",\"function_call\":{{\"name\":\"\",\"arguments\":\"line {i}\\\\n\"}}}}]}}\n\n"
        ));
    }
    s.push_str("event:extra_info\ndata:{\"reasoning_content\":\"...\"}\n\n");
    s.push_str("event:token_usage\ndata:{\"prompt_tokens\":21000,\"completion_tokens\":4200,\"total_tokens\":25200,\"reasoning_tokens\":900}\n\n");
    s.push_str("event:done\ndata:{\"finish_reason\":\"tool_calls\"}\n\n");
    s.into_bytes()
}

fn chunks(bytes: &[u8]) -> Vec<Bytes> {
    bytes.chunks(4096).map(Bytes::copy_from_slice).collect()
}

fn shim_convert(chunks: &[Bytes], request: &Value) -> usize {
    let mut t = ToOpenAi::with_identity(request, "chatcmpl-bench", 1);
    let mut parser = SseParser::new();
    let mut out = bytes::BytesMut::with_capacity(64 * 1024);
    let mut total = 0;
    for c in chunks {
        parser.push(c.clone());
        while let Ok(Some(ev)) = parser.next_event() {
            t.event(&ev, &mut out);
        }
        // The runtime sends each read's output on; keep the buffer small.
        total += out.len();
        out.clear();
    }
    total
}

/// The obvious version: every frame parsed into a `Value`, every chunk
/// built with `json!` and serialised.
fn naive_convert(chunks: &[Bytes], model: &str) -> usize {
    let mut parser = SseParser::new();
    let mut out = Vec::with_capacity(64 * 1024);
    let mut total = 0;
    let mut usage = Value::Null;
    let mut named = false;
    let chunk = |choices: Value, extra: Option<(&str, Value)>| {
        let mut c = json!({"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1,"model":model,"choices":choices});
        if let Some((k, v)) = extra {
            c[k] = v;
        }
        c
    };
    let write = |out: &mut Vec<u8>, v: &Value| {
        out.extend_from_slice(b"data: ");
        serde_json::to_writer(&mut *out, v).unwrap();
        out.extend_from_slice(b"\n\n");
    };
    for c in chunks {
        parser.push(c.clone());
        while let Ok(Some(ev)) = parser.next_event() {
            let data: Value = serde_json::from_slice(&ev.data).unwrap_or(Value::Null);
            let name =
                String::from_utf8_lossy(ev.event.as_deref().unwrap_or_default()).into_owned();
            match name.as_str() {
                "output" => {
                    let mut delta = Map::new();
                    for (from, to) in [
                        ("response", "content"),
                        ("reasoning_content", "reasoning_content"),
                    ] {
                        if let Some(s) = data[from].as_str().filter(|s| !s.is_empty()) {
                            delta.insert(to.into(), Value::from(s));
                        }
                    }
                    if let Some(calls) = data["tool_calls"].as_array() {
                        let calls: Vec<Value> = calls
                            .iter()
                            .enumerate()
                            .map(|(i, t)| {
                                let mut call = json!({"index": t["index"].as_u64().unwrap_or(i as u64),
                                    "function": {"arguments": t["function_call"]["arguments"]}});
                                if let Some(id) = t["id"].as_str().filter(|s| !s.is_empty()) {
                                    call["id"] = json!(id);
                                    call["type"] = json!("function");
                                }
                                if let Some(n) = t["function_call"]["name"].as_str().filter(|s| !s.is_empty()) {
                                    call["function"]["name"] = json!(n);
                                    named = true;
                                }
                                call
                            })
                            .collect();
                        delta.insert("tool_calls".into(), Value::Array(calls));
                    }
                    let v = chunk(
                        json!([{"index":0,"delta":delta,"finish_reason":null}]),
                        None,
                    );
                    write(&mut out, &v);
                }
                "done" => {
                    let reason = if named {
                        "tool_calls"
                    } else {
                        data["finish_reason"].as_str().unwrap_or("stop")
                    };
                    write(
                        &mut out,
                        &chunk(json!([{"index":0,"delta":{},"finish_reason":reason}]), None),
                    );
                    write(&mut out, &chunk(json!([]), Some(("usage", usage.clone()))));
                    out.extend_from_slice(DONE_FRAME);
                }
                other => {
                    if other == "token_usage" {
                        usage = json!({"prompt_tokens": data["prompt_tokens"], "completion_tokens": data["completion_tokens"],
                            "total_tokens": data["total_tokens"],
                            "completion_tokens_details": {"reasoning_tokens": data["reasoning_tokens"]}});
                    }
                    let carried = json!({"event": other, "data": data});
                    let v = chunk(
                        json!([{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]),
                        Some(("x_solo", carried)),
                    );
                    write(&mut out, &v);
                }
            }
        }
        total += out.len();
        out.clear();
    }
    total
}

/// A long Max-mode conversation: 400 messages (text parts, tool calls,
/// tool results), 30 tools with string schemas.
fn solo_body() -> Vec<u8> {
    let filler = "Lorem ipsum dolor sit amet, 中文内容 consectetur adipiscing elit. ".repeat(40);
    let mut messages = vec![json!({"role":"system","content":[{"type":"text","text":filler}]})];
    for i in 0..133 {
        messages.push(
            json!({"role":"user","content":[{"type":"text","text":format!("[u{i}] {filler}")}]}),
        );
        messages.push(json!({"role":"assistant","content":null,"tool_calls":[{"id":format!("call_{i}"),"type":"function",
            "function_call":{"name":"read_file","arguments":format!("{{\"path\":\"src/f{i}.rs\"}}")}}]}));
        messages.push(json!({"role":"tool","tool_call_id":format!("call_{i}"),"content":[{"type":"text","text":filler}]}));
    }
    let tools: Vec<Value> = (0..30)
        .map(|i| {
            let params = json!({"type":"object","properties":{"path":{"type":"string","description":"file path"},
                "limit":{"type":"integer"}},"required":["path"]});
            json!({"type":"function","function":{"name":format!("tool_{i}"),"description":"Does a thing with a file",
                "parameters": params.to_string()}})
        })
        .collect();
    let body = json!({"messages":messages,"model":"glm-5.2","config_name":"glm-5.2","function":"solo_work_remote",
        "stream":true,"tools":tools,"temperature":0.2,
        "model_auto_selection":{"strategy":"max","fallback_to_advance_model":null,"entitlement_id":null},
        "model_selection_strategy":"max","mode_type":1,"context_window_size":1000000,"prompt_max_tokens":936000,
        "max_tokens":64000});
    serde_json::to_vec(&body).unwrap()
}

const SOLO_ONLY: [&str; 7] = [
    "config_name",
    "function",
    "model_auto_selection",
    "model_selection_strategy",
    "mode_type",
    "context_window_size",
    "prompt_max_tokens",
];

fn naive_fold(native: &[u8]) -> (Value, Value) {
    let original: Value = serde_json::from_slice(native).unwrap();
    let mut openai = original.clone();
    let obj = openai.as_object_mut().unwrap();
    for k in SOLO_ONLY {
        obj.remove(k);
    }
    for m in obj["messages"].as_array_mut().unwrap() {
        if let Some(parts) = m["content"].as_array() {
            let texts: Vec<String> = parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect();
            m["content"] = json!(texts.join("\n"));
        }
        if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for c in calls {
                let f = c.as_object_mut().unwrap().remove("function_call").unwrap();
                c["function"] = f;
            }
        }
    }
    for t in obj["tools"].as_array_mut().unwrap() {
        let p: Value = serde_json::from_str(t["function"]["parameters"].as_str().unwrap()).unwrap();
        t["function"]["parameters"] = p;
    }
    (original, openai)
}

fn naive_restore(original: &Value, openai: &Value) -> Vec<u8> {
    let mut body = original.clone();
    let messages: Vec<Value> = openai["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if let Some(s) = m["content"].as_str() {
                m["content"] = json!([{"type":"text","text":s}]);
            }
            if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for c in calls {
                    let f = c.as_object_mut().unwrap().remove("function").unwrap();
                    c["function_call"] = f;
                }
            }
            m
        })
        .collect();
    body["messages"] = Value::Array(messages);
    let tools: Vec<Value> = openai["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t["function"]["parameters"] = json!(t["function"]["parameters"].to_string());
            t
        })
        .collect();
    body["tools"] = Value::Array(tools);
    body["temperature"] = openai["temperature"].clone();
    serde_json::to_vec(&body).unwrap()
}

fn bench(c: &mut Criterion) {
    let stream = solo_stream();
    let pieces = chunks(&stream);
    let request = json!({"model":"glm-5.2","stream":true});
    assert!(shim_convert(&pieces, &request) > 0 && naive_convert(&pieces, "glm-5.2") > 0);
    let mut g = c.benchmark_group("trae_convert");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("shim", |b| {
        b.iter(|| shim_convert(black_box(&pieces), &request))
    });
    g.bench_function("naive_value", |b| {
        b.iter(|| naive_convert(black_box(&pieces), "glm-5.2"))
    });
    g.finish();

    let body = solo_body();
    let folded = TraeShim.fold(&body).unwrap();
    let (n_orig, n_openai) = naive_fold(&body);
    let restored: Value =
        serde_json::from_slice(&TraeShim.restore(&folded.original, &folded.openai).unwrap())
            .unwrap();
    assert_eq!(
        restored, folded.original,
        "the benched restore must be right"
    );
    let mut g = c.benchmark_group("trae_fold");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("shim", |b| {
        b.iter(|| TraeShim.fold(black_box(&body)).unwrap())
    });
    g.bench_function("naive_value", |b| b.iter(|| naive_fold(black_box(&body))));
    g.finish();
    let mut g = c.benchmark_group("trae_restore");
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.bench_function("shim", |b| {
        b.iter(|| {
            TraeShim
                .restore(black_box(&folded.original), black_box(&folded.openai))
                .unwrap()
        })
    });
    g.bench_function("naive_value", |b| {
        b.iter(|| naive_restore(black_box(&n_orig), black_box(&n_openai)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);

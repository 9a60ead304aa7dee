//! Fold and rebuild of the ask.

use serde_json::{json, Value};

use super::*;

const REQUEST_ID: &str = "3f9a1c52-7d4e-4b8a-9c21-5e6f7a8b9c0d";

/// An ask as qodercli sends it, key order kept.
fn sample_ask() -> Value {
    json!({
        "agent_id": "agent_common",
        "aliyun_user_type": "",
        "business": {"product": "cli", "version": "1.1.34", "type": "agent", "stage": "start"},
        "chat_context": {
            "text": "list the files",
            "features": [],
            "extra": {"context": [], "modelConfig": {"key": "qmodel_38max", "is_reasoning": true}, "originalContent": "list the files"},
            "chatPrompt": "",
            "imageUrls": null
        },
        "chat_record_id": REQUEST_ID,
        "chat_task": "FREE_INPUT",
        "custom_model": null,
        "is_reply": true,
        "is_retry": false,
        "messages": [
            {"role": "system", "content": "You are qoder."},
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "a.rs\nb.rs"}
        ],
        "model_config": {"key": "qmodel_38max", "source": "system", "is_reasoning": true},
        "parameters": {"max_tokens": 32000, "reasoning_effort": "high", "enable_thinking": true, "context_length": 200000, "temperature": 0.2},
        "request_id": REQUEST_ID,
        "request_set_id": "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a",
        "session_id": "sess-42",
        "session_type": "qodercli",
        "source": 1,
        "stream": true,
        "system": "You are qoder.",
        "task_id": "common",
        "tools": [{"type": "function", "function": {"name": "list_dir", "parameters": {"type": "object"}}}],
        "version": "3"
    })
}

fn fold_value(ask: &Value) -> Folded<OriginalAsk> {
    fold(&serde_json::to_vec(ask).unwrap()).unwrap()
}

fn is_uuid_v4(id: &str) -> bool {
    let groups: Vec<&str> = id.split('-').collect();
    groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && id
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        && groups[2].starts_with('4')
        && matches!(groups[3].chars().next(), Some('8' | '9' | 'a' | 'b'))
}

#[test]
fn fold_builds_an_openai_chat_body() {
    let folded = fold_value(&sample_ask());
    let openai = &folded.openai;
    let keys: Vec<&str> = openai
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "model",
            "messages",
            "tools",
            "max_tokens",
            "temperature",
            "reasoning_effort",
            "stream"
        ]
    );
    assert_eq!(openai["model"], "qmodel_38max");
    assert_eq!(openai["messages"], sample_ask()["messages"]);
    assert_eq!(openai["tools"], sample_ask()["tools"]);
    assert_eq!(openai["max_tokens"], 32000);
    assert_eq!(openai["reasoning_effort"], "high");
    assert_eq!(openai["stream"], true);
    assert!(openai.get("enable_thinking").is_none() && openai.get("context_length").is_none());
    assert!(!folded.original.system_folded());
    assert_eq!(folded.original.model_key(), Some("qmodel_38max"));
    assert_eq!(folded.original.request_id(), Some(REQUEST_ID));
}

#[test]
fn fold_turns_a_lone_top_level_system_into_a_leading_message() {
    let mut ask = sample_ask();
    ask["messages"].as_array_mut().unwrap().remove(0);
    let folded = fold_value(&ask);
    assert!(folded.original.system_folded());
    assert_eq!(
        folded.openai["messages"][0],
        json!({"role": "system", "content": "You are qoder."})
    );
    assert_eq!(folded.openai["messages"].as_array().unwrap().len(), 4);
}

#[test]
fn fold_without_model_or_tools_uses_auto_and_omits_tools() {
    let ask = json!({"messages": [{"role": "user", "content": "hi"}], "tools": []});
    let folded = fold_value(&ask);
    assert_eq!(
        folded.openai,
        json!({"model": "auto", "messages": [{"role": "user", "content": "hi"}], "stream": true})
    );
}

#[test]
fn fold_refuses_what_is_not_an_ask_with_a_reason() {
    let reason = |bytes: &[u8]| fold(bytes).unwrap_err().0;
    assert!(reason(b"\x00\x01 encrypted").contains("not JSON"));
    assert!(reason(b"[1,2]").contains("not a JSON object"));
    assert!(reason(br#"{"messages":"hi"}"#).contains("no messages array"));
    assert!(reason(br#"{"prompt":"hi"}"#).contains("no messages array"));
}

#[test]
fn unchanged_round_trip_gives_back_the_ask_with_fresh_ids() {
    let ask = sample_ask();
    let folded = fold_value(&ask);
    let rebuilt = rebuild(&folded.original, &folded.openai).unwrap();
    let (mut a, mut b) = (ask.clone(), rebuilt.clone());
    for v in [&mut a, &mut b] {
        v["request_id"] = Value::Null;
        v["chat_record_id"] = Value::Null;
    }
    assert_eq!(a, b);
    let order = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(order(&rebuilt), order(&ask), "key order kept");
    // The bytes are the same JSON.
    let bytes = restore(&folded.original, &folded.openai).unwrap();
    let reparsed: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(order(&reparsed), order(&ask));
}

#[test]
fn every_rebuild_gets_a_fresh_request_id() {
    let folded = fold_value(&sample_ask());
    let ids: Vec<String> = (0..20)
        .map(|_| {
            let rebuilt = rebuild(&folded.original, &folded.openai).unwrap();
            rebuilt["request_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len());
    assert!(
        ids.iter().all(|id| is_uuid_v4(id) && id != REQUEST_ID),
        "{ids:?}"
    );
}

#[test]
fn chat_record_id_follows_request_id_only_when_they_were_equal() {
    let folded = fold_value(&sample_ask());
    let rebuilt = rebuild(&folded.original, &folded.openai).unwrap();
    assert_eq!(rebuilt["chat_record_id"], rebuilt["request_id"]);
    assert_eq!(rebuilt["request_set_id"], sample_ask()["request_set_id"]);

    let mut ask = sample_ask();
    ask["chat_record_id"] = json!("record-of-the-run");
    let folded = fold_value(&ask);
    let rebuilt = rebuild(&folded.original, &folded.openai).unwrap();
    assert_eq!(rebuilt["chat_record_id"], "record-of-the-run");
    assert_ne!(rebuilt["request_id"], REQUEST_ID);
}

/// The compressed body the way billion-context sends it: its tags, its
/// preamble in the system message, its tools appended, a trailing nudge,
/// `stream_options`, fewer messages.
fn compressed(openai: &Value) -> Value {
    let mut body = openai.clone();
    body["messages"] = json!([
        {"role": "system", "content": "<acp tokens=\"6\" type=\"text\">m00001</acp>\nYou are qoder.\n\n---\n\nCompression Philosophy: …"},
        {"role": "user", "content": "<acp tokens=\"5\" type=\"text\">m00002</acp>\nlist the files"},
        {"role": "user", "content": "⚠️ Context limit reached — compress now."}
    ]);
    let tools = body["tools"].as_array_mut().unwrap();
    for name in ["compress", "decompress", "search_context", "acp_status"] {
        tools.push(json!({"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}));
    }
    body["stream_options"] = json!({"include_usage": true});
    body["max_tokens"] = json!(16000);
    body
}

#[test]
fn proxy_injected_tools_system_and_nudge_survive_the_rebuild() {
    let folded = fold_value(&sample_ask());
    let body = compressed(&folded.openai);
    let rebuilt = rebuild(&folded.original, &body).unwrap();
    assert_eq!(rebuilt["messages"], body["messages"]);
    assert_eq!(rebuilt["tools"], body["tools"]);
    assert_eq!(rebuilt["tools"].as_array().unwrap().len(), 5);
    assert_eq!(
        rebuilt["system"], body["messages"][0]["content"],
        "top-level system mirrors the leading message"
    );
    assert_eq!(rebuilt["parameters"]["max_tokens"], 16000);
    assert!(
        rebuilt.get("stream_options").is_none(),
        "only messages, tools and sampling come back"
    );
    assert!(rebuilt.get("model").is_none());
}

#[test]
fn every_other_field_is_kept_as_the_agent_sent_it() {
    let ask = sample_ask();
    let folded = fold_value(&ask);
    let rebuilt = rebuild(&folded.original, &compressed(&folded.openai)).unwrap();
    let replaced = [
        "messages",
        "tools",
        "parameters",
        "system",
        "request_id",
        "chat_record_id",
    ];
    for (key, value) in ask.as_object().unwrap() {
        if !replaced.contains(&key.as_str()) {
            assert_eq!(&rebuilt[key], value, "{key} changed");
        }
    }
    // chat_context keeps the user's own text, not the nudge.
    assert_eq!(rebuilt["chat_context"]["text"], "list the files");
    // Non-sampling parameters stay.
    assert_eq!(rebuilt["parameters"]["context_length"], 200000);
    assert_eq!(rebuilt["parameters"]["enable_thinking"], true);
}

#[test]
fn tools_are_always_present() {
    let folded = fold_value(&sample_ask());
    let mut body = folded.openai.clone();
    body.as_object_mut().unwrap().remove("tools");
    let rebuilt = rebuild(&folded.original, &body).unwrap();
    assert_eq!(rebuilt["tools"], json!([]));

    let bare = fold_value(&json!({"messages": []}));
    let rebuilt = rebuild(&bare.original, &bare.openai).unwrap();
    assert_eq!(rebuilt["tools"], json!([]));
}

#[test]
fn sampling_fields_follow_the_compressed_body() {
    let folded = fold_value(&sample_ask());
    let mut body = folded.openai.clone();
    let map = body.as_object_mut().unwrap();
    map.remove("temperature");
    map.insert("reasoning_effort".into(), json!("none"));
    map.insert("top_p".into(), json!(0.9));
    let rebuilt = rebuild(&folded.original, &body).unwrap();
    let parameters = &rebuilt["parameters"];
    assert!(
        parameters.get("temperature").is_none(),
        "removed by the proxy"
    );
    assert_eq!(parameters["top_p"], 0.9);
    assert_eq!(parameters["reasoning_effort"], "none");
    assert_eq!(parameters["enable_thinking"], false, "qoder's effort rule");
}

#[test]
fn a_folded_system_prompt_stays_a_leading_message() {
    let mut ask = sample_ask();
    ask["messages"].as_array_mut().unwrap().remove(0);
    let folded = fold_value(&ask);
    let rebuilt = rebuild(&folded.original, &folded.openai).unwrap();
    assert_eq!(
        rebuilt["messages"][0],
        json!({"role": "system", "content": "You are qoder."})
    );
    assert_eq!(rebuilt["system"], "You are qoder.");
}

#[test]
fn system_text_parts_are_joined_for_the_top_level_copy() {
    let folded = fold_value(&sample_ask());
    let mut body = folded.openai.clone();
    body["messages"][0]["content"] =
        json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
    let rebuilt = rebuild(&folded.original, &body).unwrap();
    assert_eq!(rebuilt["system"], "a\nb");
}

#[test]
fn rebuild_refuses_a_body_without_messages() {
    let folded = fold_value(&sample_ask());
    assert!(rebuild(&folded.original, &json!([]))
        .unwrap_err()
        .0
        .contains("not a JSON object"));
    assert!(rebuild(&folded.original, &json!({"model": "x"}))
        .unwrap_err()
        .0
        .contains("no messages"));
}

#[test]
fn fresh_uuids_are_version_4() {
    for _ in 0..100 {
        let id = fresh_uuid();
        assert!(is_uuid_v4(&id), "{id}");
    }
}

/// An ask with numbers outside f64's range: JSON by RFC 8259, refused by
/// `serde_json`, and before the fix taken for a body that is not JSON at
/// all (so the runtime passed it through unfolded).
const OOB_ASK: &str = r#"{"request_id":"r1","messages":[{"role":"user","content":"1e400"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","maximum":1e400}}}],
    "parameters":{"temperature":1e400,"max_tokens":100,"context_length":-9E+999},
    "business":{"limits":[1e400, 2]}}"#;

#[test]
fn an_ask_with_out_of_range_numbers_is_folded_not_refused() {
    let folded = fold(OOB_ASK.as_bytes()).unwrap();
    let temperature = folded.openai["temperature"].as_str().unwrap();
    assert!(temperature.ends_with(":1e400"), "{temperature}");
    assert_eq!(folded.openai["max_tokens"], 100);
    assert_eq!(folded.openai["messages"][0]["content"], "1e400");
    assert_eq!(folded.original.request_id(), Some("r1"));
}

#[test]
fn restore_writes_out_of_range_numbers_back_as_the_agent_sent_them() {
    let folded = fold(OOB_ASK.as_bytes()).unwrap();
    // Through a proxy: re-serialised, messages replaced, tools appended.
    let mut body: Value =
        serde_json::from_slice(&serde_json::to_vec(&folded.openai).unwrap()).unwrap();
    body["messages"] = json!([{"role": "user", "content": "short"}]);
    body["tools"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "function", "function": {"name": "compress"}}));
    for openai in [&folded.openai, &body] {
        let text = String::from_utf8(restore(&folded.original, openai).unwrap()).unwrap();
        assert!(text.contains(r#""temperature":1e400"#), "{text}");
        assert!(text.contains(r#""context_length":-9E+999"#), "{text}");
        assert!(text.contains(r#""maximum":1e400"#), "{text}");
        assert!(text.contains(r#""limits":[1e400,2]"#), "{text}");
        assert!(!text.contains("shimgate"), "{text}");
    }
    let text = String::from_utf8(restore(&folded.original, &folded.openai).unwrap()).unwrap();
    assert!(
        text.contains(r#""content":"1e400""#),
        "the user's text stays text"
    );
}

#[test]
fn an_ask_that_is_not_json_is_still_refused_as_not_json() {
    let reason = |bytes: &[u8]| fold(bytes).unwrap_err().0;
    assert!(reason(br#"{"messages":[],1e400:1}"#).contains("not JSON"));
    assert!(reason(br#"{"messages":[],"t":1e400"#).contains("not JSON"));
}

#[test]
fn the_shape_is_what_the_fold_would_carry() {
    let mut no_key = sample_ask();
    no_key["model_config"] = json!({"key": ""});
    let mut no_config = sample_ask();
    no_config.as_object_mut().unwrap().remove("model_config");
    for ask in [sample_ask(), no_key, no_config] {
        let bytes = serde_json::to_vec(&ask).unwrap();
        let want = shimgate_shim_api::answer_shape(&fold(&bytes).unwrap().openai);
        assert_eq!(shape(&bytes), Some(want));
    }
}

#[test]
fn the_shape_leaves_what_it_is_unsure_of_to_the_fold() {
    for body in [
        r#"{"model_config":{"key":"m"}}"#,
        r#"{"messages":"x"}"#,
        r#"{"messages":[],"parameters":{"temperature":1e400}}"#,
        r#"{"m\u0065ssages":[]}"#,
        "not json",
    ] {
        assert_eq!(shape(body.as_bytes()), None, "{body}");
    }
}

/// `restore` writes the ask from the original and the OpenAI body as they
/// are; it must write exactly the bytes of the `rebuild` ask serialised,
/// members, order and appended ones included.
#[test]
fn restore_writes_the_bytes_of_the_rebuilt_ask() {
    let mut asks = vec![sample_ask()];
    let mut bare = json!({"messages": [{"role": "user", "content": "hi"}]});
    asks.push(bare.clone());
    bare["parameters"] = json!(null);
    bare["system"] = json!(7);
    asks.push(bare);
    let mut other_ids = sample_ask();
    other_ids["chat_record_id"] = json!("another");
    asks.push(other_ids);
    let mut no_params = sample_ask();
    no_params.as_object_mut().unwrap().remove("parameters");
    no_params["temperature"] = json!(1.5);
    asks.push(no_params);
    let mut raw: Vec<Vec<u8>> = asks
        .iter()
        .map(|a| serde_json::to_vec(a).unwrap())
        .collect();
    raw.push(br#"{"request_id":"r","messages":[{"role":"user","content":"x"}],"parameters":{"temperature":1e400}}"#.to_vec());
    for bytes in raw {
        let folded = fold(&bytes).unwrap();
        let mut bodies = vec![folded.openai.clone()];
        if folded.openai.get("tools").is_some() {
            bodies.push(compressed(&folded.openai));
        }
        let mut without = folded.openai.clone();
        without.as_object_mut().unwrap().remove("tools");
        without["max_tokens"] = json!(null);
        without["reasoning_effort"] = json!("none");
        bodies.push(without);
        for body in bodies {
            let want = serde_json::to_vec(&rebuild_with_id(&folded.original, &body, "ID").unwrap())
                .map(shimgate_shim_api::json::restore_numbers)
                .unwrap();
            let got = restore_with_id(&folded.original, &body, "ID").unwrap();
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want)
            );
        }
    }
}

#[test]
fn the_model_key_read_by_the_scanner_is_the_one_the_parse_reads() {
    let parsed = |raw: &str| -> Option<String> {
        let v: Value = serde_json::from_str(raw).unwrap();
        v.get("key").and_then(Value::as_str).map(str::to_owned)
    };
    for raw in [
        r#"{"key":"qmodel_38max","source":"system"}"#,
        r#"{"source":"system"}"#,
        r#"{"key":"a","key":"b"}"#,
        r#"{"key":"q\u006dodel \"x\""}"#,
        r#"{"k\u0065y":"escaped-key"}"#,
        r#"{"key":7}"#,
        r#"{"key":null}"#,
        r#"{ "nested": {"key": "no"} , "key" : "yes" }"#,
        r#""a string""#,
        r#"[1,2]"#,
        r#"{}"#,
    ] {
        assert_eq!(
            super::config_key(Some(raw.as_bytes())),
            Some(parsed(raw)),
            "{raw}"
        );
    }
    assert_eq!(super::config_key(None), Some(None));
}

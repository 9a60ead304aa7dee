//! The written fold (straight from the bytes) held to the fold through a
//! parsed `Value`: for every body both refuse or both take it, make the
//! same OpenAI body, and keep an original that restores to the same SOLO
//! body, compressed or not.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};
use shimgate_shim_api::{OpenAiBody, Shim};
use shimgate_shim_trae::{fold_parsed, TraeOriginal, TraeShim};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn restored(original: &TraeOriginal, openai: &Value) -> Option<Value> {
    let body = TraeShim
        .restore(original, &OpenAiBody::of_value(openai))
        .ok()?;
    Some(shimgate_shim_api::json::parse_keeping_numbers(&body).unwrap())
}

/// The same OpenAI body as shortened by a proxy: every string content
/// tagged, a message appended, a tool added.
fn compressed(openai: &Value) -> Value {
    let mut v = openai.clone();
    if let Some(messages) = v.get_mut("messages").and_then(Value::as_array_mut) {
        for m in messages.iter_mut() {
            if let Some(s) = m.get("content").and_then(Value::as_str) {
                m["content"] = json!(format!("<acp>{s}</acp>"));
            }
        }
        messages.push(json!({"role": "user", "content": "compress now"}));
    }
    if let Some(tools) = v.get_mut("tools").and_then(Value::as_array_mut) {
        tools.push(json!({"type":"function","function":{"name":"compress","parameters":{"type":"object"}}}));
    }
    v
}

fn same(native: &[u8]) {
    let written = TraeShim.fold(native);
    let parsed = fold_parsed(native);
    let (written, parsed) = match (written, parsed) {
        (Ok(w), Ok(p)) => (w, p),
        (Err(w), Err(p)) => {
            // The written fold's refusal names the same fault, in the same
            // words where the reason is its own.
            if w.0.contains("messages") || p.0.contains("messages") {
                assert_eq!(w, p, "{}", String::from_utf8_lossy(native));
            }
            return;
        }
        (w, p) => panic!(
            "one fold took what the other refused: {:?} / {:?}\n{}",
            w.map(|f| f.openai),
            p.map(|f| f.openai),
            String::from_utf8_lossy(native)
        ),
    };
    assert_eq!(
        *written.openai,
        parsed.openai,
        "{}",
        String::from_utf8_lossy(native)
    );
    assert!(
        serde_json::from_slice::<Value>(written.openai.as_bytes()).is_ok(),
        "the proxy reads it"
    );
    for openai in [parsed.openai.clone(), compressed(&parsed.openai)] {
        assert_eq!(
            restored(&written.original, &openai),
            restored(&parsed.original, &openai),
            "{}",
            String::from_utf8_lossy(native)
        );
    }
}

fn text_parts(texts: &[&str]) -> Value {
    Value::Array(
        texts
            .iter()
            .map(|t| json!({"type": "text", "text": t}))
            .collect(),
    )
}

fn bodies() -> Vec<Vec<u8>> {
    let mut out = vec![
        fixture("max_mode_request.json"),
        fixture("lite_request.json"),
    ];
    let texts = [
        "plain",
        "",
        "quote \" and \\ back",
        "line\nbreak",
        "é 中文 😀",
        "\u{1}",
    ];
    let contents = [
        json!("a string"),
        json!(null),
        text_parts(&["one"]),
        text_parts(&["one", "two"]),
        text_parts(&texts),
        json!([{"type": "text", "text": "a", "cache_control": {}}]),
        json!([{"type": "image_url", "image_url": {"url": "data:x"}}, {"type": "text", "text": "b"}]),
        json!([]),
        json!([{"type": "text"}]),
        json!([{"type": "text", "text": 5}]),
        json!(7),
    ];
    for (i, content) in contents.iter().enumerate() {
        let body = json!({
            "model": if i % 3 == 0 { Value::Null } else { json!("m") },
            "config_name": "glm",
            "messages": [
                {"role": "system", "content": content},
                {"role": "user", "content": content, "name": "u"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function_call": {"name": "glob", "arguments": "{\"p\":1}"}},
                    {"id": "c2", "function": {"name": "x"}, "function_call": {"name": "y"}},
                    "odd"
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": content},
                "not a message"
            ],
            "tools": [
                {"type": "function", "function": {"name": "glob", "parameters": "{\"type\":\"object\", \"x\": [1, 2.5]}"}},
                {"type": "function", "function": {"name": "bad", "parameters": "not json"}},
                {"type": "function", "function": {"name": "obj", "parameters": {"type": "object"}}},
                {"type": "function"},
                3
            ],
            "tool_choice": (["auto", "glob", "none", "required"][i % 4]),
            "temperature": 0.25,
            "max_tokens": 100,
            "stream": i % 2 == 0,
            "function": "solo_work_remote",
            "x_unknown": {"a": [1, {"b": null}]},
        });
        out.push(serde_json::to_vec(&body).unwrap());
        out.push(serde_json::to_vec_pretty(&body).unwrap());
    }
    // What the written fold leaves to the parsed one, and what both refuse.
    for text in [
        r#"{"messages":[],"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"messages":[{"role":"user","content":"x","content":[{"type":"text","text":"y"}]}]}"#,
        r#"{"m\u0065ssages":[]}"#,
        r#"{"messages":[],"temperature":1e400}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}"#,
        r#"{"messages":[{"role":"user","content":[{"type":"te\u0078t","text":"a"},{"type":"text","text":"b"}]}]}"#,
        r#"{"messages":[],"tools":[{"function":{"name":"g","parameters":"{\"a\":1e400}"}}]}"#,
        r#"{"messages":{}}"#,
        r#"{"model":"m"}"#,
        r#"[1]"#,
        r#"{"messages":[] "#,
        "{\"messages\":[\"\u{ff}\"]}",
    ] {
        out.push(text.as_bytes().to_vec());
    }
    out
}

#[test]
fn the_written_fold_makes_the_parsed_fold_s_body_and_original() {
    for body in bodies() {
        same(&body);
    }
}

#[test]
fn the_written_fold_takes_the_common_bodies_itself() {
    for body in [
        fixture("max_mode_request.json"),
        fixture("lite_request.json"),
    ] {
        let folded = TraeShim.fold(&body).unwrap();
        assert!(matches!(folded.original, TraeOriginal::Written { .. }));
    }
}

#[test]
fn mutated_bodies_fold_the_same_both_ways() {
    let mut rng = fastrand::Rng::with_seed(16);
    const NOISE: [u8; 12] = [
        b'"', b'\\', b'\n', b',', b':', b'{', b'}', b'[', b']', b'0', b' ', 0xff,
    ];
    let bodies = bodies();
    for _ in 0..1500 {
        let mut body = bodies[rng.usize(..bodies.len())].clone();
        for _ in 0..rng.usize(1..3) {
            let at = rng.usize(..body.len());
            match rng.u8(..3) {
                0 => body[at] = NOISE[rng.usize(..NOISE.len())],
                1 => {
                    body.remove(at);
                }
                _ => body.insert(at, NOISE[rng.usize(..NOISE.len())]),
            }
        }
        same(&body);
    }
}

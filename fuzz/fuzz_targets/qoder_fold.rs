//! Invariant: the qoder fold written from the ask's bytes
//! (`ask::fold_body`, which leaves what it is unsure of to the `Value`
//! fold) never panics on any bytes, takes exactly the asks the `Value` fold
//! (`ask::fold`) takes, makes the same OpenAI body (as JSON), and its
//! restore of that body is the `Value` restore's ask (as JSON, the fresh
//! `request_id` and a `chat_record_id` that follows it set aside), for the
//! body as folded and for a proxy's rewrite of it (messages tagged, a
//! nudge, a tool, sampling changed). Floats are compared to within a few
//! units in the last place (in the OpenAI body too, whose `parameters`
//! are parsed and written when a key there holds an escape): the `Value`
//! restore writes a number such as
//! `5e44` or `2222222222222222222222222222222220.2` through an f64 that
//! `serde_json`'s fast reader (no `float_roundtrip`) does not always read
//! back to the same f64, while the written restore sends the agent's own
//! token.
//!
//! Run (stable toolchain), from the repository root:
//! `cargo fuzz run -s none qoder_fold fuzz/corpus/qoder_fold fuzz/seeds/qoder_fold -- -dict=fuzz/dict/json_top_level.dict -max_total_time=60`

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use shimgate_shim_api::OpenAiBody;
use shimgate_shim_qoder::ask;

/// Whether `a` and `b` are the same JSON, floats within a few units in the
/// last place of each other (integers exactly).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= 1e-14 * x.abs().max(y.abs()),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_json(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

/// The restored ask as JSON, its fresh ids set aside.
fn without_ids(restored: &[u8]) -> Value {
    let mut v: Value = shimgate_shim_api::json::parse_keeping_numbers(restored)
        .unwrap_or_else(|e| panic!("a restore wrote no JSON ({e})"));
    if let Some(ask) = v.as_object_mut() {
        let id = ask.remove("request_id");
        if ask.get("chat_record_id").is_some() && ask.get("chat_record_id") == id.as_ref() {
            ask.remove("chat_record_id");
        }
    }
    v
}

/// A proxy's rewrite: contents tagged, a nudge and a tool added, sampling
/// changed.
fn rewritten(openai: &Value) -> Value {
    let mut body = openai.clone();
    if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
        for m in messages.iter_mut() {
            if let Some(s) = m.get("content").and_then(Value::as_str) {
                let tagged = format!("<acp>{s}</acp>");
                m["content"] = json!(tagged);
            }
        }
        messages.push(json!({"role": "user", "content": "go on"}));
    }
    if let Some(o) = body.as_object_mut() {
        o.remove("temperature");
        o.insert("top_p".into(), json!(0.5));
        let tools = o.entry("tools").or_insert(json!([]));
        if let Some(tools) = tools.as_array_mut() {
            tools.push(json!({"type": "function", "function": {"name": "compress"}}));
        }
    }
    body
}

fuzz_target!(|data: &[u8]| {
    let old = ask::fold(data);
    let new = ask::fold_body(data);
    let (old, new) = match (old, new) {
        (Err(_), Err(_)) => return,
        (Ok(old), Ok(new)) => (old, new),
        (old, new) => panic!(
            "the folds disagree: Value fold ok = {}, written fold ok = {}",
            old.is_ok(),
            new.is_ok()
        ),
    };
    assert!(
        same_json(new.openai.value(), &old.openai),
        "the OpenAI bodies differ: {:?} / {:?}",
        new.openai.value(),
        old.openai
    );
    for proxy in [old.openai.clone(), rewritten(&old.openai)] {
        let want = ask::restore(&old.original, &proxy);
        let got = ask::restore_body(&new.original, &OpenAiBody::of_value(&proxy));
        match (want, got) {
            (Ok(want), Ok(got)) => {
                let (got, want) = (without_ids(&got), without_ids(&want));
                assert!(
                    same_json(&got, &want),
                    "the restores differ:\n{got}\n{want}"
                );
            }
            (Err(_), Err(_)) => {}
            (want, got) => panic!(
                "the restores disagree: Value restore ok = {}, written restore ok = {}",
                want.is_ok(),
                got.is_ok()
            ),
        }
    }
});

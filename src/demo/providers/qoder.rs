//! The scripted qoder provider: checks the rebuilt ask (plaintext, fresh
//! `request_id`, the agent's credential) and answers in the envelope wire —
//! heartbeats, chunk JSON as a string in `body`, an `event:finish` timing
//! frame — then holds the connection open as the real gateway does.

use bytes::Bytes;
use http::{header, Method, StatusCode};
use serde_json::{json, Value};
use shimgate_testkit::openai::Chunks;
use shimgate_testkit::qoder;

use super::{last_turn, pieces, Log, Reply};
use crate::demo::script;

/// Answers one request.
pub fn answer(log: &Log, parts: &http::request::Parts, body: &[u8]) -> Reply {
    let refuse =
        |why: String| Reply::Refuse(StatusCode::BAD_REQUEST, format!("qoder provider: {why}"));
    if parts.method != Method::POST || parts.uri.path() != shimgate_shim_qoder::INFERENCE_PATH {
        return Reply::Refuse(
            StatusCode::NOT_FOUND,
            format!("qoder provider: unexpected {} {}", parts.method, parts.uri),
        );
    }
    let auth = parts.headers.get(header::AUTHORIZATION);
    if auth.and_then(|v| v.to_str().ok()) != Some(script::QODER_AUTH) {
        return Reply::Refuse(
            StatusCode::UNAUTHORIZED,
            "qoder provider: the agent's credential did not arrive (101 bad signature)".into(),
        );
    }
    let ask: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return refuse(format!("the ask is not JSON: {e}")),
    };
    let Some(id) = ask.get("request_id").and_then(Value::as_str) else {
        return refuse("the ask has no request_id".into());
    };
    if !log.first_use(id) {
        return refuse(format!(
            "request_id {id} was used before (103 duplicate request)"
        ));
    }
    if !ask.get("tools").is_some_and(Value::is_array) {
        return refuse("the ask has no tools list".into());
    }
    let Some(messages) = ask.get("messages").and_then(Value::as_array) else {
        return refuse("the ask has no messages".into());
    };
    let Some(turn) = last_turn(messages) else {
        return refuse("no user message with a [turn N] marker".into());
    };
    Reply::Stream {
        frames: frames(turn, script::prompt_tokens(&ask)),
        hold: true,
    }
}

/// The whole answer of `turn`, one envelope per frame, its usage saying
/// `prompt_tokens`.
fn frames(turn: u32, prompt_tokens: u64) -> Vec<Bytes> {
    let id = format!("chatcmpl-demo-q{turn}");
    let chunks = Chunks {
        id: &id,
        created: 1_764_400_000,
        model: "qmodel_38max",
    };
    let envelope = |chunk: Value| qoder::envelope(&chunk.to_string());
    let mut out = vec![
        qoder::envelope_json(&Value::Null),
        envelope(chunks.delta(json!({"role": "assistant", "content": ""}), Value::Null)),
        qoder::envelope(""),
    ];
    let text = script::qoder_answer(turn);
    for (i, piece) in pieces(&text).enumerate() {
        out.push(envelope(
            chunks.delta(json!({"content": piece}), Value::Null),
        ));
        if i == 3 {
            out.push(qoder::envelope("{}"));
        }
    }
    out.push(envelope(chunks.delta(json!({}), json!("stop"))));
    out.push(envelope(chunks.usage(prompt_tokens, 31)));
    out.push(qoder::finish_event(412, 980, 37));
    out.into_iter().map(Bytes::from).collect()
}

//! The scripted qoder provider: checks the rebuilt ask (plaintext, fresh
//! `request_id`, the agent's credential) and answers in the envelope wire —
//! heartbeats, chunk JSON as a string in `body`, an `event:finish` timing
//! frame — then holds the connection open as the real gateway does.

use bytes::Bytes;
use http::{header, Method, StatusCode};
use serde_json::{json, Value};

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
        frames: frames(turn),
        hold: true,
    }
}

/// The whole answer of `turn`, one envelope per frame.
fn frames(turn: u32) -> Vec<Bytes> {
    let id = format!("chatcmpl-demo-q{turn}");
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 1_764_400_000, "model": "qmodel_38max",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        .to_string()
    };
    let mut out = vec![
        heartbeat(Value::Null),
        envelope(&chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )),
        heartbeat(json!("")),
    ];
    let text = script::qoder_answer(turn);
    for (i, piece) in pieces(&text).enumerate() {
        out.push(envelope(&chunk(json!({"content": piece}), Value::Null)));
        if i == 3 {
            out.push(heartbeat(json!("{}")));
        }
    }
    out.push(envelope(&chunk(json!({}), json!("stop"))));
    let prompt = script::prompt_tokens(turn);
    let usage = json!({"id": id, "object": "chat.completion.chunk", "created": 1_764_400_000, "model": "qmodel_38max",
        "choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": 31, "total_tokens": prompt + 31}});
    out.push(envelope(&usage.to_string()));
    out.push(Bytes::from_static(
        b"event:finish\ndata:{\"firstTokenDuration\":412,\"totalDuration\":980,\"serverDuration\":37}\n\n",
    ));
    out
}

/// An envelope frame whose `body` is `inner` as a JSON string.
fn envelope(inner: &str) -> Bytes {
    heartbeat(Value::String(inner.to_string()))
}

/// An envelope frame with any `body` (null, `""` and `"{}"` are heartbeats).
fn heartbeat(body: Value) -> Bytes {
    Bytes::from(format!(
        "data:{}\n\n",
        json!({"headers": {"Content-Type": ["application/json"]}, "body": body, "statusCodeValue": 200, "statusCode": "OK"})
    ))
}

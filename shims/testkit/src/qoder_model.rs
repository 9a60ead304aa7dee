//! qoder's model-server wire (`POST /model/v1/chat/completions`): the
//! request the Qoder CLI sends (OpenAI chat JSON with `metadata`, Bearer
//! token, `X-Request-ID`, `X-Session-ID`), the answers a model server
//! streams (plain chunks, envelopes, sentinels, error envelopes), and the
//! CLI's reading of an answer, rule for rule as qodercli 1.1.52 reads it.

use serde_json::{json, Value};

use crate::openai::{frame, Chunks, DONE};

/// The inference path.
pub const PATH: &str = "/model/v1/chat/completions";

/// The chunk fields of the scripted answers.
pub const CHUNKS: Chunks<'static> = Chunks {
    id: "chatcmpl-ms1",
    created: 1,
    model: "auto",
};

/// The quota sentinel as a model server may send it.
pub const EXCEED_QUOTA: &str = "[EXCEED_QUOTA]";
/// The all-clear sentinel.
pub const NOT_EXCEED_QUOTA: &str = "[NOT_EXCEED_QUOTA]";
/// A credit warning the CLI reads (`[NOTIFICATIONS]#` + JSON).
pub const NOTIFICATIONS: &str = r#"[NOTIFICATIONS]#{"notifications":[{"notificationType":"credit_exhausted","isHighestTier":false}]}"#;

/// A fresh request id shaped as the CLI's (a UUID).
pub fn request_id() -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        fastrand::u32(..),
        fastrand::u16(..),
        fastrand::u16(..0x1000),
        fastrand::u16(..0x1000),
        fastrand::u64(..) & 0xffff_ffff_ffff
    )
}

/// The body the CLI sends (its shape: `model`, `messages`, `stream`,
/// `stream_options`, `metadata.context` and `metadata.business`, `tools`,
/// `max_tokens`), with `request_id` in `metadata.context` as in the
/// `X-Request-ID` header.
pub fn request(messages: &[Value], request_id: &str, session_id: &str) -> Value {
    json!({
        "model": "auto",
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
        "metadata": {
            "context": {
                "request_id": request_id,
                "request_set_id": "set-1",
                "session_id": session_id,
                "task_id": "task-1",
                "client_type": "5",
            },
            "business": {"product": "cli", "version": "1.1.52", "type": "agent", "id": "b-1", "name": "agent", "begin_at": 1, "stage": "start"},
        },
        "tools": [{"type": "function", "function": {"name": "Read", "description": "read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
        "max_tokens": 32000,
    })
}

/// The CLI's headers for one request (name, value).
pub fn headers(token: &str, request_id: &str, session_id: &str) -> Vec<(String, String)> {
    [
        ("content-type", "application/json".to_owned()),
        ("accept", "text/event-stream".to_owned()),
        ("authorization", format!("Bearer {token}")),
        ("x-request-id", request_id.to_owned()),
        ("x-session-id", session_id.to_owned()),
        ("cosy-version", "1.1.52".to_owned()),
        ("cosy-clienttype", "5".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// `data: <text>\n\n`.
pub fn data(text: &str) -> String {
    format!("data: {text}\n\n")
}

/// A plain answer: role, the text, finish, usage, `[DONE]`.
pub fn answer(text: &str, prompt_tokens: u64) -> String {
    [
        frame(&CHUNKS.delta(json!({"role": "assistant"}), Value::Null)),
        frame(&CHUNKS.delta(json!({"content": text}), Value::Null)),
        frame(&CHUNKS.delta(json!({}), json!("stop"))),
        frame(&CHUNKS.usage(prompt_tokens, 5)),
        DONE.to_owned(),
    ]
    .concat()
}

/// The role chunk and one text chunk: an answer's first content.
pub fn first_content(text: &str) -> String {
    [
        frame(&CHUNKS.delta(json!({"role": "assistant"}), Value::Null)),
        frame(&CHUNKS.delta(json!({"content": text}), Value::Null)),
    ]
    .concat()
}

/// The finish, usage and `[DONE]` frames.
pub fn ending(prompt_tokens: u64) -> String {
    [
        frame(&CHUNKS.delta(json!({}), json!("stop"))),
        frame(&CHUNKS.usage(prompt_tokens, 5)),
        DONE.to_owned(),
    ]
    .concat()
}

/// An envelope with `statusCodeValue` 200 around `body` (a chunk's JSON
/// text, a sentinel, `[DONE]`), as one `data:` frame.
pub fn envelope(body: &str) -> String {
    data(
        &json!({"statusCodeValue": 200, "statusCode": "OK", "headers": {}, "body": body})
            .to_string(),
    )
}

/// The data of an error envelope: `statusCodeValue` `status` and a body
/// `{"code","message"}`.
pub fn error_envelope_data(status: u16, code: &str, message: &str) -> String {
    let reason = match status {
        401 => "UNAUTHORIZED",
        403 => "FORBIDDEN",
        429 => "TOO_MANY_REQUESTS",
        _ => "INTERNAL_SERVER_ERROR",
    };
    json!({"statusCodeValue": status, "statusCode": reason, "headers": {},
        "body": json!({"code": code, "message": message}).to_string()})
    .to_string()
}

/// The error envelope of a reused request id.
pub fn duplicate_data() -> String {
    error_envelope_data(403, "103", "Duplicate request")
}

/// The error envelope of an expired login.
pub fn login_expired_data() -> String {
    error_envelope_data(401, "105", "Login expired, please sign in again")
}

/// The error envelope of the model queue (`retryAfterSeconds` inside).
pub fn queued_data(retry_after_seconds: u64) -> String {
    let inner = json!({"isQueued": true, "modelKey": "auto", "queueCount": 3, "queueType": "slow", "retryAfterSeconds": retry_after_seconds});
    json!({"statusCodeValue": 429, "statusCode": "TOO_MANY_REQUESTS", "headers": {},
        "body": json!({"code": "10605", "message": inner.to_string()}).to_string()})
    .to_string()
}

/// How the CLI took one answer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CliRead {
    /// The text of the content deltas.
    pub text: String,
    /// The last `finish_reason`.
    pub finish: Option<String>,
    /// The last usage's `prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// The error the CLI raised, as `{kind, status, code, message}`
    /// (`kind`: `envelope`, `event` or `chunk`; the CLI stops there).
    pub error: Option<Value>,
    /// The sentinels it skipped, as sent.
    pub sentinels: Vec<String>,
    /// The notifications it read (`[NOTIFICATIONS]#` payloads).
    pub notifications: Vec<Value>,
    /// A `data:` it could not parse (the CLI fails the stream on it).
    pub unparsable: Option<String>,
    /// It read `[DONE]`.
    pub done: bool,
    /// Events with data.
    pub events: usize,
}

/// Reads an answer as the CLI does (`payloadsFromResponse` of its HTTP
/// transport and `M6`, its payload parser).
pub fn read_answer(body: &[u8]) -> CliRead {
    let mut read = CliRead::default();
    let Ok(events) = shimgate_shim_api::sse::parse_all(body) else {
        read.unparsable = Some(String::from_utf8_lossy(body).into_owned());
        return read;
    };
    for ev in events {
        let data = String::from_utf8_lossy(&ev.data).trim().to_owned();
        if data.is_empty() {
            continue;
        }
        read.events += 1;
        if data == "[DONE]" {
            read.done = true;
            break;
        }
        if ev.is("error") {
            let v: Value = serde_json::from_str(&data).unwrap_or(json!({"message": data}));
            read.error = Some(error_of("event", None, &v));
            break;
        }
        if let Some(payload) = notification(&data) {
            read.notifications.push(payload);
            continue;
        }
        if is_sentinel(&data) {
            read.sentinels.push(data);
            continue;
        }
        if !chunk_or_stop(&mut read, &data, ev.is("finish")) {
            break;
        }
    }
    read
}

/// `[NOTIFICATIONS]#…` bare or as an envelope's body: its JSON payload.
fn notification(data: &str) -> Option<Value> {
    const TAG: &str = "[NOTIFICATIONS]#";
    let payload = match data.strip_prefix(TAG) {
        Some(p) => p.to_owned(),
        None if data.contains(TAG) => {
            let v: Value = serde_json::from_str(data).ok()?;
            v["body"].as_str()?.strip_prefix(TAG)?.to_owned()
        }
        None => return None,
    };
    Some(serde_json::from_str(&payload).unwrap_or(Value::Null))
}

fn is_sentinel(text: &str) -> bool {
    text == "[DONE]"
        || text == NOT_EXCEED_QUOTA
        || text.starts_with(EXCEED_QUOTA)
        || text.starts_with("[NOTIFICATIONS]")
}

/// One JSON frame: an envelope or a chunk. `false` when the CLI stops.
fn chunk_or_stop(read: &mut CliRead, data: &str, finish_event: bool) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        read.unparsable = Some(data.to_owned());
        return false;
    };
    let chunk = if v.get("statusCodeValue").is_some() && v.get("body").is_some() {
        let body = match &v["body"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if v["statusCodeValue"] != json!(200) && !finish_event {
            let inner = serde_json::from_str(&body).unwrap_or(json!({"message": body}));
            read.error = Some(error_of("envelope", v["statusCodeValue"].as_u64(), &inner));
            return false;
        }
        let body = body.trim();
        if body.is_empty() || is_sentinel(body) {
            if !body.is_empty() {
                read.sentinels.push(body.to_owned());
            }
            return true;
        }
        match serde_json::from_str::<Value>(body) {
            Ok(c) => c,
            Err(_) => {
                read.unparsable = Some(body.to_owned());
                return false;
            }
        }
    } else {
        v
    };
    if let Some(e) = chunk.get("error").filter(|e| !e.is_null()) {
        read.error = Some(error_of("chunk", None, e));
        return false;
    }
    if let Some(n) = chunk["usage"]["prompt_tokens"].as_u64() {
        read.prompt_tokens = Some(n);
    }
    let choice = &chunk["choices"][0];
    if let Some(t) = choice["delta"]["content"].as_str() {
        read.text.push_str(t);
    }
    if let Some(f) = choice["finish_reason"].as_str() {
        read.finish = Some(f.to_owned());
    }
    true
}

fn error_of(kind: &str, status: Option<u64>, v: &Value) -> Value {
    let e = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
    json!({"kind": kind, "status": status, "code": e.get("code"), "message": e.get("message")})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_reads_a_plain_answer_and_its_sentinels() {
        let body = format!(
            "{}{}{}",
            data(NOTIFICATIONS),
            first_content("hi"),
            [data(EXCEED_QUOTA), ending(40)].concat()
        );
        let r = read_answer(body.as_bytes());
        assert_eq!(r.text, "hi");
        assert_eq!(r.finish.as_deref(), Some("stop"));
        assert_eq!(r.prompt_tokens, Some(40));
        assert_eq!(r.sentinels, [EXCEED_QUOTA]);
        assert_eq!(r.notifications.len(), 1);
        assert!(r.done && r.error.is_none());
    }

    #[test]
    fn the_cli_stops_on_an_error_envelope() {
        let body = format!("{}{}", data(&duplicate_data()), answer("never", 1));
        let r = read_answer(body.as_bytes());
        assert_eq!(r.error.as_ref().unwrap()["code"], "103");
        assert_eq!(r.error.as_ref().unwrap()["status"], 403);
        assert!(r.text.is_empty() && !r.done);
    }
}

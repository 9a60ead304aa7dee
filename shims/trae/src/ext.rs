//! The `x_solo` extension field: what a SOLO stream carries that an OpenAI
//! chunk has no field for, so the OpenAI leg loses nothing.
//!
//! Two kinds of chunk carry it (both are `chat.completion.chunk`s with one
//! `data:` line):
//!
//! * **Carriers**, for every SOLO event that is not streamed content
//!   (`metadata`, `timing_cost`, `extra_info`, queue events, `token_usage`,
//!   `done`, `error`, unknown events, and `output` frames with nothing to
//!   stream or an unexpected shape). Their delta is
//!   `{"role":"assistant","content":""}`, the shape of the role frame that
//!   billion-context was measured to pass byte for byte, so they survive a proxy that swallows finish, usage, `[DONE]`
//!   and error frames. `x_solo` is
//!   `{"event": NAME | null, "id": ID?, "retry": MS?, "data": JSON}` or
//!   `..., "text": STRING}` when the event's data is not JSON as
//!   `serde_json` reads it (a number outside f64's range makes it text, see
//!   [`shimgate_shim_api::json`]; not UTF-8: carried lossily). `event: null` is a frame with no `event:`
//!   line. `id` is the SSE last-event-id in force at that event (absent =
//!   none), so it is exact even after a proxy drops other frames.
//! * **Output chunks** (`delta.content` / `reasoning_content` /
//!   `tool_calls`) carry `x_solo` only when needed:
//!   `{"id": ID?, "retry": MS?, "output": {members OpenAI lacks}?,
//!   "tools": [{extra members, "function_call": {extra members}?} | null]?,
//!   "continues": true?}`. `id` appears when the last-event-id changed at
//!   this frame (`""` = reset). `continues` marks the text half of an
//!   `output` frame that also held tool calls: the return leg writes text
//!   and tool calls as two chunks (a proxy re-emits tool calls on its own),
//!   and the ingress joins them back into one `output` event.

use serde_json::{Map, Value};
use shimgate_shim_api::Failure;

/// The name of the extension member of an OpenAI chunk.
pub const EXT_KEY: &str = "x_solo";

/// The SOLO `error` payload shimgate writes for a failure it reports itself
/// (`fail()` on either leg): `code` is the provider's business code when
/// the failure has one (a number when it is numeric), else the stable
/// failure code (`"TRANSPORT"`, `"AUTO_ROUTES_EXHAUSTED"`); `message` is the
/// failure's message; `extra` names the failure class, plus the HTTP status
/// and the wait the upstream asked for when known.
pub fn failure_payload(failure: &Failure) -> Value {
    let code = match failure.upstream_code.as_deref() {
        Some(c) => match c.trim().parse::<i64>() {
            Ok(n) => Value::from(n),
            Err(_) => Value::from(c),
        },
        None => Value::from(failure.code.as_str()),
    };
    let mut extra = Map::new();
    extra.insert("failure".into(), Value::from(failure.code.as_str()));
    if let Some(status) = failure.status {
        extra.insert("status".into(), Value::from(status));
    }
    if let Some(wait) = failure.retry_after {
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
        extra.insert("retry_after_ms".into(), Value::from(ms));
    }
    let mut payload = Map::new();
    payload.insert("code".into(), code);
    payload.insert("message".into(), Value::from(failure.message.clone()));
    payload.insert("extra".into(), Value::Object(extra));
    Value::Object(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shimgate_shim_api::FailureCode;
    use std::time::Duration;

    #[test]
    fn failure_payload_prefers_the_business_code() {
        let f = Failure::new(FailureCode::Quota, "used up").with_upstream_code("4008");
        assert_eq!(failure_payload(&f)["code"], 4008);
        let f = Failure::new(FailureCode::Transport, "reset")
            .with_status(502)
            .with_retry_after(Duration::from_secs(2));
        let p = failure_payload(&f);
        assert_eq!(p["code"], "TRANSPORT");
        assert_eq!(p["extra"]["status"], 502);
        assert_eq!(p["extra"]["retry_after_ms"], 2000);
    }
}

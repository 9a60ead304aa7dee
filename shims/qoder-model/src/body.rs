//! The request body: already OpenAI chat JSON, with qoder's own members.
//!
//! Fold: the body minus the members only qoder reads ([`QODER_ONLY`]:
//! `metadata` holds nested objects where OpenAI's `metadata` is a map of
//! strings, and a strict proxy refuses it; `patches` and `custom_model`
//! mean nothing to a proxy). Restore: the original body is the base and
//! keeps its key order and every member the proxy never saw; `messages`,
//! `tools` and the sampling members ([`TAKEN`]) come from the proxy's
//! body. A sampling member the proxy's body no longer has keeps the
//! original's value; a body without `tools` is a proxy's own side request
//! (a summary that wants text), so the agent's tools and tool choice are
//! left out then.
//!
//! The request id the model server checks for reuse is in the
//! `X-Request-ID` header and, equal to it, in `metadata.context.request_id`:
//! [`stamp_request_id`] writes a fresh one into the body for each attempt.

use serde_json::{Map, Value};
use shimgate_shim_api::json_scan::Cursor;
use shimgate_shim_api::{Folded, OpenAiBody, ShimError};

/// Top-level members the proxy never sees (restored from the original).
pub const QODER_ONLY: [&str; 3] = ["metadata", "patches", "custom_model"];

/// Sampling members taken from the proxy's body (with `messages` and
/// `tools`).
pub const TAKEN: [&str; 11] = [
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "presence_penalty",
    "frequency_penalty",
    "seed",
];

/// Members that only mean something next to `tools`.
const TOOL_KEYS: [&str; 3] = ["tools", "tool_choice", "parallel_tool_calls"];

/// The agent's body, parsed (an object; empty for the offline default).
#[derive(Debug, Clone, Default)]
pub struct OriginalBody(pub Map<String, Value>);

/// Folds the agent's body for the proxy.
pub fn fold(native: &[u8]) -> Result<Folded<OriginalBody, OpenAiBody>, ShimError> {
    let Value::Object(original) = serde_json::from_slice::<Value>(native)
        .map_err(|e| ShimError::new(format!("the body is not JSON: {e}")))?
    else {
        return Err(ShimError::new("the body is not a JSON object"));
    };
    if !original.get("messages").is_some_and(Value::is_array) {
        return Err(ShimError::new("the body has no messages list"));
    }
    let openai: Map<String, Value> = original
        .iter()
        .filter(|(k, _)| !QODER_ONLY.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Ok(Folded {
        openai: OpenAiBody::of_value(&Value::Object(openai)),
        original: OriginalBody(original),
    })
}

fn taken(key: &str) -> bool {
    key == "messages" || key == "tools" || TAKEN.contains(&key)
}

/// The agent's body with the proxy's messages, tools and sampling.
pub fn restore(original: &OriginalBody, openai: &OpenAiBody) -> Result<Vec<u8>, ShimError> {
    let proxy = openai
        .value()
        .as_object()
        .ok_or_else(|| ShimError::new("the proxy's body is not a JSON object"))?;
    let no_tools = !proxy.contains_key("tools");
    let mut out = Map::new();
    for (key, value) in &original.0 {
        if no_tools && TOOL_KEYS.contains(&key.as_str()) && !proxy.contains_key(key) {
            continue;
        }
        let from_proxy = proxy.get(key).filter(|_| taken(key));
        out.insert(key.clone(), from_proxy.unwrap_or(value).clone());
    }
    for (key, value) in proxy {
        if taken(key) && !original.0.contains_key(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| ShimError::new(e.to_string()))
}

/// Where `metadata.context.<key>` sits in `body`: the raw value's range.
fn context_member(body: &[u8], key: &[u8]) -> Option<(usize, usize)> {
    let mut c = Cursor::strict(body);
    for (depth, name) in [&b"metadata"[..], b"context", key].into_iter().enumerate() {
        c.enter_object()?;
        let mut first = true;
        loop {
            let k = c.next_key(&mut first)??;
            if !k.escaped && k.raw(body) == name {
                break;
            }
            c.skip_value()?;
        }
        if depth == 2 {
            c.peek();
            let start = c.offset();
            c.skip_value()?;
            return Some((start, c.offset()));
        }
    }
    None
}

/// `metadata.context.session_id`, the CLI's conversation.
pub fn session_id(body: &[u8]) -> Option<String> {
    let (s, e) = context_member(body, b"session_id")?;
    serde_json::from_slice::<String>(body.get(s..e)?)
        .ok()
        .filter(|s| !s.is_empty())
}

/// `body` with `metadata.context.request_id` set to `id` (only the value
/// changes, every other byte stays); `None` when the body has no such
/// string member.
pub fn stamp_request_id(body: &[u8], id: &str) -> Option<Vec<u8>> {
    let (s, e) = context_member(body, b"request_id")?;
    if body.get(s) != Some(&b'"') {
        return None;
    }
    let quoted = serde_json::to_vec(id).ok()?;
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(body.get(..s)?);
    out.extend_from_slice(&quoted);
    out.extend_from_slice(body.get(e..)?);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cli_body() -> Value {
        json!({
            "model": "auto",
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "metadata": {"context": {"request_id": "r-1", "request_set_id": "s-1", "session_id": "conv-9", "task_id": "t", "client_type": "5"},
                         "business": {"product": "cli", "type": "agent", "id": "b"}},
            "tools": [{"type": "function", "function": {"name": "Read", "parameters": {"type": "object"}}}],
            "max_tokens": 32000,
            "patches": {"x": 1},
        })
    }

    #[test]
    fn the_proxy_never_sees_qoder_s_own_members() {
        let native = serde_json::to_vec(&cli_body()).unwrap();
        let f = fold(&native).unwrap();
        let seen = f.openai.value();
        for key in QODER_ONLY {
            assert!(seen.get(key).is_none(), "{key}");
        }
        assert_eq!(seen["max_tokens"], 32000);
        assert_eq!(seen["stream_options"]["include_usage"], true);
        assert!(fold(b"[1]").is_err());
        assert!(fold(br#"{"model":"m"}"#).is_err(), "no messages");
    }

    #[test]
    fn restore_takes_messages_tools_and_sampling_and_keeps_the_rest() {
        let native = serde_json::to_vec(&cli_body()).unwrap();
        let f = fold(&native).unwrap();
        let proxy = json!({"model": "auto", "stream": true, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "short"}],
            "tools": [{"type": "function", "function": {"name": "compress"}}],
            "temperature": 0.2});
        let restored: Value =
            serde_json::from_slice(&restore(&f.original, &OpenAiBody::of_value(&proxy)).unwrap())
                .unwrap();
        assert_eq!(restored["messages"], proxy["messages"]);
        assert_eq!(restored["tools"], proxy["tools"]);
        assert_eq!(restored["temperature"], 0.2);
        assert_eq!(
            restored["max_tokens"], 32000,
            "kept when the proxy dropped it"
        );
        assert_eq!(restored["metadata"], cli_body()["metadata"]);
        assert_eq!(restored["patches"], json!({"x": 1}));
        let keys: Vec<_> = restored.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys[..4], ["model", "messages", "stream", "stream_options"]);
        let side = json!({"model": "auto", "stream": false, "messages": [{"role": "user", "content": "sum up"}]});
        let restored: Value =
            serde_json::from_slice(&restore(&f.original, &OpenAiBody::of_value(&side)).unwrap())
                .unwrap();
        assert!(restored.get("tools").is_none(), "a side request wants text");
        assert_eq!(restored["stream"], true, "the model server always streams");
    }

    #[test]
    fn the_request_id_is_stamped_in_place_and_the_session_read() {
        let native = serde_json::to_vec(&cli_body()).unwrap();
        let stamped = stamp_request_id(&native, "fresh-2").unwrap();
        let v: Value = serde_json::from_slice(&stamped).unwrap();
        assert_eq!(v["metadata"]["context"]["request_id"], "fresh-2");
        assert_eq!(v["metadata"]["context"]["request_set_id"], "s-1");
        let back = String::from_utf8(stamped)
            .unwrap()
            .replace("fresh-2", "r-1");
        assert_eq!(back.as_bytes(), &native[..], "nothing else changed");
        assert_eq!(session_id(&native).as_deref(), Some("conv-9"));
        assert_eq!(stamp_request_id(br#"{"messages":[]}"#, "x"), None);
        assert_eq!(
            stamp_request_id(br#"{"metadata":{"context":{"request_id":7}}}"#, "x"),
            None
        );
        assert_eq!(stamp_request_id(b"not json", "x"), None);
    }
}

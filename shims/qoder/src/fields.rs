//! What the ask and the OpenAI body share, whichever way an ask is folded:
//! the sampling fields, the default model, and the small rules that read a
//! system message, `model_config.key` and `parameters`. Both the `Value`
//! fold ([`crate::ask`]) and the written one ([`crate::written`]) use them,
//! so they live below both and neither imports the other's helpers.

use serde_json::{Map, Value};

/// The OpenAI sampling fields carried between the ask's `parameters` and
/// the OpenAI body.
pub const SAMPLING_KEYS: [&str; 9] = [
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "reasoning_effort",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
];

/// The model name used when the ask has no `model_config.key` (qoder's own
/// automatic choice).
pub const DEFAULT_MODEL: &str = "auto";

/// `model_config.key` (when a string) of the raw `model_config` member,
/// which the caller's strict scan checked: its `key` member read by the
/// scanner (a fifth of a parse of the member), the member parsed alone
/// when a key holds an escape; `None` when it is not JSON `serde_json`
/// reads.
pub(crate) fn config_key(model_config: Option<&[u8]>) -> Option<Option<String>> {
    let Some(raw) = model_config else {
        return Some(None);
    };
    if let Ok(key) = shimgate_shim_api::json_scan::last_member(raw, b"key") {
        return Some(key.and_then(|k| serde_json::from_slice::<String>(k).ok()));
    }
    let config: Value = serde_json::from_slice(raw).ok()?;
    Some(config.get("key").and_then(Value::as_str).map(str::to_owned))
}

/// Whether the first message is a system one.
pub(crate) fn starts_with_system(messages: &[Value]) -> bool {
    messages
        .first()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("system")
}

/// The text of a leading system message (string content, or its text parts
/// joined by newlines).
pub(crate) fn leading_system_text(messages: &[Value]) -> Option<String> {
    if !starts_with_system(messages) {
        return None;
    }
    match messages.first()?.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// The ask's `parameters` with its sampling fields set from the OpenAI
/// body (a field the body no longer has was removed by the proxy and is
/// removed here), from the ask's `parameters` object (`None`: it had none)
/// and the body's member `key` (`sampled`); `None` when the ask keeps what
/// it had (no `parameters` object and none is needed).
pub(crate) fn rebuild_parameters(
    had: Option<&Map<String, Value>>,
    sampled: impl Fn(&str) -> Option<Value>,
) -> Option<Map<String, Value>> {
    let had_parameters = had.is_some();
    let mut parameters = had.cloned().unwrap_or_default();
    let old_effort = parameters.get("reasoning_effort").cloned();
    for key in SAMPLING_KEYS {
        match sampled(key).filter(|v| !v.is_null()) {
            Some(v) => {
                parameters.insert(key.into(), v);
            }
            None => {
                parameters.shift_remove(key);
            }
        }
    }
    if parameters.contains_key("enable_thinking") {
        if let Some(on) = thinking_after(old_effort.as_ref(), parameters.get("reasoning_effort")) {
            parameters.insert("enable_thinking".into(), on.into());
        }
    }
    (had_parameters || !parameters.is_empty()).then_some(parameters)
}

/// What an ask that has `enable_thinking` sets it to when its
/// `reasoning_effort` goes from `old` to `new`: qoder's own rule, applied
/// only when the effort really changed (an always-thinking model refuses
/// `enable_thinking: false`) and is a string; `None` keeps it.
pub(crate) fn thinking_after(old: Option<&Value>, new: Option<&Value>) -> Option<bool> {
    if old == new {
        return None;
    }
    new.and_then(Value::as_str).map(|effort| effort != "none")
}

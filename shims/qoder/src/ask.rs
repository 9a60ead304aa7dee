//! The ask (qoder's plaintext request JSON, before the provider's encoder)
//! folded into an OpenAI chat body the proxy can shrink, and rebuilt from
//! the shrunken body with every other field of the original kept.
//!
//! qoder messages are already OpenAI-shaped, so messages and tools travel
//! unchanged in both directions; what the proxy injects (its tools, a system
//! preamble, a trailing user nudge) reaches the upstream as it is.
//!
//! `chat_context` (`text`, `originalContent`) is left as the agent sent it:
//! it records the user's turn for the server, while the model reads
//! `messages`. After compression the last user message may be the proxy's
//! nudge, or carry its `<acp …>` tags, neither of which is the user's text.

use serde_json::{Map, Value};
use shimgate_shim_api::{Folded, ShimError};

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

/// The ask the agent sent, kept under a rid until the return leg rebuilds
/// it (the runtime's `Shim::Original`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OriginalAsk {
    ask: Map<String, Value>,
    system_folded: bool,
}

impl OriginalAsk {
    /// The parsed ask, keys in the agent's order.
    pub fn ask(&self) -> &Map<String, Value> {
        &self.ask
    }

    /// Whether fold turned a top-level `system` string into a leading
    /// system message (the ask had none).
    pub fn system_folded(&self) -> bool {
        self.system_folded
    }

    /// `model_config.key`, the catalog model (`X-Model-Key` for a codec).
    pub fn model_key(&self) -> Option<&str> {
        self.ask.get("model_config")?.get("key")?.as_str()
    }

    /// The agent's `request_id`.
    pub fn request_id(&self) -> Option<&str> {
        self.ask.get("request_id")?.as_str()
    }
}

/// Folds an ask into an OpenAI chat body: `model` from `model_config.key`,
/// `messages` (a top-level `system` string becomes a leading system message
/// when there is none), `tools` when non-empty, the sampling fields of
/// `parameters`, `stream: true`.
pub fn fold(native: &[u8]) -> Result<Folded<OriginalAsk>, ShimError> {
    // A number outside f64's range (`"temperature": 1e400`) is JSON the
    // agent meant: it travels as a tag, and `restore` writes it back.
    let value = shimgate_shim_api::json::parse_keeping_numbers(native)
        .map_err(|e| ShimError::new(format!("qoder ask is not JSON: {e}")))?;
    let Value::Object(ask) = value else {
        return Err(ShimError::new("qoder ask is not a JSON object"));
    };
    let Some(Value::Array(messages)) = ask.get("messages") else {
        return Err(ShimError::new("qoder ask has no messages array"));
    };
    let mut messages = messages.clone();
    let system = ask.get("system").and_then(Value::as_str).unwrap_or("");
    let system_folded = !system.is_empty() && !starts_with_system(&messages);
    if system_folded {
        let mut message = Map::new();
        message.insert("role".into(), "system".into());
        message.insert("content".into(), system.into());
        messages.insert(0, Value::Object(message));
    }

    let mut openai = Map::new();
    let model_key = ask
        .get("model_config")
        .and_then(|c| c.get("key"))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .unwrap_or(DEFAULT_MODEL);
    openai.insert("model".into(), model_key.into());
    openai.insert("messages".into(), Value::Array(messages));
    if let Some(Value::Array(tools)) = ask.get("tools") {
        // `tools: []` is invalid OpenAI; restore puts `[]` back.
        if !tools.is_empty() {
            openai.insert("tools".into(), Value::Array(tools.clone()));
        }
    }
    if let Some(Value::Object(parameters)) = ask.get("parameters") {
        for key in SAMPLING_KEYS {
            if let Some(v) = parameters.get(key).filter(|v| !v.is_null()) {
                openai.insert(key.into(), v.clone());
            }
        }
    }
    openai.insert("stream".into(), Value::Bool(true));
    Ok(Folded {
        openai: Value::Object(openai),
        original: OriginalAsk { ask, system_folded },
    })
}

/// The answer shape of the body [`fold`] would make (`model` from
/// `model_config.key`, `stream: true`), read without parsing the
/// conversation; `None` when unsure (not UTF-8, not JSON the strict
/// scanner accepts, an escaped key, no `messages` list): the caller folds,
/// which decides, refusals included.
pub fn shape(native: &[u8]) -> Option<Value> {
    std::str::from_utf8(native).ok()?;
    let (mut model_config, mut messages) = (None, None);
    let mut escaped_key = false;
    // A repeated key keeps its last value, as the parsed ask does.
    shimgate_shim_api::json_scan::members(native, &mut |key, value| match key {
        b"\"model_config\"" => model_config = Some(value),
        b"\"messages\"" => messages = Some(value),
        _ => escaped_key |= key.contains(&b'\\'),
    })
    .ok()?;
    if escaped_key || messages?.first() != Some(&b'[') {
        return None;
    }
    let config: Option<Value> = match model_config {
        Some(raw) => Some(serde_json::from_slice(raw).ok()?),
        None => None,
    };
    let model_key = config
        .as_ref()
        .and_then(|c| c.get("key"))
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .unwrap_or(DEFAULT_MODEL);
    let mut shape = Map::new();
    shape.insert("model".into(), model_key.into());
    shape.insert("stream".into(), Value::Bool(true));
    Some(Value::Object(shape))
}

/// Rebuilds the ask from the original and the (compressed) OpenAI body:
/// `messages`, `tools` (always present, `[]` when absent) and the sampling
/// fields of `parameters` come from `openai`; every other field from the
/// original, in its place. A top-level `system` string, when the original
/// had one, mirrors the leading system message. Every call gets a fresh
/// `request_id` (and `chat_record_id` when the original had it equal to
/// `request_id`): qoder answers a reused id with 103.
pub fn rebuild(original: &OriginalAsk, openai: &Value) -> Result<Value, ShimError> {
    let Some(body) = openai.as_object() else {
        return Err(ShimError::new("compressed body is not a JSON object"));
    };
    let Some(Value::Array(messages)) = body.get("messages") else {
        return Err(ShimError::new("compressed body has no messages array"));
    };
    let mut ask = original.ask.clone();
    if let Some(Value::String(_)) = ask.get("system") {
        if let Some(text) = leading_system_text(messages) {
            ask.insert("system".into(), text.into());
        }
    }
    ask.insert("messages".into(), Value::Array(messages.clone()));
    let tools = match body.get("tools") {
        Some(Value::Array(tools)) => tools.clone(),
        _ => Vec::new(),
    };
    ask.insert("tools".into(), Value::Array(tools));
    rebuild_parameters(&mut ask, body);
    renew_ids(&mut ask);
    Ok(Value::Object(ask))
}

/// [`rebuild`], serialised: the ask JSON bytes for the codec, with every
/// out-of-range number fold carried as a tag written back as the agent's
/// own token (see [`shimgate_shim_api::json`]).
pub fn restore(original: &OriginalAsk, openai: &Value) -> Result<Vec<u8>, ShimError> {
    let ask = rebuild(original, openai)?;
    serde_json::to_vec(&ask)
        .map(shimgate_shim_api::json::restore_numbers)
        .map_err(|e| ShimError::new(format!("ask did not serialise: {e}")))
}

/// A fresh random (version 4) UUID, lowercase, hyphenated: the ask's
/// `request_id` and the COSY payload's `requestId` (qoder answers `103
/// Duplicate request` to a reused one, so it comes from the OS generator).
pub fn fresh_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

fn starts_with_system(messages: &[Value]) -> bool {
    messages
        .first()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("system")
}

/// The text of a leading system message (string content, or its text parts
/// joined by newlines).
fn leading_system_text(messages: &[Value]) -> Option<String> {
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

/// Sets the sampling fields of `parameters` from the OpenAI body; a field
/// the body no longer has was removed by the proxy and is removed here.
fn rebuild_parameters(ask: &mut Map<String, Value>, body: &Map<String, Value>) {
    let had_parameters = matches!(ask.get("parameters"), Some(Value::Object(_)));
    let mut parameters = match ask.get("parameters") {
        Some(Value::Object(p)) => p.clone(),
        _ => Map::new(),
    };
    let old_effort = parameters.get("reasoning_effort").cloned();
    for key in SAMPLING_KEYS {
        match body.get(key).filter(|v| !v.is_null()) {
            Some(v) => {
                parameters.insert(key.into(), v.clone());
            }
            None => {
                parameters.shift_remove(key);
            }
        }
    }
    // qoder's own rule, applied only when the effort really changed: an
    // always-thinking model refuses `enable_thinking: false`.
    let new_effort = parameters.get("reasoning_effort").cloned();
    if new_effort != old_effort && parameters.contains_key("enable_thinking") {
        if let Some(effort) = new_effort.as_ref().and_then(Value::as_str) {
            parameters.insert("enable_thinking".into(), (effort != "none").into());
        }
    }
    if had_parameters || !parameters.is_empty() {
        ask.insert("parameters".into(), Value::Object(parameters));
    }
}

/// The ask with a fresh `request_id` (and `chat_record_id` where it
/// equalled it), every other byte of meaning unchanged: for a second
/// attempt of the same ask, which qoder would refuse with 103 otherwise.
pub fn with_fresh_ids(ask: &[u8]) -> Result<Vec<u8>, ShimError> {
    let mut map: Map<String, Value> = serde_json::from_slice(ask)
        .map_err(|e| ShimError::new(format!("the ask is not a JSON object: {e}")))?;
    renew_ids(&mut map);
    serde_json::to_vec(&map).map_err(|e| ShimError::new(e.to_string()))
}

fn renew_ids(ask: &mut Map<String, Value>) {
    let old_id = ask
        .get("request_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let new_id = fresh_uuid();
    let record_follows = match (&old_id, ask.get("chat_record_id")) {
        (Some(old), Some(Value::String(record))) => record == old,
        _ => false,
    };
    if record_follows {
        ask.insert("chat_record_id".into(), new_id.clone().into());
    }
    ask.insert("request_id".into(), new_id.into());
}

#[cfg(test)]
mod tests;

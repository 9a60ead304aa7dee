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
//!
//! The shim folds and restores through [`fold_body`] and [`restore_body`],
//! which work from the ask's bytes ([`crate::written`]: the `Value` fold
//! cost a qoder stream 90k of its 976k instructions, all before the first
//! token) and leave what they are unsure of to [`fold`] and [`restore`],
//! the `Value` reference they are tested against.

use std::borrow::Cow;

use serde_json::{Map, Value};
use shimgate_shim_api::{Folded, OpenAiBody, ShimError};

use crate::fields::{config_key, leading_system_text, rebuild_parameters, starts_with_system};
pub use crate::fields::{DEFAULT_MODEL, SAMPLING_KEYS};
use crate::written::{self, Written};

/// The ask the agent sent, kept under a rid until the return leg rebuilds
/// it (the runtime's `Shim::Original`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OriginalAsk {
    kept: Kept,
    system_folded: bool,
}

/// How the ask is kept.
#[derive(Debug, Clone, PartialEq)]
enum Kept {
    /// Parsed, key order kept (the `Value` fold's: an ask the written fold
    /// was unsure of, a repeated key or an out-of-range number).
    Parsed(Map<String, Value>),
    /// Its bytes and where its members sit ([`crate::written`]).
    Written(Written),
}

impl Default for Kept {
    fn default() -> Self {
        Kept::Parsed(Map::new())
    }
}

impl OriginalAsk {
    /// The parsed ask, keys in the agent's order (parsed here when the
    /// ask was kept as its bytes).
    pub fn ask(&self) -> Cow<'_, Map<String, Value>> {
        match &self.kept {
            Kept::Parsed(ask) => Cow::Borrowed(ask),
            // The written fold read the text strictly, so it parses.
            Kept::Written(w) => Cow::Owned(serde_json::from_slice(&w.text).unwrap_or_default()),
        }
    }

    /// Whether the ask was kept as its bytes (the written fold took it).
    pub fn is_written(&self) -> bool {
        matches!(self.kept, Kept::Written(_))
    }

    /// Whether fold turned a top-level `system` string into a leading
    /// system message (the ask had none).
    pub fn system_folded(&self) -> bool {
        self.system_folded
    }

    /// `model_config.key`, the catalog model (`X-Model-Key` for a codec).
    pub fn model_key(&self) -> Option<&str> {
        match &self.kept {
            Kept::Parsed(ask) => ask.get("model_config")?.get("key")?.as_str(),
            Kept::Written(w) => w.model_key.as_deref(),
        }
    }

    /// The agent's `request_id`.
    pub fn request_id(&self) -> Option<&str> {
        match &self.kept {
            Kept::Parsed(ask) => ask.get("request_id")?.as_str(),
            Kept::Written(w) => w.request_id.as_deref(),
        }
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
        original: OriginalAsk {
            kept: Kept::Parsed(ask),
            system_folded,
        },
    })
}

/// [`fold`] as the shim runs it: written from the bytes in one pass
/// ([`crate::written`]) when that pass is sure, the same OpenAI body as
/// [`fold`]'s; else through [`fold`].
pub fn fold_body(native: &[u8]) -> Result<Folded<OriginalAsk, OpenAiBody>, ShimError> {
    match written::fold(native) {
        Some(Ok(done)) => Ok(Folded {
            openai: OpenAiBody::written(done.openai),
            original: OriginalAsk {
                kept: Kept::Written(done.kept),
                system_folded: done.system_folded,
            },
        }),
        Some(Err(refused)) => Err(refused),
        None => {
            let folded = fold(native)?;
            Ok(Folded {
                openai: OpenAiBody::from_value(folded.openai),
                original: folded.original,
            })
        }
    }
}

/// [`restore`] as the shim runs it: an original kept as its bytes is
/// restored from them and the body's text, reading only the members it
/// needs; a parsed one from the body's `Value`.
pub fn restore_body(original: &OriginalAsk, openai: &OpenAiBody) -> Result<Vec<u8>, ShimError> {
    match &original.kept {
        Kept::Written(w) => written::restore(w, openai, &fresh_uuid()),
        Kept::Parsed(_) => restore(original, openai.value()),
    }
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
    let key = config_key(model_config)?;
    let model_key = key
        .as_deref()
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
    rebuild_with_id(original, openai, &fresh_uuid())
}

/// [`rebuild`] with `new_id` as the fresh `request_id`.
fn rebuild_with_id(
    original: &OriginalAsk,
    openai: &Value,
    new_id: &str,
) -> Result<Value, ShimError> {
    let Some(body) = openai.as_object() else {
        return Err(ShimError::new("compressed body is not a JSON object"));
    };
    let Some(Value::Array(messages)) = body.get("messages") else {
        return Err(ShimError::new("compressed body has no messages array"));
    };
    let mut ask = original.ask().into_owned();
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
    if let Some(parameters) = rebuilt_parameters(&ask, body) {
        ask.insert("parameters".into(), Value::Object(parameters));
    }
    renew_ids_with(&mut ask, new_id);
    Ok(Value::Object(ask))
}

/// [`rebuild`], serialised: the ask JSON bytes for the codec, with every
/// out-of-range number fold carried as a tag written back as the agent's
/// own token (see [`shimgate_shim_api::json`]).
pub fn restore(original: &OriginalAsk, openai: &Value) -> Result<Vec<u8>, ShimError> {
    restore_with_id(original, openai, &fresh_uuid())
}

/// [`restore`] with `new_id` as the fresh `request_id`: the bytes of
/// [`rebuild`]'s ask, written from the original and the OpenAI body as
/// they are instead of from a clone of the whole ask (the clone cost more
/// than the writing).
fn restore_with_id(
    original: &OriginalAsk,
    openai: &Value,
    new_id: &str,
) -> Result<Vec<u8>, ShimError> {
    let ask = match &original.kept {
        Kept::Parsed(ask) => ask,
        Kept::Written(w) => return written::restore(w, &OpenAiBody::of_value(openai), new_id),
    };
    let Some(body) = openai.as_object() else {
        return Err(ShimError::new("compressed body is not a JSON object"));
    };
    let Some(Value::Array(messages)) = body.get("messages") else {
        return Err(ShimError::new("compressed body has no messages array"));
    };
    let system = match ask.get("system") {
        Some(Value::String(_)) => leading_system_text(messages),
        _ => None,
    };
    let no_tools = Vec::new();
    let tools = match body.get("tools") {
        Some(Value::Array(tools)) => tools,
        _ => &no_tools,
    };
    let rebuilt = Rebuilt {
        ask,
        system,
        messages,
        tools,
        parameters: rebuilt_parameters(ask, body),
        record_follows: record_follows(ask),
        new_id,
    };
    serde_json::to_vec(&rebuilt)
        .map(shimgate_shim_api::json::restore_numbers)
        .map_err(|e| ShimError::new(format!("ask did not serialise: {e}")))
}

/// The rebuilt ask as [`rebuild_with_id`] makes it: the original's members
/// in their places, these in place of theirs, and the ones it lacked after
/// them in the order `rebuild` inserts them.
struct Rebuilt<'a> {
    ask: &'a Map<String, Value>,
    system: Option<String>,
    messages: &'a Vec<Value>,
    tools: &'a Vec<Value>,
    parameters: Option<Map<String, Value>>,
    record_follows: bool,
    new_id: &'a str,
}

impl serde::Serialize for Rebuilt<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        for (key, value) in self.ask {
            match key.as_str() {
                "system" if self.system.is_some() => map.serialize_entry(key, &self.system)?,
                "messages" => map.serialize_entry(key, self.messages)?,
                "tools" => map.serialize_entry(key, self.tools)?,
                "parameters" if self.parameters.is_some() => {
                    map.serialize_entry(key, &self.parameters)?
                }
                "chat_record_id" if self.record_follows => map.serialize_entry(key, self.new_id)?,
                "request_id" => map.serialize_entry(key, self.new_id)?,
                _ => map.serialize_entry(key, value)?,
            }
        }
        if !self.ask.contains_key("messages") {
            map.serialize_entry("messages", self.messages)?;
        }
        if !self.ask.contains_key("tools") {
            map.serialize_entry("tools", self.tools)?;
        }
        if let (false, Some(p)) = (self.ask.contains_key("parameters"), &self.parameters) {
            map.serialize_entry("parameters", p)?;
        }
        if !self.ask.contains_key("request_id") {
            map.serialize_entry("request_id", self.new_id)?;
        }
        map.end()
    }
}

/// A fresh random (version 4) UUID, lowercase, hyphenated: the ask's
/// `request_id` and the COSY payload's `requestId` (qoder answers `103
/// Duplicate request` to a reused one, so it comes from the OS generator).
pub fn fresh_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// The ask's `parameters` with its sampling fields set from the OpenAI
/// body (a field the body no longer has was removed by the proxy and is
/// removed here); `None` when the ask keeps what it had (it had no
/// `parameters` object and none is needed).
fn rebuilt_parameters(
    ask: &Map<String, Value>,
    body: &Map<String, Value>,
) -> Option<Map<String, Value>> {
    let had = match ask.get("parameters") {
        Some(Value::Object(p)) => Some(p),
        _ => None,
    };
    rebuild_parameters(had, |key| body.get(key).cloned())
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
    renew_ids_with(ask, &fresh_uuid());
}

fn renew_ids_with(ask: &mut Map<String, Value>, new_id: &str) {
    if record_follows(ask) {
        ask.insert("chat_record_id".into(), new_id.into());
    }
    ask.insert("request_id".into(), new_id.into());
}

/// Whether `chat_record_id` equals `request_id` (it then follows it).
fn record_follows(ask: &Map<String, Value>) -> bool {
    match (ask.get("request_id"), ask.get("chat_record_id")) {
        (Some(Value::String(old)), Some(Value::String(record))) => record == old,
        _ => false,
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod differential;

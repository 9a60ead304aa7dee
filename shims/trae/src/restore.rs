//! Restores the SOLO request body from the original and the compressed
//! OpenAI body, written straight to bytes (no intermediate `Value`).
//!
//! The original is the base and keeps its key order: `config_name`,
//! `function`, Max-mode fields and unknown keys stay exactly as the agent
//! sent them. `messages`, `tools` and the [`SAMPLING`] fields come from the
//! compressed body, converted back to SOLO form; keys the compressed body
//! adds (a proxy's own `tools`) follow the original's. A sampling field the
//! compressed body no longer has keeps the original's value: a proxy that
//! re-serialises a body and drops a field should not change how the agent
//! asked the model to sample (billion-context passes them through
//! unchanged; `stream_options`, which it adds, is never taken). `tools` is
//! the exception: a body without tools is a proxy's own side request (a
//! summary) that wants text, so the agent's tools, `tool_choice` and
//! `parallel_tool_calls` are left out then.
//!
//! Messages: string content → `[{"type":"text","text":…}]`, except that a
//! string equal to what an original list of text parts folded to gives that
//! list back; content lists pass as they are; `content: null` stays null;
//! `developer` → `system`; `function` → `function_call` in `tool_calls`
//! (calls with no name are dropped, SOLO refuses them); `tool_call_id` and
//! other members pass. Tools: `parameters` objects → JSON strings, the
//! original's own string when the object is unchanged.
//!
//! A number outside f64's range that fold carried as a tag (see
//! [`shimgate_shim_api::json`]) is written back as the agent's own token.

use std::borrow::Cow;
use std::collections::HashMap;

use serde_json::{Map, Value};
use shimgate_shim_api::ShimError;

use crate::fold::{joined_text, SAMPLING};
use crate::json_write as jw;
use crate::written::Written;

/// Keys that only mean something next to `tools`.
pub(crate) const TOOL_KEYS: [&str; 3] = ["tools", "tool_choice", "parallel_tool_calls"];

/// Keys taken from the compressed body.
pub(crate) fn taken(key: &str) -> bool {
    key == "messages" || key == "tools" || SAMPLING.contains(&key)
}

/// The restored SOLO body as JSON bytes.
pub fn restore_body(original: &Value, openai: &Value) -> Result<Vec<u8>, ShimError> {
    let orig = original
        .as_object()
        .ok_or_else(|| ShimError::new("the original trae body is not an object"))?;
    let comp = compressed(openai)?;
    let ctx = Context::new(orig);
    let mut out = Vec::with_capacity(estimate(openai));
    out.push(b'{');
    let mut first = true;
    let mut member = |out: &mut Vec<u8>, key: &str| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        jw::string(out, key);
        out.push(b':');
    };
    let no_tools = !comp.contains_key("tools");
    for (key, value) in orig {
        if no_tools && TOOL_KEYS.contains(&key.as_str()) && !comp.contains_key(key) {
            continue;
        }
        member(&mut out, key);
        match comp.get(key).filter(|_| taken(key)) {
            Some(from_proxy) => ctx.write_taken(&mut out, key, from_proxy),
            None => jw::value(&mut out, value),
        }
    }
    for (key, value) in comp {
        if taken(key) && !orig.contains_key(key) {
            member(&mut out, key);
            ctx.write_taken(&mut out, key, value);
        }
    }
    out.push(b'}');
    // Numbers fold carried as tags (out of f64's range) go back as sent.
    Ok(shimgate_shim_api::json::restore_numbers(out))
}

/// The compressed body's members, with its `messages` list checked.
fn compressed(openai: &Value) -> Result<&Map<String, Value>, ShimError> {
    let comp = openai
        .as_object()
        .ok_or_else(|| ShimError::new("the compressed body is not an object"))?;
    if !comp.get("messages").is_some_and(Value::is_array) {
        return Err(ShimError::new("the compressed body has no messages list"));
    }
    Ok(comp)
}

/// [`restore_body`] for an original the written fold kept (its bytes and
/// the places of its parts): the same body, with what restore does not
/// take from the proxy copied as the agent wrote it. This one reads the
/// proxy's body parsed; the return leg reads it by members
/// (`crate::restore_members`), which falls back to this one when a key of
/// the proxy's body holds an escape.
pub fn restore_written(text: &[u8], kept: &Written, openai: &Value) -> Result<Vec<u8>, ShimError> {
    let comp = compressed(openai)?;
    let ctx = Context::written(text, kept);
    let key_of = |span: &std::ops::Range<usize>| {
        text.get(span.clone())
            .and_then(|k| std::str::from_utf8(k).ok())
            .unwrap_or_default()
    };
    // Compared as bytes: no decoding per pair of keys.
    let has = |key: &str| {
        kept.members
            .iter()
            .any(|(k, _)| text.get(k.clone()) == Some(key.as_bytes()))
    };
    let mut out = Vec::with_capacity(estimate(openai));
    out.push(b'{');
    let mut first = true;
    let mut member = |out: &mut Vec<u8>, key: &str| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        jw::string(out, key);
        out.push(b':');
    };
    let no_tools = !comp.contains_key("tools");
    for (key, value) in &kept.members {
        let key = key_of(key);
        if no_tools && TOOL_KEYS.contains(&key) && !comp.contains_key(key) {
            continue;
        }
        member(&mut out, key);
        match comp.get(key).filter(|_| taken(key)) {
            Some(from_proxy) => ctx.write_taken(&mut out, key, from_proxy),
            None => out.extend_from_slice(text.get(value.clone()).unwrap_or(b"null")),
        }
    }
    for (key, value) in comp {
        if taken(key) && !has(key) {
            member(&mut out, key);
            ctx.write_taken(&mut out, key, value);
        }
    }
    out.push(b'}');
    Ok(shimgate_shim_api::json::restore_numbers(out))
}

/// A rough output size: the compressed messages dominate.
fn estimate(openai: &Value) -> usize {
    let chars: usize = openai
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| m.iter().map(content_chars).sum())
        .unwrap_or(0);
    chars + chars / 8 + 4096
}

fn content_chars(message: &Value) -> usize {
    match message.get("content") {
        Some(Value::String(s)) => s.len() + 64,
        _ => 256,
    }
}

/// What restoring needs from the original beyond its keys.
pub(crate) struct Context<'a> {
    /// Joined text → (role, original content list) for original messages
    /// whose several text parts were folded into one string.
    parts: HashMap<String, Vec<(Cow<'a, str>, Raw<'a>)>>,
    /// Tool name → the original `parameters` string (the last tool of a
    /// name wins, as it always has).
    params: HashMap<Cow<'a, str>, Schema<'a>>,
}

/// A tool's original `parameters` string: the parsed original's, or the
/// literal the written fold kept, decoded only when a restore needs its
/// text (most restores compare it with the proxy's bytes and copy it).
#[derive(Clone, Copy)]
pub(crate) enum Schema<'a> {
    Str(&'a str),
    Literal(&'a [u8]),
}

impl<'a> Schema<'a> {
    /// The string's text (`None` for a literal that does not decode,
    /// which a strict fold never keeps).
    pub(crate) fn text(self) -> Option<Cow<'a, str>> {
        match self {
            Schema::Str(s) => Some(Cow::Borrowed(s)),
            Schema::Literal(raw) => literal(raw),
        }
    }

    /// Whether the string's text is `json`, byte for byte (what the fold
    /// wrote for the proxy when it is the proxy's `parameters` unchanged);
    /// `None` when a `\u` escape leaves it to [`Schema::text`].
    pub(crate) fn is_text(self, json: &[u8]) -> Option<bool> {
        match self {
            Schema::Str(s) => Some(s.as_bytes() == json),
            Schema::Literal(raw) => literal_is(raw, json),
        }
    }

    /// Writes the string as a JSON string literal: the agent's own literal
    /// when it is what the writer would write for its text.
    pub(crate) fn write(self, out: &mut Vec<u8>) {
        if let Schema::Literal(raw) = self {
            if shimgate_shim_api::json_scan::is_canonical(raw) {
                out.extend_from_slice(raw);
                return;
            }
        }
        jw::string(out, &self.text().unwrap_or_default());
    }

    /// Whether the string holds the JSON value `params`, as parsed values
    /// compare (key order and number spelling aside).
    fn holds(self, params: &Value) -> bool {
        self.text()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|v| v == *params)
    }
}

/// Whether the string literal `raw` decodes to `want`, compared without
/// decoding; `None` at a `\u` escape (surrogates: left to `serde_json`).
pub(crate) fn literal_is(raw: &[u8], want: &[u8]) -> Option<bool> {
    let inner = raw.get(1..raw.len().checked_sub(1)?)?;
    let (mut i, mut j) = (0, 0);
    while let Some(&b) = inner.get(i) {
        let byte = if b == b'\\' {
            i += 1;
            match inner.get(i)? {
                b'"' => b'"',
                b'\\' => b'\\',
                b'/' => b'/',
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                _ => return None,
            }
        } else {
            b
        };
        if want.get(j) != Some(&byte) {
            return Some(false);
        }
        i += 1;
        j += 1;
    }
    Some(j == want.len())
}

/// A piece of the original: parsed, or the agent's bytes.
#[derive(Clone, Copy)]
pub(crate) enum Raw<'a> {
    Value(&'a Value),
    Text(&'a [u8]),
}

impl Raw<'_> {
    pub(crate) fn write(self, out: &mut Vec<u8>) {
        match self {
            Raw::Value(v) => jw::value(out, v),
            Raw::Text(t) => out.extend_from_slice(t),
        }
    }
}

/// A raw string literal decoded (borrowed when it holds no escape).
pub(crate) fn literal(raw: &[u8]) -> Option<Cow<'_, str>> {
    let inner = raw.get(1..raw.len().checked_sub(1)?)?;
    if inner.contains(&b'\\') {
        serde_json::from_slice::<String>(raw).ok().map(Cow::Owned)
    } else {
        std::str::from_utf8(inner).ok().map(Cow::Borrowed)
    }
}

impl<'a> Context<'a> {
    fn new(orig: &'a Map<String, Value>) -> Context<'a> {
        let mut parts: HashMap<String, Vec<(Cow<'a, str>, Raw<'a>)>> = HashMap::new();
        for m in orig
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(content @ Value::Array(list)) = m.get("content") {
                if list.len() > 1 {
                    if let Some(joined) = joined_text(list) {
                        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
                        parts
                            .entry(joined)
                            .or_default()
                            .push((Cow::Borrowed(role), Raw::Value(content)));
                    }
                }
            }
        }
        let params = orig
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                let f = t.get("function")?;
                Some((
                    Cow::Borrowed(f.get("name")?.as_str()?),
                    Schema::Str(f.get("parameters")?.as_str()?),
                ))
            })
            .collect();
        Context { parts, params }
    }

    /// The same, from what the written fold kept.
    pub(crate) fn written(text: &'a [u8], kept: &'a Written) -> Context<'a> {
        let mut parts: HashMap<String, Vec<(Cow<'a, str>, Raw<'a>)>> = HashMap::new();
        for (joined, role, list) in &kept.parts {
            let (Some(joined), Some(list)) = (literal(joined), text.get(list.clone())) else {
                continue;
            };
            let role = text.get(role.clone()).and_then(literal).unwrap_or_default();
            parts
                .entry(joined.into_owned())
                .or_default()
                .push((role, Raw::Text(list)));
        }
        let params = kept
            .params
            .iter()
            .filter_map(|(name, p)| {
                Some((
                    literal(text.get(name.clone())?)?,
                    Schema::Literal(text.get(p.clone())?),
                ))
            })
            .collect();
        Context { parts, params }
    }

    pub(crate) fn write_taken(&self, out: &mut Vec<u8>, key: &str, value: &Value) {
        match (key, value) {
            ("messages", Value::Array(list)) => {
                out.push(b'[');
                for (i, m) in list.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_message(out, m);
                }
                out.push(b']');
            }
            ("tools", Value::Array(list)) => {
                out.push(b'[');
                for (i, t) in list.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    self.write_tool(out, t);
                }
                out.push(b']');
            }
            ("tool_choice", Value::Object(_)) => match value.pointer("/function/name") {
                Some(Value::String(name)) => jw::string(out, name),
                _ => jw::value(out, value),
            },
            _ => jw::value(out, value),
        }
    }

    pub(crate) fn write_message(&self, out: &mut Vec<u8>, message: &Value) {
        let Some(obj) = message.as_object() else {
            jw::value(out, message);
            return;
        };
        let role = obj.get("role").and_then(Value::as_str).unwrap_or("");
        out.push(b'{');
        let mut first = true;
        for (key, value) in obj {
            let written = match key.as_str() {
                "role" if role == "developer" => Some(Write::Str("system")),
                "content" => Some(Write::Content(value)),
                "tool_calls" if value.is_array() => Some(Write::Calls(value)),
                _ => None,
            };
            if let Some(Write::Calls(Value::Array(calls))) = &written {
                if !calls.iter().any(has_name) {
                    // Every call lacked a name: SOLO refuses those, and an
                    // empty list is no better than none.
                    continue;
                }
            }
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            jw::string(out, key);
            out.push(b':');
            match written {
                Some(Write::Str(s)) => jw::string(out, s),
                Some(Write::Content(c)) => self.write_content(out, role, c),
                Some(Write::Calls(Value::Array(calls))) => write_calls(out, calls),
                _ => jw::value(out, value),
            }
        }
        out.push(b'}');
    }

    fn write_content(&self, out: &mut Vec<u8>, role: &str, content: &Value) {
        let Value::String(text) = content else {
            jw::value(out, content);
            return;
        };
        if let Some(parts) = self.original_parts(text, role) {
            parts.write(out);
            return;
        }
        out.extend_from_slice(b"[{\"type\":\"text\",\"text\":");
        jw::string(out, text);
        out.extend_from_slice(b"}]");
    }

    /// Whether any original message had its text parts joined (only then
    /// does a string content need its text looked up).
    pub(crate) fn has_parts(&self) -> bool {
        !self.parts.is_empty()
    }

    /// The original content list a string content `text` of a message
    /// with `role` was folded from, if any.
    pub(crate) fn original_parts(&self, text: &str, role: &str) -> Option<Raw<'a>> {
        if self.parts.is_empty() {
            return None;
        }
        let original = self
            .parts
            .get(text)?
            .iter()
            .find(|(r, _)| *r == role || (role == "developer" && *r == "system"))?;
        Some(original.1)
    }

    /// The original `parameters` string of the tool named `name`.
    pub(crate) fn schema(&self, name: &str) -> Option<Schema<'a>> {
        self.params.get(name).copied()
    }

    pub(crate) fn write_tool(&self, out: &mut Vec<u8>, tool: &Value) {
        let Some(params) = tool
            .pointer("/function/parameters")
            .filter(|p| !p.is_string())
        else {
            jw::value(out, tool);
            return;
        };
        let name = tool
            .pointer("/function/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = match self.params.get(name).and_then(|s| Some((s.text()?, s))) {
            // The agent's own text when the proxy left the schema alone.
            Some((orig, schema)) if schema.holds(params) => orig.into_owned(),
            _ => serde_json::to_string(params).unwrap_or_default(),
        };
        let mut tool = tool.clone();
        if let Some(slot) = tool.pointer_mut("/function/parameters") {
            *slot = Value::String(text);
        }
        jw::value(out, &tool);
    }
}

enum Write<'v> {
    Str(&'static str),
    Content(&'v Value),
    Calls(&'v Value),
}

pub(crate) fn has_name(call: &Value) -> bool {
    ["/function/name", "/function_call/name"].iter().any(|p| {
        call.pointer(p)
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
    })
}

/// Writes tool calls with `function` renamed to `function_call`, dropping
/// calls without a name.
fn write_calls(out: &mut Vec<u8>, calls: &[Value]) {
    out.push(b'[');
    for (i, call) in calls.iter().filter(|c| has_name(c)).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_call(out, call);
    }
    out.push(b']');
}

/// One tool call with `function` renamed to `function_call` (unless it
/// has a `function_call` already).
pub(crate) fn write_call(out: &mut Vec<u8>, call: &Value) {
    let Some(obj) = call.as_object() else {
        jw::value(out, call);
        return;
    };
    let renames = !obj.contains_key("function_call");
    out.push(b'{');
    for (i, (k, v)) in obj.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let key = if renames && k == "function" {
            "function_call"
        } else {
            k
        };
        jw::string(out, key);
        out.push(b':');
        jw::value(out, v);
    }
    out.push(b'}');
}

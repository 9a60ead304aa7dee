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
const TOOL_KEYS: [&str; 3] = ["tools", "tool_choice", "parallel_tool_calls"];

/// Keys taken from the compressed body.
fn taken(key: &str) -> bool {
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
/// take from the proxy copied as the agent wrote it.
pub fn restore_written(text: &[u8], kept: &Written, openai: &Value) -> Result<Vec<u8>, ShimError> {
    let comp = compressed(openai)?;
    let ctx = Context::written(text, kept);
    let key_of = |span: &std::ops::Range<usize>| {
        text.get(span.clone())
            .and_then(|k| std::str::from_utf8(k).ok())
            .unwrap_or_default()
    };
    let has = |key: &str| kept.members.iter().any(|(k, _)| key_of(k) == key);
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
struct Context<'a> {
    /// Joined text → (role, original content list) for original messages
    /// whose several text parts were folded into one string.
    parts: HashMap<String, Vec<(Cow<'a, str>, Raw<'a>)>>,
    /// Tool name → the original `parameters` string.
    params: HashMap<Cow<'a, str>, Cow<'a, str>>,
}

/// A piece of the original: parsed, or the agent's bytes.
#[derive(Clone, Copy)]
enum Raw<'a> {
    Value(&'a Value),
    Text(&'a [u8]),
}

impl Raw<'_> {
    fn write(self, out: &mut Vec<u8>) {
        match self {
            Raw::Value(v) => jw::value(out, v),
            Raw::Text(t) => out.extend_from_slice(t),
        }
    }
}

/// A raw string literal decoded (borrowed when it holds no escape).
fn literal(raw: &[u8]) -> Option<Cow<'_, str>> {
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
                    Cow::Borrowed(f.get("parameters")?.as_str()?),
                ))
            })
            .collect();
        Context { parts, params }
    }

    /// The same, from what the written fold kept.
    fn written(text: &'a [u8], kept: &'a Written) -> Context<'a> {
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
                    literal(text.get(p.clone())?)?,
                ))
            })
            .collect();
        Context { parts, params }
    }

    fn write_taken(&self, out: &mut Vec<u8>, key: &str, value: &Value) {
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

    fn write_message(&self, out: &mut Vec<u8>, message: &Value) {
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
        if !self.parts.is_empty() {
            let original = self.parts.get(text.as_str()).and_then(|c| {
                c.iter()
                    .find(|(r, _)| *r == role || (role == "developer" && *r == "system"))
            });
            if let Some((_, parts)) = original {
                parts.write(out);
                return;
            }
        }
        out.extend_from_slice(b"[{\"type\":\"text\",\"text\":");
        jw::string(out, text);
        out.extend_from_slice(b"}]");
    }

    fn write_tool(&self, out: &mut Vec<u8>, tool: &Value) {
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
        let text = match self.params.get(name) {
            // The agent's own text when the proxy left the schema alone.
            Some(orig) if serde_json::from_str::<Value>(orig).ok().as_ref() == Some(params) => {
                orig.to_string()
            }
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

fn has_name(call: &Value) -> bool {
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
    let mut first = true;
    for call in calls.iter().filter(|c| has_name(c)) {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        let Some(obj) = call.as_object() else {
            jw::value(out, call);
            continue;
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
    out.push(b']');
}

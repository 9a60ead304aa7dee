//! Reading SOLO answer frames: the `output` delta (scanned, not parsed into
//! a `Value`, because it is most of the stream), its tool-call fragments, and
//! `token_usage` turned into an OpenAI `usage` object.
//!
//! The return leg, the digest used by the tests and the fuzz targets all read
//! `output` through [`Output::parse`], so they agree on what a frame means.

use serde_json::{Map, Value};

use crate::json_scan;
use crate::json_write;

/// One `output` frame: `{response, reasoning_content, tool_calls, ...}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Output<'a> {
    /// `response` as a raw JSON string literal; empty when absent or null.
    pub response: &'a [u8],
    /// `reasoning_content` as a raw JSON string literal; empty when absent or
    /// null.
    pub reasoning: &'a [u8],
    /// The tool-call fragments (a single object counts as a list of one).
    pub tools: Vec<ToolDelta>,
    /// Members OpenAI has no field for: raw key literal, raw value.
    pub extra: Vec<(&'a [u8], &'a [u8])>,
}

/// One tool-call fragment inside `output.tool_calls`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolDelta {
    /// `index`, or the fragment's position in the list when absent.
    pub index: u64,
    /// `id` (`""` on later fragments).
    pub id: String,
    /// `type`, when present.
    pub kind: Option<String>,
    /// `function_call.name` (`""` on later fragments).
    pub name: String,
    /// `function_call.arguments` increment.
    pub arguments: String,
    /// Other members of the fragment (`namespace`, `partial_arguments`, ...).
    pub extra: Map<String, Value>,
    /// Other members of `function_call`.
    pub function_extra: Map<String, Value>,
}

impl ToolDelta {
    /// Whether the fragment says anything (an id, a name or arguments).
    pub fn is_content(&self) -> bool {
        !self.id.is_empty() || !self.name.is_empty() || !self.arguments.is_empty()
    }
}

impl<'a> Output<'a> {
    /// Reads an `output` frame; `None` when its shape is not the one SOLO
    /// documents (the frame then travels verbatim instead).
    pub fn parse(data: &'a [u8]) -> Option<Output<'a>> {
        std::str::from_utf8(data).ok()?;
        let mut out = Output::default();
        let mut understood = true;
        json_scan::members(data, &mut |key, value| {
            let name = key_name(key);
            match name.as_deref() {
                Some("response") => understood &= text_member(value, &mut out.response),
                Some("reasoning_content") => {
                    understood &= text_member(value, &mut out.reasoning);
                }
                Some("tool_calls") => match tool_deltas(value) {
                    Some(tools) => out.tools = tools,
                    None => understood = false,
                },
                _ => out.extra.push((key, value)),
            }
        })
        .ok()?;
        understood.then_some(out)
    }

    /// Whether `response` holds text.
    pub fn has_text(&self) -> bool {
        !self.response.is_empty() && !json_scan::is_empty_string(self.response)
    }

    /// Whether `reasoning_content` holds text.
    pub fn has_reasoning(&self) -> bool {
        !self.reasoning.is_empty() && !json_scan::is_empty_string(self.reasoning)
    }

    /// Whether the frame carries answer content (text, reasoning or a tool
    /// call): what commits an attempt.
    pub fn is_content(&self) -> bool {
        self.has_text() || self.has_reasoning() || self.tools.iter().any(ToolDelta::is_content)
    }
}

/// The decoded name of a raw key literal (keys with escapes are rare).
fn key_name(raw: &[u8]) -> Option<std::borrow::Cow<'_, str>> {
    let inner = raw.get(1..raw.len().saturating_sub(1))?;
    if inner.contains(&b'\\') {
        serde_json::from_slice::<String>(raw).ok().map(Into::into)
    } else {
        std::str::from_utf8(inner).ok().map(Into::into)
    }
}

/// A text member is a string or null; anything else is not SOLO's shape.
fn text_member<'a>(value: &'a [u8], slot: &mut &'a [u8]) -> bool {
    match value.first() {
        Some(b'"') => {
            *slot = value;
            true
        }
        Some(b'n') => {
            *slot = b"";
            true
        }
        _ => false,
    }
}

fn tool_deltas(raw: &[u8]) -> Option<Vec<ToolDelta>> {
    if raw == b"null" {
        return Some(Vec::new());
    }
    let value: Value = serde_json::from_slice(raw).ok()?;
    match &value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(pos, item)| tool_delta(item, pos as u64))
            .collect(),
        Value::Object(_) => Some(vec![tool_delta(&value, 0)?]),
        _ => None,
    }
}

fn opt_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

fn tool_delta(item: &Value, position: u64) -> Option<ToolDelta> {
    let mut d = ToolDelta {
        index: position,
        ..ToolDelta::default()
    };
    for (k, v) in item.as_object()? {
        match k.as_str() {
            "index" if !v.is_null() => d.index = v.as_u64()?,
            "index" => {}
            "id" => d.id = opt_string(v)?,
            "type" if v.is_null() => d.kind = None,
            "type" => d.kind = Some(v.as_str()?.to_owned()),
            "function_call" | "function" if v.is_null() => {}
            "function_call" | "function" => {
                for (fk, fv) in v.as_object()? {
                    match fk.as_str() {
                        "name" => d.name = opt_string(fv)?,
                        "arguments" => d.arguments = opt_string(fv)?,
                        _ => {
                            d.function_extra.insert(fk.clone(), fv.clone());
                        }
                    }
                }
            }
            _ => {
                d.extra.insert(k.clone(), v.clone());
            }
        }
    }
    Some(d)
}

/// Renders a SOLO `token_usage` payload as an OpenAI `usage` object:
/// `prompt_tokens`, `completion_tokens`, `total_tokens` and, when SOLO
/// reports them, `completion_tokens_details.reasoning_tokens` and
/// `prompt_tokens_details.cached_tokens`. `None` when it is not an object.
pub fn openai_usage(data: &[u8]) -> Option<Vec<u8>> {
    let v: Value = serde_json::from_slice(data).ok()?;
    let obj = v.as_object()?;
    let num = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| obj.get(*n).and_then(Value::as_u64))
    };
    let prompt = num(&["prompt_tokens", "input_tokens"]).unwrap_or(0);
    let completion = num(&["completion_tokens", "output_tokens"]).unwrap_or(0);
    let total = num(&["total_tokens"]).unwrap_or(prompt.saturating_add(completion));
    let mut out = Vec::with_capacity(128);
    out.extend_from_slice(b"{\"prompt_tokens\":");
    json_write::uint(&mut out, prompt);
    out.extend_from_slice(b",\"completion_tokens\":");
    json_write::uint(&mut out, completion);
    out.extend_from_slice(b",\"total_tokens\":");
    json_write::uint(&mut out, total);
    if let Some(r) = num(&["reasoning_tokens"]) {
        out.extend_from_slice(b",\"completion_tokens_details\":{\"reasoning_tokens\":");
        json_write::uint(&mut out, r);
        out.push(b'}');
    }
    if let Some(c) = num(&["cached_tokens", "cache_read_tokens"]) {
        out.extend_from_slice(b",\"prompt_tokens_details\":{\"cached_tokens\":");
        json_write::uint(&mut out, c);
        out.push(b'}');
    }
    out.push(b'}');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_members_are_read_raw() {
        let o = Output::parse(
            br#"{"response":"a\nb","reasoning_content":null,"tool_calls":null,"x":1}"#,
        )
        .unwrap();
        assert_eq!(o.response, br#""a\nb""#);
        assert!(o.has_text() && !o.has_reasoning() && o.tools.is_empty());
        assert_eq!(o.extra, vec![(&b"\"x\""[..], &b"1"[..])]);
    }

    #[test]
    fn tool_calls_as_a_single_object_is_a_list_of_one() {
        let o = Output::parse(
            br#"{"response":"","tool_calls":{"id":"c1","type":"function","function_call":{"name":"glob","arguments":""},"namespace":"fs"}}"#,
        )
        .unwrap();
        assert_eq!(o.tools.len(), 1);
        assert_eq!(o.tools[0].name, "glob");
        assert_eq!(o.tools[0].extra["namespace"], "fs");
        assert!(o.is_content());
    }

    #[test]
    fn fragments_without_index_use_their_position() {
        let o = Output::parse(
            br#"{"tool_calls":[{"function_call":{"name":"a"}},{"function_call":{"name":"b"}}]}"#,
        )
        .unwrap();
        assert_eq!((o.tools[0].index, o.tools[1].index), (0, 1));
    }

    #[test]
    fn unexpected_shapes_are_not_understood() {
        for bad in [
            &br#"{"response":1}"#[..],
            br#"{"tool_calls":"x"}"#,
            br#"{"tool_calls":[1]}"#,
            br#"{"tool_calls":[{"index":-1}]}"#,
            br#"{"tool_calls":[{"function_call":{"arguments":{}}}]}"#,
            b"[]",
            b"{",
        ] {
            assert!(
                Output::parse(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn usage_becomes_openai_usage_with_reasoning_tokens() {
        let u = openai_usage(
            br#"{"prompt_tokens":21,"completion_tokens":142,"total_tokens":163,"reasoning_tokens":135}"#,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&u).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"prompt_tokens":21,"completion_tokens":142,"total_tokens":163,
                "completion_tokens_details":{"reasoning_tokens":135}})
        );
        let alt: Value = serde_json::from_slice(
            &openai_usage(br#"{"input_tokens":3,"output_tokens":4,"cached_tokens":1}"#).unwrap(),
        )
        .unwrap();
        assert_eq!(alt["total_tokens"], 7);
        assert_eq!(alt["prompt_tokens_details"]["cached_tokens"], 1);
    }
}

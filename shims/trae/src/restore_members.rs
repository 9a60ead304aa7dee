//! The written restore reading the proxy's body member by member, so that
//! the return leg (the request's way to the upstream, its time to first
//! token) never parses the whole compressed conversation into a
//! `serde_json::Value` only to write it out again.
//!
//! It writes the bytes [`restore::restore_written`] writes for the parsed
//! body (differential tests and the `trae_restore` fuzz target hold it
//! to that): a value the restore passes on is copied when its text is
//! what `serde_json` writes for it ([`json_scan::is_canonical`]: what a
//! serialising proxy sends), else parsed, it alone, and written. A message,
//! tool call or tool is rewritten from its members; one with a key that
//! holds an escape or repeats (whose parsed reading keeps the last value,
//! at the first place) is parsed and goes through the `Value` restore, and
//! a body with such a top-level key goes through it whole.
//!
//! A tool's `parameters` object goes back as the agent's own string when
//! the proxy's text is what the fold wrote for it (compared without
//! decoding or parsing), or when both parse to the same value.
//!
//! The proxy's body must be one a strict reading accepted
//! ([`OpenAiBody::parse`], which the return leg calls): members are found
//! with the lenient cursor.

use std::borrow::Cow;
use std::ops::Range;

use serde_json::Value;
use shimgate_shim_api::json_scan::{self, Cursor};
use shimgate_shim_api::{OpenAiBody, ShimError};

use crate::fold::SAMPLING;
use crate::json_write as jw;
use crate::restore::{self, literal, Context, Schema, TOOL_KEYS};
use crate::written::Written;

/// One member of an object: its key's contents and its value's text.
type Span = (Range<usize>, Range<usize>);

/// The keys restore takes from the proxy's body, as [`restore::taken`].
fn taken_keys() -> impl Iterator<Item = &'static str> {
    ["messages", "tools"]
        .into_iter()
        .chain(SAMPLING.iter().copied())
}

/// The taken key `key` spells, if it is one.
fn taken_name(key: &[u8]) -> Option<&'static str> {
    taken_keys().find(|k| k.as_bytes() == key)
}

/// The restored SOLO body, as [`restore::restore_written`] writes it for
/// `openai` parsed.
pub(crate) fn restore(
    text: &[u8],
    kept: &Written,
    openai: &OpenAiBody,
) -> Result<Vec<u8>, ShimError> {
    let body = openai.as_bytes();
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ShimError::new("the compressed body is not an object"));
    }
    let messages = match openai.member("messages") {
        Ok(messages) => messages.filter(|m| m.first() == Some(&b'[')),
        // A key with an escape might spell any key: the parse decides.
        Err(_) => return restore::restore_written(text, kept, openai.value()),
    };
    if messages.is_none() {
        return Err(ShimError::new("the compressed body has no messages list"));
    }
    // The same answer for every key once one was `Ok`.
    let get = |key: &str| openai.member(key).ok().flatten();
    let ctx = Context::written(text, kept);
    let mut w = Writer::new(&ctx);
    let mut out = Vec::with_capacity(body.len() + body.len() / 8 + text.len() / 4 + 4096);
    out.push(b'{');
    let no_tools = get("tools").is_none();
    for (key, value) in &kept.members {
        let key = text.get(key.clone()).unwrap_or_default();
        let from_proxy = taken_name(key).and_then(|name| Some((name, get(name)?)));
        if no_tools && from_proxy.is_none() && TOOL_KEYS.iter().any(|k| k.as_bytes() == key) {
            continue;
        }
        put_key(&mut out, key);
        match from_proxy {
            Some((name, raw)) => w.taken(&mut out, name, raw)?,
            None => out.extend_from_slice(text.get(value.clone()).unwrap_or(b"null")),
        }
    }
    for (name, raw) in added(text, kept, openai) {
        put_key(&mut out, name.as_bytes());
        w.taken(&mut out, name, raw)?;
    }
    out.push(b'}');
    Ok(shimgate_shim_api::json::restore_numbers(out))
}

/// The taken members the proxy's body has and the original has not, in
/// the order a parsed body keeps them (a repeated key at its first place).
fn added<'b>(text: &[u8], kept: &Written, openai: &'b OpenAiBody) -> Vec<(&'static str, &'b [u8])> {
    let had = |key: &str| {
        kept.members
            .iter()
            .any(|(k, _)| text.get(k.clone()) == Some(key.as_bytes()))
    };
    let mut added: Vec<_> = taken_keys()
        .filter(|k| !had(k))
        .filter_map(|k| Some((k, openai.member(k).ok().flatten()?)))
        .collect();
    if added.len() > 1 {
        // Rare (a proxy seldom adds a sampling field): one more walk.
        let body = openai.as_bytes();
        let spans = json_scan::member_spans(body).unwrap_or_default();
        let first = |key: &str| {
            spans
                .iter()
                .position(|s| body.get(s.key.clone()) == Some(key.as_bytes()))
        };
        added.sort_by_key(|(k, _)| first(k));
    }
    added
}

/// `,"key":` (no comma first): a key without escapes is its own literal.
fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    if out.len() > 1 {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
}

fn not_json(e: impl std::fmt::Display) -> ShimError {
    ShimError::new(format!("the compressed body is not JSON: {e}"))
}

fn parse(raw: &[u8]) -> Result<Value, ShimError> {
    serde_json::from_slice(raw).map_err(not_json)
}

/// A value as `serde_json` writes it: its text when that is what it
/// writes, else parsed and written.
fn value(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ShimError> {
    if is_str(raw) {
        return string(out, raw);
    }
    // A proxy that writes `", "` or indents differs only in spacing.
    let raw = minified(raw);
    if json_scan::is_canonical(&raw) {
        out.extend_from_slice(&raw);
    } else {
        jw::value(out, &parse(&raw)?);
    }
    Ok(())
}

/// `raw` (JSON a strict reading accepted) without the whitespace between
/// its tokens: the same value, borrowed when there is none.
fn minified(raw: &[u8]) -> Cow<'_, [u8]> {
    let space = |b: &u8| matches!(b, b' ' | b'\n' | b'\r' | b'\t');
    let mut out: Option<Vec<u8>> = None;
    let (mut i, mut copied) = (0, 0);
    while let Some(b) = raw.get(i) {
        if *b == b'"' {
            i = string_end(raw, i);
        } else if space(b) {
            let o = out.get_or_insert_with(|| Vec::with_capacity(raw.len()));
            o.extend_from_slice(raw.get(copied..i).unwrap_or_default());
            while raw.get(i).is_some_and(space) {
                i += 1;
            }
            copied = i;
        } else {
            i += 1;
        }
    }
    match out {
        None => Cow::Borrowed(raw),
        Some(mut o) => {
            o.extend_from_slice(raw.get(copied..).unwrap_or_default());
            Cow::Owned(o)
        }
    }
}

/// Where the string literal opening at `at` ends (after its quote).
fn string_end(raw: &[u8], at: usize) -> usize {
    let mut i = at + 1;
    while let Some(k) = raw.get(i..).and_then(|r| memchr::memchr2(b'"', b'\\', r)) {
        if raw.get(i + k) == Some(&b'"') {
            return i + k + 1;
        }
        i += k + 2;
    }
    raw.len()
}

/// A string literal as `serde_json` writes its text.
fn string(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ShimError> {
    if canonical_literal(raw) {
        out.extend_from_slice(raw);
    } else {
        let text = literal(raw).ok_or_else(|| not_json("a bad string"))?;
        jw::string(out, &text);
    }
    Ok(())
}

/// [`json_scan::is_canonical`] of a string literal a strict reading
/// accepted, found with `memchr` (the long contents of a conversation
/// are most of a body): such a literal holds no raw control byte, so only
/// its escapes can differ from what `serde_json` writes (`\"`, `\\`,
/// `\b`, `\f`, `\n`, `\r`, `\t`, and `\u00xx` in lower case for the
/// other control bytes).
fn canonical_literal(raw: &[u8]) -> bool {
    let Some(mut rest) = raw.get(1..raw.len().saturating_sub(1)) else {
        return false;
    };
    while let Some(at) = memchr::memchr(b'\\', rest) {
        let escape = rest.get(at + 1..).unwrap_or_default();
        let used = match escape.first() {
            Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => 1,
            Some(b'u') => {
                let Some(hex) = escape.get(1..5) else {
                    return false;
                };
                let lower = hex.iter().all(|h| matches!(h, b'0'..=b'9' | b'a'..=b'f'));
                let unit = std::str::from_utf8(hex)
                    .ok()
                    .and_then(|h| u32::from_str_radix(h, 16).ok());
                let short = matches!(unit, Some(0x08 | 0x09 | 0x0a | 0x0c | 0x0d));
                if !lower || short || unit.is_none_or(|u| u >= 0x20) {
                    return false;
                }
                5
            }
            _ => return false,
        };
        rest = rest.get(at + 1 + used..).unwrap_or_default();
    }
    true
}

/// The items of a raw array, each as its text.
fn items(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut c = Cursor::new(raw);
    let mut open = c.enter_array().is_some();
    let mut first = true;
    std::iter::from_fn(move || {
        if !open || !c.next_item(&mut first)? {
            open = false;
            return None;
        }
        c.peek()?;
        let start = c.offset();
        c.skip_value()?;
        raw.get(start..c.offset())
    })
}

/// One item of an array, read where it sits: its place in the array's
/// text and, for an object whose members all have plain, distinct keys,
/// `sure` (its members are then in the spans it was read with).
struct Item {
    span: Range<usize>,
    sure: bool,
}

/// Reads the value at the cursor (which reads `buf`); an object's members
/// go into `spans` (offsets in `buf`) as it is walked, so that an item is
/// read once, not skipped and then walked again.
fn read_item(c: &mut Cursor<'_>, buf: &[u8], spans: &mut Vec<Span>) -> Option<Item> {
    spans.clear();
    let opens = c.peek()?;
    let start = c.offset();
    if opens != b'{' {
        c.skip_value()?;
        return Some(Item {
            span: start..c.offset(),
            sure: false,
        });
    }
    c.enter_object()?;
    let (mut sure, mut first) = (true, true);
    while let Some(key) = c.next_key(&mut first)? {
        let name = key.raw(buf);
        // An escaped key might spell another; a repeated one keeps its
        // first place and its last value when parsed.
        sure &= !key.escaped && !spans.iter().any(|(k, _)| buf.get(k.clone()) == Some(name));
        c.peek()?;
        let at = c.offset();
        c.skip_value()?;
        if sure {
            spans.push((key.start..key.end, at..c.offset()));
        }
    }
    Some(Item {
        span: start..c.offset(),
        sure,
    })
}

/// The members of the raw object `raw` into `spans`; `false` when a key
/// holds an escape or repeats (the parsed object decides then).
fn members(raw: &[u8], spans: &mut Vec<Span>) -> bool {
    read_item(&mut Cursor::new(raw), raw, spans).is_some_and(|i| i.sure)
}

/// The value of the member `key` among `spans` of `raw`.
fn find<'r>(raw: &'r [u8], spans: &[Span], key: &[u8]) -> Option<&'r [u8]> {
    let (_, value) = spans
        .iter()
        .find(|(k, _)| raw.get(k.clone()) == Some(key))?;
    raw.get(value.clone())
}

/// Whether a raw value is a string literal.
fn is_str(raw: &[u8]) -> bool {
    raw.first() == Some(&b'"')
}

/// [`restore::has_name`] of a raw call; `Err` when a key holds an escape.
fn has_name(call: &[u8]) -> Result<bool, json_scan::Unsure> {
    if call.first() != Some(&b'{') {
        return Ok(false);
    }
    for key in [&b"function"[..], b"function_call"] {
        let Some(function) = json_scan::last_member(call, key)? else {
            continue;
        };
        let name = json_scan::last_member(function, b"name")?;
        if name.is_some_and(|n| is_str(n) && !json_scan::is_empty_string(n)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// How a list's item is written ([`Writer::message`], [`Writer::tool`]).
type WriteItem<'c, 'a> =
    fn(&mut Writer<'c, 'a>, &mut Vec<u8>, &[u8], Item) -> Result<(), ShimError>;

/// Writes the taken members, with the scratch lists their objects'
/// members are read into (one allocation each per restore, not per
/// message).
struct Writer<'c, 'a> {
    ctx: &'c Context<'a>,
    outer: Vec<Span>,
    inner: Vec<Span>,
}

impl<'c, 'a> Writer<'c, 'a> {
    fn new(ctx: &'c Context<'a>) -> Self {
        Writer {
            ctx,
            outer: Vec::with_capacity(8),
            inner: Vec::with_capacity(8),
        }
    }

    /// [`Context::write_taken`] of a raw member.
    fn taken(&mut self, out: &mut Vec<u8>, key: &str, raw: &[u8]) -> Result<(), ShimError> {
        match (key, raw.first()) {
            ("messages", Some(b'[')) => self.list(out, raw, Self::message),
            ("tools", Some(b'[')) => self.list(out, raw, Self::tool),
            ("tool_choice", Some(b'{')) => {
                self.ctx.write_taken(out, key, &parse(raw)?);
                Ok(())
            }
            _ => value(out, raw),
        }
    }

    /// A list of messages or tools, each item read once where it sits.
    fn list(
        &mut self,
        out: &mut Vec<u8>,
        raw: &[u8],
        each: WriteItem<'c, 'a>,
    ) -> Result<(), ShimError> {
        let bad = || not_json("a list the scan could not walk");
        let mut c = Cursor::new(raw);
        c.enter_array().ok_or_else(bad)?;
        out.push(b'[');
        let mut first = true;
        while c.next_item(&mut first).ok_or_else(bad)? {
            if out.last() != Some(&b'[') {
                out.push(b',');
            }
            let item = read_item(&mut c, raw, &mut self.outer).ok_or_else(bad)?;
            each(self, out, raw, item)?;
        }
        out.push(b']');
        Ok(())
    }

    /// [`Context::write_message`] of a raw message (`item` of the list
    /// `list`, its members in `self.outer`).
    fn message(&mut self, out: &mut Vec<u8>, list: &[u8], item: Item) -> Result<(), ShimError> {
        let raw = list.get(item.span).unwrap_or_default();
        if raw.first() != Some(&b'{') {
            return value(out, raw);
        }
        let calls = item
            .sure
            .then(|| find(list, &self.outer, b"tool_calls"))
            .map(|c| match c.filter(|c| c.first() == Some(&b'[')) {
                Some(c) => items(c).try_fold(false, |any, call| {
                    Ok::<_, json_scan::Unsure>(any | has_name(call)?)
                }),
                None => Ok(false),
            });
        let Some(Ok(named)) = calls else {
            self.ctx.write_message(out, &parse(raw)?);
            return Ok(());
        };
        let role = find(list, &self.outer, b"role")
            .filter(|r| is_str(r))
            .and_then(literal)
            .unwrap_or_default();
        out.push(b'{');
        let spans = std::mem::take(&mut self.outer);
        let mut first = true;
        for (key, value_at) in &spans {
            let key = list.get(key.clone()).unwrap_or_default();
            let v = list.get(value_at.clone()).unwrap_or_default();
            let calls = key == b"tool_calls" && v.first() == Some(&b'[');
            if calls && !named {
                // Every call lacked a name: SOLO refuses those, and an
                // empty list is no better than none.
                continue;
            }
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(key);
            out.extend_from_slice(b"\":");
            match key {
                b"role" if role == "developer" => out.extend_from_slice(b"\"system\""),
                b"content" => self.content(out, &role, v)?,
                _ if calls => self.calls(out, v)?,
                _ => value(out, v)?,
            }
        }
        self.outer = spans;
        out.push(b'}');
        Ok(())
    }

    /// [`Context::write_content`] of a raw content.
    fn content(&self, out: &mut Vec<u8>, role: &str, raw: &[u8]) -> Result<(), ShimError> {
        if !is_str(raw) {
            return value(out, raw);
        }
        if self.ctx.has_parts() {
            let text: Cow<'_, str> = literal(raw).ok_or_else(|| not_json("a bad string"))?;
            if let Some(parts) = self.ctx.original_parts(&text, role) {
                parts.write(out);
                return Ok(());
            }
        }
        out.extend_from_slice(b"[{\"type\":\"text\",\"text\":");
        string(out, raw)?;
        out.extend_from_slice(b"}]");
        Ok(())
    }

    /// Named calls (keys checked by [`has_name`]), `function` renamed.
    fn calls(&mut self, out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ShimError> {
        out.push(b'[');
        let mut first = true;
        for call in items(raw).filter(|c| has_name(c) == Ok(true)) {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            if !members(call, &mut self.inner) {
                restore::write_call(out, &parse(call)?);
                continue;
            }
            let renames = find(call, &self.inner, b"function_call").is_none();
            out.push(b'{');
            for (i, (key, v)) in self.inner.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let key = call.get(key.clone()).unwrap_or_default();
                out.push(b'"');
                out.extend_from_slice(match key {
                    b"function" if renames => b"function_call",
                    _ => key,
                });
                out.extend_from_slice(b"\":");
                value(out, call.get(v.clone()).unwrap_or_default())?;
            }
            out.push(b'}');
        }
        out.push(b']');
        Ok(())
    }

    /// [`Context::write_tool`] of a raw tool (`item` of the list `list`,
    /// its members in `self.outer`).
    fn tool(&mut self, out: &mut Vec<u8>, list: &[u8], item: Item) -> Result<(), ShimError> {
        let raw = list.get(item.span).unwrap_or_default();
        if raw.first() != Some(&b'{') {
            return value(out, raw);
        }
        let function = item
            .sure
            .then(|| find(list, &self.outer, b"function"))
            .map(|f| f.filter(|f| f.first() == Some(&b'{')));
        let function = match function {
            Some(Some(f)) if members(f, &mut self.inner) => f,
            // No `function` object: nothing to rewrite.
            Some(None) => return value(out, raw),
            _ => {
                self.ctx.write_tool(out, &parse(raw)?);
                return Ok(());
            }
        };
        let Some(params) = find(function, &self.inner, b"parameters").filter(|p| !is_str(p)) else {
            return value(out, raw);
        };
        let name = find(function, &self.inner, b"name")
            .filter(|n| is_str(n))
            .and_then(literal)
            .unwrap_or_default();
        let schema = self.ctx.schema(&name);
        out.push(b'{');
        for (i, (key, v)) in self.outer.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let key = list.get(key.clone()).unwrap_or_default();
            out.push(b'"');
            out.extend_from_slice(key);
            out.extend_from_slice(b"\":");
            if key != b"function" {
                value(out, list.get(v.clone()).unwrap_or_default())?;
                continue;
            }
            out.push(b'{');
            for (j, (key, v)) in self.inner.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                let key = function.get(key.clone()).unwrap_or_default();
                out.push(b'"');
                out.extend_from_slice(key);
                out.extend_from_slice(b"\":");
                match key {
                    b"parameters" => write_params(out, schema, params)?,
                    _ => value(out, function.get(v.clone()).unwrap_or_default())?,
                }
            }
            out.push(b'}');
        }
        out.push(b'}');
        Ok(())
    }
}

/// A tool's `parameters` object as the string SOLO takes: the agent's own
/// when the proxy left the schema alone, else the object's text.
fn write_params(
    out: &mut Vec<u8>,
    schema: Option<Schema<'_>>,
    raw: &[u8],
) -> Result<(), ShimError> {
    if let Some(schema) = schema {
        let unchanged = match schema.is_text(raw) {
            Some(true) => true,
            // Reformatted (or a `\u` escape): the parsed values decide.
            _ => schema.text().is_some_and(|t| {
                let orig = serde_json::from_str::<Value>(&t).ok();
                orig.is_some() && orig == serde_json::from_slice::<Value>(raw).ok()
            }),
        };
        if unchanged {
            schema.write(out);
            return Ok(());
        }
    }
    if json_scan::is_canonical(raw) {
        jw::string(out, std::str::from_utf8(raw).map_err(not_json)?);
    } else {
        jw::string(out, &serde_json::to_string(&parse(raw)?).map_err(not_json)?);
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_literal_is_compared_with_text_as_it_decodes() {
        let cases: [(&[u8], &[u8], Option<bool>); 8] = [
            (br#""{\"a\":1}""#, br#"{"a":1}"#, Some(true)),
            (br#""{\"a\":1}""#, br#"{"a":2}"#, Some(false)),
            (br#""{\"a\":1}""#, br#"{"a":1} "#, Some(false)),
            (br#""{\"a\":1}""#, br#"{"a":"#, Some(false)),
            (br#""\/\\\b\f\n\r\t""#, b"/\\\x08\x0c\n\r\t", Some(true)),
            (br#""\u00e9""#, "é".as_bytes(), None),
            (br#""""#, b"", Some(true)),
            (br#""x""#, b"", Some(false)),
        ];
        for (raw, want, is) in cases {
            assert_eq!(
                restore::literal_is(raw, want),
                is,
                "{}",
                String::from_utf8_lossy(raw)
            );
            let decoded: String = serde_json::from_slice(raw).unwrap();
            if let Some(is) = is {
                assert_eq!(decoded.as_bytes() == want, is);
            }
        }
    }

    #[test]
    fn a_literal_is_canonical_as_the_scanner_says() {
        let mut literals: Vec<String> = (0u8..128)
            .map(|b| serde_json::to_string(&char::from(b).to_string()).unwrap())
            .collect();
        for escape in [
            r"\/",
            r"\u0041",
            r"\u001F",
            r"\u001f",
            r"\u000a",
            r"\u0008",
            r"\u0000",
            r"\u00e9",
            r"\ud83d\ude00",
            r#"\""#,
            r"\\",
            r"\b",
            r"\f",
            r"\n",
            r"\r",
            r"\t",
        ] {
            literals.push(format!("\"a{escape}b\""));
            literals.push(format!("\"{escape}\""));
            literals.push(format!("\"{escape}{escape}x\""));
        }
        literals.push("\"é 中文 😀\u{7f}\"".to_string());
        for lit in literals {
            assert!(serde_json::from_str::<String>(&lit).is_ok(), "{lit}");
            assert_eq!(
                canonical_literal(lit.as_bytes()),
                json_scan::is_canonical(lit.as_bytes()),
                "{lit}"
            );
        }
    }

    #[test]
    fn spacing_between_tokens_goes_and_spacing_in_strings_stays() {
        let cases: [(&str, &str); 4] = [
            (
                "{ \"a\" : [1, 2],\n \"b\": \" x \\\" y \" }",
                "{\"a\":[1,2],\"b\":\" x \\\" y \"}",
            ),
            ("[]", "[]"),
            ("[ ]", "[]"),
            ("{\"a\\\\\":\t1}", "{\"a\\\\\":1}"),
        ];
        for (raw, want) in cases {
            assert_eq!(minified(raw.as_bytes()), want.as_bytes(), "{raw}");
        }
        assert!(matches!(minified(b"{\"a b\":1}"), Cow::Borrowed(_)));
    }
}

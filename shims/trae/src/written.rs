//! The fold written straight from the SOLO body's bytes, in one strict
//! pass: each member is checked as `serde_json` would check it while it
//! is read, what the proxy gets is copied as the agent wrote it, and only
//! what changes is rewritten (a content list of text parts joined,
//! `function_call` renamed, `parameters` strings written as the objects
//! they hold, a tool choice by name). No `Value` is built; the original is
//! kept as its bytes and the places of its parts.
//!
//! It makes the OpenAI body [`crate::fold::fold_body`] makes, member for
//! member and value for value (differential tests on the fixtures,
//! generated and mutated bodies); the bytes of a copied value are the
//! agent's own (its spacing, its escapes), which the proxy reads as the
//! same JSON. What it is not sure of (an object with a repeated key, whose
//! parsed reading keeps only the last value; a key with an escape; text a
//! strict reading refuses, an out-of-range number among it) it leaves to
//! the `Value` fold (`None`), which decides.

use std::ops::Range;

use shimgate_shim_api::json_scan::Cursor;

use crate::fold::SAMPLING;

/// What the written fold keeps of the body for restore.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// The top-level members, in order: the key's contents (between its
    /// quotes, no escapes) and the value's raw text.
    pub members: Vec<(Range<usize>, Range<usize>)>,
    /// Original messages whose several text parts were folded into one
    /// string: the joined literal (as written for the proxy), the role's
    /// raw literal (empty when none) and the content list's raw text.
    pub parts: Vec<(Vec<u8>, Range<usize>, Range<usize>)>,
    /// Tools whose `parameters` was a string: the name's raw literal and
    /// the parameters string's raw literal.
    pub params: Vec<(Range<usize>, Range<usize>)>,
}

/// Keys of the object being read, to refuse a repeated one.
#[derive(Default)]
struct Keys(Vec<Range<usize>>);

impl Keys {
    /// The next key's contents, or `None` (unsure) for an escaped or a
    /// repeated key.
    fn next<'a>(&mut self, c: &mut Cursor<'a>, first: &mut bool) -> Option<Option<&'a [u8]>> {
        let Some(key) = c.next_key(first)? else {
            return Some(None);
        };
        if key.escaped {
            return None;
        }
        let text = c.buf();
        let name = text.get(key.start..key.end)?;
        if self.0.iter().any(|k| text.get(k.clone()) == Some(name)) {
            return None;
        }
        self.0.push(key.start..key.end);
        Some(Some(name))
    }
}

/// The raw text of the value at the cursor, skipped (and so checked).
fn skip<'a>(c: &mut Cursor<'a>) -> Option<Range<usize>> {
    c.peek()?;
    let start = c.offset();
    c.skip_value()?;
    Some(start..c.offset())
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
}

/// The written fold of `text` (UTF-8): the OpenAI body's bytes and what
/// restore needs; `None` when it leaves the body to the `Value` fold,
/// `Some(Err)` for a body without a `messages` list.
pub(crate) fn fold(text: &[u8]) -> Option<Result<(Vec<u8>, Written), &'static str>> {
    let mut c = Cursor::strict(text);
    let mut out = Vec::with_capacity(text.len() + text.len() / 16 + 64);
    let mut kept = Written::default();
    let (mut model, mut stream, mut messages) = (false, false, false);
    let mut config_name = None;
    c.enter_object()?;
    out.push(b'{');
    let mut keys = Keys::default();
    let mut first = true;
    while let Some(key) = keys.next(&mut c, &mut first)? {
        let key_span = keys.0.last()?.clone();
        let comma = |out: &mut Vec<u8>| {
            if out.len() > 1 {
                out.push(b',');
            }
        };
        c.peek()?;
        let start = c.offset();
        match key {
            b"messages" if c.peek()? == b'[' => {
                messages = true;
                comma(&mut out);
                put_key(&mut out, key);
                write_messages(&mut c, &mut out, &mut kept)?;
            }
            b"tools" if c.peek()? == b'[' => {
                comma(&mut out);
                put_key(&mut out, key);
                write_tools(&mut c, &mut out, &mut kept)?;
            }
            b"tool_choice" => {
                comma(&mut out);
                put_key(&mut out, key);
                let span = skip(&mut c)?;
                write_tool_choice(text.get(span)?, &mut out);
            }
            b"messages" | b"tools" | b"model" | b"stream" => {
                model |= key == b"model";
                stream |= key == b"stream";
                comma(&mut out);
                put_key(&mut out, key);
                let span = skip(&mut c)?;
                out.extend_from_slice(text.get(span)?);
            }
            k if SAMPLING.iter().any(|s| s.as_bytes() == k) => {
                comma(&mut out);
                put_key(&mut out, key);
                let span = skip(&mut c)?;
                out.extend_from_slice(text.get(span)?);
            }
            _ => {
                let span = skip(&mut c)?;
                if key == b"config_name" {
                    config_name = Some(span);
                }
            }
        }
        kept.members.push((key_span, start..c.offset()));
    }
    if !c.at_end() {
        return None;
    }
    if !messages {
        return Some(Err("trae body has no messages list"));
    }
    if !model {
        if let Some(name) = config_name {
            out.push(b',');
            put_key(&mut out, b"model");
            out.extend_from_slice(text.get(name)?);
        }
    }
    if !stream {
        out.extend_from_slice(b",\"stream\":true");
    }
    out.push(b'}');
    Some(Ok((out, kept)))
}

fn write_messages(c: &mut Cursor<'_>, out: &mut Vec<u8>, kept: &mut Written) -> Option<()> {
    c.enter_array()?;
    out.push(b'[');
    let mut first = true;
    while c.next_item(&mut first)? {
        if out.last() != Some(&b'[') {
            out.push(b',');
        }
        if c.peek()? == b'{' {
            write_message(c, out, kept)?;
        } else {
            let span = skip(c)?;
            out.extend_from_slice(c.buf().get(span)?);
        }
    }
    out.push(b']');
    Some(())
}

fn write_message(c: &mut Cursor<'_>, out: &mut Vec<u8>, kept: &mut Written) -> Option<()> {
    let text = c.buf();
    c.enter_object()?;
    out.push(b'{');
    let mut keys = Keys::default();
    let mut first = true;
    let mut role = 0..0;
    let mut joined_parts = None;
    while let Some(key) = keys.next(c, &mut first)? {
        if out.last() != Some(&b'{') {
            out.push(b',');
        }
        put_key(out, key);
        match key {
            b"content" if c.peek()? == b'[' => {
                let list_start = c.offset();
                let at = out.len();
                let count = write_content(c, out)?;
                if count > 1 {
                    let joined = out.get(at..)?.to_vec();
                    joined_parts = Some((joined, list_start..c.offset()));
                }
            }
            b"tool_calls" if c.peek()? == b'[' => write_tool_calls(c, out)?,
            _ => {
                let span = skip(c)?;
                if key == b"role" && text.get(span.start) == Some(&b'"') {
                    role = span.clone();
                }
                out.extend_from_slice(text.get(span)?);
            }
        }
    }
    out.push(b'}');
    if let Some((joined, list)) = joined_parts {
        // Restore gives the list back for this text.
        kept.parts.push((joined, role, list));
    }
    Some(())
}

/// A content list: of plain text parts (`{"type":"text","text":…}`, those
/// two members only) it becomes one string, their texts joined with `\n`
/// (raw string contents stay valid side by side); else (or empty) it is
/// copied as it is. Returns how many parts were joined (0: copied).
fn write_content(c: &mut Cursor<'_>, out: &mut Vec<u8>) -> Option<usize> {
    let text = c.buf();
    let list_start = c.offset();
    let at = out.len();
    c.enter_array()?;
    out.push(b'"');
    let (mut count, mut plain) = (0usize, true);
    let mut first = true;
    while c.next_item(&mut first)? {
        if !plain || c.peek()? != b'{' {
            plain = false;
            skip(c)?;
            continue;
        }
        c.enter_object()?;
        let mut keys = Keys::default();
        let mut first_key = true;
        let (mut kind, mut body) = (false, None);
        let mut n = 0;
        while let Some(key) = keys.next(c, &mut first_key)? {
            n += 1;
            let span = skip(c)?;
            match key {
                b"type" => kind = is_text_literal(text.get(span)?),
                b"text" if text.get(span.start) == Some(&b'"') => {
                    body = Some(span.start + 1..span.end - 1)
                }
                _ => {}
            }
        }
        match body {
            Some(contents) if kind && n == 2 => {
                if count > 0 {
                    out.extend_from_slice(b"\\n");
                }
                out.extend_from_slice(text.get(contents)?);
                count += 1;
            }
            _ => plain = false,
        }
    }
    if plain && count > 0 {
        out.push(b'"');
        return Some(count);
    }
    out.truncate(at);
    out.extend_from_slice(text.get(list_start..c.offset())?);
    Some(0)
}

/// Whether a raw JSON value is the string `"text"`.
fn is_text_literal(raw: &[u8]) -> bool {
    is_string(raw, b"text")
}

/// Whether the raw JSON value `raw` is a string that decodes to `want`.
fn is_string(raw: &[u8], want: &[u8]) -> bool {
    if raw.first() != Some(&b'"') {
        return false;
    }
    if !raw.contains(&b'\\') {
        return raw.get(1..raw.len() - 1) == Some(want);
    }
    serde_json::from_slice::<String>(raw).is_ok_and(|s| s.as_bytes() == want)
}

/// Tool calls with `function_call` renamed `function` (a call that
/// already has a `function` passes as it is).
fn write_tool_calls(c: &mut Cursor<'_>, out: &mut Vec<u8>) -> Option<()> {
    let text = c.buf();
    c.enter_array()?;
    out.push(b'[');
    let mut first = true;
    while c.next_item(&mut first)? {
        if out.last() != Some(&b'[') {
            out.push(b',');
        }
        if c.peek()? != b'{' {
            let span = skip(c)?;
            out.extend_from_slice(text.get(span)?);
            continue;
        }
        let start = c.offset();
        c.enter_object()?;
        let mut keys = Keys::default();
        let mut members = Vec::new();
        let mut first_key = true;
        while let Some(key) = keys.next(c, &mut first_key)? {
            members.push((key, skip(c)?));
        }
        if members.iter().any(|(k, _)| *k == b"function") {
            out.extend_from_slice(text.get(start..c.offset())?);
            continue;
        }
        out.push(b'{');
        for (i, (key, value)) in members.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            put_key(
                out,
                if key == b"function_call" {
                    b"function"
                } else {
                    key
                },
            );
            out.extend_from_slice(text.get(value)?);
        }
        out.push(b'}');
    }
    out.push(b']');
    Some(())
}

/// Tools with a `function.parameters` string that holds JSON written as
/// the JSON it holds.
fn write_tools(c: &mut Cursor<'_>, out: &mut Vec<u8>, kept: &mut Written) -> Option<()> {
    let text = c.buf();
    c.enter_array()?;
    out.push(b'[');
    let mut first = true;
    while c.next_item(&mut first)? {
        if out.last() != Some(&b'[') {
            out.push(b',');
        }
        if c.peek()? != b'{' {
            let span = skip(c)?;
            out.extend_from_slice(text.get(span)?);
            continue;
        }
        c.enter_object()?;
        out.push(b'{');
        let mut keys = Keys::default();
        let mut first_key = true;
        while let Some(key) = keys.next(c, &mut first_key)? {
            if out.last() != Some(&b'{') {
                out.push(b',');
            }
            put_key(out, key);
            if key == b"function" && c.peek()? == b'{' {
                write_function(c, out, kept)?;
            } else {
                let span = skip(c)?;
                out.extend_from_slice(text.get(span)?);
            }
        }
        out.push(b'}');
    }
    out.push(b']');
    Some(())
}

fn write_function(c: &mut Cursor<'_>, out: &mut Vec<u8>, kept: &mut Written) -> Option<()> {
    let text = c.buf();
    c.enter_object()?;
    out.push(b'{');
    let mut keys = Keys::default();
    let mut first = true;
    let (mut name, mut params) = (None, None);
    while let Some(key) = keys.next(c, &mut first)? {
        if out.last() != Some(&b'{') {
            out.push(b',');
        }
        put_key(out, key);
        let span = skip(c)?;
        let raw = text.get(span.clone())?;
        let string = raw.first() == Some(&b'"');
        match key {
            b"parameters" if string => {
                params = Some(span);
                match held_json(raw) {
                    Some(object) => out.extend_from_slice(&object),
                    None => out.extend_from_slice(raw),
                }
            }
            b"name" if string => {
                name = Some(span);
                out.extend_from_slice(raw);
            }
            _ => out.extend_from_slice(raw),
        }
    }
    out.push(b'}');
    if let (Some(name), Some(params)) = (name, params) {
        kept.params.push((name, params));
    }
    Some(())
}

/// The JSON a string literal holds, when it holds JSON `serde_json` reads.
fn held_json(literal: &[u8]) -> Option<Vec<u8>> {
    let decoded: String = serde_json::from_slice(literal).ok()?;
    shimgate_shim_api::json_scan::is_valid(decoded.as_bytes()).then(|| decoded.into_bytes())
}

/// `tool_choice`: a function named by a string other than `auto`,
/// `required` and `none` becomes OpenAI's object.
fn write_tool_choice(raw: &[u8], out: &mut Vec<u8>) {
    let named = raw.first() == Some(&b'"')
        && !["auto", "required", "none"]
            .iter()
            .any(|w| is_string(raw, w.as_bytes()));
    if named {
        out.extend_from_slice(b"{\"type\":\"function\",\"function\":{\"name\":");
        out.extend_from_slice(raw);
        out.extend_from_slice(b"}}");
    } else {
        out.extend_from_slice(raw);
    }
}

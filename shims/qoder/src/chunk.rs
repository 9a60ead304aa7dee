//! What one inner OpenAI chunk means (content, a finish, usage, a timing or
//! heartbeat frame, an error), read with the zero-allocation strict cursor
//! and, only when the cursor is unsure, with `serde_json`.

use serde_json::Value;
use shimgate_shim_api::translate::chars;

use crate::scan::Cursor;

/// The keys of a qoder timing frame (`event:finish` payload and friends).
const TIMING_KEYS: [&str; 3] = ["firstTokenDuration", "serverDuration", "totalDuration"];

/// What an inner chunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inner {
    /// Not a JSON object as `serde_json` reads it (text, a number, an
    /// array, an object holding a number outside f64's range): passed on as
    /// it is when bare, an error inside an envelope.
    NotObject,
    /// `{}`: a heartbeat.
    Empty,
    /// Only timing keys: dropped.
    Timing,
    /// `{code, message}` or `{error}` without `choices`. `openai_shaped`:
    /// it has an `error` key, the OpenAI error frame shape.
    Error { openai_shaped: bool },
    /// Anything else: a chunk, passed on.
    Chunk(ChunkFacts),
}

/// What a chunk carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct ChunkFacts {
    /// Non-empty `delta.content`, `delta.reasoning_content` or `delta.tool_calls`.
    pub content: bool,
    /// A non-empty `finish_reason`.
    pub finish: bool,
    /// `usage` with no choice in the chunk.
    pub usage_only: bool,
    /// A non-null `usage` (with or without choices): the meter reads it.
    pub has_usage: bool,
    /// Characters of the content strings (and tool-call arrays) as
    /// written, for the meter (the `serde_json` fallback measures them
    /// re-written).
    pub content_chars: usize,
}

/// Keys seen at the top level of a chunk.
#[derive(Debug, Default)]
struct TopKeys {
    count: usize,
    timing: usize,
    choices: bool,
    nonempty_choices: bool,
    usage: bool,
    code: bool,
    message: bool,
    error: bool,
}

impl TopKeys {
    fn verdict(&self, mut facts: ChunkFacts) -> Inner {
        if self.count == 0 {
            return Inner::Empty;
        }
        if self.timing == self.count {
            return Inner::Timing;
        }
        if !self.choices && (self.error || (self.code && self.message)) {
            return Inner::Error {
                openai_shaped: self.error,
            };
        }
        facts.usage_only = self.usage && !self.nonempty_choices;
        facts.has_usage = self.usage;
        Inner::Chunk(facts)
    }
}

/// Reads a chunk: the cursor first, `serde_json` when the cursor is unsure
/// (escaped keys, malformed text). Text `serde_json` refuses is `NotObject`.
#[cfg(test)]
pub(crate) fn inspect(json: &[u8]) -> Inner {
    inspect_spanned(json).0
}

/// Where the one answer string of a chunk lies: its delta's only
/// `content` or `reasoning_content` string, in a chunk with no tool calls
/// and no usage, as the offsets of its contents (between the quotes). The
/// rest of the chunk says everything else about it: a chunk that repeats
/// the rest byte for byte around another valid string is read the same
/// way (see `memo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Varying {
    pub start: usize,
    pub end: usize,
}

/// What the walk saw of the answer strings.
#[derive(Debug, Default)]
struct Strings {
    count: usize,
    last: Option<Varying>,
    /// A `tool_calls` member: its content depends on it too.
    tool_calls: bool,
}

/// [`inspect`], and the chunk's [`Varying`] string when it has one.
pub(crate) fn inspect_spanned(json: &[u8]) -> (Inner, Option<Varying>) {
    let mut strings = Strings::default();
    if let Some(inner) = inspect_walk(json, &mut strings) {
        let varying = match inner {
            Inner::Chunk(f) if !f.has_usage && strings.count == 1 && !strings.tool_calls => {
                strings.last
            }
            _ => None,
        };
        return (inner, varying);
    }
    let inner = match serde_json::from_slice::<Value>(json) {
        Ok(value) => inspect_value(&value),
        Err(_) => Inner::NotObject,
    };
    (inner, None)
}

/// The cursor reading; `None` when unsure.
#[cfg(test)]
fn inspect_fast(json: &[u8]) -> Option<Inner> {
    inspect_walk(json, &mut Strings::default())
}

/// The cursor reading, noting the answer strings; `None` when unsure.
fn inspect_walk(json: &[u8], strings: &mut Strings) -> Option<Inner> {
    // The chunk is copied into a frame: the strict cursor is unsure
    // wherever `serde_json` (and so the proxy) would refuse the text (an
    // out-of-range number, a bad escape, broken structure), and
    // `serde_json` then says `NotObject`. Outside strings a non-ASCII byte
    // is a syntax error anyway, so checking UTF-8 once covers them all.
    std::str::from_utf8(json).ok()?;
    let mut c = Cursor::strict(json);
    if c.peek() != Some(b'{') {
        // Not an object; `serde_json` would say the same or refuse it.
        return Some(Inner::NotObject);
    }
    c.enter_object()?;
    let mut keys = TopKeys::default();
    let mut facts = ChunkFacts::default();
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        if key.escaped {
            return None;
        }
        keys.count += 1;
        match key.raw(json) {
            b"choices" => {
                keys.choices = true;
                keys.nonempty_choices |= walk_choices(&mut c, &mut facts, strings)?;
            }
            b"usage" => keys.usage |= !c.skip_is_null()?,
            b"error" => keys.error |= !c.skip_is_null()?,
            b"code" => {
                keys.code = true;
                c.skip_value()?;
            }
            b"message" => {
                keys.message = true;
                c.skip_value()?;
            }
            name => {
                if TIMING_KEYS.iter().any(|t| t.as_bytes() == name) {
                    keys.timing += 1;
                }
                c.skip_value()?;
            }
        }
    }
    if !c.at_end() {
        return None;
    }
    Some(keys.verdict(facts))
}

/// Walks `choices`; returns whether it held at least one item.
fn walk_choices(c: &mut Cursor<'_>, facts: &mut ChunkFacts, strings: &mut Strings) -> Option<bool> {
    if c.peek()? != b'[' {
        return c.skip_value().map(|()| false);
    }
    c.enter_array()?;
    let mut any = false;
    let mut first = true;
    while c.next_item(&mut first)? {
        any = true;
        if c.peek()? != b'{' {
            c.skip_value()?;
            continue;
        }
        c.enter_object()?;
        let mut first_key = true;
        while let Some(key) = c.next_key(&mut first_key)? {
            if key.escaped {
                return None;
            }
            match key.raw(c.buf()) {
                b"delta" => walk_delta(c, facts, strings)?,
                b"finish_reason" => facts.finish |= c.skip_is_nonempty_string()?,
                _ => c.skip_value()?,
            }
        }
    }
    Some(any)
}

fn walk_delta(c: &mut Cursor<'_>, facts: &mut ChunkFacts, strings: &mut Strings) -> Option<()> {
    if c.peek()? != b'{' {
        return c.skip_value();
    }
    c.enter_object()?;
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        if key.escaped {
            return None;
        }
        match key.raw(c.buf()) {
            b"content" | b"reasoning_content" if c.peek()? == b'"' => {
                let text = c.string()?;
                strings.count += 1;
                strings.last = Some(Varying {
                    start: text.start,
                    end: text.end,
                });
                facts.content |= !text.is_empty();
                facts.content_chars += chars(text.raw(c.buf())) as usize;
            }
            b"tool_calls" => {
                strings.tool_calls = true;
                c.peek()?;
                let start = c.offset();
                let calls = c.skip_is_nonempty_array()?;
                facts.content |= calls;
                if calls {
                    facts.content_chars += chars(c.buf().get(start..c.offset())?) as usize;
                }
            }
            _ => c.skip_value()?,
        }
    }
    Some(())
}

/// The same reading on a parsed value (the fallback).
pub(crate) fn inspect_value(value: &Value) -> Inner {
    let Some(map) = value.as_object() else {
        return Inner::NotObject;
    };
    let mut keys = TopKeys {
        count: map.len(),
        timing: map
            .keys()
            .filter(|k| TIMING_KEYS.contains(&k.as_str()))
            .count(),
        choices: map.contains_key("choices"),
        usage: map.get("usage").is_some_and(|u| !u.is_null()),
        code: map.contains_key("code"),
        message: map.contains_key("message"),
        error: map.get("error").is_some_and(|e| !e.is_null()),
        ..TopKeys::default()
    };
    let mut facts = ChunkFacts::default();
    if let Some(choices) = map.get("choices").and_then(Value::as_array) {
        keys.nonempty_choices = !choices.is_empty();
        for choice in choices {
            let nonempty_str =
                |v: Option<&Value>| v.and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            facts.finish |= nonempty_str(choice.get("finish_reason"));
            let Some(delta) = choice.get("delta").filter(|d| d.is_object()) else {
                continue;
            };
            facts.content |= nonempty_str(delta.get("content"))
                || nonempty_str(delta.get("reasoning_content"))
                || delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .is_some_and(|calls| !calls.is_empty());
            for key in ["content", "reasoning_content"] {
                facts.content_chars += delta
                    .get(key)
                    .and_then(Value::as_str)
                    .map_or(0, |s| s.chars().count());
            }
            if let Some(calls) = delta
                .get("tool_calls")
                .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
            {
                facts.content_chars += calls.to_string().chars().count();
            }
        }
    }
    keys.verdict(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reading without the meter's figures (which the `serde_json`
    /// fallback only approximates).
    fn unmetered(inner: Inner) -> Inner {
        match inner {
            Inner::Chunk(f) => Inner::Chunk(ChunkFacts {
                has_usage: false,
                content_chars: 0,
                ..f
            }),
            other => other,
        }
    }

    fn both(json: &str) -> Inner {
        let fast = inspect_fast(json.as_bytes()).map(unmetered);
        let slow = serde_json::from_str::<Value>(json).map(|v| unmetered(inspect_value(&v)));
        if let (Some(fast), Ok(slow)) = (fast, slow) {
            assert_eq!(fast, slow, "fast and serde readings differ for {json}");
        }
        unmetered(inspect(json.as_bytes()))
    }

    fn chunk(content: bool, finish: bool, usage_only: bool) -> Inner {
        Inner::Chunk(ChunkFacts {
            content,
            finish,
            usage_only,
            ..ChunkFacts::default()
        })
    }

    #[test]
    fn the_meter_reads_content_lengths_and_usage() {
        let j = r#"{"choices":[{"delta":{"content":"Hello","reasoning_content":"hm"}}],"usage":{"prompt_tokens":9}}"#;
        for reading in [
            inspect_fast(j.as_bytes()),
            Some(inspect_value(&serde_json::from_str(j).unwrap())),
        ] {
            let Some(Inner::Chunk(f)) = reading else {
                panic!("a chunk");
            };
            assert_eq!((f.content_chars, f.has_usage), (7, true));
        }
    }

    #[test]
    fn text_delta_is_content() {
        let j =
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#;
        assert_eq!(both(j), chunk(true, false, false));
    }

    #[test]
    fn reasoning_and_tool_call_deltas_are_content() {
        let r = r#"{"choices":[{"delta":{"content":null,"reasoning_content":"hmm"}}]}"#;
        assert_eq!(both(r), chunk(true, false, false));
        let t =
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#;
        assert_eq!(both(t), chunk(true, false, false));
    }

    #[test]
    fn role_only_and_empty_deltas_are_not_content() {
        let j = r#"{"choices":[{"delta":{"role":"assistant","content":"","tool_calls":[]}}]}"#;
        assert_eq!(both(j), chunk(false, false, false));
    }

    #[test]
    fn finish_with_usage_is_a_finish_not_usage_only() {
        let j = r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9}}"#;
        assert_eq!(both(j), chunk(false, true, false));
    }

    #[test]
    fn usage_with_no_choice_is_usage_only() {
        let j = r#"{"choices":[],"usage":{"prompt_tokens":9}}"#;
        assert_eq!(both(j), chunk(false, false, true));
    }

    #[test]
    fn heartbeat_timing_and_error_shapes() {
        assert_eq!(both("{ }"), Inner::Empty);
        assert_eq!(
            both(r#"{"firstTokenDuration":1,"totalDuration":2,"serverDuration":3}"#),
            Inner::Timing
        );
        assert_eq!(
            both(r#"{"code":"103","message":"Duplicate request"}"#),
            Inner::Error {
                openai_shaped: false
            }
        );
        assert_eq!(
            both(r#"{"error":{"message":"x"}}"#),
            Inner::Error {
                openai_shaped: true
            }
        );
        assert_eq!(
            both(r#"{"error":null,"choices":[]}"#),
            chunk(false, false, false)
        );
        assert_eq!(both("[1]"), Inner::NotObject);
        assert_eq!(both("hello"), Inner::NotObject);
    }

    #[test]
    fn escaped_keys_fall_back_to_serde() {
        let j = r#"{"choi\u0063es":[{"delta":{"content":"x"}}]}"#;
        assert_eq!(inspect_fast(j.as_bytes()), None);
        assert_eq!(unmetered(inspect(j.as_bytes())), chunk(true, false, false));
    }

    #[test]
    fn a_chunk_with_an_out_of_range_number_is_not_an_object() {
        for j in [
            r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1e400}}"#,
            r#"{"choices":[{"index":143e33333,"delta":{"content":"x"}}]}"#,
            r#"{"created":-1E+999,"choices":[]}"#,
        ] {
            assert_eq!(inspect_fast(j.as_bytes()), None, "{j}");
            assert_eq!(inspect(j.as_bytes()), Inner::NotObject, "{j}");
        }
        let tiny = r#"{"created":1e-400,"choices":[{"delta":{"content":"x"}}]}"#;
        assert_eq!(both(tiny), chunk(true, false, false));
    }

    #[test]
    fn a_chunk_serde_json_refuses_is_not_an_object() {
        // The lenient cursor once read these as content chunks, and the
        // return leg wrote text the proxy cannot parse.
        for j in [
            &br#"{"choices":[{"delta":{"content":"x"}}],"a":tru}"#[..],
            br#"{"choices":[{"delta":{"content":"x\u12"}}]}"#,
            br#"{"choices":[{"delta":{"content":"x"}} {"x":1}]}"#,
            br#"{"choices":[{"delta":{"content":"x"}}],}"#,
            br#"{"choices":[],"usage":{"a":1 "b":2}}"#,
            b"{\"choices\":[{\"delta\":{\"content\":\"\xff\"}}]}",
        ] {
            assert_eq!(inspect_fast(j), None, "{}", String::from_utf8_lossy(j));
            assert_eq!(inspect(j), Inner::NotObject);
        }
    }

    #[test]
    fn malformed_json_is_not_an_object() {
        assert_eq!(inspect(br#"{"choices":[{"delta":"#), Inner::NotObject);
    }
}

//! The ingress: bare OpenAI SSE, as the compression proxy relays it, becomes
//! the SOLO events the TRAE agent reads, using `x_solo` to restore what the
//! OpenAI leg cannot say.
//!
//! It is correct in three situations: straight from our return leg (our
//! finish, usage and `[DONE]` present), through billion-context (those three
//! swallowed, its own `stop` finish + usage + `[DONE]` instead, tool calls
//! re-emitted as one frame, its `📦` text frames added), and through a proxy
//! that passes everything. Hence:
//!
//! * carried events are written back verbatim, with the SSE id they had;
//! * `token_usage` and `done` are held and written once, at the end: the
//!   carried ones if any (the last, when a proxy made several rounds), else
//!   built from the standard usage and finish chunks; a built `done` says
//!   `tool_calls` whenever a named tool call was streamed;
//! * an error (carried, or a standard error frame) becomes a SOLO `error`
//!   with the original code and message, written at the end of the relayed
//!   stream (`[DONE]` or end of input) after any tool call the proxy
//!   re-emits only then; it ends the stream (no `done`: the chain never
//!   reads past an upstream error) and returns `Error` at that point;
//! * anything after the end writes nothing.
//!
//! [`fail`](StreamTranslator::fail) writes a SOLO `error` built by
//! [`failure_payload`] and ends the stream.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};
use serde_json::{Map, Value};
use shimgate_shim_api::sse::write_data;
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};

use crate::classify::SoloError;
use crate::ext::{failure_payload, EXT_KEY};
use crate::json_write as jw;
use shimgate_shim_api::json_scan::{Cursor, RawStr};
use shimgate_shim_api::repeat::{offset_in, Around};

/// The ingress translator for one answer relayed by the proxy.
#[derive(Debug, Default)]
pub struct ToSolo {
    /// The text half of an `output` whose tool-call half comes next.
    held: Option<OutputEvent>,
    /// The SSE last-event-id the upstream had in force.
    upstream_id: Option<String>,
    /// The last-event-id the agent's parser holds.
    agent_id: Option<String>,
    usage: Option<Carried>,
    done: Option<Carried>,
    std_usage: Option<Value>,
    finish: Option<String>,
    named_call: bool,
    /// An error to write at the end (carried or a standard error frame).
    error: Option<(Carried, Failure)>,
    ended: Option<FrameClass>,
    /// The bytes the relayed plain content chunks repeat around their text.
    memo: Option<ChunkMemo>,
    /// Without the memo: every frame read in full (the reference).
    unmemoized: bool,
}

/// The bytes an answer's plain content chunks repeat around their one
/// text (see [`shimgate_shim_api::repeat`]), from a chunk read in full
/// whose other text was empty.
#[derive(Debug)]
struct ChunkMemo {
    around: Around,
    /// The text is `reasoning_content` (else `content`).
    reasoning: bool,
    /// The other text's literal, as that chunk gave it.
    other: Vec<u8>,
}

/// A carried SOLO event's payload.
#[derive(Debug, Clone)]
enum Payload {
    Json(Value),
    Text(String),
    /// JSON already written as `serde_json` writes it (see [`canonical`]).
    Raw(Vec<u8>),
}

impl Payload {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Payload::Json(v) => serde_json::to_vec(v).unwrap_or_default(),
            Payload::Text(s) => s.clone().into_bytes(),
            Payload::Raw(b) => b.clone(),
        }
    }
}

#[derive(Debug, Clone)]
struct Carried {
    payload: Payload,
    id: Option<String>,
    retry: Option<u64>,
}

/// One SOLO `output` event to write.
#[derive(Debug, Default)]
struct OutputEvent {
    response: String,
    reasoning: String,
    tools: Vec<Value>,
    tool_extra: Vec<Value>,
    extra: Map<String, Value>,
    id: Option<String>,
    retry: Option<u64>,
}

impl ToSolo {
    /// A fresh translator.
    pub fn new() -> ToSolo {
        ToSolo::default()
    }

    /// A translator that reads every frame in full, without the memo of
    /// repeated bytes: the reference the differential tests and the fuzz
    /// targets hold the memo to.
    #[doc(hidden)]
    pub fn unmemoized() -> ToSolo {
        ToSolo {
            unmemoized: true,
            ..ToSolo::default()
        }
    }

    /// Whether it holds a memo (the tests check it is used).
    #[doc(hidden)]
    pub fn has_memo(&self) -> bool {
        self.memo.is_some()
    }

    /// The texts of a plain content chunk: from the memo when `data`
    /// repeats its bytes around a text, else read in full (and learned
    /// from).
    fn plain_texts<'d>(&mut self, data: &'d [u8]) -> Option<(Literal<'d>, Literal<'d>)> {
        if let Some(m) = &self.memo {
            if let Some(text) = m.around.contents(data) {
                // The full reading leaves a chunk naming `x_solo` to the
                // `Value` reading; a key cannot straddle the text's quotes.
                if names_ext(text) {
                    return None;
                }
                let start = offset_in(data, text)?;
                let raw = RawStr {
                    start,
                    end: start + text.len(),
                    escaped: text.contains(&b'\\'),
                };
                let varying = text_literal(data, Some(Some(raw)))?;
                let other = if m.other == EMPTY_LITERAL {
                    Cow::Borrowed(EMPTY_LITERAL)
                } else {
                    Cow::Owned(m.other.clone())
                };
                return Some(if m.reasoning {
                    (other, varying)
                } else {
                    (varying, other)
                });
            }
        }
        let (content, reasoning) = plain_delta_texts(data)?;
        let literals = (text_literal(data, content)?, text_literal(data, reasoning)?);
        if !self.unmemoized {
            let nonempty = |t: &Text| matches!(t, Some(Some(raw)) if !raw.is_empty());
            let learned = match (nonempty(&content), nonempty(&reasoning)) {
                (true, false) => content.flatten().map(|raw| (raw, false, &literals.1)),
                (false, true) => reasoning.flatten().map(|raw| (raw, true, &literals.0)),
                _ => None,
            };
            if let Some((raw, reasoning, other)) = learned {
                if let Some(around) = Around::new(data, raw.start, raw.end) {
                    self.memo = Some(ChunkMemo {
                        around,
                        reasoning,
                        other: other.to_vec(),
                    });
                }
            }
        }
        Some(literals)
    }

    /// Writes one SOLO frame; `id` is the last-event-id the event had
    /// upstream (`None` = no opinion), written only when the agent's differs.
    fn frame(
        &mut self,
        out: &mut BytesMut,
        event: Option<&str>,
        id: Option<Option<&str>>,
        retry: Option<u64>,
        data: &[u8],
    ) {
        self.frame_head(out, event, id, retry);
        write_data(out, data);
    }

    /// The lines of a frame before its data (see [`ToSolo::frame`]).
    fn frame_head(
        &mut self,
        out: &mut BytesMut,
        event: Option<&str>,
        id: Option<Option<&str>>,
        retry: Option<u64>,
    ) {
        if let Some(name) = event {
            out.put_slice(b"event: ");
            out.put_slice(name.replace(['\r', '\n'], "").as_bytes());
            out.put_u8(b'\n');
        }
        if let Some(want) = id {
            if want != self.agent_id.as_deref() {
                out.put_slice(b"id: ");
                out.put_slice(
                    want.unwrap_or_default()
                        .replace(['\r', '\n', '\0'], "")
                        .as_bytes(),
                );
                out.put_u8(b'\n');
                self.agent_id = want.map(str::to_owned);
            }
        }
        if let Some(ms) = retry {
            out.put_slice(b"retry: ");
            jw::uint(out, ms);
            out.put_u8(b'\n');
        }
    }

    /// A plain content chunk, the kind nearly every frame of an answer is
    /// (text or reasoning in the first choice's delta; no `x_solo`, error,
    /// usage, tool calls or finish), read with the strict scanner and
    /// written as [`ToSolo::write_output`] would write it, without parsing
    /// it into a `Value` (which cost more than the rest of the frame's
    /// relaying together). `None`: any other chunk, for the `Value` reading.
    fn plain_content(&mut self, data: &[u8], out: &mut BytesMut) -> Option<FrameClass> {
        let (response, reasoning) = self.plain_texts(data)?;
        if response == EMPTY_LITERAL && reasoning == EMPTY_LITERAL {
            return Some(FrameClass::NotContent);
        }
        self.flush(out);
        let id = self.upstream_id.clone();
        self.frame_head(out, Some("output"), Some(id.as_deref()), None);
        out.reserve(response.len() + reasoning.len() + 72);
        out.put_slice(b"data: {\"response\":");
        out.put_slice(&response);
        out.put_slice(b",\"reasoning_content\":");
        out.put_slice(&reasoning);
        out.put_slice(b",\"tool_calls\":null}\n\n");
        Some(FrameClass::Content)
    }

    /// A carrier (any event but `error`) whose data is JSON already
    /// written as `serde_json` writes it (see [`canonical`]): its bytes are
    /// kept or copied instead of parsed into a `Value` and written again,
    /// as [`ToSolo::carried`] would keep or write them. `None`: anything
    /// else.
    fn plain_carrier(&mut self, data: &[u8], out: &mut BytesMut) -> Option<FrameClass> {
        if self.error.is_some() {
            return None;
        }
        let x = carrier_fields(data)?;
        if x.event == Some("error") {
            return None;
        }
        self.upstream_id = x.id.map(str::to_owned);
        let held = |x: &CarrierFields<'_>, id: Option<String>| Carried {
            payload: Payload::Raw(x.data.to_vec()),
            id,
            retry: x.retry,
        };
        match x.event {
            Some("done") => self.done = Some(held(&x, self.upstream_id.clone())),
            Some("token_usage") => self.usage = Some(held(&x, self.upstream_id.clone())),
            _ => {
                self.flush(out);
                let id = self.upstream_id.clone();
                self.frame(out, x.event, Some(id.as_deref()), x.retry, x.data);
            }
        }
        Some(FrameClass::NotContent)
    }

    fn write_carried(&mut self, out: &mut BytesMut, name: Option<&str>, c: &Carried) {
        let data = c.payload.bytes();
        self.frame(out, name, Some(c.id.as_deref()), c.retry, &data);
    }

    fn write_output(&mut self, out: &mut BytesMut, ev: OutputEvent) {
        let mut data = Vec::with_capacity(ev.response.len() + ev.reasoning.len() + 64);
        data.put_slice(b"{\"response\":");
        jw::string(&mut data, &ev.response);
        data.put_slice(b",\"reasoning_content\":");
        jw::string(&mut data, &ev.reasoning);
        data.put_slice(b",\"tool_calls\":");
        if ev.tools.is_empty() {
            data.put_slice(b"null");
        } else {
            let calls: Vec<Value> = ev
                .tools
                .iter()
                .enumerate()
                .map(|(pos, t)| solo_tool_call(t, pos, ev.tool_extra.get(pos)))
                .collect();
            jw::value(&mut data, &Value::Array(calls));
        }
        for (k, v) in &ev.extra {
            if !matches!(k.as_str(), "response" | "reasoning_content" | "tool_calls") {
                data.put_u8(b',');
                jw::string(&mut data, k);
                data.put_u8(b':');
                jw::value(&mut data, v);
            }
        }
        data.put_u8(b'}');
        self.frame(out, Some("output"), Some(ev.id.as_deref()), ev.retry, &data);
    }

    fn flush(&mut self, out: &mut BytesMut) {
        if let Some(held) = self.held.take() {
            self.write_output(out, held);
        }
    }

    fn carried(&mut self, x: &Value, out: &mut BytesMut) -> FrameClass {
        let name = x.get("event").and_then(Value::as_str);
        let payload = match x.get("data") {
            Some(d) => Payload::Json(d.clone()),
            None => Payload::Text(
                x.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            ),
        };
        // A carrier states the id in force at its event (absent = none).
        self.upstream_id = x.get("id").and_then(Value::as_str).map(str::to_owned);
        let c = Carried {
            payload,
            id: self.upstream_id.clone(),
            retry: x.get("retry").and_then(Value::as_u64),
        };
        match name {
            Some("done") => self.done = Some(c),
            Some("token_usage") => self.usage = Some(c),
            Some("error") => {
                let e = match &c.payload {
                    Payload::Json(v) => SoloError::from_value(v),
                    Payload::Text(t) => SoloError::parse(t.as_bytes()),
                    Payload::Raw(b) => SoloError::parse(b),
                };
                self.error = Some((c, e.failure()));
            }
            _ => {
                self.flush(out);
                self.write_carried(out, name, &c);
            }
        }
        FrameClass::NotContent
    }

    /// A standard OpenAI error frame that came without a carrier.
    fn error_frame(&mut self, err: &Value) -> FrameClass {
        let e = SoloError::from_value(&serde_json::json!({ "error": err }));
        let code = match e.code.as_deref() {
            Some(c) => match c.parse::<i64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::from(c),
            },
            None => Value::Null,
        };
        let data = serde_json::json!({"code": code, "message": e.message, "extra": null});
        let c = Carried {
            payload: Payload::Json(data),
            id: None,
            retry: None,
        };
        self.error = Some((c, e.failure()));
        FrameClass::NotContent
    }

    fn output(
        &mut self,
        delta: Option<&Value>,
        x: Option<&Value>,
        out: &mut BytesMut,
    ) -> FrameClass {
        let text = |key: &str| {
            delta
                .and_then(|d| d.get(key))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let response = text("content");
        let reasoning = text("reasoning_content");
        let tools = delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(id) = x.and_then(|x| x.get("id")).and_then(Value::as_str) {
            self.upstream_id = (!id.is_empty()).then(|| id.to_owned());
        }
        if response.is_empty() && reasoning.is_empty() && tools.is_empty() {
            return FrameClass::NotContent;
        }
        let content = !response.is_empty()
            || !reasoning.is_empty()
            || tools.iter().any(openai_call_is_content);
        self.named_call |= tools.iter().any(|t| !call_name(t).is_empty());
        let ext = |key: &str| x.and_then(|x| x.get(key));
        let ev = OutputEvent {
            response,
            reasoning,
            tool_extra: ext("tools")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            extra: ext("output")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default(),
            tools,
            id: self.upstream_id.clone(),
            retry: ext("retry").and_then(Value::as_u64),
        };
        let class = if content {
            FrameClass::Content
        } else {
            FrameClass::NotContent
        };
        if ext("continues").and_then(Value::as_bool) == Some(true) {
            self.flush(out);
            self.held = Some(ev);
            return class;
        }
        if let Some(mut held) = self.held.take() {
            if ev.response.is_empty() && ev.reasoning.is_empty() {
                held.tools = ev.tools;
                held.tool_extra = ev.tool_extra;
                self.write_output(out, held);
                return class;
            }
            self.write_output(out, held);
        }
        self.write_output(out, ev);
        class
    }

    /// Writes the held error, or `token_usage` and `done`, and ends the
    /// stream.
    fn end(&mut self, out: &mut BytesMut) -> FrameClass {
        self.flush(out);
        // Usage SOLO reported comes before an error too; usage only a proxy
        // reported is not worth an event on a failed answer.
        let error = self.error.take();
        if let Some(c) = self.usage.take() {
            self.write_carried(out, Some("token_usage"), &c);
        } else if let (None, Some(u)) = (&error, self.std_usage.take()) {
            let data = serde_json::to_vec(&solo_usage(&u)).unwrap_or_default();
            self.frame(out, Some("token_usage"), None, None, &data);
        }
        if let Some((c, failure)) = error {
            self.write_carried(out, Some("error"), &c);
            return self.end_with(FrameClass::Error(failure));
        }
        if let Some(c) = self.done.take() {
            self.write_carried(out, Some("done"), &c);
        } else {
            let reason = match (self.named_call, self.finish.as_deref()) {
                (true, _) => "tool_calls",
                (false, Some(r)) => r,
                (false, None) => "stop",
            };
            let data = serde_json::to_vec(&serde_json::json!({ "finish_reason": reason }))
                .unwrap_or_default();
            self.frame(out, Some("done"), None, None, &data);
        }
        self.end_with(FrameClass::End)
    }

    fn end_with(&mut self, class: FrameClass) -> FrameClass {
        self.ended = Some(class.clone());
        class
    }
}

/// Whether `text` names the extension key anywhere (a searcher built
/// once: building one for every frame cost more than the search).
fn names_ext(text: &[u8]) -> bool {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(EXT_KEY.as_bytes()));
    FINDER.find(text).is_some()
}

/// `""`, the literal of an absent or null text.
const EMPTY_LITERAL: &[u8] = b"\"\"";

/// The text and reasoning of a plain content chunk (see
/// [`ToSolo::plain_content`]) as they sit in `data` ([`text_literal`]
/// gives the string literals [`jw::string`] writes for them); `None` for
/// any other chunk, or one the scanner is unsure of (the `Value` reading
/// decides those). One strict pass: a member that is read is validated
/// where it is read, the rest where it is skipped.
fn plain_delta_texts(data: &[u8]) -> Option<(Text, Text)> {
    // A carrier (most non-content frames) is the `Value` reading's anyway.
    if names_ext(data) {
        return None;
    }
    std::str::from_utf8(data).ok()?;
    let mut c = Cursor::strict(data);
    c.enter_object()?;
    let mut texts = None;
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        // An escaped key could spell anything.
        if key.escaped {
            return None;
        }
        match key.raw(data) {
            b"choices" => texts = Some(first_choice_texts(&mut c)?),
            b"error" | b"usage" => return None,
            _ => c.skip_value()?,
        }
    }
    if !c.at_end() {
        return None;
    }
    texts
}

/// A string literal as the SOLO frame holds it.
type Literal<'a> = Cow<'a, [u8]>;

/// A text member: absent, `null`, or a string (any other value: unsure).
type Text = Option<Option<RawStr>>;

/// The texts of the first choice of `choices` (the cursor at its value);
/// `None` unless it is an array whose first item is an object with an
/// object `delta` holding no tool call, and no finish.
fn first_choice_texts(c: &mut Cursor<'_>) -> Option<(Text, Text)> {
    c.enter_array()?;
    let mut texts = None;
    let mut first = true;
    while c.next_item(&mut first)? {
        if texts.is_some() {
            c.skip_value()?;
            continue;
        }
        c.enter_object()?;
        let mut delta = None;
        let mut first_key = true;
        while let Some(key) = c.next_key(&mut first_key)? {
            if key.escaped {
                return None;
            }
            match key.raw(c.buf()) {
                b"delta" => delta = Some(delta_texts(c)?),
                b"finish_reason" if !c.skip_is_null()? => return None,
                b"finish_reason" => {}
                _ => c.skip_value()?,
            }
        }
        texts = Some(delta?);
    }
    texts
}

fn delta_texts(c: &mut Cursor<'_>) -> Option<(Text, Text)> {
    c.enter_object()?;
    let (mut content, mut reasoning) = (None, None);
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        if key.escaped {
            return None;
        }
        match key.raw(c.buf()) {
            b"content" => content = Some(text(c)?),
            b"reasoning_content" => reasoning = Some(text(c)?),
            b"tool_calls" if !c.skip_is_null()? => return None,
            b"tool_calls" => {}
            _ => c.skip_value()?,
        }
    }
    Some((content, reasoning))
}

/// A string or `null` (`Some(None)`); `None` for anything else.
fn text(c: &mut Cursor<'_>) -> Option<Option<RawStr>> {
    if c.peek()? == b'"' {
        return c.string().map(Some);
    }
    c.skip_is_null()?.then_some(None)
}

/// What a carrier chunk says, read by [`carrier_fields`].
struct CarrierFields<'a> {
    event: Option<&'a str>,
    id: Option<&'a str>,
    retry: Option<u64>,
    data: &'a [u8],
}

/// The `x_solo` of a carrier chunk whose members are plain (strings
/// without escapes, a plain integer `retry`) and whose `data` is
/// [`canonical`]; `None` for any other chunk (the `Value` reading takes it).
fn carrier_fields(chunk: &[u8]) -> Option<CarrierFields<'_>> {
    names_ext(chunk).then_some(())?;
    let text = std::str::from_utf8(chunk).ok()?;
    let mut c = Cursor::strict(chunk);
    c.enter_object()?;
    let mut x = None;
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        if key.escaped {
            return None;
        }
        c.peek()?;
        let start = c.offset();
        c.skip_value()?;
        if key.raw(chunk) == EXT_KEY.as_bytes() {
            x = Some(start..c.offset());
        }
    }
    if !c.at_end() {
        return None;
    }
    let x = x?;
    let base = x.start;
    let mut c = Cursor::strict(chunk.get(x)?);
    c.enter_object()?;
    let (mut event, mut id, mut retry, mut data) = (None, None, None, None);
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        if key.escaped {
            return None;
        }
        c.peek()?;
        let start = base + c.offset();
        match key.raw(c.buf()) {
            b"event" => event = Some(plain_string_or_null(&mut c, text, base)?),
            b"id" => id = Some(plain_string_or_null(&mut c, text, base)?),
            b"retry" => {
                let digits = c.literal()?;
                let plain = !digits.is_empty()
                    && digits.len() <= 18
                    && digits.iter().all(u8::is_ascii_digit)
                    && (digits.len() == 1 || digits[0] != b'0');
                if !plain {
                    return None;
                }
                retry = Some(std::str::from_utf8(digits).ok()?.parse::<u64>().ok()?);
            }
            b"data" => {
                c.skip_value()?;
                data = Some(chunk.get(start..base + c.offset())?);
            }
            // `text` (data that is not JSON): the `Value` reading.
            b"text" => return None,
            _ => c.skip_value()?,
        }
    }
    let data = data?;
    canonical(data)?;
    Some(CarrierFields {
        event: event?,
        id: id.flatten(),
        retry,
        data,
    })
}

/// A string without escapes (its text) or `null` (`None`); `None` again
/// (unsure) for anything else. `base`: where the cursor's text starts in
/// `text`.
fn plain_string_or_null<'a>(
    c: &mut Cursor<'_>,
    text: &'a str,
    base: usize,
) -> Option<Option<&'a str>> {
    if c.peek()? == b'"' {
        let raw = c.string()?;
        if raw.escaped {
            return None;
        }
        return text.get(base + raw.start..base + raw.end).map(Some);
    }
    c.skip_is_null()?.then_some(None)
}

/// `Some` when `json` (valid already) is exactly what `serde_json` writes
/// for the value it holds: no whitespace between tokens, no escape in any
/// string (a string without one is written as it is, while `serde_json`
/// would write `\/` or `\u00e9` otherwise), integers only (no fraction or
/// exponent, no leading zero, no `-0`, short enough for an `i64`), and no
/// repeated key in an object (which keeps one member).
fn canonical(json: &[u8]) -> Option<()> {
    if json.contains(&b'\\') {
        return None;
    }
    let mut in_string = false;
    // Digits of the number being read, and the byte before this one.
    let mut digits = 0usize;
    let mut prev = b' ';
    for &b in json {
        if in_string {
            in_string = b != b'"';
        } else {
            match b {
                b'"' => in_string = true,
                // `e` also ends `true` and `false`.
                b'e' if matches!(prev, b'u' | b's') => {}
                b' ' | b'\t' | b'\n' | b'\r' | b'.' | b'e' | b'E' | b'+' => return None,
                b'0' if digits == 0 && prev == b'-' => return None,
                b'0'..=b'9' if digits == 1 && prev == b'0' => return None,
                b'0'..=b'9' if digits == 18 => return None,
                _ => {}
            }
        }
        digits = if !in_string && b.is_ascii_digit() {
            digits + 1
        } else {
            0
        };
        prev = b;
    }
    no_repeated_keys(&mut Cursor::new(json))
}

/// No object in the value at the cursor holds one key twice.
fn no_repeated_keys(c: &mut Cursor<'_>) -> Option<()> {
    match c.peek()? {
        b'{' => {
            c.enter_object()?;
            let mut keys: Vec<&[u8]> = Vec::new();
            let mut first = true;
            while let Some(key) = c.next_key(&mut first)? {
                let raw = key.raw(c.buf());
                if keys.contains(&raw) {
                    return None;
                }
                keys.push(raw);
                no_repeated_keys(c)?;
            }
            Some(())
        }
        b'[' => {
            c.enter_array()?;
            let mut first = true;
            while c.next_item(&mut first)? {
                no_repeated_keys(c)?;
            }
            Some(())
        }
        _ => c.skip_value(),
    }
}

/// A text member as [`jw::string`] writes the string it holds: absent or
/// `null` is `""`, a literal without escapes is already that (the writer
/// escapes only what JSON requires), others are decoded and written again.
fn text_literal(data: &[u8], text: Text) -> Option<Literal<'_>> {
    let Some(Some(raw)) = text else {
        return Some(Cow::Borrowed(EMPTY_LITERAL));
    };
    // The quotes sit just outside the contents.
    let literal = data.get(raw.start - 1..raw.end + 1)?;
    if !raw.escaped {
        return Some(Cow::Borrowed(literal));
    }
    let decoded: String = serde_json::from_slice(literal).ok()?;
    let mut again = Vec::with_capacity(literal.len());
    jw::string(&mut again, &decoded);
    Some(Cow::Owned(again))
}

fn call_name(t: &Value) -> &str {
    t.pointer("/function/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn openai_call_is_content(t: &Value) -> bool {
    let s = |p: &str| t.pointer(p).and_then(Value::as_str).unwrap_or("");
    !s("/id").is_empty() || !call_name(t).is_empty() || !s("/function/arguments").is_empty()
}

/// An OpenAI tool-call delta in SOLO form, with its carried extra members.
fn solo_tool_call(t: &Value, position: usize, extra: Option<&Value>) -> Value {
    let s = |p: &str| {
        t.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let index = t
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(position as u64);
    let kind = t.get("type").and_then(Value::as_str).unwrap_or("function");
    let mut function = Map::new();
    function.insert("name".into(), Value::from(s("/function/name")));
    function.insert("arguments".into(), Value::from(s("/function/arguments")));
    let mut call = Map::new();
    call.insert("index".into(), Value::from(index));
    call.insert("id".into(), Value::from(s("/id")));
    call.insert("type".into(), Value::from(kind));
    if let Some(Value::Object(extra)) = extra {
        for (k, v) in extra {
            match (k.as_str(), v) {
                ("function_call", Value::Object(f)) => {
                    for (fk, fv) in f {
                        function.entry(fk.clone()).or_insert_with(|| fv.clone());
                    }
                }
                ("index" | "id" | "type" | "function_call" | "function", _) => {}
                _ => {
                    call.insert(k.clone(), v.clone());
                }
            }
        }
    }
    call.insert("function_call".into(), Value::Object(function));
    Value::Object(call)
}

/// An OpenAI `usage` object in SOLO `token_usage` form.
fn solo_usage(u: &Value) -> Value {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64);
    let mut m = Map::new();
    for key in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        m.insert(key.into(), Value::from(n(&format!("/{key}")).unwrap_or(0)));
    }
    if let Some(r) = n("/completion_tokens_details/reasoning_tokens") {
        m.insert("reasoning_tokens".into(), Value::from(r));
    }
    if let Some(c) = n("/prompt_tokens_details/cached_tokens") {
        m.insert("cached_tokens".into(), Value::from(c));
    }
    Value::Object(m)
}

impl StreamTranslator for ToSolo {
    fn event(&mut self, ev: &shimgate_shim_api::sse::SseEvent, out: &mut BytesMut) -> FrameClass {
        if let Some(ended) = &self.ended {
            return ended.clone();
        }
        let data = ev.data.trim_ascii();
        if data == b"[DONE]" {
            return self.end(out);
        }
        if let Some(class) = self.plain_content(data, out) {
            return class;
        }
        if let Some(class) = self.plain_carrier(data, out) {
            return class;
        }
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            // Not a chunk (a proxy's own noise): nothing the agent can use.
            return FrameClass::NotContent;
        };
        let x = v.get(EXT_KEY).filter(|x| x.is_object());
        let carried = x.filter(|x| x.get("event").is_some());
        let err = v.get("error").filter(|e| !e.is_null());
        if self.error.is_some() && (carried.is_some() || err.is_some()) {
            // After an error only the proxy's re-emitted tool calls matter.
            return FrameClass::NotContent;
        }
        if let Some(x) = carried {
            return self.carried(x, out);
        }
        if let Some(err) = err {
            return self.error_frame(err);
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.std_usage = Some(u.clone());
        }
        let Some(choice) = v
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return FrameClass::NotContent;
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(r.to_owned());
        }
        self.output(choice.get("delta"), x, out)
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        if let Some(ended) = &self.ended {
            return ended.clone();
        }
        if self.error.is_some() || self.done.is_some() || self.finish.is_some() {
            // The answer was complete; only the proxy's `[DONE]` is missing.
            return self.end(out);
        }
        self.flush(out);
        FrameClass::Error(Failure::new(
            FailureCode::Transport,
            "the proxy closed the stream before its end frame",
        ))
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        if self.ended.is_some() {
            return;
        }
        self.flush(out);
        let data = serde_json::to_vec(&failure_payload(failure)).unwrap_or_default();
        let id = self.upstream_id.clone();
        self.frame(out, Some("error"), Some(id.as_deref()), None, &data);
        self.ended = Some(FrameClass::Error(failure.clone()));
    }
}

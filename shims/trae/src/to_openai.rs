//! The return leg: the upstream's SOLO SSE becomes bare OpenAI SSE that a
//! compression proxy can read (one `data:` line per chunk, `\n\n` between
//! chunks, `data: [DONE]` last), with everything else kept in `x_solo`.
//!
//! Per SOLO event:
//!
//! * `output` → a chunk with `delta.content` / `reasoning_content` /
//!   `tool_calls` (`function_call` → `function`; empty `id`/`name` left out;
//!   `index` or the list position). Text and tool calls of one frame become
//!   two chunks (see [`crate::ext`]). `Content` when it holds text, reasoning
//!   or a tool-call fragment; an `output` with nothing to stream is carried.
//! * `done` (or a bare `data: [DONE]`) → a carrier (exact payload), the
//!   finish chunk (`tool_calls` when a named call was streamed, else SOLO's
//!   reason), the usage chunk (unless the request set
//!   `stream_options.include_usage: false`), `[DONE]`: `End`.
//! * `error` → a carrier, `{"error":{"code","message","type"}}`, `[DONE]`:
//!   `Error` (classified by business code).
//! * `token_usage` → a carrier now; the standard usage chunk at the end.
//! * anything else (`metadata`, `timing_cost`, `extra_info`, queue and
//!   unknown events) → a carrier, `NotContent`. `extra_info` repeats the
//!   whole reasoning, so it never becomes `reasoning_content`.
//!
//! After the stream ended every call writes nothing and returns how it
//! ended, so a `done` after an `error` is never a success. End of input
//! without `done` is a cut stream (the trait's default): the chain reports
//! it through [`fail`](StreamTranslator::fail).

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::Value;
use shimgate_shim_api::repeat::{offset_in, Around};
use shimgate_shim_api::sse::{SseEvent, DONE_FRAME};
use shimgate_shim_api::translate::{chars, Meter};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};

use crate::classify::{openai_error_type, SoloError};
use crate::ext::{failure_payload, EXT_KEY};
use crate::json_scan;
use crate::json_write as jw;
use crate::solo::{openai_usage, Output, ToolDelta};

/// The return-leg translator for one upstream attempt.
#[derive(Debug)]
pub struct ToOpenAi {
    /// `data: {"id":…,"object":…,"created":…,"model":…,"choices":[`, shared
    /// by every chunk of the answer.
    head: Vec<u8>,
    include_usage: bool,
    last_id: Option<Bytes>,
    named_call: bool,
    usage: Option<Vec<u8>>,
    ended: Option<FrameClass>,
    /// What the answer said of its size.
    meter: Meter,
    /// The bytes the answer's `output` frames repeat around their text.
    memo: Option<OutputMemo>,
    /// Without the memo: every frame read in full (the reference).
    unmemoized: bool,
}

/// The bytes an answer's `output` frames repeat around their one text
/// (see [`shimgate_shim_api::repeat`]), from a frame read in full whose
/// only content was that text.
#[derive(Debug)]
struct OutputMemo {
    around: Around,
    /// The text is `reasoning_content` (else `response`).
    reasoning: bool,
    /// The frame had no member OpenAI lacks: its chunk is the text alone.
    plain: bool,
}

impl OutputMemo {
    fn learn(data: &[u8], o: &Output<'_>) -> Option<OutputMemo> {
        if !o.tools.is_empty() {
            return None;
        }
        let (literal, reasoning) = match (o.has_text(), o.has_reasoning()) {
            (true, false) => (o.response, false),
            (false, true) => (o.reasoning, true),
            _ => return None,
        };
        let start = offset_in(data, literal)? + 1;
        let around = Around::new(data, start, (start + literal.len()).checked_sub(2)?)?;
        Some(OutputMemo {
            around,
            reasoning,
            plain: o.extra.is_empty(),
        })
    }
}

impl ToOpenAi {
    /// A translator with a fresh `chatcmpl-…` id and the current time;
    /// `request` is the OpenAI body the proxy sent (for `model` and
    /// `stream_options.include_usage`).
    pub fn new(request: &Value) -> ToOpenAi {
        let id = format!("chatcmpl-{:016x}", fastrand::u64(..));
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ToOpenAi::with_identity(request, &id, created)
    }

    /// A translator with a given chunk id and `created` time (for tests).
    pub fn with_identity(request: &Value, id: &str, created: u64) -> ToOpenAi {
        let model = request.get("model").and_then(Value::as_str).unwrap_or("");
        let mut head = Vec::with_capacity(96 + id.len() + model.len());
        head.extend_from_slice(b"data: {\"id\":");
        jw::string(&mut head, id);
        head.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        jw::uint(&mut head, created);
        head.extend_from_slice(b",\"model\":");
        jw::string(&mut head, model);
        head.extend_from_slice(b",\"choices\":[");
        // Two lookups (`pointer` allocates a string per step).
        let include_usage = request
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            != Some(false);
        ToOpenAi {
            head,
            include_usage,
            last_id: None,
            named_call: false,
            usage: None,
            ended: None,
            meter: Meter::default(),
            memo: None,
            unmemoized: false,
        }
    }

    /// A translator that reads every frame in full, without the memo of
    /// repeated bytes: the reference the differential tests and the fuzz
    /// targets hold the memo to.
    #[doc(hidden)]
    pub fn unmemoized(request: &Value, id: &str, created: u64) -> ToOpenAi {
        ToOpenAi {
            unmemoized: true,
            ..ToOpenAi::with_identity(request, id, created)
        }
    }

    /// Whether it holds a memo (the tests check it is used).
    #[doc(hidden)]
    pub fn has_memo(&self) -> bool {
        self.memo.is_some()
    }

    /// The text of an `output` frame that repeats the memo's bytes.
    fn remembered<'d>(&self, data: &'d [u8]) -> Option<(&'d [u8], &OutputMemo)> {
        let memo = self.memo.as_ref()?;
        Some((memo.around.contents(data)?, memo))
    }

    /// Learns from an `output` frame read in full (keeping the old memo
    /// when this one cannot be learned from).
    fn learn(&mut self, data: &[u8], o: &Output<'_>) {
        if self.unmemoized {
            return;
        }
        if let Some(memo) = OutputMemo::learn(data, o) {
            self.memo = Some(memo);
        }
    }

    /// Writes a chunk whose only choice has `delta` (the text between the
    /// braces, in pieces so frame text is copied once) and finish reason,
    /// then the `x_solo` text if any.
    fn chunk(&self, out: &mut BytesMut, delta: &[&[u8]], finish: Option<&str>, ext: &Ext) {
        let len: usize = delta.iter().map(|d| d.len()).sum();
        out.reserve(self.head.len() + len + ext.buf.len() + 64);
        out.put_slice(&self.head);
        out.put_slice(b"{\"index\":0,\"delta\":{");
        for piece in delta {
            out.put_slice(piece);
        }
        out.put_slice(b"},\"finish_reason\":");
        match finish {
            Some(reason) => jw::string(out, reason),
            None => out.put_slice(b"null"),
        }
        out.put_slice(b"}]");
        ext.close_into(out);
        out.put_slice(b"}\n\n");
    }

    /// Carries a whole SOLO event verbatim in a content-free chunk.
    fn carrier(&mut self, ev: &SseEvent, out: &mut BytesMut) {
        self.last_id = ev.id.clone();
        let mut ext = Ext::default();
        ext.key(b"event");
        match &ev.event {
            Some(name) => jw::string(&mut ext.buf, &String::from_utf8_lossy(name)),
            None => ext.buf.put_slice(b"null"),
        }
        if let Some(id) = &ev.id {
            ext.key(b"id");
            jw::string(&mut ext.buf, &String::from_utf8_lossy(id));
        }
        ext.retry(ev.retry);
        match std::str::from_utf8(&ev.data) {
            Ok(_) if json_scan::is_valid(&ev.data) => {
                ext.key(b"data");
                jw::raw_one_line(&mut ext.buf, &ev.data);
            }
            _ => {
                ext.key(b"text");
                jw::string(&mut ext.buf, &String::from_utf8_lossy(&ev.data));
            }
        }
        self.chunk(
            out,
            &[b"\"role\":\"assistant\",\"content\":\"\""],
            None,
            &ext,
        );
    }

    fn output(&mut self, ev: &SseEvent, out: &mut BytesMut) -> FrameClass {
        // A frame that repeats the memo's bytes around a text, with no ID
        // or retry of its own to carry: the chunk is that text alone.
        if ev.id == self.last_id && ev.retry.is_none() {
            if let Some((text, memo)) = self.remembered(&ev.data) {
                if memo.plain && !text.is_empty() {
                    let key: &[u8] = if memo.reasoning {
                        b"\"reasoning_content\":\""
                    } else {
                        b"\"content\":\""
                    };
                    self.chunk(out, &[key, text, b"\""], None, &Ext::default());
                    self.meter.content_chars += chars(text);
                    return FrameClass::Content;
                }
            }
        }
        let Some(o) = Output::parse(&ev.data).filter(Output::is_content) else {
            self.carrier(ev, out);
            return FrameClass::NotContent;
        };
        self.learn(&ev.data, &o);
        self.named_call |= o.tools.iter().any(|t| !t.name.is_empty());
        self.meter.content_chars += content_chars(&o);
        let mut ext = Ext::default();
        if ev.id != self.last_id {
            ext.key(b"id");
            let id = ev.id.as_deref().unwrap_or_default();
            jw::string(&mut ext.buf, &String::from_utf8_lossy(id));
            self.last_id = ev.id.clone();
        }
        ext.retry(ev.retry);
        if !o.extra.is_empty() {
            ext.key(b"output");
            ext.buf.put_u8(b'{');
            for (i, (k, v)) in o.extra.iter().enumerate() {
                if i > 0 {
                    ext.buf.put_u8(b',');
                }
                ext.buf.put_slice(k);
                ext.buf.put_u8(b':');
                jw::raw_one_line(&mut ext.buf, v);
            }
            ext.buf.put_u8(b'}');
        }
        let text = o.has_text() || o.has_reasoning();
        let split = text && !o.tools.is_empty();
        if split {
            ext.key(b"continues");
            ext.buf.put_slice(b"true");
        }
        // At most five pieces: on the stack, not a heap `Vec` per frame.
        let mut delta: [&[u8]; 5] = [b""; 5];
        let mut pieces = 0;
        if o.has_text() {
            delta[0] = b"\"content\":";
            delta[1] = o.response;
            pieces = 2;
        }
        if o.has_reasoning() {
            delta[pieces] = if pieces == 0 {
                b"\"reasoning_content\":"
            } else {
                b",\"reasoning_content\":"
            };
            delta[pieces + 1] = o.reasoning;
            pieces += 2;
        }
        if split {
            self.chunk(out, &delta[..pieces], None, &ext);
            pieces = 0;
            ext = Ext::default();
        }
        let mut calls = Vec::new();
        if !o.tools.is_empty() {
            if pieces > 0 {
                calls.push(b',');
            }
            tool_calls(&mut calls, &o.tools);
            tool_extras(&mut ext, &o.tools);
            delta[pieces] = &calls;
            pieces += 1;
        }
        self.chunk(out, &delta[..pieces], None, &ext);
        FrameClass::Content
    }

    fn finish(&mut self, done: Option<&SseEvent>, out: &mut BytesMut) -> FrameClass {
        let mut reason = String::from("stop");
        if let Some(ev) = done {
            self.carrier(ev, out);
            let data: Option<Value> = serde_json::from_slice(&ev.data).ok();
            if let Some(r) = data.as_ref().and_then(|d| d.get("finish_reason")?.as_str()) {
                reason = r.to_owned();
            }
        }
        if self.named_call {
            reason = String::from("tool_calls");
        }
        self.chunk(out, &[], Some(&reason), &Ext::default());
        if let (true, Some(usage)) = (self.include_usage, &self.usage) {
            out.put_slice(&self.head);
            out.put_slice(b"],\"usage\":");
            out.put_slice(usage);
            out.put_slice(b"}\n\n");
        }
        out.put_slice(DONE_FRAME);
        self.ended = Some(FrameClass::End);
        FrameClass::End
    }

    /// The standard error frame and `[DONE]`, after the carrier.
    fn error_frames(&mut self, code: &str, failure: &Failure, out: &mut BytesMut) -> FrameClass {
        out.put_slice(b"data: {\"error\":{\"code\":");
        jw::string(out, code);
        out.put_slice(b",\"message\":");
        jw::string(out, &failure.message);
        out.put_slice(b",\"type\":");
        jw::string(out, openai_error_type(failure.code));
        out.put_slice(b"}}\n\n");
        out.put_slice(DONE_FRAME);
        let class = FrameClass::Error(failure.clone());
        self.ended = Some(class.clone());
        class
    }
}

/// The `x_solo` object being built (empty = no extension member).
#[derive(Default)]
struct Ext {
    buf: Vec<u8>,
}

impl Ext {
    fn key(&mut self, name: &[u8]) {
        self.buf
            .put_u8(if self.buf.is_empty() { b'{' } else { b',' });
        self.buf.put_u8(b'"');
        self.buf.put_slice(name);
        self.buf.put_slice(b"\":");
    }

    fn retry(&mut self, retry: Option<u64>) {
        if let Some(ms) = retry {
            self.key(b"retry");
            jw::uint(&mut self.buf, ms);
        }
    }

    fn close_into(&self, out: &mut BytesMut) {
        if !self.buf.is_empty() {
            out.put_slice(b",\"");
            out.put_slice(EXT_KEY.as_bytes());
            out.put_slice(b"\":");
            out.put_slice(&self.buf);
            out.put_u8(b'}');
        }
    }
}

/// Writes `"tool_calls":[…]` in OpenAI form.
fn tool_calls(out: &mut Vec<u8>, tools: &[ToolDelta]) {
    out.put_slice(b"\"tool_calls\":[");
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            out.put_u8(b',');
        }
        out.put_slice(b"{\"index\":");
        jw::uint(out, t.index);
        if !t.id.is_empty() {
            out.put_slice(b",\"id\":");
            jw::string(out, &t.id);
            out.put_slice(b",\"type\":");
            jw::string(out, t.kind.as_deref().unwrap_or("function"));
        }
        out.put_slice(b",\"function\":{");
        if !t.name.is_empty() {
            out.put_slice(b"\"name\":");
            jw::string(out, &t.name);
            out.put_u8(b',');
        }
        out.put_slice(b"\"arguments\":");
        jw::string(out, &t.arguments);
        out.put_slice(b"}}");
    }
    out.put_u8(b']');
}

/// Adds `"tools":[…]` to `x_solo` when a fragment has members OpenAI lacks.
fn tool_extras(ext: &mut Ext, tools: &[ToolDelta]) {
    if tools
        .iter()
        .all(|t| t.extra.is_empty() && t.function_extra.is_empty())
    {
        return;
    }
    ext.key(b"tools");
    ext.buf.put_u8(b'[');
    for (i, t) in tools.iter().enumerate() {
        if i > 0 {
            ext.buf.put_u8(b',');
        }
        if t.extra.is_empty() && t.function_extra.is_empty() {
            ext.buf.put_slice(b"null");
            continue;
        }
        let mut entry = t.extra.clone();
        if !t.function_extra.is_empty() {
            entry.insert(
                "function_call".into(),
                Value::Object(t.function_extra.clone()),
            );
        }
        jw::value(&mut ext.buf, &Value::Object(entry));
    }
    ext.buf.put_u8(b']');
}

/// Characters of an output's content: its text and reasoning strings
/// (without their quotes) and tool-call argument increments.
fn content_chars(o: &Output<'_>) -> u64 {
    let literal = |raw: &[u8]| chars(raw).saturating_sub(2);
    let args: u64 = o.tools.iter().map(|t| chars(t.arguments.as_bytes())).sum();
    literal(o.response) + literal(o.reasoning) + args
}

/// `token_usage`'s counts, under either spelling SOLO uses (the cached
/// part of the prompt as `cached_tokens` or `cache_read_tokens`, when it
/// is reported at all).
fn read_usage(data: &[u8], meter: &mut Meter) {
    use shimgate_shim_api::json_scan::{as_u64, is_valid, last_member};
    // Text `serde_json` refuses says nothing (as it did parsed).
    if std::str::from_utf8(data).is_err() || !is_valid(data) {
        return;
    }
    // Off the text with the cursor; parsed whole only when a key is
    // escaped (or the text is not JSON the cursor can walk).
    let cursor = |names: [&[u8]; 2]| -> Result<Option<u64>, shimgate_shim_api::json_scan::Unsure> {
        for name in names {
            if let Some(n) = last_member(data, name)?.and_then(as_u64) {
                return Ok(Some(n));
            }
        }
        Ok(None)
    };
    let counts = cursor([b"prompt_tokens", b"input_tokens"]).and_then(|p| {
        Ok((
            p,
            cursor([b"completion_tokens", b"output_tokens"])?,
            cursor([b"cached_tokens", b"cache_read_tokens"])?,
        ))
    });
    let (prompt, completion, cached) = match counts {
        Ok(counts) => counts,
        Err(_) => {
            let Ok(v) = serde_json::from_slice::<Value>(data) else {
                return;
            };
            let count = |names: [&str; 2]| names.iter().find_map(|n| v.get(*n)?.as_u64());
            (
                count(["prompt_tokens", "input_tokens"]),
                count(["completion_tokens", "output_tokens"]),
                count(["cached_tokens", "cache_read_tokens"]),
            )
        }
    };
    meter.prompt_tokens = prompt.or(meter.prompt_tokens);
    meter.completion_tokens = completion.or(meter.completion_tokens);
    meter.cached_tokens = cached.or(meter.cached_tokens);
}

fn is_done_marker(ev: &SseEvent) -> bool {
    (ev.event.is_none() || ev.is("message")) && ev.data.trim_ascii() == b"[DONE]"
}

impl StreamTranslator for ToOpenAi {
    fn event(&mut self, ev: &SseEvent, out: &mut BytesMut) -> FrameClass {
        if let Some(ended) = &self.ended {
            return ended.clone();
        }
        let name = ev.event.as_deref().unwrap_or_default();
        match name {
            b"output" => self.output(ev, out),
            b"done" => self.finish(Some(ev), out),
            b"error" => {
                self.carrier(ev, out);
                let e = SoloError::parse(&ev.data);
                let failure = e.failure();
                let code = e.code.unwrap_or_else(|| failure.code.as_str().to_owned());
                self.error_frames(&code, &failure, out)
            }
            b"token_usage" => {
                self.carrier(ev, out);
                if let Some(usage) = openai_usage(&ev.data) {
                    self.usage = Some(usage);
                }
                read_usage(&ev.data, &mut self.meter);
                FrameClass::NotContent
            }
            _ if is_done_marker(ev) => self.finish(None, out),
            _ => {
                self.carrier(ev, out);
                FrameClass::NotContent
            }
        }
    }

    /// The classes [`ToOpenAi::event`] gives, without writing a chunk: a
    /// direct answer passes SOLO's own events on and needs only these.
    fn classify(&mut self, ev: &SseEvent, _scratch: &mut BytesMut) -> FrameClass {
        if let Some(ended) = &self.ended {
            return ended.clone();
        }
        let class = match ev.event.as_deref().unwrap_or_default() {
            b"output" => {
                if let Some((text, _)) = self.remembered(&ev.data) {
                    self.meter.content_chars += chars(text);
                    return if text.is_empty() {
                        FrameClass::NotContent
                    } else {
                        FrameClass::Content
                    };
                }
                return match Output::parse(&ev.data).filter(Output::is_content) {
                    Some(o) => {
                        self.learn(&ev.data, &o);
                        self.meter.content_chars += content_chars(&o);
                        FrameClass::Content
                    }
                    None => FrameClass::NotContent,
                };
            }
            b"token_usage" => {
                read_usage(&ev.data, &mut self.meter);
                return FrameClass::NotContent;
            }
            b"done" => FrameClass::End,
            b"error" => FrameClass::Error(SoloError::parse(&ev.data).failure()),
            _ if is_done_marker(ev) => FrameClass::End,
            _ => return FrameClass::NotContent,
        };
        self.ended = Some(class.clone());
        class
    }

    fn meter(&self) -> Meter {
        self.meter
    }

    fn eof(&mut self, _out: &mut BytesMut) -> FrameClass {
        match &self.ended {
            Some(ended) => ended.clone(),
            None => FrameClass::Error(Failure::new(
                FailureCode::Transport,
                "upstream closed the stream before its end frame",
            )),
        }
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        if self.ended.is_some() {
            return;
        }
        let payload = failure_payload(failure);
        let data = serde_json::to_vec(&payload).unwrap_or_default();
        let ev = SseEvent {
            event: Some(Bytes::from_static(b"error")),
            data: Bytes::from(data),
            id: self.last_id.clone(),
            retry: None,
        };
        self.carrier(&ev, out);
        let code = match &payload["code"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        self.error_frames(&code, failure, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(data: &str) -> Meter {
        let mut m = Meter::default();
        read_usage(data.as_bytes(), &mut m);
        m
    }

    #[test]
    fn token_usage_is_metered_with_the_cached_part_when_reported() {
        let m = metered(r#"{"prompt_tokens":21,"completion_tokens":142,"total_tokens":163}"#);
        assert_eq!(
            (m.prompt_tokens, m.completion_tokens, m.cached_tokens),
            (Some(21), Some(142), None)
        );
        let m = metered(r#"{"input_tokens":30,"output_tokens":4,"cache_read_tokens":12}"#);
        assert_eq!(
            (m.prompt_tokens, m.completion_tokens, m.cached_tokens),
            (Some(30), Some(4), Some(12))
        );
        let m = metered(r#"{"prompt_tokens":30,"c\u0061ched_tokens":12}"#);
        assert_eq!(m.cached_tokens, Some(12));
        for odd in [
            r#"{"prompt_tokens":"30"}"#,
            r#"{"prompt_tokens":-3}"#,
            r#"{"prompt_tokens":3.5}"#,
            "not json",
        ] {
            assert_eq!(metered(odd), Meter::default(), "{odd}");
        }
    }
}

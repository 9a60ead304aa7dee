//! The stream translators: qoder's envelope SSE to bare OpenAI SSE (the
//! return leg, read by the compression proxy), and the bare OpenAI SSE the
//! proxy relays back to the qoder agent (the ingress), frame by frame.
//!
//! Both run the same [`Unwrapper`]: bare frames pass through it unchanged,
//! so the ingress also copes with an envelope that slipped through.
//!
//! An envelope `body` that is not a chunk (not JSON as `serde_json` reads
//! it, a number outside f64's range included, or JSON but no object) is
//! never written as a `data:` line, nor quoted to the proxy or the agent
//! (it may be an HTML page, a stack trace, a script): it is dropped and
//! counted ([`Meter::unreadable_frames`], per route in `/status` and in
//! the log) and the answer goes on. An answer that is nothing else ends
//! empty or cut, which the chain retries like any other. Heartbeat bodies
//! (`null`, `""`, `"null"`, `{}`) are dropped without counting, and
//! `[DONE]` still ends the stream.

use std::borrow::Cow;

use bytes::BytesMut;
use serde_json::Value;
use shimgate_shim_api::sse::{SseEvent, DONE_FRAME};
use shimgate_shim_api::translate::Meter;
use shimgate_shim_api::{Failure, FrameClass, StreamTranslator};

use crate::chunk::{self, Inner, Varying};
use crate::classify::{self, UpstreamError};
use crate::envelope::{scan_top, Body, Status, Top};
use crate::frames;
use crate::memo::Memo;
use crate::oneline::{put_one_line, unescape_into};

const DATA_PREFIX: &[u8] = b"data: ";

/// What to do with usage-only chunks (`choices: []` plus `usage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsagePolicy {
    /// Pass them on: the proxy decides to compress from `usage.prompt_tokens`.
    #[default]
    Keep,
    /// Drop them: the request said `stream_options.include_usage: false`.
    DropUsageOnly,
}

impl UsagePolicy {
    /// Drops usage-only chunks only when the request explicitly set
    /// `stream_options.include_usage` to `false`; usage on a finish chunk is
    /// always kept (it shares the frame with the finish).
    pub fn for_request(request: &Value) -> Self {
        // Two lookups (`pointer` allocates a string per step).
        match request
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
        {
            Some(Value::Bool(false)) => UsagePolicy::DropUsageOnly,
            _ => UsagePolicy::Keep,
        }
    }
}

/// Where an inner chunk came from: an OpenAI error frame that was already
/// bare is passed on as it is; one inside an envelope is rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    Envelope,
    Bare,
}

/// What becomes of one written frame.
#[derive(Debug)]
enum Verdict {
    Drop,
    End,
    Keep(FrameClass),
    Error {
        openai_shaped: bool,
    },
    /// An envelope body that is not a chunk: dropped and counted.
    Unreadable,
}

/// The frame-by-frame engine behind both translators.
#[derive(Debug, Default)]
pub(crate) struct Unwrapper {
    usage: UsagePolicy,
    /// A `finish_reason` went by: an EOF now is a complete answer.
    finish_seen: bool,
    /// The end or error already written; nothing is written after it.
    terminal: Option<FrameClass>,
    /// What the answer said of its size.
    meter: Meter,
    /// The bytes the stream's frames repeat (see [`crate::memo`]).
    memo: Memo,
    /// The answer string (and finish) of the chunk just judged, when the
    /// memo may learn from it.
    varying: Option<(Varying, bool)>,
    /// Frames written from the memo (the tests check it is used).
    #[cfg(test)]
    pub(crate) memo_hits: usize,
}

impl Unwrapper {
    /// An engine with the given usage policy.
    pub fn new(usage: UsagePolicy) -> Self {
        Unwrapper {
            usage,
            ..Unwrapper::default()
        }
    }

    /// An engine that reads every frame in full (no memo): the reference
    /// the memo is tested against.
    pub fn unmemoized(usage: UsagePolicy) -> Self {
        Unwrapper {
            usage,
            memo: Memo::disabled(),
            ..Unwrapper::default()
        }
    }

    /// Translates one event (see [`StreamTranslator::event`]). After an end
    /// or error it writes nothing and returns that class again.
    pub fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        if let Some(done) = &self.terminal {
            return done.clone();
        }
        let class = self.translate(event, out);
        if matches!(class, FrameClass::End | FrameClass::Error(_)) {
            self.terminal = Some(class.clone());
        }
        class
    }

    /// The stream closed: complete if a `finish_reason` was seen (the
    /// qodercli 1.1.5 ending has no `[DONE]`), else cut.
    pub fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        if let Some(done) = &self.terminal {
            return done.clone();
        }
        if self.finish_seen {
            out.extend_from_slice(DONE_FRAME);
            self.terminal = Some(FrameClass::End);
            return FrameClass::End;
        }
        FrameClass::Error(Failure::new(
            shimgate_shim_api::FailureCode::Transport,
            "upstream closed the stream before its end frame",
        ))
    }

    /// Writes the error frame and `[DONE]` for a failure seen outside the
    /// stream, unless the stream already ended.
    pub fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        if self.terminal.is_some() {
            return;
        }
        frames::put_failure(out, failure);
        self.terminal = Some(FrameClass::Error(failure.clone()));
    }

    fn translate(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        // `event:finish` carries only timings and ends the answer.
        if event.is("finish") {
            return end(out);
        }
        if event.is("error") {
            return upstream_failure(out, classify::event_error(&event.data));
        }
        let data = event.data.trim_ascii();
        // A frame with a line break is read as it is written, on one line
        // (`oneline`): the repair can make broken JSON an envelope, and
        // the next reader (the ingress, the CLI) sees only the repaired
        // frame. Rare, so the copy costs nothing on the common path.
        let one_line: BytesMut;
        let data = if memchr::memchr2(b'\n', b'\r', data).is_some() {
            let mut buf = BytesMut::with_capacity(data.len() + 16);
            put_one_line(&mut buf, data);
            one_line = buf;
            one_line.trim_ascii()
        } else {
            data
        };
        if data.is_empty() {
            return FrameClass::NotContent;
        }
        if data == b"[DONE]" {
            return end(out);
        }
        if let Some(hit) = self.memo.apply(data, out) {
            #[cfg(test)]
            {
                self.memo_hits += 1;
            }
            self.meter.content_chars += hit.chars as u64;
            self.finish_seen |= hit.finish;
            return if hit.content {
                FrameClass::Content
            } else {
                FrameClass::NotContent
            };
        }
        self.varying = None;
        if data.first() != Some(&b'{') || !could_be_envelope(data) {
            return self.bare(data, out);
        }
        // Optimistically decode the body into the frame while scanning.
        let frame_start = out.len();
        out.extend_from_slice(DATA_PREFIX);
        match scan_top(data, Some(out)) {
            Some(top) if top.is_envelope() => self.envelope(data, frame_start, &top, out),
            Some(_) => {
                out.truncate(frame_start);
                self.bare(data, out)
            }
            None => {
                out.truncate(frame_start);
                self.parsed(data, out)
            }
        }
    }

    /// An envelope read by the cursor, its body (when a string) already
    /// decoded after `frame_start`: no `Value` built.
    fn envelope(
        &mut self,
        data: &[u8],
        frame_start: usize,
        top: &Top,
        out: &mut BytesMut,
    ) -> FrameClass {
        let body_start = frame_start + DATA_PREFIX.len();
        if !top.status.is_success() {
            let text = match &top.body {
                Body::Decoded(_) => out.get(body_start..).unwrap_or_default().to_vec(),
                other => body_text(data, other).into_owned(),
            };
            out.truncate(frame_start);
            return upstream_failure(out, classify::upstream_error(top.status.failed(), &text));
        }
        match &top.body {
            Body::Decoded(raw) => {
                let class = self.close_frame(frame_start, Origin::Envelope, out);
                if let Some(varying) = self.varying.take() {
                    let decoded = out
                        .get(body_start..out.len().saturating_sub(2))
                        .unwrap_or_default();
                    self.memo.learn_envelope(data, *raw, decoded, varying);
                }
                class
            }
            Body::Missing => {
                out.truncate(frame_start);
                FrameClass::NotContent
            }
            Body::Json(range) => {
                out.truncate(frame_start);
                self.inner(
                    data.get(range.clone()).unwrap_or_default(),
                    Origin::Envelope,
                    out,
                )
            }
            Body::Str(raw) => {
                out.truncate(frame_start);
                let text = body_text(data, &Body::Str(*raw)).into_owned();
                self.inner(&text, Origin::Envelope, out)
            }
        }
    }

    /// The rare frames the cursor was unsure of, read with `serde_json`.
    fn parsed(&mut self, data: &[u8], out: &mut BytesMut) -> FrameClass {
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) else {
            return self.inner(data, Origin::Bare, out);
        };
        let status = match map.get("statusCodeValue") {
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .map_or(Status::OtherNumber, Status::Code),
            _ => Status::Absent,
        };
        let body = map.get("body");
        let string_body = matches!(body, Some(Value::String(_)));
        let envelope = status != Status::Absent || (string_body && !map.contains_key("choices"));
        if !envelope {
            return self.inner(data, Origin::Bare, out);
        }
        let text: Cow<'_, [u8]> = match body {
            None | Some(Value::Null) => Cow::Borrowed(b""),
            Some(Value::String(s)) => Cow::Borrowed(s.as_bytes()),
            Some(other) => Cow::Owned(serde_json::to_vec(other).unwrap_or_default()),
        };
        if !status.is_success() {
            return upstream_failure(out, classify::upstream_error(status.failed(), &text));
        }
        if matches!(body, None | Some(Value::Null)) {
            return FrameClass::NotContent;
        }
        self.inner(&text, Origin::Envelope, out)
    }

    /// A bare chunk (not an envelope), written as it is; the memo learns
    /// from it when it was written byte for byte.
    fn bare(&mut self, data: &[u8], out: &mut BytesMut) -> FrameClass {
        let class = self.inner(data, Origin::Bare, out);
        if let Some(varying) = self.varying.take() {
            if memchr::memchr2(b'\n', b'\r', data).is_none() {
                self.memo.learn_bare(data, varying);
            }
        }
        class
    }

    /// Writes `data: <chunk>` on one line and judges it.
    fn inner(&mut self, chunk: &[u8], origin: Origin, out: &mut BytesMut) -> FrameClass {
        let frame_start = out.len();
        out.extend_from_slice(DATA_PREFIX);
        put_one_line(out, chunk);
        self.close_frame(frame_start, origin, out)
    }

    /// Judges the chunk written after `frame_start` and keeps, drops or
    /// replaces the frame.
    fn close_frame(
        &mut self,
        frame_start: usize,
        origin: Origin,
        out: &mut BytesMut,
    ) -> FrameClass {
        let body_start = frame_start + DATA_PREFIX.len();
        let verdict = self.judge(out.get(body_start..).unwrap_or_default(), origin);
        match verdict {
            Verdict::Drop => {
                out.truncate(frame_start);
                FrameClass::NotContent
            }
            Verdict::End => {
                out.truncate(frame_start);
                end(out)
            }
            Verdict::Keep(class) => {
                out.extend_from_slice(b"\n\n");
                class
            }
            Verdict::Error { openai_shaped } => {
                let body = out.get(body_start..).unwrap_or_default().to_vec();
                let error = classify::upstream_error(None, &body);
                if origin == Origin::Bare && openai_shaped {
                    // Already an OpenAI error frame: pass it on as it is.
                    out.extend_from_slice(b"\n\n");
                    out.extend_from_slice(DONE_FRAME);
                    return FrameClass::Error(error.failure);
                }
                out.truncate(frame_start);
                upstream_failure(out, error)
            }
            Verdict::Unreadable => {
                out.truncate(frame_start);
                self.meter.unreadable_frames += 1;
                FrameClass::NotContent
            }
        }
    }

    fn judge(&mut self, written: &[u8], origin: Origin) -> Verdict {
        let chunk = written.trim_ascii();
        let lead = written.len() - written.trim_ascii_start().len();
        // Heartbeats: body null, "", "null" (and `{}`, below).
        if chunk.is_empty() || chunk == b"null" {
            return Verdict::Drop;
        }
        if chunk == b"[DONE]" {
            return Verdict::End;
        }
        let (inner, varying) = chunk::inspect_spanned(chunk);
        match inner {
            // Bare text is someone's own frame, passed on as it is; an
            // envelope body is qoder's answer, and neither the proxy nor
            // the agent could read it as a chunk.
            Inner::NotObject if origin == Origin::Envelope => Verdict::Unreadable,
            Inner::NotObject => Verdict::Keep(FrameClass::NotContent),
            Inner::Empty | Inner::Timing => Verdict::Drop,
            Inner::Error { openai_shaped } => Verdict::Error { openai_shaped },
            Inner::Chunk(facts) => {
                self.meter.content_chars += facts.content_chars as u64;
                if facts.has_usage {
                    read_usage(chunk, &mut self.meter);
                }
                if facts.usage_only && self.usage == UsagePolicy::DropUsageOnly {
                    return Verdict::Drop;
                }
                self.finish_seen |= facts.finish;
                self.varying = varying.map(|v| {
                    let at = |offset: usize| offset + lead;
                    (
                        Varying {
                            start: at(v.start),
                            end: at(v.end),
                        },
                        facts.finish,
                    )
                });
                Verdict::Keep(if facts.content {
                    FrameClass::Content
                } else {
                    FrameClass::NotContent
                })
            }
        }
    }
}

/// The token counts of a chunk's `usage` (prompt, completion, and the
/// cached part of the prompt under `prompt_tokens_details`), read off the
/// checked chunk with the cursor; parsed whole only when a key is escaped.
fn read_usage(chunk: &[u8], meter: &mut Meter) {
    use shimgate_shim_api::json_scan::{as_u64, last_member};
    let counts = last_member(chunk, b"usage").and_then(|usage| {
        let Some(u) = usage else {
            return Ok((None, None, None));
        };
        let count = |key: &[u8]| last_member(u, key).map(|n| n.and_then(as_u64));
        let cached = match last_member(u, b"prompt_tokens_details")? {
            Some(d) => last_member(d, b"cached_tokens")?.and_then(as_u64),
            None => None,
        };
        Ok((
            count(b"prompt_tokens")?,
            count(b"completion_tokens")?,
            cached,
        ))
    });
    let (prompt, completion, cached) = match counts {
        Ok(counts) => counts,
        Err(_) => {
            let Ok(v) = serde_json::from_slice::<Value>(chunk) else {
                return;
            };
            let count = |key: &str| v.get("usage")?.get(key)?.as_u64();
            let cached = v
                .pointer("/usage/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64);
            (count("prompt_tokens"), count("completion_tokens"), cached)
        }
    };
    meter.prompt_tokens = prompt.or(meter.prompt_tokens);
    meter.completion_tokens = completion.or(meter.completion_tokens);
    meter.cached_tokens = cached.or(meter.cached_tokens);
}

/// Whether an object frame may be an envelope: one has a `body` or a
/// `statusCodeValue` key, spelled out or (only `\u` escapes make letters)
/// escaped. A bare chunk (what the ingress reads) has neither, and is
/// judged without the envelope scan, which every reading of such a frame
/// ends in anyway (`inner`, bare).
fn could_be_envelope(data: &[u8]) -> bool {
    use memchr::memmem::Finder;
    use std::sync::LazyLock;
    // Searchers built once: building one for every frame cost more than
    // the search.
    static BODY: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"body"));
    static STATUS: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"statusCodeValue"));
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));
    BODY.find(data).is_some() || STATUS.find(data).is_some() || ESCAPE.find(data).is_some()
}

fn end(out: &mut BytesMut) -> FrameClass {
    out.extend_from_slice(DONE_FRAME);
    FrameClass::End
}

fn upstream_failure(out: &mut BytesMut, error: UpstreamError) -> FrameClass {
    frames::put_upstream_error(out, &error);
    FrameClass::Error(error.failure)
}

/// The decoded text of a body the scan did not decode.
fn body_text<'a>(data: &'a [u8], body: &Body) -> Cow<'a, [u8]> {
    match body {
        Body::Missing | Body::Decoded(_) => Cow::Borrowed(b""),
        Body::Json(range) => Cow::Borrowed(data.get(range.clone()).unwrap_or_default()),
        Body::Str(raw) if !raw.escaped => Cow::Borrowed(raw.raw(data)),
        Body::Str(raw) => {
            let mut text = BytesMut::new();
            match unescape_into(raw.raw(data), &mut text) {
                Some(()) => Cow::Owned(text.to_vec()),
                None => Cow::Borrowed(raw.raw(data)),
            }
        }
    }
}

/// The return leg: qoder envelope SSE to bare OpenAI SSE.
#[derive(Debug, Default)]
pub struct QoderReturnLeg {
    core: Unwrapper,
}

impl QoderReturnLeg {
    /// A translator with the given usage policy.
    pub fn new(usage: UsagePolicy) -> Self {
        QoderReturnLeg {
            core: Unwrapper::new(usage),
        }
    }

    /// A translator for the OpenAI body the proxy sent (reads
    /// `stream_options.include_usage`).
    pub fn for_request(request: &Value) -> Self {
        Self::new(UsagePolicy::for_request(request))
    }

    /// A translator that reads every frame in full, without the memo of
    /// repeated bytes: the reference the differential tests and the fuzz
    /// target hold the memo to.
    #[doc(hidden)]
    pub fn unmemoized(usage: UsagePolicy) -> Self {
        QoderReturnLeg {
            core: Unwrapper::unmemoized(usage),
        }
    }
}

#[cfg(test)]
impl QoderReturnLeg {
    /// Frames written from the memo so far.
    pub(crate) fn memo_hits(&self) -> usize {
        self.core.memo_hits
    }
}

impl StreamTranslator for QoderReturnLeg {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        self.core.event(event, out)
    }

    fn meter(&self) -> Meter {
        self.core.meter
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        self.core.eof(out)
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        self.core.fail(failure, out);
    }
}

/// The ingress: the bare OpenAI SSE the proxy relays, as the qoder agent
/// reads it (the agent reads bare OpenAI frames, so this is near identity).
#[derive(Debug, Default)]
pub struct QoderIngress {
    core: Unwrapper,
}

impl QoderIngress {
    /// A translator for one relayed answer.
    pub fn new() -> Self {
        QoderIngress::default()
    }

    /// A translator without the memo (see [`QoderReturnLeg::unmemoized`]).
    #[doc(hidden)]
    pub fn unmemoized() -> Self {
        QoderIngress {
            core: Unwrapper::unmemoized(UsagePolicy::Keep),
        }
    }
}

impl StreamTranslator for QoderIngress {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        self.core.event(event, out)
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        self.core.eof(out)
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        self.core.fail(failure, out);
    }
}

#[cfg(test)]
mod tests;

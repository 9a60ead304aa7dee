//! The two stream translations of the model-server wire.
//!
//! **Return leg** (the model server's SSE → bare OpenAI SSE for the
//! compression proxy), per event as [`crate::wire`] reads it:
//!
//! * a chunk, a 200 envelope, a heartbeat, `event: finish`, `[DONE]`: the
//!   qoder unwrapper's (bare chunks pass byte for byte, envelopes are
//!   unwrapped, usage chunks are kept so the proxy learns
//!   `prompt_tokens`, one `data:` line per frame and `data: [DONE]` last);
//! * a sentinel: a carrier ([`crate::ext`]), not content. Before any
//!   content, an answer that said `[EXCEED_QUOTA]` and then ended (an end
//!   frame, or the body's end) is a `QUOTA` failure (the route rests;
//!   another may answer);
//! * an error (an envelope whose `statusCodeValue` is not 200, `event:
//!   error`, a chunk with `error`): before content, a failure classified
//!   by qoder's business codes (the chain retries, switches, or answers
//!   the proxy with an HTTP error whose `error.native` holds the model
//!   server's own bytes); after content, a carrier of the event and
//!   `[DONE]`, so the CLI still gets its error through a proxy that drops
//!   frames without `choices`.
//!
//! **Ingress** (the proxy's OpenAI SSE → what the CLI reads): a carrier
//! becomes the event it carries, byte for byte as the model server sent
//! it (an error one ends the answer); every other frame is read by the
//! qoder unwrapper (bare chunks pass as they are).

use bytes::BytesMut;
use serde_json::Value;
use shimgate_shim_api::sse::{write_sse_event, SseEvent, DONE_FRAME};
use shimgate_shim_api::translate::Meter;
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};
use shimgate_shim_qoder::{QoderIngress, QoderReturnLeg};

use crate::ext::{carried, put_carrier};
use crate::wire::{self, Frame, Sentinel};

/// The most of a sentinel's text a failure's reason quotes.
const QUOTED: usize = 200;

/// The model server's SSE to bare OpenAI SSE.
#[derive(Debug, Default)]
pub struct ModelReturnLeg {
    inner: QoderReturnLeg,
    /// A content frame went by: the attempt is committed.
    content: bool,
    /// The text of an `[EXCEED_QUOTA]` seen before any content.
    quota: Option<String>,
    /// How the answer ended, once its closing frames are written
    /// (nothing is written after them).
    ended: Option<FrameClass>,
}

impl ModelReturnLeg {
    /// A translator for the OpenAI body the proxy sent (its
    /// `stream_options.include_usage`).
    pub fn for_request(request: &Value) -> Self {
        ModelReturnLeg {
            inner: QoderReturnLeg::for_request(request),
            ..ModelReturnLeg::default()
        }
    }

    /// A translator that reads every frame in full (the unwrapper without
    /// its memo): the reference for fuzzing.
    #[doc(hidden)]
    pub fn unmemoized() -> Self {
        ModelReturnLeg {
            inner: QoderReturnLeg::unmemoized(shimgate_shim_qoder::UsagePolicy::Keep),
            ..ModelReturnLeg::default()
        }
    }

    fn end(&mut self, class: FrameClass) -> FrameClass {
        if matches!(class, FrameClass::End | FrameClass::Error(_)) {
            self.ended = Some(class.clone());
        }
        class
    }

    /// An answer that ended without content after `[EXCEED_QUOTA]`.
    fn quota_failure(&self) -> Option<Failure> {
        let text = self.quota.as_ref().filter(|_| !self.content)?;
        Some(
            Failure::new(
                FailureCode::Quota,
                format!("the model server said {text} and sent no content"),
            )
            .with_upstream_code("EXCEED_QUOTA"),
        )
    }

    /// An error the CLI acts on: after content, carried (and the answer
    /// ends); before, the failure (its frames are never sent).
    fn error(&mut self, event: &SseEvent, failure: Failure, out: &mut BytesMut) -> FrameClass {
        if self.content {
            put_carrier(out, event);
            out.extend_from_slice(DONE_FRAME);
        } else {
            shimgate_shim_qoder::frames::put_failure(out, &failure);
        }
        FrameClass::Error(failure)
    }
}

impl StreamTranslator for ModelReturnLeg {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        if let Some(class) = &self.ended {
            return class.clone();
        }
        let class = match wire::read(event) {
            Frame::Sentinel(kind) => {
                if kind == Sentinel::ExceedQuota && !self.content {
                    let text = String::from_utf8_lossy(event.data.trim_ascii());
                    self.quota = Some(text.chars().take(QUOTED).collect());
                }
                put_carrier(out, event);
                FrameClass::NotContent
            }
            Frame::Error(e) => self.error(event, e.failure, out),
            Frame::Done | Frame::Other => {
                let start = out.len();
                match self.inner.event(event, out) {
                    FrameClass::Content => {
                        self.content = true;
                        FrameClass::Content
                    }
                    FrameClass::End => match self.quota_failure() {
                        Some(f) => FrameClass::Error(f),
                        None => FrameClass::End,
                    },
                    FrameClass::Error(f) if self.content => {
                        // The unwrapper's own error frame (a 200 envelope
                        // whose body is an error): the event as it came.
                        out.truncate(start);
                        self.error(event, f, out)
                    }
                    other => other,
                }
            }
        };
        self.end(class)
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        if let Some(class) = &self.ended {
            return class.clone();
        }
        let inner = self.inner.eof(out);
        // `[EXCEED_QUOTA]` and then the end of the body, with no content:
        // the quota wall, whether or not `[DONE]` came (the model server
        // may end the body right after the sentinel).
        if let Some(f) = self.quota_failure() {
            if inner != FrameClass::End {
                out.extend_from_slice(DONE_FRAME);
            }
            return self.end(FrameClass::Error(f));
        }
        match inner {
            // The unwrapper wrote `[DONE]`: the answer is closed.
            FrameClass::End => self.end(FrameClass::End),
            // Cut: nothing written yet; the chain calls `fail`, which
            // closes the output.
            other => other,
        }
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        if self.ended.is_none() {
            self.inner.fail(failure, out);
            self.ended = Some(FrameClass::Error(failure.clone()));
        }
    }

    fn meter(&self) -> Meter {
        self.inner.meter()
    }
}

/// The proxy's OpenAI SSE to what the CLI reads.
#[derive(Debug, Default)]
pub struct ModelIngress {
    inner: QoderIngress,
    ended: Option<FrameClass>,
}

impl ModelIngress {
    /// A translator for one relayed answer.
    pub fn new() -> Self {
        ModelIngress::default()
    }
}

impl StreamTranslator for ModelIngress {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        if let Some(class) = &self.ended {
            return class.clone();
        }
        let Some(native) = carried(&event.data) else {
            return self.inner.event(event, out);
        };
        write_sse_event(out, &native);
        match wire::read(&native) {
            Frame::Error(e) => {
                let class = FrameClass::Error(e.failure);
                self.ended = Some(class.clone());
                class
            }
            _ => FrameClass::NotContent,
        }
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        match &self.ended {
            Some(class) => class.clone(),
            None => self.inner.eof(out),
        }
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        if self.ended.is_none() {
            self.inner.fail(failure, out);
        }
    }
}

#[cfg(test)]
mod tests;

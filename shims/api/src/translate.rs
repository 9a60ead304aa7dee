//! The per-frame contract between a shim's stream translation and the
//! chain-failover core.
//!
//! The core reads upstream SSE with the zero-copy parser and hands each event
//! to a [`StreamTranslator`], which writes the frames to send on and says what
//! the frame meant. The core holds the written frames back until the first
//! [`FrameClass::Content`], so an attempt that fails before any content can
//! still be retried or switched without the client seeing a byte of it.

use bytes::{Bytes, BytesMut};

use crate::failure::{Failure, FailureCode};
use crate::sse::{SseEvent, SseParser};

/// What one upstream frame means to the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameClass {
    /// Not an answer: role-only deltas, usage, markers, heartbeats, metadata.
    /// Held back (with whatever the translator wrote) until content arrives.
    NotContent,
    /// Answer content (text, reasoning or a tool call): commits the attempt;
    /// from here on the chain never retries or switches.
    Content,
    /// An error carried inside the stream. The translator has already written
    /// its final error frames; before content the chain discards them and
    /// retries or switches, after content it passes them on and stops.
    Error(Failure),
    /// The answer is complete (the translator wrote the end frames). The chain
    /// stops reading: the upstream may keep the connection open after it.
    End,
}

impl FrameClass {
    /// Whether a [`StreamTranslator::eof`] answer says the stream was cut:
    /// a `TRANSPORT` failure with nothing written, which the caller closes
    /// with [`StreamTranslator::fail`]. Any other error at the end is the
    /// upstream's own, already closed by the translator.
    pub fn is_cut(&self) -> bool {
        matches!(self, FrameClass::Error(f) if f.code == FailureCode::Transport)
    }
}

/// What an answer said of its own size, as the translator read it: the
/// usage the upstream reported and how much content went by (a route's
/// output speed and tokens today come from it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meter {
    /// `usage.prompt_tokens` (or the wire's own name for it), when reported.
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, when reported.
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the provider read from its cache
    /// (`usage.prompt_tokens_details.cached_tokens`, or the wire's own
    /// name for it), when reported: the savings ledger shows them.
    pub cached_tokens: Option<u64>,
    /// Characters of answer content (text, reasoning and tool-call deltas,
    /// as their JSON strings or arrays are written), for an upstream that
    /// reports no usage.
    pub content_chars: u64,
    /// Frames the translator could not read and dropped (a qoder envelope
    /// whose `body` is not a chunk): counted per route in `/status`
    /// (`today.unreadableFrames`) and logged, never passed on.
    pub unreadable_frames: u64,
}

/// The characters of UTF-8 text (its bytes that start one).
pub fn chars(utf8: &[u8]) -> u64 {
    utf8.iter().filter(|b| (**b as i8) >= -0x40).count() as u64
}

/// Translates one upstream response, frame by frame. One value per attempt,
/// so state never leaks from a failed attempt into the next.
pub trait StreamTranslator: Send + 'static {
    /// Translates one upstream event, appending whole frames to `out`.
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass;

    /// What [`event`](Self::event) would say of `event`, keeping the same
    /// state, for a caller that passes the upstream's own events on and
    /// needs only their class (a direct answer in the agent's own wire).
    /// The default translates into `scratch` and clears it; a translator
    /// that can tell the class without writing overrides it.
    fn classify(&mut self, event: &SseEvent, scratch: &mut BytesMut) -> FrameClass {
        let class = self.event(event, scratch);
        scratch.clear();
        class
    }

    /// The upstream closed the stream without an end frame. Appends whatever
    /// closes the output and returns [`FrameClass::End`] when the answer is
    /// nevertheless complete; an `Error` whose code is not `TRANSPORT` when
    /// the way it ended is the upstream's own error (the model-server
    /// wire's `[EXCEED_QUOTA]` then the end), its closing frames written
    /// as for an error event.
    ///
    /// The default treats the stream as cut ([`FrameClass::is_cut`]): a
    /// transport failure, with no frame written (the caller then closes
    /// the output with [`fail`](Self::fail)).
    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        let _ = out;
        FrameClass::Error(Failure::new(
            FailureCode::Transport,
            "upstream closed the stream before its end frame",
        ))
    }

    /// Appends the final frames that report `failure` in this translator's
    /// output wire and end the stream (called once, for failures the
    /// translator did not see itself: resets, timeouts, shutdown).
    fn fail(&mut self, failure: &Failure, out: &mut BytesMut);

    /// What the answer said of its size so far. Default: nothing known.
    fn meter(&self) -> Meter {
        Meter::default()
    }
}

/// A boxed translator is a translator (the runtime holds them boxed).
impl<T: StreamTranslator + ?Sized> StreamTranslator for Box<T> {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        (**self).event(event, out)
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        (**self).eof(out)
    }

    fn classify(&mut self, event: &SseEvent, scratch: &mut BytesMut) -> FrameClass {
        (**self).classify(event, scratch)
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        (**self).fail(failure, out)
    }

    fn meter(&self) -> Meter {
        (**self).meter()
    }
}

/// One translator run over a whole stream, offline (a capture, a held
/// error, a test), the way the runtime runs it before content: events
/// until its end or an error frame, then [`StreamTranslator::eof`] when the
/// input ends, and [`StreamTranslator::fail`] for input that does not parse.
pub struct Drive<T> {
    translator: T,
    parser: SseParser,
    out: BytesMut,
    done: bool,
}

impl<T: StreamTranslator> Drive<T> {
    /// A run of `translator`.
    pub fn new(translator: T) -> Self {
        Drive {
            translator,
            parser: SseParser::new(),
            out: BytesMut::new(),
            done: false,
        }
    }

    /// Feeds the next chunk; returns what the translator wrote for it
    /// (nothing once the stream is over).
    pub fn push(&mut self, chunk: Bytes) -> Bytes {
        if !self.done {
            self.parser.push(chunk);
            self.drain();
        }
        self.out.split().freeze()
    }

    /// Whether the translator saw the end (or an error).
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The input ended: the closing frames, if any.
    pub fn finish(mut self) -> Bytes {
        if !self.done {
            match self.translator.eof(&mut self.out) {
                FrameClass::Error(f) if f.code == FailureCode::Transport => {
                    self.translator.fail(&f, &mut self.out);
                }
                _ => {}
            }
        }
        self.out.freeze()
    }

    fn drain(&mut self) {
        loop {
            match self.parser.next_event() {
                Ok(Some(ev)) => match self.translator.event(&ev, &mut self.out) {
                    FrameClass::End | FrameClass::Error(_) => {
                        self.done = true;
                        return;
                    }
                    FrameClass::Content | FrameClass::NotContent => {}
                },
                Ok(None) => return,
                Err(e) => {
                    let f = Failure::new(FailureCode::Server, e.to_string());
                    self.translator.fail(&f, &mut self.out);
                    self.done = true;
                    return;
                }
            }
        }
    }
}

/// Everything `translator` writes for the stream `chunks`.
pub fn translate_all<T: StreamTranslator>(
    translator: T,
    chunks: impl IntoIterator<Item = Bytes>,
) -> Bytes {
    let mut drive = Drive::new(translator);
    let mut out = BytesMut::new();
    for chunk in chunks {
        out.extend_from_slice(&drive.push(chunk));
        if drive.is_done() {
            return out.freeze();
        }
    }
    out.extend_from_slice(&drive.finish());
    out.freeze()
}

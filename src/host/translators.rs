//! Translator adapters the host needs around a shim's own translators:
//! composition (fallback sends the native answer through both legs so the
//! agent gets exactly what the proxy path would give it) and counting (the
//! `returnLeg` figures in `/status`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use shimgate_shim_api::sse::{SseEvent, SseParser};
use shimgate_shim_api::{Failure, FrameClass, StreamTranslator};

/// The return-leg translator followed by the ingress translator. The
/// classification (what the chain acts on) is the return leg's.
pub struct Compose<R, I> {
    ret: R,
    ing: I,
    mid: BytesMut,
    parser: SseParser,
}

impl<R: StreamTranslator, I: StreamTranslator> Compose<R, I> {
    /// Chains `ret` into `ing`.
    pub fn new(ret: R, ing: I) -> Self {
        Compose {
            ret,
            ing,
            mid: BytesMut::new(),
            parser: SseParser::new(),
        }
    }

    fn pump(&mut self, out: &mut BytesMut) {
        if self.mid.is_empty() {
            return;
        }
        self.parser.push(self.mid.split().freeze());
        // The return leg writes well-formed frames, so the parser cannot fail.
        while let Ok(Some(ev)) = self.parser.next_event() {
            self.ing.event(&ev, out);
        }
    }
}

impl<R: StreamTranslator, I: StreamTranslator> StreamTranslator for Compose<R, I> {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        let class = self.ret.event(event, &mut self.mid);
        self.pump(out);
        class
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        let class = self.ret.eof(&mut self.mid);
        self.pump(out);
        class
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        self.ing.fail(failure, out);
    }
}

/// Counters of the ingress rebuild (`/status.<shim>.returnLeg`).
#[derive(Debug, Default)]
pub struct RebuildStats {
    /// OpenAI frames received back from the proxy.
    pub frames_in: AtomicU64,
    /// Frames rebuilt for the agent.
    pub frames_out: AtomicU64,
    /// Frames the rebuild reported as errors, or streams it had to fail.
    pub errors: AtomicU64,
    /// Answers that produced no frame for the agent.
    pub empty: AtomicU64,
}

/// Wraps an ingress translator and counts what passes.
pub struct Counting<T> {
    inner: T,
    stats: Arc<RebuildStats>,
    out_frames: u64,
}

impl<T: StreamTranslator> Counting<T> {
    /// Counts into `stats`.
    pub fn new(inner: T, stats: Arc<RebuildStats>) -> Self {
        Counting {
            inner,
            stats,
            out_frames: 0,
        }
    }

    fn count_out(&mut self, out: &BytesMut, from: usize) {
        let n = memchr::memmem::find_iter(&out[from..], b"\n\n").count() as u64;
        self.out_frames += n;
        self.stats.frames_out.fetch_add(n, Ordering::Relaxed);
    }
}

impl<T: StreamTranslator> StreamTranslator for Counting<T> {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        self.stats.frames_in.fetch_add(1, Ordering::Relaxed);
        let from = out.len();
        let class = self.inner.event(event, out);
        if matches!(class, FrameClass::Error(_)) {
            self.stats.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.count_out(out, from);
        class
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        let from = out.len();
        let class = self.inner.eof(out);
        self.count_out(out, from);
        class
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        self.stats.errors.fetch_add(1, Ordering::Relaxed);
        let from = out.len();
        self.inner.fail(failure, out);
        self.count_out(out, from);
    }
}

impl<T> Drop for Counting<T> {
    fn drop(&mut self) {
        if self.out_frames == 0 {
            self.stats.empty.fetch_add(1, Ordering::Relaxed);
        }
    }
}

//! Translator adapters the host needs around a shim's own translators:
//! native pass-through (a direct answer reaches the agent in its own wire,
//! classified by the return leg) and counting (the `returnLeg` figures in
//! `/status`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::BytesMut;
use shimgate_shim_api::sse::SseEvent;
use shimgate_shim_api::{Failure, FrameClass, StreamTranslator};

/// The upstream's own events, classified by the return-leg translator (its
/// output is only scratch), with failures written by the ingress
/// translator: what an agent that reads the native wire gets when the
/// ingress answers directly, without translating every frame twice.
pub struct Native<R, I> {
    ret: R,
    ing: I,
    scratch: BytesMut,
    /// The last event ID the agent has seen from us.
    last_id: Option<bytes::Bytes>,
}

impl<R: StreamTranslator, I: StreamTranslator> Native<R, I> {
    /// Classifies with `ret`, reports failures with `ing`.
    pub fn new(ret: R, ing: I) -> Self {
        Native {
            ret,
            ing,
            scratch: BytesMut::new(),
            last_id: None,
        }
    }
}

impl<R: StreamTranslator, I: StreamTranslator> StreamTranslator for Native<R, I> {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        let class = self.ret.classify(event, &mut self.scratch);
        // A parsed event carries the last event ID in force; write an `id:`
        // line only where it changed (an empty one where it was reset), so
        // the agent's parser ends up with the same IDs as the upstream's.
        let id = if event.id == self.last_id {
            None
        } else {
            self.last_id.clone_from(&event.id);
            Some(event.id.clone().unwrap_or_default())
        };
        let written = SseEvent {
            id,
            ..event.clone()
        };
        shimgate_shim_api::sse::write_sse_event(out, &written);
        class
    }

    /// The upstream's own events are already written; only the return
    /// leg's verdict on the ending counts.
    fn eof(&mut self, _out: &mut BytesMut) -> FrameClass {
        let class = self.ret.eof(&mut self.scratch);
        self.scratch.clear();
        class
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        self.ing.fail(failure, out);
    }

    /// The return leg's reading: it classified every event.
    fn meter(&self) -> shimgate_shim_api::translate::Meter {
        self.ret.meter()
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
        // A searcher built once, not for every frame.
        static FRAME_END: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\n"));
        let n = FRAME_END.find_iter(&out[from..]).count() as u64;
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

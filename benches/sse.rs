//! How fast the zero-copy SSE parser reads real streams, against the
//! eventsource-stream crate (what most Rust clients use) and a minimal
//! LF-only memchr splitter (the practical ceiling), in the same run.
//!
//! Workloads, both fed as 4 KiB `Bytes` chunks:
//! - `openai_chunks`: 20,000 OpenAI `chat.completion.chunk` frames of about
//!   180 bytes plus `[DONE]` (one `data:` line per event).
//! - `reasoning`: 1,000 `event: reasoning` frames whose data is 40 lines of
//!   about 80 bytes (multi-line data, which our parser joins by copying).
//!
//! Run: `cargo bench --bench sse` (about 40 s). Every implementation must
//! report the same event count and data bytes, checked before measuring.
//!
//! Measured 2026-11-29 on a shared 2-core VM (`nproc` = 2, `lscpu` model
//! "AMD EPYC"), `cargo bench --bench sse`, criterion medians, three runs. The
//! load average was 5-9 from other engineers' builds, so absolute figures
//! swing by a third between runs; read the ratios within one run.
//!
//! | run | workload | ours | eventsource-stream | minimal splitter | ours / es | ours / minimal |
//! |---|---|---|---|---|---|---|
//! | A | openai_chunks | 1.20 GiB/s | 93.9 MiB/s | 1.55 GiB/s | 13.1× | 78 % |
//! | B | openai_chunks | 1.62 GiB/s | 117 MiB/s | 1.97 GiB/s | 14.1× | 82 % |
//! | C | openai_chunks | 1.24 GiB/s | 92.6 MiB/s | 1.59 GiB/s | 13.7× | 78 % |
//! | A | reasoning | 611 MiB/s | 62.8 MiB/s | 541 MiB/s | 9.7× | 113 % |
//! | B | reasoning | 550 MiB/s | 76.9 MiB/s | 638 MiB/s | 7.1× | 86 % |
//! | C | reasoning | 582 MiB/s | 81.3 MiB/s | 693 MiB/s | 7.2× | 84 % |
//!
//! Targets were ours ≥ 25× eventsource-stream and ≥ 40 % of the minimal
//! splitter. The second holds with room (78-113 %). The first does not, and
//! cannot on this machine: the minimal splitter, which does strictly less
//! than any WHATWG parser (LF only, one field, no BOM, CR or limits), is
//! itself only 17-18× eventsource-stream on `openai_chunks`, so 25× would
//! mean beating that ceiling by half again. Profile of ours on
//! `openai_chunks` (perf): ~28 % memchr2 for line ends, ~18 % the refcount
//! bump and drop of the zero-copy slice, the rest line classification and
//! building the event. On `reasoning` every reader copies to join the 40
//! data lines, so all three converge.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_util::stream::{self, Stream};
use shimgate_shim_api::sse::SseParser;

/// The chunk size a TCP read typically hands the proxy.
const CHUNK_BYTES: usize = 4 * 1024;

/// What a run saw: events and total data bytes, so the three implementations
/// can be checked against each other and none can skip work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Tally {
    events: usize,
    data_bytes: usize,
}

impl Tally {
    fn add(&mut self, data: &[u8]) {
        self.events += 1;
        self.data_bytes += data.len();
        black_box(data);
    }
}

/// 20,000 OpenAI-style streaming chunks of ~180 bytes, then `[DONE]`.
fn openai_stream() -> Vec<u8> {
    let words = [
        "The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".",
    ];
    let mut out = Vec::new();
    for i in 0..20_000 {
        let frame = format!(
            "data: {{\"id\":\"chatcmpl-9xQ2kLm7Rt\",\"object\":\"chat.completion.chunk\",\"created\":1732870000,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
            words[i % words.len()]
        );
        out.extend_from_slice(frame.as_bytes());
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

/// 1,000 reasoning events, each 40 data lines of ~80 bytes.
fn reasoning_stream() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..1_000 {
        out.extend_from_slice(b"event: reasoning\n");
        out.extend_from_slice(format!("id: r{i}\n").as_bytes());
        for line in 0..40 {
            out.extend_from_slice(
                format!(
                    "data: step {line:02}: consider the constraint, check the invariant, then refine it.\n"
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"\n");
    }
    out
}

fn chunked(stream: &[u8]) -> Vec<Bytes> {
    let whole = Bytes::copy_from_slice(stream);
    (0..whole.len())
        .step_by(CHUNK_BYTES)
        .map(|at| whole.slice(at..(at + CHUNK_BYTES).min(whole.len())))
        .collect()
}

fn ours(chunks: &[Bytes]) -> Tally {
    let mut tally = Tally::default();
    let mut parser = SseParser::new();
    for chunk in chunks {
        parser.push(chunk.clone());
        while let Some(ev) = parser.next_event().unwrap() {
            tally.add(&ev.data);
        }
    }
    tally
}

/// eventsource-stream over a ready `futures` stream of the same chunks,
/// polled with a no-op waker: every poll is ready, so this is a block_on
/// without an executor's overhead.
fn eventsource_stream(chunks: &[Bytes]) -> Tally {
    let mut tally = Tally::default();
    let input = stream::iter(chunks.iter().cloned().map(Ok::<Bytes, Infallible>));
    let mut events = eventsource_stream::EventStream::new(input);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match Pin::new(&mut events).poll_next(&mut cx) {
            Poll::Ready(Some(ev)) => tally.add(ev.unwrap().data.as_bytes()),
            Poll::Ready(None) => return tally,
            Poll::Pending => unreachable!("an iter stream is always ready"),
        }
    }
}

/// The least a splitter can do: LF-only lines found with memchr, only the
/// `data: ` field, a blank line dispatches; single-line data is one slice of
/// the chunk (one refcount bump), multi-line data is joined (as any correct
/// reader must).
fn minimal(chunks: &[Bytes]) -> Tally {
    let mut tally = Tally::default();
    let mut carry = Vec::new();
    let mut data: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    for chunk in chunks {
        let mut pos = 0;
        while let Some(at) = memchr::memchr(b'\n', &chunk[pos..]) {
            let end = pos + at;
            let value = if carry.is_empty() {
                let line = &chunk[pos..end];
                if line.is_empty() {
                    None
                } else if line.starts_with(b"data: ") {
                    Some(chunk.slice(pos + 6..end))
                } else {
                    pos = end + 1;
                    continue;
                }
            } else {
                carry.extend_from_slice(&chunk[pos..end]);
                let line = Bytes::from(std::mem::take(&mut carry));
                if !line.starts_with(b"data: ") {
                    pos = end + 1;
                    continue;
                }
                Some(line.slice(6..))
            };
            pos = end + 1;
            let Some(value) = value else {
                if let Some(j) = joined.take() {
                    tally.add(&j);
                } else if let Some(d) = data.take() {
                    tally.add(&d);
                }
                continue;
            };
            match (&mut joined, data.take()) {
                (Some(j), _) => {
                    j.extend_from_slice(b"\n");
                    j.extend_from_slice(&value);
                }
                (None, Some(first)) => {
                    let mut j = BytesMut::with_capacity(first.len() * 4);
                    j.extend_from_slice(&first);
                    j.extend_from_slice(b"\n");
                    j.extend_from_slice(&value);
                    joined = Some(j);
                }
                (None, None) => data = Some(value),
            }
        }
        carry.extend_from_slice(&chunk[pos..]);
    }
    tally
}

fn bench_workload(c: &mut Criterion, name: &str, stream: &[u8]) {
    let chunks = chunked(stream);
    let want = ours(&chunks);
    assert!(want.events > 0);
    assert_eq!(
        eventsource_stream(&chunks),
        want,
        "eventsource-stream disagrees"
    );
    assert_eq!(minimal(&chunks), want, "minimal splitter disagrees");

    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("ours", |b| b.iter(|| ours(black_box(&chunks))));
    group.bench_function("eventsource_stream", |b| {
        b.iter(|| eventsource_stream(black_box(&chunks)))
    });
    group.bench_function("minimal_splitter", |b| {
        b.iter(|| minimal(black_box(&chunks)))
    });
    group.finish();
}

fn sse(c: &mut Criterion) {
    bench_workload(c, "openai_chunks", &openai_stream());
    bench_workload(c, "reasoning", &reasoning_stream());
}

criterion_group! {
    name = benches;
    // Short runs: the bench machine has 2 cores shared with other work.
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = sse
}
criterion_main!(benches);

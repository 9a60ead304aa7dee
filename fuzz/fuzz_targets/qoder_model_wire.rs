//! Fuzz target: qoder's model-server wire (the reading of sentinels and
//! envelopes, the return leg, the ingress) never panics, always closes its
//! output well, and loses no event the Qoder CLI acts on.
//!
//! Invariant: for any bytes, split into chunks whose sizes come from the
//! first input byte, driving `SseParser` → `ModelReturnLeg` events (until
//! `End` or `Error`) → at EOF `eof()`, then `fail()` when that was not
//! `End`, gives whole frames, each exactly one `data: …` line ended by a
//! blank line, with exactly one `[DONE]`, the last event (what a
//! compression proxy reads). Every event the return leg carried in an
//! `x_qoder` chunk is one the upstream sent (its type and data, after lossy
//! UTF-8 decoding), in order, and the ingress, fed the return leg's
//! output, writes each of them back in that order. And the unwrapper's
//! memo changes nothing: the return leg writes exactly what its unmemoized
//! reference writes.
//!
//! Run (from the repository root; stable needs `-s none`, and
//! `cargo install cargo-fuzz --locked` if it is missing):
//!
//! ```text
//! cargo fuzz run -s none qoder_model_wire fuzz/seeds/qoder_model_wire -- \
//!     -dict=fuzz/dict/qoder_model_wire.dict -max_total_time=60
//! ```
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use shimgate_shim_api::sse::{parse_all, SseEvent, SseParser};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};
use shimgate_shim_qoder_model::{ext, wire, ModelIngress, ModelReturnLeg};

/// Chunk sizes 1..=64 from a small LCG seeded by the first byte, so one
/// input byte picks a whole chunking pattern (0: one chunk).
fn chunks(seed: u8, body: &[u8]) -> Vec<Bytes> {
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = if seed == 0 {
            rest.len()
        } else {
            1 + (state >> 16) as usize % 64
        };
        let (head, tail) = rest.split_at(size.min(rest.len()));
        out.push(Bytes::copy_from_slice(head));
        rest = tail;
    }
    out
}

/// Runs `translator` as the chain does; also returns the events it read.
fn drive(mut translator: impl StreamTranslator, chunks: &[Bytes]) -> (BytesMut, Vec<SseEvent>) {
    let mut parser = SseParser::new();
    let mut out = BytesMut::new();
    let mut seen = Vec::new();
    for chunk in chunks {
        parser.push(chunk.clone());
        loop {
            match parser.next_event() {
                Ok(Some(event)) => {
                    let _ = wire::read(&event);
                    let class = translator.event(&event, &mut out);
                    seen.push(event);
                    if matches!(class, FrameClass::End | FrameClass::Error(_)) {
                        return (out, seen);
                    }
                }
                Ok(None) => break,
                Err(err) => {
                    let failure = Failure::new(FailureCode::Transport, err.to_string());
                    translator.fail(&failure, &mut out);
                    return (out, seen);
                }
            }
        }
    }
    if translator.eof(&mut out) != FrameClass::End {
        translator.fail(&Failure::new(FailureCode::Transport, "cut"), &mut out);
    }
    (out, seen)
}

fn assert_closed(out: &[u8]) {
    assert!(out.ends_with(b"\n\n"), "unterminated output");
    let lines: Vec<&[u8]> = out[..out.len() - 1].split(|&b| b == b'\n').collect();
    assert!(
        lines.len().is_multiple_of(2),
        "a frame with more than one line"
    );
    for frame in lines.chunks(2) {
        let line = String::from_utf8_lossy(frame[0]);
        assert!(frame[0].starts_with(b"data: "), "not a data line: {line:?}");
        assert!(!frame[0].contains(&b'\r'), "CR inside a frame: {line:?}");
        assert!(frame[1].is_empty(), "two lines in one frame: {line:?}");
    }
    let events = parse_all(out).unwrap();
    let done = events.iter().filter(|e| &e.data[..] == b"[DONE]").count();
    assert_eq!(done, 1, "[DONE] count");
    assert_eq!(
        &events.last().unwrap().data[..],
        b"[DONE]",
        "[DONE] not last"
    );
    assert!(events.iter().all(|e| e.event.is_none()));
}

/// An event as text: its type and data, lossily decoded.
fn text(e: &SseEvent) -> (Option<String>, String) {
    let lossy = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    (e.event.as_ref().map(lossy), lossy(&e.data))
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let chunks = chunks(seed, body);
    let (out, input) = drive(ModelReturnLeg::default(), &chunks);
    assert_closed(&out);
    let (reference, _) = drive(ModelReturnLeg::unmemoized(), &chunks);
    assert_eq!(out, reference, "memo against the full reading");
    let carried: Vec<SseEvent> = parse_all(&out)
        .unwrap()
        .iter()
        .filter_map(|f| ext::carried(&f.data))
        .collect();
    // Each carried event is an input event, in order.
    let mut sent = input.iter().map(text);
    for c in &carried {
        let want = text(c);
        assert!(
            sent.any(|s| s == want),
            "carried an event the upstream did not send: {want:?}"
        );
    }
    // The ingress writes each back, in order.
    let (back, _) = drive(ModelIngress::new(), &[out.freeze()]);
    let written: Vec<_> = parse_all(&back).unwrap().iter().map(text).collect();
    let mut rest = written.iter();
    for c in &carried {
        let want = text(c);
        assert!(rest.any(|w| *w == want), "the ingress lost {want:?}");
    }
});

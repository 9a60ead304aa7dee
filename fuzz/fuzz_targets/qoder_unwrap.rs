//! Fuzz target: the qoder stream translators never panic and always close
//! their output well, whatever the upstream sends and however it is cut.
//!
//! Invariant: for any bytes, split into chunks whose sizes come from the
//! first input byte, driving `SseParser` → translator events (until `End`
//! or `Error`) → at EOF `eof()`, then `fail()` when that was not `End`,
//! gives output made of whole frames, each exactly one `data: …` line ended
//! by a blank line, with exactly one `[DONE]`, the last event. Checked for
//! the return leg (`QoderReturnLeg`, with and without usage) and the ingress.
//! And the memo of repeated bytes changes nothing: each translator writes
//! exactly what its unmemoized reference (every frame read in full) writes.
//!
//! Run (from the repository root; stable needs `-s none`, and
//! `cargo install cargo-fuzz --locked` if it is missing):
//!
//! ```text
//! cargo fuzz run -s none qoder_unwrap fuzz/seeds/qoder_unwrap
//! ```
//!
//! To keep new inputs out of the committed seeds, put a scratch corpus
//! first: `cargo fuzz run -s none qoder_unwrap fuzz/corpus/qoder_unwrap
//! fuzz/seeds/qoder_unwrap -- -dict=fuzz/dict/qoder_unwrap.dict
//! -max_total_time=60`.
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use shimgate_shim_api::sse::{parse_all, SseParser};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};
use shimgate_shim_qoder::{QoderIngress, QoderReturnLeg, UsagePolicy};

/// Chunk sizes 1..=64 from a small LCG seeded by the first byte, so one
/// input byte picks a whole chunking pattern.
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

fn drive(mut translator: impl StreamTranslator, chunks: &[Bytes]) -> BytesMut {
    let mut parser = SseParser::new();
    let mut out = BytesMut::new();
    for chunk in chunks {
        parser.push(chunk.clone());
        loop {
            match parser.next_event() {
                Ok(Some(event)) => match translator.event(&event, &mut out) {
                    FrameClass::End | FrameClass::Error(_) => return out,
                    FrameClass::Content | FrameClass::NotContent => {}
                },
                Ok(None) => break,
                Err(err) => {
                    // The parser refused the stream: the chain reports it.
                    let failure = Failure::new(FailureCode::Transport, err.to_string());
                    translator.fail(&failure, &mut out);
                    return out;
                }
            }
        }
    }
    if translator.eof(&mut out) != FrameClass::End {
        let failure = Failure::new(FailureCode::Transport, "cut");
        translator.fail(&failure, &mut out);
    }
    out
}

fn assert_closed(out: &[u8]) {
    assert!(out.ends_with(b"\n\n"), "unterminated output");
    // Without its last LF the output alternates `data: …` and empty lines.
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
    assert!(events
        .iter()
        .all(|e| e.event.is_none() && !e.data.contains(&b'\n')));
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let chunks = chunks(seed, body);
    let no_usage = json!({"stream_options": {"include_usage": false}});
    let keep = drive(QoderReturnLeg::default(), &chunks);
    assert_closed(&keep);
    let drop = drive(QoderReturnLeg::for_request(&no_usage), &chunks);
    assert_closed(&drop);
    let ingress = drive(QoderIngress::new(), &chunks);
    assert_closed(&ingress);
    let reference = |usage| drive(QoderReturnLeg::unmemoized(usage), &chunks);
    assert_eq!(
        keep,
        reference(UsagePolicy::Keep),
        "memo against the full reading"
    );
    assert_eq!(
        drop,
        reference(UsagePolicy::DropUsageOnly),
        "memo, no usage"
    );
    assert_eq!(
        ingress,
        drive(QoderIngress::unmemoized(), &chunks),
        "memo, ingress"
    );
});

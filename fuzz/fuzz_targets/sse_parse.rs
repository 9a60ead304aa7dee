//! Invariant: any bytes, cut into any chunks, read by our SSE parser never
//! panic and give exactly what the same bytes in one chunk give (events,
//! limit error, unterminated tail, last event ID); and, when no limit trips,
//! the same events and last event ID as the `sse-parse` crate (the reference
//! WHATWG implementation, fed the same chunks).
//!
//! The first input byte picks the chunking (low 3 bits: a fixed size 1-7, or
//! 7 = a cycling pattern of sizes) and, with its top bit set, a small size
//! limit (8-71 bytes) so the limit paths are fuzzed too; the rest is the
//! stream.
//!
//! Normalisation against the reference, all allowed by the spec: our parser
//! hands out raw bytes and the reference decodes each field with U+FFFD
//! replacement, so both sides are compared after `from_utf8_lossy` (this is
//! exact: LF, which joins data lines, always ends an invalid sequence); our
//! `None` event type is the spec's "message" and our `None` id the empty
//! string. Nothing else is normalised.
//!
//! Run (stable toolchain; `cargo install cargo-fuzz --locked` if missing), from
//! the repository root:
//! `cargo fuzz run -s none sse_parse fuzz/corpus/sse_parse fuzz/seeds/sse_parse -- -dict=fuzz/dict/sse.dict -max_total_time=60`
//! (libFuzzer adds what it finds to the first directory, so the committed
//! seeds stay clean).

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use shimgate_shim_api::sse::{
    IncompleteEvent, SseError, SseEvent, SseParser, DEFAULT_MAX_EVENT_BYTES,
};

/// Sizes cycled through by the pattern chunking: mixes 1-byte cuts (which
/// split CRLF, BOM and UTF-8) with longer ones.
const PATTERN: [usize; 8] = [1, 3, 2, 7, 1, 1, 5, 4];

/// Everything a caller of our parser can observe from one stream.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<SseEvent>,
    error: Option<SseError>,
    incomplete: Option<IncompleteEvent>,
    last_id: Bytes,
}

fn chunks(mode: u8, stream: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = stream;
    let mut i = usize::from(mode >> 3);
    while !rest.is_empty() {
        let size = match mode & 7 {
            7 => PATTERN[i % PATTERN.len()],
            n => usize::from(n) + 1,
        };
        i += 1;
        let (head, tail) = rest.split_at(size.min(rest.len()));
        out.push(head);
        rest = tail;
    }
    out
}

fn ours(limit: usize, chunks: &[&[u8]]) -> Outcome {
    let mut parser = SseParser::with_limit(limit);
    let mut events = Vec::new();
    for chunk in chunks {
        parser.push(Bytes::copy_from_slice(chunk));
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => events.push(ev),
                Ok(None) => break,
                Err(err) => {
                    return Outcome {
                        events,
                        error: Some(err),
                        incomplete: None,
                        last_id: parser.last_event_id().clone(),
                    }
                }
            }
        }
    }
    let incomplete = parser.finish();
    Outcome {
        events,
        error: None,
        incomplete,
        last_id: parser.last_event_id().clone(),
    }
}

/// An event as text with the spec's defaults: (type, data, id, retry ms).
type Text = (String, String, String, Option<u64>);

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn as_text(ev: &SseEvent) -> Text {
    (
        ev.event
            .as_deref()
            .map_or_else(|| "message".to_owned(), lossy),
        lossy(&ev.data),
        ev.id.as_deref().map(lossy).unwrap_or_default(),
        ev.retry,
    )
}

fn reference(chunks: &[&[u8]]) -> (Vec<Text>, String) {
    let mut parser = sse_parse::SseParser::new();
    let mut events = Vec::new();
    for chunk in chunks {
        parser.feed(chunk);
        while let Some(ev) = parser.next_event() {
            let retry = ev.retry.map(|d| u64::try_from(d.as_millis()).unwrap());
            events.push((ev.event, ev.data, ev.id, retry));
        }
    }
    parser.finish();
    while let Some(ev) = parser.next_event() {
        let retry = ev.retry.map(|d| u64::try_from(d.as_millis()).unwrap());
        events.push((ev.event, ev.data, ev.id, retry));
    }
    (events, parser.last_event_id().to_owned())
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, stream)) = input.split_first() else {
        return;
    };
    let limit = if mode & 0x80 != 0 {
        8 + usize::from(mode & 0x3f)
    } else {
        DEFAULT_MAX_EVENT_BYTES
    };
    let cut = chunks(mode, stream);

    let whole = ours(limit, &[stream]);
    let chunked = ours(limit, &cut);
    assert_eq!(chunked, whole, "the result depends on the chunking");

    if whole.error.is_none() {
        let (want, want_last_id) = reference(&cut);
        let got: Vec<Text> = whole.events.iter().map(as_text).collect();
        assert_eq!(got, want, "events differ from sse-parse");
        assert_eq!(
            lossy(&whole.last_id),
            want_last_id,
            "last event id differs from sse-parse"
        );
    }
});

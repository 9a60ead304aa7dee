//! Invariant: any bytes, cut into any chunks, read by the SSE parser and the
//! trae return leg (then `eof`, and `fail` when the stream was cut, as the
//! chain does) never panic and give well-formed OpenAI SSE: every frame one
//! `data:` line holding a JSON object, frames ended by a blank line, exactly
//! one `data: [DONE]`, last. The output does not depend on the chunking, and
//! the ingress reads it back without panicking. The memo of repeated bytes
//! changes nothing: both legs write what their unmemoized references (every
//! frame read in full) write.
//!
//! Run (stable toolchain; `cargo install cargo-fuzz --locked` if missing):
//! `cargo fuzz run -s none trae_convert fuzz/seeds/trae_convert -- -dict=fuzz/dict/trae_convert.dict -max_total_time=60`
//! (libFuzzer adds what it finds to the first directory: put a scratch
//! directory before the seeds to keep them clean).

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use shimgate_testkit::check_openai;
use shimgate_testkit::trae::{convert, convert_unmemoized, pieces, rebuild, rebuild_unmemoized};

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunking; the rest is the upstream stream.
    let Some((&cut, solo)) = data.split_first() else {
        return;
    };
    let whole = convert(pieces(solo, solo.len().max(1)));
    if let Err(why) = check_openai(&whole) {
        panic!("{why}\n{}", String::from_utf8_lossy(&whole));
    }
    let chunked = convert(pieces(solo, usize::from(cut % 17) + 1));
    assert_eq!(chunked, whole, "the output depends on the chunking");
    let reference = convert_unmemoized(pieces(solo, usize::from(cut % 17) + 1));
    assert_eq!(chunked, reference, "memo against the full reading");
    let rebuilt = rebuild(pieces(&whole, usize::from(cut % 5) + 1));
    let rebuilt_in_full = rebuild_unmemoized(pieces(&whole, usize::from(cut % 5) + 1));
    assert_eq!(
        rebuilt, rebuilt_in_full,
        "ingress memo against the full reading"
    );
});

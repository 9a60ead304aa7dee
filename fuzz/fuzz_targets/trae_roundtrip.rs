//! Invariant: a SOLO event sequence generated from the fuzz bytes (text,
//! reasoning and tool-call fragments, usage, done, error, bookkeeping and
//! unknown events, ids, retry, CRLF, bare `[DONE]`; see
//! `shimgate_testkit::trae::generate`) reaches the agent with the same
//! meaning after SOLO → OpenAI → SOLO, straight, through the
//! billion-context simulation and through a byte-by-byte pass-through proxy
//! (`trae::compare`: same text, reasoning, tool calls, usage, events and
//! ids, end; a cut stream becomes a `TRANSPORT` error).
//!
//! Run (stable toolchain; `cargo install cargo-fuzz --locked` if missing):
//! `cargo fuzz run -s none trae_roundtrip fuzz/seeds/trae_roundtrip -- -max_total_time=60`
//! (libFuzzer adds what it finds to the first directory: put a scratch
//! directory before the seeds to keep them clean).

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use shimgate_testkit::trae::{compare, digest, generate, round_trip, PROXIES};

fuzz_target!(|data: &[u8]| {
    let solo = generate(data);
    let upstream = digest(&solo);
    for proxy in PROXIES {
        let agent = round_trip(&solo, proxy);
        if let Err(why) = compare(&upstream, &digest(&agent), proxy) {
            panic!(
                "through {proxy:?}: {why}\n--- upstream ---\n{}\n--- agent ---\n{}",
                String::from_utf8_lossy(&solo),
                String::from_utf8_lossy(&agent)
            );
        }
    }
});

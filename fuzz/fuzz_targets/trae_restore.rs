//! Invariant: for a SOLO body the written fold takes and any proxy body a
//! strict reading accepts (`OpenAiBody::parse`, as the return leg checks
//! it), the written restore the return leg runs (`TraeShim::restore`,
//! which reads the proxy's body member by member) writes exactly the bytes,
//! or gives exactly the refusal, of the same restore reading the body
//! parsed (`restore::restore_written`), and never parses the body whole
//! unless a top-level key holds an escape. The fuzz bytes are the SOLO
//! body, a NUL, then the proxy's body; without a NUL the proxy's body is
//! the fold's own, compact, pretty and with its keys reversed.
//!
//! Run (stable toolchain), from the repository root:
//! `cargo fuzz run -s none trae_restore fuzz/corpus/trae_restore fuzz/seeds/trae_restore -- -dict=fuzz/dict/trae_restore.dict -max_total_time=60`

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use shimgate_shim_api::{OpenAiBody, Shim};
use shimgate_shim_trae::{restore, TraeOriginal, TraeShim};
use shimgate_testkit::keys_reversed;

fn check(original: &TraeOriginal, proxy: &[u8]) {
    let TraeOriginal::Written { text, kept } = original else {
        return;
    };
    let Ok(body) = OpenAiBody::parse(proxy.to_vec()) else {
        return;
    };
    let got = TraeShim.restore(original, &body);
    let escaped = body.member("messages").is_err();
    assert!(escaped || body.parsed().is_none(), "parsed whole");
    let parsed: Value = serde_json::from_slice(proxy).unwrap();
    let want = restore::restore_written(text, kept, &parsed);
    if got != want {
        panic!(
            "the restores differ for\n{}\n--- by members ---\n{:?}\n--- parsed ---\n{:?}",
            String::from_utf8_lossy(proxy),
            got.map(|b| String::from_utf8_lossy(&b).into_owned()),
            want.map(|b| String::from_utf8_lossy(&b).into_owned()),
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let (native, proxy) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], Some(&data[at + 1..])),
        None => (data, None),
    };
    let Ok(folded) = TraeShim.fold(native) else {
        return;
    };
    assert_eq!(
        TraeShim.restore_reads_whole(&folded.original),
        matches!(folded.original, TraeOriginal::Parsed(_)),
        "only a parsed original is restored from the whole parse"
    );
    match proxy {
        Some(proxy) => check(&folded.original, proxy),
        None => {
            let openai = folded.openai.value();
            check(&folded.original, folded.openai.as_bytes());
            check(
                &folded.original,
                &serde_json::to_vec_pretty(openai).unwrap(),
            );
            check(
                &folded.original,
                &serde_json::to_vec(&keys_reversed(openai)).unwrap(),
            );
        }
    }
});

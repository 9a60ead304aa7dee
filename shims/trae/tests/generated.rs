//! The stable stand-in for the `trae_roundtrip` fuzz target: generated SOLO
//! streams survive SOLO → OpenAI → SOLO in every proxy situation, and any
//! bytes at all convert to well-formed OpenAI frames.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shimgate_testkit::check_openai;
use shimgate_testkit::trae::{
    compare, convert, digest, generate, pieces, rebuild, round_trip, PROXIES,
};

#[test]
fn generated_streams_round_trip_in_every_proxy_situation() {
    let mut rng = fastrand::Rng::with_seed(0x7ae);
    for case in 0..1000 {
        let len = rng.usize(0..64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        let solo = generate(&bytes);
        let upstream = digest(&solo);
        for proxy in PROXIES {
            let agent = round_trip(&solo, proxy);
            if let Err(why) = compare(&upstream, &digest(&agent), proxy) {
                panic!(
                    "case {case} {bytes:?} through {proxy:?}: {why}\n--- upstream ---\n{}\n--- agent ---\n{}",
                    String::from_utf8_lossy(&solo),
                    String::from_utf8_lossy(&agent)
                );
            }
        }
    }
}

#[test]
fn random_bytes_convert_to_well_formed_frames_in_any_chunking() {
    let mut rng = fastrand::Rng::with_seed(0xc0ffee);
    let words: [&[u8]; 10] = [
        b"event:output\n",
        b"event:done\n",
        b"event:error\n",
        b"data:{\"response\":\"x\"}\n",
        b"data:{\"code\":4008}\n",
        b"data: [DONE]\n",
        b"\n",
        b"\r\n",
        b"id:1\n",
        b"data:{\"tool_calls\":{\"function_call\":{\"name\":\"f\"}}}\n",
    ];
    for _ in 0..1500 {
        let mut bytes = Vec::new();
        for _ in 0..rng.usize(0..12) {
            if rng.bool() {
                bytes.extend_from_slice(words[rng.usize(..words.len())]);
            } else {
                bytes.push(rng.u8(..));
            }
        }
        let whole = convert(pieces(&bytes, bytes.len().max(1)));
        check_openai(&whole).unwrap_or_else(|e| panic!("{bytes:?}: {e}"));
        assert_eq!(convert(pieces(&bytes, rng.usize(1..5))), whole, "{bytes:?}");
        let _ = rebuild(pieces(&whole, rng.usize(1..64)));
    }
}

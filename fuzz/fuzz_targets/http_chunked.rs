//! Invariant: the chunked-body decoder of shimgate's upstream client
//! (`src/http/client/chunked.rs`, compiled here as it is) never panics and
//! never gives out more bytes than it was fed; any bytes cut into any
//! pieces decode to exactly what the same bytes in one piece give (the
//! data, the end or the error, the bytes left after the end); and a body
//! written by a chunked encoder (any chunk sizes, extensions, trailers,
//! bytes after the end) decodes to its data and its end, with the bytes
//! after the end left as they were.
//!
//! The first input byte picks the cutting (low 3 bits: a fixed size 1-7,
//! or 7 = a cycling pattern of sizes); with its top bit set the rest is
//! taken as a body to encode (a length byte, then that many data bytes,
//! and so on), else as the raw stream.
//!
//! Run (stable toolchain), from the repository root:
//! `cargo fuzz run -s none http_chunked ~/.cache/shimgate/fuzz-corpus/http_chunked fuzz/seeds/http_chunked -- -dict=fuzz/dict/http_chunked.dict -max_total_time=60`

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../src/http/client/chunked.rs"]
#[allow(dead_code)]
mod chunked;

use chunked::ChunkedDecoder;
use libfuzzer_sys::fuzz_target;

const PATTERN: [usize; 8] = [1, 3, 2, 7, 1, 1, 5, 4];

/// What decoding a stream gave: its data, and how it stopped (`Some(rest)`
/// at the end, with the bytes after it; `None` still wanting more), or the
/// error's text.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    data: Vec<u8>,
    stop: Result<Option<Vec<u8>>, String>,
}

fn decode(stream: &[u8], cut: u8) -> Outcome {
    let mut decoder = ChunkedDecoder::new();
    let mut data = Vec::new();
    let mut at = 0;
    let mut turn = 0;
    while at < stream.len() {
        let size = match cut & 7 {
            0 => stream.len(),
            7 => PATTERN[turn % PATTERN.len()],
            n => n as usize,
        };
        turn += 1;
        let end = (at + size).min(stream.len());
        let piece = &stream[at..end];
        let used = match decoder.decode(piece, |d| {
            assert!(!d.is_empty(), "an empty data piece");
            data.extend_from_slice(d);
        }) {
            Ok(used) => used,
            Err(e) => {
                return Outcome {
                    data,
                    stop: Err(e.to_string()),
                }
            }
        };
        assert!(used <= piece.len());
        at += used;
        if decoder.is_done() {
            return Outcome {
                data,
                stop: Ok(Some(stream[at..].to_vec())),
            };
        }
        assert_eq!(used, piece.len(), "a piece not taken whole before the end");
    }
    Outcome {
        data,
        stop: Ok(None),
    }
}

/// A chunked body of the pieces `spec` names, with extensions, trailers
/// and a tail after the end chosen from its bytes; the data and the tail.
fn encode(spec: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut body = Vec::new();
    let mut data = Vec::new();
    let mut rest = spec;
    let mut n = 0usize;
    while let Some((&len, tail)) = rest.split_first() {
        let len = (len as usize % 64) + 1;
        let take = len.min(tail.len());
        if take == 0 {
            break;
        }
        let piece = &tail[..take];
        rest = &tail[take..];
        let size = if n.is_multiple_of(2) {
            format!("{take:x}")
        } else {
            format!("{take:X}")
        };
        body.extend_from_slice(size.as_bytes());
        match n % 4 {
            1 => body.extend_from_slice(b";ext=1"),
            2 => body.extend_from_slice(b" \t;a=\"b c\""),
            _ => {}
        }
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(piece);
        body.extend_from_slice(b"\r\n");
        data.extend_from_slice(piece);
        n += 1;
    }
    body.extend_from_slice(b"0\r\n");
    if n % 2 == 1 {
        body.extend_from_slice(b"x-trailer: yes\r\n");
    }
    body.extend_from_slice(b"\r\n");
    let after = rest.to_vec();
    body.extend_from_slice(&after);
    (body, data, after)
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, rest)) = input.split_first() else {
        return;
    };
    if mode & 0x80 != 0 {
        let (body, data, after) = encode(rest);
        let out = decode(&body, mode);
        assert_eq!(out.data, data, "the data of an encoded body");
        assert_eq!(out.stop, Ok(Some(after)), "the end of an encoded body");
        return;
    }
    let whole = decode(rest, 0); // 0: the whole stream in one piece
    assert!(whole.data.len() <= rest.len());
    let cut = decode(rest, mode);
    assert_eq!(cut, whole, "cut {mode:#x}");
});

//! Invariant: events written with the SSE writer and read back by the parser
//! (in any chunking) are exactly the events written, after the writer's
//! documented normalisation: CR and LF are dropped from `event`, CR, LF
//! and NUL from `id`; CR and CRLF in data become LF (data is split into one `data:` line
//! per line); an empty `event` reads back as the default type; an event
//! written without an id carries the last id written before it (the spec's
//! last event ID); `write_event` and `write_data` carry no retry. The stream
//! ends with no unterminated event.
//!
//! Input format (so seeds can be written by hand): byte 0 picks the chunk
//! size for reading back (`b % 9`, 0 = one chunk); then events separated by
//! 0xFF. Each event is a flags byte (bit 0: has event, 1: has id, 2: has
//! retry, 3: written with `write_event`, 4: written with `write_data`)
//! followed by up to four fields separated by 0xFE: event, id, retry (up to 8
//! bytes, little-endian u64), data. 0xFD escapes the next byte, so every byte
//! value can appear in a field.
//!
//! Run (stable toolchain; `cargo install cargo-fuzz --locked` if missing), from
//! the repository root:
//! `cargo fuzz run -s none sse_roundtrip fuzz/corpus/sse_roundtrip fuzz/seeds/sse_roundtrip -- -dict=fuzz/dict/sse.dict -max_total_time=60`

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use shimgate_shim_api::sse::{write_data, write_event, write_sse_event, SseEvent, SseParser};

const EVENT_SEP: u8 = 0xFF;
const FIELD_SEP: u8 = 0xFE;
const ESCAPE: u8 = 0xFD;

/// One event as the input describes it.
#[derive(Debug, Default)]
struct Spec {
    flags: u8,
    fields: [Vec<u8>; 4],
}

/// Splits the input into event specs, honouring the escape byte.
fn specs(input: &[u8]) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut cur: Option<Spec> = None;
    let mut field = 0;
    let mut bytes = input.iter().copied();
    while let Some(b) = bytes.next() {
        let spec = match &mut cur {
            Some(spec) => spec,
            None => {
                // The first byte of an event is its flags.
                cur = Some(Spec {
                    flags: b,
                    ..Spec::default()
                });
                field = 0;
                continue;
            }
        };
        match b {
            EVENT_SEP => out.extend(cur.take()),
            FIELD_SEP => field = (field + 1).min(3),
            ESCAPE => spec.fields[field].extend(bytes.next()),
            _ => spec.fields[field].push(b),
        }
    }
    out.extend(cur);
    out
}

/// What the writer promises to keep of an `event` value.
fn sanitised_event(field: &[u8]) -> Vec<u8> {
    field
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n'))
        .collect()
}

/// What the writer promises to keep of an `id` value.
fn sanitised_id(field: &[u8]) -> Vec<u8> {
    field
        .iter()
        .copied()
        .filter(|b| !matches!(b, b'\r' | b'\n' | 0))
        .collect()
}

/// Data as a reader sees it: CRLF and lone CR become LF.
fn data_read_back(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        if data[i] == b'\r' {
            out.push(b'\n');
            i += if data.get(i + 1) == Some(&b'\n') {
                2
            } else {
                1
            };
        } else {
            out.push(data[i]);
            i += 1;
        }
    }
    out
}

fn retry_ms(field: &[u8]) -> u64 {
    let mut le = [0u8; 8];
    let n = field.len().min(8);
    le[..n].copy_from_slice(&field[..n]);
    u64::from_le_bytes(le)
}

fuzz_target!(|input: &[u8]| {
    let Some((&cut, rest)) = input.split_first() else {
        return;
    };

    let mut wire = BytesMut::new();
    let mut expected = Vec::new();
    let mut last_id: Vec<u8> = Vec::new();
    for spec in specs(rest) {
        let [event, id, retry, data] = &spec.fields;
        let event = (spec.flags & 1 != 0).then_some(&event[..]);
        let id = (spec.flags & 2 != 0).then_some(&id[..]);
        let retry = (spec.flags & 4 != 0).then(|| retry_ms(retry));
        let (event, id, retry) = if spec.flags & 16 != 0 {
            write_data(&mut wire, data);
            (None, None, None)
        } else if spec.flags & 8 != 0 {
            write_event(&mut wire, event, id, data);
            (event, id, None)
        } else {
            let ev = SseEvent {
                event: event.map(Bytes::copy_from_slice),
                data: Bytes::copy_from_slice(data),
                id: id.map(Bytes::copy_from_slice),
                retry,
            };
            write_sse_event(&mut wire, &ev);
            (event, id, retry)
        };
        if let Some(id) = id {
            last_id = sanitised_id(id);
        }
        expected.push(SseEvent {
            event: event
                .map(sanitised_event)
                .filter(|e| !e.is_empty())
                .map(Bytes::from),
            data: Bytes::from(data_read_back(data)),
            id: (!last_id.is_empty()).then(|| Bytes::from(last_id.clone())),
            retry,
        });
    }

    let wire = wire.freeze();
    let size = match usize::from(cut % 9) {
        0 => wire.len().max(1),
        n => n,
    };
    let mut parser = SseParser::new();
    let mut got = Vec::new();
    for at in (0..wire.len()).step_by(size) {
        parser.push(wire.slice(at..(at + size).min(wire.len())));
        while let Some(ev) = parser.next_event().unwrap() {
            got.push(ev);
        }
    }
    assert_eq!(got, expected, "wire: {:?}", wire);
    assert_eq!(parser.finish(), None, "the writer left an event open");
    assert_eq!(&parser.last_event_id()[..], &last_id[..]);
});

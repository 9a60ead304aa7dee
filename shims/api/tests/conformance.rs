//! Runs the 36 WHATWG conformance vectors shipped with the `sse-parse` crate
//! (copied beside this file with its MIT notice) against our parser, each fed
//! with its declared chunking, byte by byte, and as one chunk.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use serde_json::Value;
use shimgate_shim_api::sse::{SseEvent, SseParser};

const VECTORS: &str = include_str!("conformance-vectors.json");

/// An event as the vectors state it: lossily decoded text, the spec's
/// defaults applied ("message" type, empty id).
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    event: String,
    data: String,
    id: String,
    retry: Option<u64>,
}

impl Expected {
    fn from_json(v: &Value) -> Self {
        Expected {
            event: v["event"].as_str().unwrap().to_owned(),
            data: v["data"].as_str().unwrap().to_owned(),
            id: v["id"].as_str().unwrap().to_owned(),
            retry: v["retry"].as_u64(),
        }
    }

    fn from_event(ev: &SseEvent) -> Self {
        Expected {
            event: ev
                .event
                .as_ref()
                .map_or_else(|| "message".to_owned(), |e| lossy(e)),
            data: lossy(&ev.data),
            id: ev.id.as_ref().map(|i| lossy(i)).unwrap_or_default(),
            retry: ev.retry,
        }
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The vector's input as its declared chunks.
fn chunks(vector: &Value) -> Vec<Vec<u8>> {
    if let Some(gen) = vector.get("generator") {
        let stream: Vec<u8> = match gen["kind"].as_str().unwrap() {
            "repeat_stream" => gen["unit_text"]
                .as_str()
                .unwrap()
                .repeat(gen["count"].as_u64().unwrap() as usize)
                .into_bytes(),
            "long_line" => format!(
                "{}{}{}",
                gen["prefix"].as_str().unwrap(),
                gen["fill_char"]
                    .as_str()
                    .unwrap()
                    .repeat(gen["fill_count"].as_u64().unwrap() as usize),
                gen["suffix"].as_str().unwrap()
            )
            .into_bytes(),
            other => panic!("unknown generator kind {other}"),
        };
        let size = gen["chunk_bytes"].as_u64().unwrap() as usize;
        return stream.chunks(size).map(<[u8]>::to_vec).collect();
    }
    vector["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| match (c.get("text"), c.get("hex")) {
            (Some(t), None) => t.as_str().unwrap().as_bytes().to_vec(),
            (None, Some(h)) => hex(h.as_str().unwrap()),
            _ => panic!("chunk is neither text nor hex: {c}"),
        })
        .collect()
}

/// The vector's expected events, with generator shorthands expanded.
fn expected_events(vector: &Value) -> Vec<Expected> {
    let events = &vector["expected"]["events"];
    if let Some(list) = events.as_array() {
        return list.iter().map(Expected::from_json).collect();
    }
    let count = events.get("count").and_then(Value::as_u64);
    match events["kind"].as_str().unwrap() {
        "repeat" => (0..count.unwrap())
            .map(|_| Expected::from_json(&events["event"]))
            .collect(),
        "single_fill_event" => vec![Expected {
            event: events["event"].as_str().unwrap().to_owned(),
            data: events["fill_char"]
                .as_str()
                .unwrap()
                .repeat(events["fill_count"].as_u64().unwrap() as usize),
            id: events["id"].as_str().unwrap().to_owned(),
            retry: events["retry"].as_u64(),
        }],
        other => panic!("unknown expected kind {other}"),
    }
}

/// Feeds `chunks` in order, draining after each, then ends the stream; returns
/// the dispatched events and the final last event ID.
fn run(chunks: &[Vec<u8>]) -> (Vec<Expected>, String) {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        parser.push(Bytes::copy_from_slice(chunk));
        while let Some(ev) = parser.next_event().unwrap() {
            out.push(Expected::from_event(&ev));
        }
    }
    // The incomplete tail is diagnostics only: the spec discards it.
    let _ = parser.finish();
    (out, lossy(parser.last_event_id()))
}

fn check(vector: &Value, how: &str, chunks: &[Vec<u8>]) {
    let id = vector["id"].as_str().unwrap();
    let (events, last_id) = run(chunks);
    let want = expected_events(vector);
    assert_eq!(events.len(), want.len(), "{id} ({how}): event count");
    for (i, (got, want)) in events.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "{id} ({how}): event {i}");
    }
    let want_last = vector["expected"]["final_last_event_id"].as_str().unwrap();
    assert_eq!(last_id, want_last, "{id} ({how}): final last event id");
}

fn vectors() -> Vec<Value> {
    let doc: Value = serde_json::from_str(VECTORS).unwrap();
    assert_eq!(doc["schema"], "sse-conformance-vectors/1");
    doc["vectors"].as_array().unwrap().clone()
}

#[test]
fn corpus_has_all_36_vectors() {
    assert_eq!(vectors().len(), 36);
}

#[test]
fn every_vector_passes_with_its_declared_chunking() {
    for v in vectors() {
        check(&v, "declared chunks", &chunks(&v));
    }
}

#[test]
fn every_vector_passes_fed_byte_by_byte() {
    for v in vectors() {
        let stream = chunks(&v).concat();
        let bytes: Vec<Vec<u8>> = stream.iter().map(|b| vec![*b]).collect();
        check(&v, "byte by byte", &bytes);
    }
}

#[test]
fn every_vector_passes_fed_as_one_chunk() {
    for v in vectors() {
        check(&v, "one chunk", &[chunks(&v).concat()]);
    }
}

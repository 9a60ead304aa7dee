//! The memo of repeated bytes held to the full reading: every stream read
//! both ways (the return leg's chunks and its classes, the ingress's SOLO
//! events) gives the same bytes, the same class for every frame, the same
//! end and the same meter, however it is cut.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use shimgate_shim_api::sse::SseParser;
use shimgate_shim_api::translate::Meter;
use shimgate_shim_api::{FrameClass, StreamTranslator};
use shimgate_shim_trae::{ToOpenAi, ToSolo};
use shimgate_testkit::trae as solo;

#[derive(Debug, PartialEq)]
struct Run {
    out: Vec<u8>,
    classes: Vec<FrameClass>,
    eof: Option<FrameClass>,
    meter: Meter,
}

fn drive(t: &mut dyn StreamTranslator, input: &[u8], size: usize, classify: bool) -> Run {
    let mut parser = SseParser::new();
    let mut out = BytesMut::new();
    let mut classes = Vec::new();
    for piece in input.chunks(size.max(1)) {
        parser.push(Bytes::copy_from_slice(piece));
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => {
                    let class = if classify {
                        t.classify(&ev, &mut out)
                    } else {
                        t.event(&ev, &mut out)
                    };
                    let stop = matches!(class, FrameClass::End | FrameClass::Error(_));
                    classes.push(class);
                    if stop {
                        return Run {
                            out: out.to_vec(),
                            classes,
                            eof: None,
                            meter: t.meter(),
                        };
                    }
                }
                Ok(None) => break,
                Err(_) => break,
            }
        }
    }
    let eof = Some(t.eof(&mut out));
    Run {
        out: out.to_vec(),
        classes,
        eof,
        meter: t.meter(),
    }
}

fn request() -> Value {
    json!({"model": "m", "stream": true})
}

/// The return leg (translating and classifying) both ways on a SOLO
/// stream, and the ingress both ways on what the return leg wrote.
fn same(solo_stream: &[u8]) {
    for size in [solo_stream.len(), 1, 7, 61] {
        for classify in [false, true] {
            let memo = drive(
                &mut ToOpenAi::with_identity(&request(), "chatcmpl-x", 1),
                solo_stream,
                size,
                classify,
            );
            let full = drive(
                &mut ToOpenAi::unmemoized(&request(), "chatcmpl-x", 1),
                solo_stream,
                size,
                classify,
            );
            assert_eq!(
                memo,
                full,
                "return leg, classify {classify}, pieces of {size}: {}",
                String::from_utf8_lossy(solo_stream)
            );
            if !classify {
                same_ingress(&full.out, size);
            }
        }
    }
}

fn same_ingress(openai: &[u8], size: usize) {
    assert_eq!(
        drive(&mut ToSolo::new(), openai, size, false),
        drive(&mut ToSolo::unmemoized(), openai, size, false),
        "ingress, pieces of {size}: {}",
        String::from_utf8_lossy(openai)
    );
}

/// Texts that exercise every way a string can be written.
const TEXTS: [&str; 14] = [
    "plain",
    "",
    "with \"quotes\"",
    "back\\slash and a/slash",
    "line\nbreak\r\n",
    "tab\there",
    "é 中文 😀",
    "\u{1}\u{1f} controls",
    "</script>",
    "x_solo",
    "\\u0041 not an escape",
    "[DONE]",
    "null",
    "{}",
];

#[test]
fn the_fixtures_read_the_same_both_ways() {
    let dir = format!("{}/fixtures", env!("CARGO_MANIFEST_DIR"));
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "sse") {
            same(&std::fs::read(&path).unwrap());
            seen += 1;
        }
    }
    assert!(seen >= 10, "the fixtures are there");
}

#[test]
fn generated_answers_read_the_same_both_ways() {
    let mut stream = solo::metadata("s", 1) + &solo::timing_cost();
    for (i, text) in TEXTS.iter().cycle().take(60).enumerate() {
        let frame = match i % 6 {
            3 => solo::output("", json!(text), Value::Null),
            4 => solo::output(text, Value::Null, Value::Null),
            5 => solo::output(text, json!("thinking"), Value::Null),
            _ => solo::output(text, json!(""), Value::Null),
        };
        stream.push_str(&frame);
        if i % 13 == 0 {
            stream.push_str(&solo::output(
                "",
                Value::Null,
                solo::tool_fragment("call_1", "glob", text),
            ));
        }
        if i % 17 == 0 {
            // An ID and a retry of its own, and a member OpenAI lacks.
            stream.push_str(&format!(
                "event: output\nid: {i}\nretry: 50\ndata: {}\n\n",
                json!({"response": text, "reasoning_content": "", "tool_calls": null, "extra": 1})
            ));
        }
    }
    stream.push_str(&solo::token_usage(10, 5, 1));
    stream.push_str(&solo::done("stop"));
    same(stream.as_bytes());
    // The memo is there to be used: learned on the return leg and on
    // the ingress.
    let mut leg = ToOpenAi::with_identity(&request(), "chatcmpl-x", 1);
    let openai = drive(&mut leg, stream.as_bytes(), stream.len(), false).out;
    assert!(leg.has_memo());
    let mut ingress = ToSolo::new();
    drive(&mut ingress, &openai, openai.len(), false);
    assert!(ingress.has_memo());
}

#[test]
fn hand_written_frames_around_a_learned_one_read_the_same_both_ways() {
    let learned = solo::output("ok", json!(""), Value::Null);
    let (before, after) = learned.split_once("ok").unwrap();
    let middles: [&[u8]; 16] = [
        b"x",
        b"",
        br#"\"quoted\""#,
        br#"""#,
        br"\n",
        br"\u00e9",
        br"\ud83d\ude00",
        br"\ud83d",
        br"\q",
        br"\/",
        b"\x01",
        b"\xff\xfe",
        "é".as_bytes(),
        br#"x","response":"y"#,
        br#"x","tool_calls":[{"index":0,"function_call":{"name":"g","arguments":"{}"}}],"z":""#,
        br"x\",
    ];
    for middle in middles {
        let mut stream = learned.as_bytes().to_vec();
        stream.extend_from_slice(before.as_bytes());
        stream.extend_from_slice(middle);
        stream.extend_from_slice(after.as_bytes());
        stream.extend_from_slice(solo::done("stop").as_bytes());
        same(&stream);
    }
}

#[test]
fn relayed_chunks_around_a_learned_one_read_the_same_both_ways() {
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        )
    };
    let mut stream = String::new();
    for text in TEXTS.iter().cycle().take(40) {
        stream.push_str(&chunk(json!({"content": text})));
        stream.push_str(&chunk(json!({"reasoning_content": text, "content": null})));
    }
    stream.push_str("data: [DONE]\n\n");
    for size in [stream.len(), 7] {
        same_ingress(stream.as_bytes(), size);
    }
}

#[test]
fn mutated_answers_read_the_same_both_ways() {
    let mut base = solo::metadata("s", 1);
    for text in TEXTS.iter().cycle().take(24) {
        base.push_str(&solo::output(text, json!(""), Value::Null));
    }
    base.push_str(&solo::done("stop"));
    let bytes = base.into_bytes();
    let mut rng = fastrand::Rng::with_seed(24);
    const NOISE: [u8; 10] = [b'"', b'\\', b'\n', 0x01, 0xff, b'u', b'{', b'}', b'0', b' '];
    for _ in 0..120 {
        let mut stream = bytes.clone();
        for _ in 0..rng.usize(1..4) {
            let at = rng.usize(..stream.len());
            match rng.u8(..3) {
                0 => stream[at] = NOISE[rng.usize(..NOISE.len())],
                1 => {
                    stream.remove(at);
                }
                _ => stream.insert(at, NOISE[rng.usize(..NOISE.len())]),
            }
        }
        same(&stream);
    }
}

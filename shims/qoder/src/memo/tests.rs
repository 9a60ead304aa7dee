//! The memo held to the full reading: every stream read both ways gives the
//! same bytes, the same class for every frame, the same end and the same
//! meter, however it is cut.

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use shimgate_shim_api::sse::SseParser;
use shimgate_shim_api::translate::Meter;
use shimgate_shim_api::{FrameClass, StreamTranslator};

use crate::unwrap::{QoderIngress, QoderReturnLeg, UsagePolicy};

#[derive(Debug, PartialEq)]
struct Run {
    out: Vec<u8>,
    classes: Vec<FrameClass>,
    eof: Option<FrameClass>,
    meter: Meter,
}

fn drive(t: &mut dyn StreamTranslator, input: &[u8], size: usize) -> Run {
    let mut parser = SseParser::new();
    let mut out = BytesMut::new();
    let mut classes = Vec::new();
    for piece in input.chunks(size.max(1)) {
        parser.push(Bytes::copy_from_slice(piece));
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => {
                    let class = t.event(&ev, &mut out);
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
                Err(_) => {
                    return Run {
                        out: out.to_vec(),
                        classes,
                        eof: None,
                        meter: t.meter(),
                    }
                }
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

/// Both ways, for the return leg (with and without usage) and the ingress,
/// whole and cut into small pieces.
fn same(input: &[u8]) {
    for size in [input.len(), 1, 7, 61] {
        for usage in [UsagePolicy::Keep, UsagePolicy::DropUsageOnly] {
            assert_eq!(
                drive(&mut QoderReturnLeg::new(usage), input, size),
                drive(&mut QoderReturnLeg::unmemoized(usage), input, size),
                "return leg, {usage:?}, pieces of {size}: {}",
                String::from_utf8_lossy(input)
            );
        }
        assert_eq!(
            drive(&mut QoderIngress::new(), input, size),
            drive(&mut QoderIngress::unmemoized(), input, size),
            "ingress, pieces of {size}: {}",
            String::from_utf8_lossy(input)
        );
    }
}

fn chunk(delta: Value, finish: Value) -> String {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
}

fn envelope(body: &str) -> String {
    format!(
        "data:{}\n\n",
        json!({"headers": {"Content-Type": ["application/json"]}, "body": body, "statusCodeValue": 200, "statusCode": "OK"})
    )
}

fn bare(chunk: &str) -> String {
    format!("data: {chunk}\n\n")
}

/// Text deltas that exercise every way a string can be written.
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
    "body statusCodeValue",
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
        same(&std::fs::read(&path).unwrap());
        seen += 1;
    }
    assert!(seen >= 10, "the fixtures are there");
}

#[test]
fn generated_answers_read_the_same_both_ways() {
    let frames: [fn(&str) -> String; 2] = [envelope, bare];
    for frame in frames {
        let mut stream = String::new();
        stream.push_str(&frame(&chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )));
        for (i, text) in TEXTS.iter().cycle().take(60).enumerate() {
            let delta = match i % 5 {
                3 => json!({"reasoning_content": text}),
                4 => json!({"content": null, "reasoning_content": text}),
                _ => json!({"content": text}),
            };
            stream.push_str(&frame(&chunk(delta, Value::Null)));
            if i % 11 == 0 {
                stream.push_str(&frame("{}"));
                stream.push_str(&frame(""));
            }
            if i % 17 == 0 {
                let tool = json!([{"index": 0, "function": {"arguments": text}}]);
                stream.push_str(&frame(&chunk(json!({"tool_calls": tool}), Value::Null)));
            }
        }
        stream.push_str(&frame(&chunk(json!({}), json!("stop"))));
        let usage = json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}});
        stream.push_str(&frame(&usage.to_string()));
        stream.push_str("data: [DONE]\n\n");
        same(stream.as_bytes());
        let mut leg = QoderReturnLeg::default();
        drive(&mut leg, stream.as_bytes(), stream.len());
        assert!(
            leg.memo_hits() >= 20,
            "the memo is used: {}",
            leg.memo_hits()
        );
    }
}

#[test]
fn hand_written_frames_around_a_learned_one_read_the_same_both_ways() {
    let enveloped = envelope(&chunk(json!({"content": "ok"}), Value::Null));
    let plain = bare(&chunk(json!({"content": "ok"}), Value::Null));
    // What may sit where the string was, raw: at the envelope's level of
    // escaping and at the chunk's.
    let middles: [&[u8]; 24] = [
        b"x",
        b"",
        br#"\\\"quoted\\\""#,
        br#"\""#,
        br#"\\\""#,
        br"\\n",
        br"\n",
        br"\\u00e9",
        br"\u00e9",
        br"\\ud83d\\ude00",
        br"\\ud83d",
        br"\\q",
        br"\q",
        br"\/",
        br"\\/",
        b"\x01",
        b"\xff\xfe",
        "é".as_bytes(),
        br#"x\"}]},"a":1,"b":{"c":"#,
        br#"x"}]}"#,
        br"x\\",
        br"\",
        br"\\\\",
        br#"\\\\\\\\\\\""#,
    ];
    for middle in middles {
        for learned in [&enveloped, &plain] {
            let (before, after) = learned.split_once("ok").unwrap();
            let mut stream = learned.as_bytes().to_vec();
            stream.extend_from_slice(before.as_bytes());
            stream.extend_from_slice(middle);
            stream.extend_from_slice(after.as_bytes());
            stream.extend_from_slice(b"data: [DONE]\n\n");
            same(&stream);
        }
    }
}

#[test]
fn mutated_answers_read_the_same_both_ways() {
    let frames: [fn(&str) -> String; 2] = [envelope, bare];
    let mut rng = fastrand::Rng::with_seed(24);
    const NOISE: [u8; 10] = [b'"', b'\\', b'\n', 0x01, 0xff, b'u', b'{', b'}', b'0', b' '];
    for frame in frames {
        let mut base = String::new();
        for text in TEXTS.iter().cycle().take(30) {
            base.push_str(&frame(&chunk(json!({"content": text}), Value::Null)));
        }
        base.push_str(&frame(&chunk(json!({}), json!("stop"))));
        let bytes = base.into_bytes();
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
}

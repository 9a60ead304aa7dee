//! The ingress in each proxy situation: what the agent gets when the
//! proxy's own frames replace ours, or when there are no carriers at all.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use shimgate_shim_api::sse::{parse_all, SseEvent};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, Shim, StreamTranslator};
use shimgate_shim_trae::{ToSolo, TraeShim};
use shimgate_testkit::trae::{bili, convert, pieces, rebuild};

/// The agent's events as (name, data JSON or text).
fn events(solo: &[u8]) -> Vec<(String, Value)> {
    parse_all(solo)
        .unwrap()
        .iter()
        .map(|e| {
            let name = String::from_utf8_lossy(e.event.as_deref().unwrap_or_default()).into_owned();
            let data = serde_json::from_slice(&e.data)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&e.data).into_owned()));
            (name, data)
        })
        .collect()
}

fn names(solo: &[u8]) -> Vec<String> {
    events(solo).into_iter().map(|(n, _)| n).collect()
}

fn frames(lines: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in lines {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(v.to_string().as_bytes());
        out.extend_from_slice(b"\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn chunk(delta: Value, finish: Value) -> Value {
    json!({"id":"c","object":"chat.completion.chunk","created":1,"model":"m",
        "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
}

#[test]
fn bili_stop_after_streamed_tool_calls_still_gives_done_tool_calls() {
    // No carriers at all: a proxy that rewrote everything; bili's `stop`.
    let stream = frames(&[
        chunk(
            json!({"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}),
            Value::Null,
        ),
        json!({"id":"p","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],
            "usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}),
    ]);
    let ev = events(&rebuild(pieces(&stream, 4096)));
    assert_eq!(ev.len(), 3);
    assert_eq!(ev[0].0, "output");
    assert_eq!(ev[0].1["tool_calls"][0]["function_call"]["name"], "read");
    assert_eq!(
        ev[1],
        (
            "token_usage".into(),
            json!({"prompt_tokens":10,"completion_tokens":2,"total_tokens":12})
        )
    );
    assert_eq!(
        ev[2],
        ("done".into(), json!({"finish_reason":"tool_calls"}))
    );
}

#[test]
fn straight_from_the_return_leg_usage_and_done_are_not_duplicated() {
    let solo = b"event:output\ndata:{\"response\":\"hi\"}\n\n\
        event:token_usage\ndata:{\"prompt_tokens\":1,\"completion_tokens\":1,\"total_tokens\":2}\n\n\
        event:done\ndata:{\"finish_reason\":\"stop\"}\n\n";
    let agent = rebuild(pieces(&convert(pieces(solo, 4096)), 4096));
    assert_eq!(names(&agent), ["output", "token_usage", "done"]);
}

#[test]
fn bili_compress_rounds_give_one_usage_one_done_and_its_notice_as_text() {
    // Round 1 calls bili's own `compress` tool (swallowed by bili), round 2
    // answers; bili writes its notice between them and one finish at the end.
    let round1 = convert(pieces(
        b"id:1\nevent:metadata\ndata:{\"round\":1}\n\n\
          event:output\ndata:{\"tool_calls\":[{\"index\":0,\"id\":\"k\",\"function_call\":{\"name\":\"compress\",\"arguments\":\"{}\"}}]}\n\n\
          event:token_usage\ndata:{\"prompt_tokens\":26000,\"completion_tokens\":20,\"total_tokens\":26020}\n\n\
          event:done\ndata:{\"finish_reason\":\"tool_calls\"}\n\n",
        4096,
    ));
    let round2 = convert(pieces(
        b"id:1\nevent:metadata\ndata:{\"round\":2}\n\n\
          event:output\ndata:{\"response\":\"Compression noted.\"}\n\n\
          event:token_usage\ndata:{\"prompt_tokens\":7000,\"completion_tokens\":3,\"total_tokens\":7003}\n\n\
          event:done\ndata:{\"finish_reason\":\"stop\"}\n\n",
        4096,
    ));
    // What bili passes of each round: everything but tool calls, finish,
    // usage and [DONE].
    let passed = |round: &[u8]| -> Vec<u8> {
        let b = bili(round);
        let text = String::from_utf8(b).unwrap();
        text.split("\n\n")
            .filter(|f| f.contains("x_solo") || f.contains("\"content\":\"C"))
            .map(|f| format!("{f}\n\n"))
            .collect::<String>()
            .into_bytes()
    };
    let mut stream = passed(&round1);
    let notice = chunk(
        json!({"content":"\n📦 [ACP] Compressed m00001–m00021 → 1 block(s), ~19247 tokens saved.\n"}),
        Value::Null,
    );
    stream.extend_from_slice(format!("data: {notice}\n\n").as_bytes());
    stream.extend_from_slice(&passed(&round2));
    stream.extend_from_slice(
        format!(
            "data: {}\n\ndata: [DONE]\n\n",
            json!({"id":"p","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],
                "usage":{"prompt_tokens":7000,"completion_tokens":3,"total_tokens":7003}})
        )
        .as_bytes(),
    );
    let ev = events(&rebuild(pieces(&stream, 4096)));
    let n: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        n,
        [
            "metadata",
            "output",
            "metadata",
            "output",
            "token_usage",
            "done"
        ]
    );
    assert!(ev[1].1["response"]
        .as_str()
        .unwrap()
        .contains("📦 [ACP] Compressed"));
    assert_eq!(ev[3].1["response"], "Compression noted.");
    assert_eq!(ev[4].1["prompt_tokens"], 7000);
    assert_eq!(ev[5].1, json!({"finish_reason":"stop"}));
}

#[test]
fn a_standard_error_frame_becomes_a_solo_error_with_the_numeric_code() {
    let stream = b"data: {\"error\":{\"code\":\"4008\",\"message\":\"quota\",\"type\":\"insufficient_quota\"}}\n\ndata: [DONE]\n\n";
    let mut t = ToSolo::new();
    let mut out = BytesMut::new();
    let ev = parse_all(stream).unwrap();
    assert_eq!(t.event(&ev[0], &mut out), FrameClass::NotContent);
    let class = t.event(&ev[1], &mut out);
    assert!(matches!(&class, FrameClass::Error(f) if f.code == FailureCode::Quota));
    assert_eq!(t.event(&ev[1], &mut out), class, "nothing after an error");
    assert_eq!(
        events(&out),
        vec![(
            "error".into(),
            json!({"code":4008,"message":"quota","extra":null})
        )]
    );
}

#[test]
fn an_upstream_error_through_bili_keeps_its_code_and_message() {
    let solo = b"event:output\ndata:{\"response\":\"part\"}\n\n\
        event:error\ndata:{\"code\":4022,\"message\":\"prompt too long\",\"extra\":null}\n\n\
        event:done\ndata:{\"finish_reason\":\"stop\"}\n\n";
    let agent = rebuild(pieces(&bili(&convert(pieces(solo, 4096))), 4096));
    let ev = events(&agent);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(
        ev[1],
        (
            "error".into(),
            json!({"code":4022,"message":"prompt too long","extra":null})
        )
    );
}

#[test]
fn fail_writes_a_solo_error_and_ends() {
    let mut t = TraeShim.ingress(&shimgate_shim_trae::TraeOriginal::Parsed(json!({})));
    let mut out = BytesMut::new();
    t.event(
        &SseEvent::data(chunk(json!({"content":"a"}), Value::Null).to_string()),
        &mut out,
    );
    t.fail(
        &Failure::new(FailureCode::Timeout, "idle for 120 s"),
        &mut out,
    );
    t.fail(&Failure::new(FailureCode::Timeout, "again"), &mut out);
    let later = t.event(&SseEvent::data("[DONE]"), &mut out);
    assert!(matches!(later, FrameClass::Error(_)));
    let ev = events(&out);
    assert_eq!(ev.len(), 2);
    assert_eq!(
        ev[1],
        (
            "error".into(),
            json!({"code":"TIMEOUT","message":"idle for 120 s","extra":{"failure":"TIMEOUT"}})
        )
    );
}

#[test]
fn eof_after_a_finish_without_done_marker_completes() {
    let stream = format!(
        "data: {}\n\ndata: {}\n\n",
        chunk(json!({"content":"a"}), Value::Null),
        chunk(json!({}), json!("length"))
    );
    let agent = rebuild(pieces(stream.as_bytes(), 4096));
    assert_eq!(
        events(&agent).last().unwrap().1,
        json!({"finish_reason":"length"})
    );
}

#[test]
fn eof_with_no_end_is_a_transport_error() {
    let mut t = ToSolo::new();
    let mut out = BytesMut::new();
    assert!(matches!(t.eof(&mut out), FrameClass::Error(f) if f.code == FailureCode::Transport));
}

#[test]
fn classes_are_content_for_deltas_end_at_done_marker_and_not_content_otherwise() {
    let mut t = ToSolo::new();
    let mut out = BytesMut::new();
    let data = |v: Value| SseEvent::data(Bytes::from(v.to_string()));
    assert_eq!(
        t.event(
            &data(chunk(json!({"role":"assistant","content":""}), Value::Null)),
            &mut out
        ),
        FrameClass::NotContent
    );
    assert_eq!(
        t.event(
            &data(chunk(json!({"reasoning_content":"r"}), Value::Null)),
            &mut out
        ),
        FrameClass::Content
    );
    assert_eq!(
        t.event(
            &data(chunk(
                json!({"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}),
                Value::Null
            )),
            &mut out
        ),
        FrameClass::Content
    );
    assert_eq!(
        t.event(
            &data(json!({"choices":[],"usage":{"prompt_tokens":1}})),
            &mut out
        ),
        FrameClass::NotContent
    );
    assert_eq!(
        t.event(&SseEvent::data("not json"), &mut out),
        FrameClass::NotContent
    );
    assert_eq!(
        t.event(&SseEvent::data("[DONE]"), &mut out),
        FrameClass::End
    );
    assert_eq!(names(&out), ["output", "output", "token_usage", "done"]);
}

#[test]
fn tool_calls_bili_re_emits_after_an_error_still_precede_the_error() {
    // Found by the generated round trip: bili writes the collapsed call only
    // after our error carrier, so the ingress waits for the end to report.
    let solo = b"event:output\ndata:{\"tool_calls\":[{\"index\":2,\"id\":\"c2\",\"function_call\":{\"name\":\"f\",\"arguments\":\"{\"}}]}\n\n";
    let agent = rebuild(pieces(&bili(&convert(pieces(solo, 4096))), 4096));
    let ev = events(&agent);
    assert_eq!(names(&agent), ["output", "error"]);
    assert_eq!(ev[0].1["tool_calls"][0]["function_call"]["arguments"], "{");
    assert_eq!(ev[1].1["code"], "TRANSPORT");
}

#[test]
fn usage_reported_before_a_cut_still_reaches_the_agent() {
    // Found by the generated round trip: held usage was dropped on errors.
    let solo = b"event:output\ndata:{\"response\":\"a\"}\n\n\
        event:token_usage\ndata:{\"prompt_tokens\":48,\"completion_tokens\":0,\"total_tokens\":48}\n\n";
    for stream in [
        convert(pieces(solo, 4096)),
        bili(&convert(pieces(solo, 4096))),
    ] {
        let agent = rebuild(pieces(&stream, 4096));
        assert_eq!(names(&agent), ["output", "token_usage", "error"]);
    }
}

/// Plain content chunks take a scanner path; the same chunks with a
/// `"usage": null` member (which the ingress ignores) take the `Value`
/// path. Both must write the same bytes, escapes and held halves included.
#[test]
fn plain_content_chunks_are_written_as_the_value_reading_writes_them() {
    let texts = [
        json!({"content": "hi"}),
        json!({"role": "assistant", "content": ""}),
        json!({"content": "a \"quoted\" line\nand a tab\t, é, \u{2028}, \\ done"}),
        json!({"reasoning_content": "think", "content": null}),
        json!({"content": "x", "reasoning_content": "y", "tool_calls": null}),
        json!({"content": "\u{1}\u{1f}"}),
    ];
    let carried = json!({"id":"c","object":"chat.completion.chunk","created":1,"model":"m",
        "choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],
        "x_solo":{"event":"metadata","id":"7","data":{"a":1}}});
    let held = json!({"id":"c","choices":[{"index":0,"delta":{"content":"half"},"finish_reason":null}],
        "x_solo":{"id":"8","continues":true}});
    let mut plain = vec![carried.clone(), held.clone()];
    plain.extend(texts.iter().map(|d| chunk(d.clone(), Value::Null)));
    let escaped = chunk(json!({"content": "u"}), Value::Null)
        .to_string()
        .replace("\"u\"", "\"\\u0075\\/\"");
    let slow: Vec<Value> = plain
        .iter()
        .map(|c| {
            let mut c = c.clone();
            c["usage"] = Value::Null;
            c
        })
        .collect();
    let run = |lines: &[Value], extra: &str| {
        let mut bytes = frames(lines);
        bytes.splice(0..0, extra.bytes());
        let mut t = ToSolo::new();
        let mut out = BytesMut::new();
        for e in parse_all(&bytes).unwrap() {
            t.event(&e, &mut out);
        }
        out
    };
    let a = run(&plain, &format!("data: {escaped}\n\n"));
    let slow_escaped = escaped.replacen('{', "{\"usage\":null,", 1);
    let b = run(&slow, &format!("data: {slow_escaped}\n\n"));
    assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
    assert!(names(&a).iter().filter(|n| *n == "output").count() >= 6);
}

/// A carrier whose data is already written as `serde_json` writes it is
/// copied; the same carrier with its data spaced out takes the `Value`
/// path, which writes it compact: both must give the agent the same bytes.
#[test]
fn canonical_carriers_are_copied_as_the_value_reading_writes_them() {
    let datas = [
        json!({"model": "", "session_id": "s-1", "prompt_completion_id": 0}),
        json!({"name": "llm_raw_chat_v2", "preprocess_timing": 71, "nested": {"a": [1, -2, true, false, null, "é ✓"]}}),
        json!({"reasoning_content": "...", "n": 123456789012345678_u64}),
        json!([]),
        json!("just a string"),
    ];
    let carrier = |event: Value, id: Option<&str>, retry: Option<u64>, data: &str| {
        let mut x = format!("{{\"event\":{event}");
        if let Some(id) = id {
            x.push_str(&format!(",\"id\":\"{id}\""));
        }
        if let Some(r) = retry {
            x.push_str(&format!(",\"retry\":{r}"));
        }
        x.push_str(&format!(",\"data\":{data}}}"));
        format!("{{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"finish_reason\":null}}],\"x_solo\":{x}}}")
    };
    let run = |chunks: &[String]| {
        let mut bytes = Vec::new();
        for c in chunks {
            bytes.extend_from_slice(format!("data: {c}\n\n").as_bytes());
        }
        let mut t = ToSolo::new();
        let mut out = BytesMut::new();
        for e in parse_all(&bytes).unwrap() {
            t.event(&e, &mut out);
        }
        out
    };
    let mut fast = Vec::new();
    let mut slow = Vec::new();
    for (i, d) in datas.iter().enumerate() {
        let (event, id, retry) = match i % 3 {
            0 => (json!("metadata"), Some("7"), None),
            1 => (json!("timing_cost"), None, Some(1500)),
            _ => (Value::Null, Some(""), None),
        };
        fast.push(carrier(event.clone(), id, retry, &d.to_string()));
        let spaced = serde_json::to_string_pretty(d).unwrap().replace('\n', " ");
        slow.push(carrier(event, id, retry, &spaced));
    }
    // Held ones (usage and done), written at the end.
    let usage = json!({"prompt_tokens": 1000, "completion_tokens": 12, "total_tokens": 1012, "reasoning_tokens": 3});
    let done = json!({"finish_reason": "stop"});
    for (name, d) in [("token_usage", &usage), ("done", &done)] {
        fast.push(carrier(json!(name), Some("9"), None, &d.to_string()));
        let spaced = serde_json::to_string_pretty(d).unwrap().replace('\n', " ");
        slow.push(carrier(json!(name), Some("9"), None, &spaced));
    }
    fast.push("[DONE]".into());
    slow.push("[DONE]".into());
    let (a, b) = (run(&fast), run(&slow));
    assert_eq!(String::from_utf8_lossy(&a), String::from_utf8_lossy(&b));
    assert_eq!(names(&a).len(), datas.len() + 2);
    // Data `serde_json` would write otherwise is never copied as it is.
    for odd in [
        r#"{"a":1.50}"#,
        r#"{"a":"\u00e9"}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"a":-0}"#,
        r#"{"a":1e2}"#,
    ] {
        let got = run(&[carrier(json!("metadata"), None, None, odd)]);
        let want: Value = serde_json::from_str(odd).unwrap();
        let ev = events(&got);
        assert_eq!(ev[0].1, want, "{odd}");
        let data = String::from_utf8_lossy(&got)
            .lines()
            .find(|l| l.starts_with("data: "))
            .unwrap()
            .to_string();
        assert_eq!(
            data,
            format!("data: {}", serde_json::to_string(&want).unwrap()),
            "{odd}"
        );
    }
}

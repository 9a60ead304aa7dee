//! The return leg and the ingress, each alone and one behind the other
//! with a proxy in between that keeps only frames with `choices` (what
//! billion-context does): every sentinel and envelope form reaches the CLI
//! as the model server sent it.

use bytes::Bytes;
use serde_json::{json, Value};
use shimgate_shim_api::sse::parse_all;
use shimgate_shim_api::{translate_all, FailureCode};

use super::*;

const ROLE: &str = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"#;
const HI: &str = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#;
const STOP: &str = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
const USAGE: &str = r#"{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":3,"total_tokens":1203}}"#;
const DUPLICATE: &str = r#"{"statusCodeValue":403,"statusCode":"FORBIDDEN","headers":{},"body":"{\"code\":\"103\",\"message\":\"Duplicate request\"}"}"#;
const NOTIFY: &str =
    r#"[NOTIFICATIONS]#{"notifications":[{"notificationType":"credit_exhausted"}]}"#;

fn sse(frames: &[&str]) -> Bytes {
    let mut s = String::new();
    for f in frames {
        s.push_str(f);
        s.push_str("\n\n");
    }
    Bytes::from(s)
}

fn data(frames: &[&str]) -> Bytes {
    let with: Vec<String> = frames.iter().map(|f| format!("data: {f}")).collect();
    let refs: Vec<&str> = with.iter().map(String::as_str).collect();
    sse(&refs)
}

/// Every event of a stream with its class, as the chain runs a return leg.
fn classes(t: &mut dyn StreamTranslator, input: &Bytes) -> (Vec<FrameClass>, BytesMut) {
    let mut out = BytesMut::new();
    let mut seen = Vec::new();
    for ev in parse_all(input).unwrap() {
        let c = t.event(&ev, &mut out);
        let stop = matches!(c, FrameClass::End | FrameClass::Error(_));
        seen.push(c);
        if stop {
            return (seen, out);
        }
    }
    seen.push(t.eof(&mut out));
    (seen, out)
}

/// What billion-context passes on of the return leg's frames: those with a
/// choice that is not a finish (content and role-shaped frames), then its
/// own finish and `[DONE]`.
fn through_bili(return_leg: &[u8]) -> Bytes {
    let mut kept = String::new();
    for ev in parse_all(return_leg).unwrap() {
        let Ok(v) = serde_json::from_slice::<Value>(&ev.data) else {
            continue;
        };
        let content_frame = v["choices"].as_array().is_some_and(|c| !c.is_empty())
            && v["choices"][0]["finish_reason"].is_null();
        if content_frame {
            kept.push_str(&format!("data: {}\n\n", String::from_utf8_lossy(&ev.data)));
        }
    }
    kept.push_str(&format!("data: {STOP}\n\ndata: [DONE]\n\n"));
    Bytes::from(kept)
}

fn ingress(relayed: Bytes) -> Bytes {
    translate_all(ModelIngress::new(), [relayed])
}

#[test]
fn plain_chunks_pass_byte_for_byte_with_usage_and_one_done() {
    let input = data(&[ROLE, HI, STOP, USAGE, "[DONE]"]);
    let out = translate_all(ModelReturnLeg::default(), [input.clone()]);
    assert_eq!(out, input);
    let mut leg = ModelReturnLeg::default();
    let (c, _) = classes(&mut leg, &input);
    assert_eq!(
        c,
        [
            FrameClass::NotContent,
            FrameClass::Content,
            FrameClass::NotContent,
            FrameClass::NotContent,
            FrameClass::End
        ]
    );
    assert_eq!(
        leg.meter().prompt_tokens,
        Some(1200),
        "the proxy learns prompt_tokens"
    );
}

#[test]
fn envelopes_are_unwrapped_for_the_proxy() {
    let env = |chunk: &str| {
        json!({"statusCodeValue": 200, "statusCode": "OK", "headers": {}, "body": chunk})
            .to_string()
    };
    let input = data(&[&env(ROLE), &env(HI), &env(USAGE), &env("[DONE]")]);
    let out = translate_all(ModelReturnLeg::default(), [input]);
    assert_eq!(out, data(&[ROLE, HI, USAGE, "[DONE]"]));
}

#[test]
fn an_error_envelope_before_content_is_a_classified_failure() {
    let mut leg = ModelReturnLeg::default();
    let (c, _) = classes(&mut leg, &data(&[ROLE, DUPLICATE]));
    match c.last() {
        Some(FrameClass::Error(f)) => {
            assert_eq!(f.code, FailureCode::Duplicate);
            assert_eq!(f.upstream_code.as_deref(), Some("103"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_error_envelope_after_content_reaches_the_cli_through_a_proxy() {
    let input = data(&[ROLE, HI, DUPLICATE, "[DONE]"]);
    let mut leg = ModelReturnLeg::default();
    let (c, out) = classes(&mut leg, &input);
    assert!(matches!(c.last(), Some(FrameClass::Error(f)) if f.code == FailureCode::Duplicate));
    let cli = ingress(through_bili(&out));
    let events = parse_all(&cli).unwrap();
    let datas: Vec<_> = events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .collect();
    assert_eq!(
        datas,
        [ROLE, HI, DUPLICATE],
        "the envelope as the model server sent it, last"
    );
}

#[test]
fn an_error_event_after_content_keeps_its_event_line() {
    let input = Bytes::from(format!(
        "data: {HI}\n\nevent: error\ndata: {{\"code\":\"105\",\"message\":\"login expired\"}}\n\n"
    ));
    let out = translate_all(ModelReturnLeg::default(), [input]);
    let cli = ingress(through_bili(&out));
    let events = parse_all(&cli).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.event.as_deref(), Some(&b"error"[..]));
    assert_eq!(
        &last.data[..],
        br#"{"code":"105","message":"login expired"}"#
    );
}

#[test]
fn an_error_chunk_after_content_reaches_the_cli() {
    let err = r#"{"error":{"code":"500","message":"model crashed"}}"#;
    let out = translate_all(ModelReturnLeg::default(), [data(&[HI, err])]);
    let cli = ingress(through_bili(&out));
    let datas: Vec<_> = parse_all(&cli)
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect();
    assert_eq!(datas.last().map(|d| &d[..]), Some(err.as_bytes()));
}

#[test]
fn every_sentinel_reaches_the_cli_through_a_proxy_in_its_place() {
    let exceed = "[EXCEED_QUOTA]{\"resetAt\":\"2026-12-07 00:00:00\"}";
    let input = data(&[
        ROLE,
        NOTIFY,
        HI,
        exceed,
        "[NOT_EXCEED_QUOTA]",
        STOP,
        USAGE,
        "[DONE]",
    ]);
    let mut leg = ModelReturnLeg::default();
    let (c, out) = classes(&mut leg, &input);
    assert_eq!(
        c.last(),
        Some(&FrameClass::End),
        "after content a sentinel is no failure"
    );
    let cli = ingress(through_bili(&out));
    let datas: Vec<_> = parse_all(&cli)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .collect();
    assert_eq!(
        datas,
        [
            ROLE,
            NOTIFY,
            HI,
            exceed,
            "[NOT_EXCEED_QUOTA]",
            STOP,
            "[DONE]"
        ]
    );
}

#[test]
fn an_enveloped_sentinel_comes_back_enveloped() {
    let env = r#"{"statusCodeValue":200,"statusCode":"OK","headers":{},"body":"[NOTIFICATIONS]#{\"notifications\":[]}"}"#;
    let out = translate_all(ModelReturnLeg::default(), [data(&[HI, env, "[DONE]"])]);
    let cli = ingress(through_bili(&out));
    let datas: Vec<_> = parse_all(&cli)
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect();
    assert_eq!(&datas[1][..], env.as_bytes());
}

#[test]
fn exceed_quota_and_no_content_is_a_quota_failure() {
    for input in [
        data(&["[EXCEED_QUOTA]", "[DONE]"]),
        data(&["[EXCEED_QUOTA]", STOP]),
        // The body ends right after it (no `[DONE]`).
        data(&["[EXCEED_QUOTA]{\"message\":\"quota exceeded\"}"]),
        data(&[ROLE, "[EXCEED_QUOTA]", STOP, USAGE, "[DONE]"]),
    ] {
        let mut leg = ModelReturnLeg::default();
        let (c, _) = classes(&mut leg, &input);
        match c.last() {
            Some(FrameClass::Error(f)) => {
                assert_eq!(f.code, FailureCode::Quota);
                assert_eq!(f.upstream_code.as_deref(), Some("EXCEED_QUOTA"));
            }
            other => panic!("{other:?} for {input:?}"),
        }
    }
    let mut leg = ModelReturnLeg::default();
    let (c, _) = classes(&mut leg, &data(&["[EXCEED_QUOTA]", HI, "[DONE]"]));
    assert_eq!(
        c.last(),
        Some(&FrameClass::End),
        "content came after all: a warning"
    );
}

#[test]
fn a_cut_stream_is_a_transport_failure_and_fail_writes_an_error_the_cli_reads() {
    let mut leg = ModelReturnLeg::default();
    let (c, _) = classes(&mut leg, &data(&[HI]));
    assert!(matches!(c.last(), Some(FrameClass::Error(f)) if f.code == FailureCode::Transport));
    let mut out = BytesMut::new();
    let mut fresh = ModelReturnLeg::default();
    fresh.fail(&Failure::new(FailureCode::Timeout, "idle"), &mut out);
    let relayed = ingress(through_bili(&out));
    let first = parse_all(&relayed).unwrap().remove(0);
    let v: Value = serde_json::from_slice(&first.data).unwrap();
    assert_eq!(v["error"]["code"], "TIMEOUT", "{v}");
}

#[test]
fn the_ingress_passes_bare_frames_and_ends_on_done() {
    let input = data(&[ROLE, HI, STOP, "[DONE]"]);
    assert_eq!(ingress(input.clone()), input);
}

#[test]
fn a_cut_stream_after_a_broken_envelope_is_still_closed_by_fail() {
    // fuzz: an envelope-like frame that is not JSON, then the end of input.
    let input =
        Bytes::from_static(b"data: {\"statusCodeValue\": 403, \"body\":\\{\" \"code\\\": 1}\n\n");
    let out = translate_all(ModelReturnLeg::default(), [input]);
    let events = parse_all(&out).unwrap();
    assert_eq!(&events.last().unwrap().data[..], b"[DONE]", "{out:?}");
}

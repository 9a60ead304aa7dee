//! The return leg, event kind by event kind: what each SOLO event becomes
//! and how the chain is told what it meant.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use shimgate_shim_api::sse::{parse_all, SseEvent};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, Shim, StreamTranslator};
use shimgate_shim_trae::{ToOpenAi, TraeShim};
use shimgate_testkit::check_openai;
use shimgate_testkit::trae::{convert, pieces};

fn leg() -> ToOpenAi {
    ToOpenAi::with_identity(&json!({"model": "glm-5.2"}), "chatcmpl-x", 7)
}

fn ev(name: &str, data: &str) -> SseEvent {
    SseEvent {
        event: Some(Bytes::copy_from_slice(name.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: None,
        retry: None,
    }
}

/// The JSON chunks (and `[DONE]` as a string) in OpenAI output.
fn chunks(out: &[u8]) -> Vec<Value> {
    parse_all(out)
        .unwrap()
        .iter()
        .map(|e| serde_json::from_slice(&e.data).unwrap_or(Value::String("[DONE]".into())))
        .collect()
}

fn deltas(out: &[u8]) -> Vec<Value> {
    chunks(out)
        .into_iter()
        .filter(|c| c.get("x_solo").and_then(|x| x.get("event")).is_none())
        .filter_map(|c| c.pointer("/choices/0/delta").cloned())
        .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
        .collect()
}

fn convert_str(solo: &str) -> Vec<u8> {
    convert(pieces(solo.as_bytes(), 4096))
}

#[test]
fn output_text_and_reasoning_become_deltas_and_commit() {
    let mut t = leg();
    let mut out = BytesMut::new();
    let class = t.event(
        &ev(
            "output",
            r#"{"response":"hi","reasoning_content":"hmm","tool_calls":null}"#,
        ),
        &mut out,
    );
    assert_eq!(class, FrameClass::Content);
    assert_eq!(
        deltas(&out),
        vec![json!({"content":"hi","reasoning_content":"hmm"})]
    );
    let c = &chunks(&out)[0];
    assert_eq!(
        (&c["id"], &c["object"], &c["created"], &c["model"]),
        (
            &json!("chatcmpl-x"),
            &json!("chat.completion.chunk"),
            &json!(7),
            &json!("glm-5.2")
        )
    );
}

#[test]
fn extra_info_does_not_double_reasoning() {
    let out = convert_str(
        "event:output\ndata:{\"response\":\"\",\"reasoning_content\":\"think\",\"tool_calls\":null}\n\n\
         event:extra_info\ndata:{\"reasoning_content\":\"think\"}\n\n\
         event:done\ndata:{\"finish_reason\":\"stop\"}\n\n",
    );
    let reasoning: String = deltas(&out)
        .iter()
        .filter_map(|d| d["reasoning_content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(reasoning, "think");
}

#[test]
fn text_and_tool_call_in_one_output_frame_emit_both() {
    let mut out = BytesMut::new();
    let class = leg().event(
        &ev(
            "output",
            r#"{"response":"Looking.","reasoning_content":null,"tool_calls":[{"index":0,"id":"c1","type":"function","function_call":{"name":"glob","arguments":"{}"}}]}"#,
        ),
        &mut out,
    );
    assert_eq!(class, FrameClass::Content);
    let c = chunks(&out);
    assert_eq!(c.len(), 2, "text and the call travel as two chunks");
    assert_eq!(c[0]["choices"][0]["delta"], json!({"content":"Looking."}));
    assert_eq!(c[0]["x_solo"], json!({"continues": true}));
    assert_eq!(
        c[1]["choices"][0]["delta"]["tool_calls"],
        json!([{"index":0,"id":"c1","type":"function","function":{"name":"glob","arguments":"{}"}}])
    );
}

#[test]
fn later_fragments_never_send_empty_id_or_name_and_drop_solo_only_members() {
    let mut out = BytesMut::new();
    leg().event(
        &ev(
            "output",
            r#"{"response":"","tool_calls":[{"index":0,"id":"","type":"function","namespace":"fs","partial_arguments":"{","function_call":{"name":"","arguments":"{\"a\""}}]}"#,
        ),
        &mut out,
    );
    let c = &chunks(&out)[0];
    assert_eq!(
        c["choices"][0]["delta"]["tool_calls"],
        json!([{"index":0,"function":{"arguments":"{\"a\""}}])
    );
    assert_eq!(
        c["x_solo"]["tools"],
        json!([{"namespace":"fs","partial_arguments":"{"}])
    );
}

#[test]
fn parallel_calls_keep_their_index_and_missing_index_uses_position() {
    let mut out = BytesMut::new();
    leg().event(
        &ev(
            "output",
            r#"{"tool_calls":[{"id":"a","function_call":{"name":"x","arguments":""}},{"id":"b","function_call":{"name":"y","arguments":""}},{"index":5,"id":"c","function_call":{"name":"z","arguments":""}}]}"#,
        ),
        &mut out,
    );
    let calls = chunks(&out)[0]["choices"][0]["delta"]["tool_calls"].clone();
    let indexes: Vec<u64> = calls
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(indexes, vec![0, 1, 5]);
}

#[test]
fn token_usage_becomes_a_standard_usage_chunk_at_the_end() {
    let out = convert_str(
        "event:output\ndata:{\"response\":\"x\"}\n\n\
         event:token_usage\ndata:{\"prompt_tokens\":21,\"completion_tokens\":142,\"total_tokens\":163,\"reasoning_tokens\":135}\n\n\
         event:done\ndata:{\"finish_reason\":\"stop\"}\n\n",
    );
    check_openai(&out).unwrap();
    let c = chunks(&out);
    let n = c.len();
    assert_eq!(c[n - 1], json!("[DONE]"));
    assert_eq!(c[n - 2]["choices"], json!([]));
    assert_eq!(
        c[n - 2]["usage"],
        json!({"prompt_tokens":21,"completion_tokens":142,"total_tokens":163,
            "completion_tokens_details":{"reasoning_tokens":135}})
    );
    assert_eq!(c[n - 3]["choices"][0]["finish_reason"], "stop");
    assert_eq!(c[n - 3]["choices"][0]["delta"], json!({}));
}

#[test]
fn include_usage_false_leaves_the_usage_chunk_out() {
    let mut t = ToOpenAi::with_identity(
        &json!({"model":"m","stream_options":{"include_usage":false}}),
        "chatcmpl-x",
        1,
    );
    let mut out = BytesMut::new();
    t.event(&ev("token_usage", r#"{"prompt_tokens":1}"#), &mut out);
    t.event(&ev("done", r#"{"finish_reason":"stop"}"#), &mut out);
    assert!(chunks(&out).iter().all(|c| c.get("usage").is_none()));
}

#[test]
fn done_after_tool_calls_finishes_with_tool_calls_and_carries_the_real_reason() {
    let out = convert_str(
        "event:output\ndata:{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function_call\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}\n\n\
         event:done\ndata:{\"finish_reason\":\"stop\"}\n\n",
    );
    let c = chunks(&out);
    let carrier = c.iter().find(|c| c["x_solo"]["event"] == "done").unwrap();
    assert_eq!(carrier["x_solo"]["data"], json!({"finish_reason":"stop"}));
    let finish = c
        .iter()
        .find(|c| c["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn done_ends_the_stream_and_later_events_write_nothing() {
    let mut t = leg();
    let mut out = BytesMut::new();
    assert_eq!(
        t.event(&ev("done", r#"{"finish_reason":"stop"}"#), &mut out),
        FrameClass::End
    );
    let len = out.len();
    assert_eq!(
        t.event(&ev("output", r#"{"response":"late"}"#), &mut out),
        FrameClass::End
    );
    assert_eq!(t.eof(&mut out), FrameClass::End);
    t.fail(&Failure::new(FailureCode::Timeout, "late"), &mut out);
    assert_eq!(out.len(), len);
    check_openai(&out).unwrap();
}

#[test]
fn bare_done_marker_from_trae_ends_too() {
    let mut out = BytesMut::new();
    let class = leg().event(&SseEvent::data("[DONE]"), &mut out);
    assert_eq!(class, FrameClass::End);
    check_openai(&out).unwrap();
}

#[test]
fn error_then_done_is_a_quota_error_not_a_success() {
    let mut t = leg();
    let mut out = BytesMut::new();
    let class = t.event(
        &ev(
            "error",
            r#"{"code":4008,"message":"Your requests have exceeded the quota.","extra":null}"#,
        ),
        &mut out,
    );
    let FrameClass::Error(f) = class else {
        panic!("not an error: {class:?}")
    };
    assert_eq!(f.code, FailureCode::Quota);
    assert_eq!(f.upstream_code.as_deref(), Some("4008"));
    assert_eq!(f.message, "Your requests have exceeded the quota.");
    let later = t.event(&ev("done", r#"{"finish_reason":"stop"}"#), &mut out);
    assert!(
        matches!(later, FrameClass::Error(_)),
        "a done after an error is no success"
    );
    check_openai(&out).unwrap();
    let c = chunks(&out);
    assert_eq!(c[0]["x_solo"]["event"], "error");
    assert_eq!(c[0]["x_solo"]["data"]["code"], 4008);
    assert_eq!(
        c[1],
        json!({"error":{"code":"4008","message":"Your requests have exceeded the quota.","type":"insufficient_quota"}})
    );
    assert_eq!(c[2], json!("[DONE]"));
    assert!(c.iter().all(|c| c
        .pointer("/choices/0/finish_reason")
        .is_none_or(Value::is_null)));
}

#[test]
fn prompt_too_long_is_context_window_exceeded() {
    let mut out = BytesMut::new();
    let class = leg().event(
        &ev("error", r#"{"code":4022,"message":"too long"}"#),
        &mut out,
    );
    assert!(matches!(class, FrameClass::Error(f) if f.code == FailureCode::ContextWindowExceeded));
}

#[test]
fn bookkeeping_events_are_carried_and_are_not_content() {
    for name in [
        "metadata",
        "timing_cost",
        "extra_info",
        "request_wait_in_queue",
        "queue_begin",
        "queue_end",
        "queue_continue",
        "suggested_questions",
    ] {
        let mut out = BytesMut::new();
        let class = leg().event(&ev(name, r#"{"k":1}"#), &mut out);
        assert_eq!(class, FrameClass::NotContent, "{name}");
        let c = &chunks(&out)[0];
        assert_eq!(c["x_solo"], json!({"event": name, "data": {"k":1}}));
        assert_eq!(
            c["choices"][0]["delta"],
            json!({"role":"assistant","content":""})
        );
    }
}

#[test]
fn an_output_with_nothing_to_stream_is_not_content() {
    for data in [
        r#"{"response":"","reasoning_content":null,"tool_calls":null}"#,
        r#"{"response":"","reasoning_content":"","tool_calls":[]}"#,
        r#"{"response":7}"#,
        "not json",
    ] {
        let mut out = BytesMut::new();
        assert_eq!(
            leg().event(&ev("output", data), &mut out),
            FrameClass::NotContent,
            "{data}"
        );
        assert!(chunks(&out)[0]["x_solo"]["event"] == "output");
    }
}

#[test]
fn a_cut_stream_is_a_transport_error_and_fail_closes_it_once() {
    let mut t = leg();
    let mut out = BytesMut::new();
    t.event(&ev("output", r#"{"response":"half"}"#), &mut out);
    let FrameClass::Error(f) = t.eof(&mut out) else {
        panic!("a cut stream must be an error")
    };
    assert_eq!(f.code, FailureCode::Transport);
    t.fail(&f, &mut out);
    t.fail(&f, &mut out);
    check_openai(&out).unwrap();
    let c = chunks(&out);
    assert_eq!(c[1]["x_solo"]["data"]["code"], "TRANSPORT");
    assert_eq!(c[2]["error"]["code"], "TRANSPORT");
}

#[test]
fn fail_reports_the_business_code_when_the_failure_has_one() {
    let mut out = BytesMut::new();
    let f = Failure::new(FailureCode::AutoRoutesExhausted, "all routes failed")
        .with_upstream_code("4008");
    leg().fail(&f, &mut out);
    let c = chunks(&out);
    assert_eq!(c[0]["x_solo"]["data"]["code"], 4008);
    assert_eq!(
        c[0]["x_solo"]["data"]["extra"]["failure"],
        "AUTO_ROUTES_EXHAUSTED"
    );
    assert_eq!(c[1]["error"]["code"], "4008");
}

#[test]
fn strings_are_escaped_and_multi_line_data_stays_one_line() {
    let out = convert_str(
        "event:output\ndata:{\"response\":\"a\\\"b\\\\c\\n\\u0001\",\ndata:\"x\":[1,\ndata:2]}\n\n\
         event:done\ndata:{\"finish_reason\":\"stop\"}\n\n",
    );
    check_openai(&out).unwrap();
    let c = chunks(&out);
    assert_eq!(c[0]["choices"][0]["delta"]["content"], "a\"b\\c\n\u{1}");
    assert_eq!(c[0]["x_solo"]["output"], json!({"x":[1,2]}));
}

#[test]
fn a_changed_event_id_travels_with_the_frame_it_changed_at() {
    let out = convert_str(
        "id:4\nevent:output\ndata:{\"response\":\"a\"}\n\nevent:output\ndata:{\"response\":\"b\"}\n\n",
    );
    let c = chunks(&out);
    assert_eq!(c[0]["x_solo"], json!({"id":"4"}));
    assert!(c[1].get("x_solo").is_none());
}

#[test]
fn the_shim_builds_a_return_leg_with_a_fresh_chatcmpl_id() {
    let mut t = TraeShim.return_leg(&json!({"model":"glm"}));
    let mut out = BytesMut::new();
    t.event(&ev("output", r#"{"response":"x"}"#), &mut out);
    let c = &chunks(&out)[0];
    assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(c["model"], "glm");
    assert!(c["created"].as_u64().unwrap() > 1_700_000_000);
}

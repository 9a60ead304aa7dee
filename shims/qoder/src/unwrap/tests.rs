//! Unwrap rules, one test each, on the fixtures and on hand-made frames.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use shimgate_shim_api::sse::{parse_all, SseEvent, SseParser};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What one run produced: the bytes written, each event's class, and what
/// `eof` said when the stream ran out without an end.
#[derive(Debug, PartialEq)]
struct Run {
    out: Vec<u8>,
    classes: Vec<FrameClass>,
    eof: Option<FrameClass>,
}

/// Drives `translator` the way the chain does: parser, events until an end
/// or error, `eof` if the input runs out first.
fn drive(translator: &mut impl StreamTranslator, chunks: &[&[u8]]) -> Run {
    let mut parser = SseParser::new();
    let mut out = BytesMut::new();
    let mut classes = Vec::new();
    for chunk in chunks {
        parser.push(Bytes::copy_from_slice(chunk));
        while let Some(ev) = parser.next_event().unwrap() {
            let class = translator.event(&ev, &mut out);
            let stop = matches!(class, FrameClass::End | FrameClass::Error(_));
            classes.push(class);
            if stop {
                return Run {
                    out: out.to_vec(),
                    classes,
                    eof: None,
                };
            }
        }
    }
    let eof = Some(translator.eof(&mut out));
    Run {
        out: out.to_vec(),
        classes,
        eof,
    }
}

fn unwrap_all(input: &[u8]) -> Run {
    drive(&mut QoderReturnLeg::default(), &[input])
}

/// Output is whole frames, each exactly one `data:` line, no envelope left.
fn assert_well_formed(out: &[u8]) {
    let text = std::str::from_utf8(out).unwrap();
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "unterminated: {text:?}"
    );
    for frame in text.split_terminator("\n\n") {
        assert!(frame.starts_with("data: "), "not a data frame: {frame:?}");
        assert!(
            !frame.contains('\n') && !frame.contains('\r'),
            "two lines: {frame:?}"
        );
        assert!(
            !frame.contains("statusCodeValue"),
            "envelope left: {frame:?}"
        );
    }
}

/// Well formed and closed by exactly one `[DONE]`.
fn assert_closed(out: &[u8]) {
    assert_well_formed(out);
    let events = parse_all(out).unwrap();
    let done = events.iter().filter(|e| &e.data[..] == b"[DONE]").count();
    assert_eq!(
        done,
        1,
        "[DONE] count in {:?}",
        String::from_utf8_lossy(out)
    );
    assert_eq!(&events.last().unwrap().data[..], b"[DONE]");
}

fn data_frames(out: &[u8]) -> Vec<String> {
    parse_all(out)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.data.to_vec()).unwrap())
        .collect()
}

fn envelope(body: &str) -> String {
    let env = json!({"headers":{"Content-Type":["application/json"]},"body":body,"statusCodeValue":200,"statusCode":"OK"});
    format!("data:{env}\n\n")
}

fn failure_of(run: &Run) -> Failure {
    match run.classes.last() {
        Some(FrameClass::Error(f)) => f.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn envelope_text_stream_unwraps_to_bare_chunks() {
    let input = fixture("text_event_finish.sse");
    let run = unwrap_all(&input);
    assert_closed(&run.out);
    assert_eq!(run.classes.last(), Some(&FrameClass::End));
    // Every inner body that is a chunk arrives, decoded, in order.
    let expected: Vec<Value> = parse_all(&input)
        .unwrap()
        .iter()
        .filter_map(|e| serde_json::from_slice::<Value>(&e.data).ok())
        .filter_map(|env| env["body"].as_str().map(str::to_owned))
        .filter_map(|body| serde_json::from_str::<Value>(&body).ok())
        .filter(|inner| inner.get("choices").is_some())
        .collect();
    let frames = data_frames(&run.out);
    let got: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    assert_eq!(got, expected);
    assert_eq!(got.len(), 8, "role + 5 texts + finish + usage");
    let content = run
        .classes
        .iter()
        .filter(|c| **c == FrameClass::Content)
        .count();
    assert_eq!(content, 5);
}

#[test]
fn unwrapped_text_keeps_quotes_breaks_and_unicode() {
    let run = unwrap_all(&fixture("text_event_finish.sse"));
    let text: String = data_frames(&run.out)
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(f).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        text,
        "Hello! Here is a \"quoted\" word, a line\nbreak, a tab\tand a backslash \\ — unicode ✓ 你好 😀."
    );
}

#[test]
fn envelope_heartbeat_is_dropped() {
    for body in [
        r#""body":null"#,
        r#""body":"""#,
        r#""body":"null""#,
        r#""body":"{}""#,
        r#""body":" { } ""#,
        r#""body":{}"#,
        r#""headers":{}"#,
    ] {
        let frame = format!("data:{{{body},\"statusCodeValue\":200}}\n\n");
        let run = unwrap_all(frame.as_bytes());
        assert_eq!(run.classes, vec![FrameClass::NotContent], "{frame}");
        assert!(run.out.is_empty(), "{frame} wrote {:?}", run.out);
    }
}

#[test]
fn timing_frame_without_event_name_is_dropped() {
    let run = unwrap_all(
        b"data:{\"firstTokenDuration\":414,\"totalDuration\":571,\"serverDuration\":88}\n\n",
    );
    assert_eq!(run.classes, vec![FrameClass::NotContent]);
    assert!(run.out.is_empty());
}

#[test]
fn event_finish_ends_with_one_done() {
    let run =
        unwrap_all(b"event:finish\ndata:{\"firstTokenDuration\":1811,\"totalDuration\":2487}\n\n");
    assert_eq!(run.classes, vec![FrameClass::End]);
    assert_eq!(run.out, b"data: [DONE]\n\n");
}

#[test]
fn body_done_ends_and_nothing_after_it_is_read() {
    let run = unwrap_all(&fixture("body_done.sse"));
    assert_closed(&run.out);
    assert_eq!(run.classes.last(), Some(&FrameClass::End));
    assert_eq!(run.eof, None, "stopped at the sentinel, not at EOF");
    assert_eq!(
        data_frames(&run.out).len(),
        5,
        "role, text, finish, usage, [DONE]"
    );
}

#[test]
fn bare_done_ends_the_stream() {
    let run = unwrap_all(&fixture("bare_done.sse"));
    assert_closed(&run.out);
    assert_eq!(run.classes.last(), Some(&FrameClass::End));
    assert_eq!(run.eof, None);
}

#[test]
fn reasoning_and_tool_call_fragments_are_content() {
    let run = unwrap_all(&fixture("reasoning_tool_call.sse"));
    assert_closed(&run.out);
    let classes = &run.classes;
    assert_eq!(classes[0], FrameClass::NotContent, "role frame");
    assert!(
        classes[1..8].iter().all(|c| *c == FrameClass::Content),
        "{classes:?}"
    );
    assert_eq!(classes[8], FrameClass::NotContent, "finish frame");
    let frames = data_frames(&run.out);
    let first_call: Value = serde_json::from_str(&frames[4]).unwrap();
    let call = &first_call["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["id"], "toolu_bdrk_01HzQ8vW9");
    assert_eq!(call["function"]["name"], "list_dir");
}

#[test]
fn finish_then_eof_is_a_complete_answer() {
    let run = unwrap_all(&fixture("usage_last_frame_eof.sse"));
    assert_eq!(run.eof, Some(FrameClass::End));
    assert_closed(&run.out);
    let frames = data_frames(&run.out);
    let last: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
    assert_eq!(last["usage"]["prompt_tokens"], 1834);
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
}

#[test]
fn usage_on_the_finish_frame_then_timing_finish() {
    let run = unwrap_all(&fixture("usage_last_frame_finish.sse"));
    assert_eq!(run.classes.last(), Some(&FrameClass::End));
    assert_closed(&run.out);
}

#[test]
fn eof_without_finish_is_a_cut_and_fail_closes_it() {
    let mut leg = QoderReturnLeg::default();
    let mut out = BytesMut::new();
    for ev in parse_all(&fixture("cut_without_end.sse")).unwrap() {
        leg.event(&ev, &mut out);
    }
    let written = out.len();
    let class = leg.eof(&mut out);
    assert!(matches!(&class, FrameClass::Error(f) if f.code == FailureCode::Transport));
    assert_eq!(out.len(), written, "a cut writes nothing itself");
    let failure = Failure::new(FailureCode::Transport, "reset by peer");
    leg.fail(&failure, &mut out);
    assert_closed(&out);
    let frames = data_frames(&out);
    let error: Value = serde_json::from_str(&frames[frames.len() - 2]).unwrap();
    assert_eq!(
        error,
        json!({"error":{"code":"TRANSPORT","message":"reset by peer","type":"shimgate_error"},
            "choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})
    );
}

#[test]
fn duplicate_request_error_is_flattened() {
    let run = unwrap_all(&fixture("error_103_duplicate.sse"));
    assert_closed(&run.out);
    let failure = failure_of(&run);
    assert_eq!(failure.code, FailureCode::Duplicate);
    assert_eq!(failure.status, Some(403));
    assert_eq!(failure.upstream_code.as_deref(), Some("103"));
    assert_eq!(
        data_frames(&run.out),
        vec![
            r#"{"error":{"code":"103","message":"Duplicate request","type":"model_error"},"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            "[DONE]"
        ]
    );
}

#[test]
fn daily_limit_error_is_quota() {
    let run = unwrap_all(&fixture("error_110_daily_limit.sse"));
    assert_closed(&run.out);
    assert_eq!(failure_of(&run).code, FailureCode::Quota);
}

#[test]
fn triple_nested_queue_throttle_gives_innermost_code_and_wait() {
    let run = unwrap_all(&fixture("error_10605_queue.sse"));
    assert_closed(&run.out);
    let failure = failure_of(&run);
    assert_eq!(failure.code, FailureCode::RateLimit);
    assert_eq!(failure.retry_after, Some(Duration::from_secs(30)));
    assert_eq!(failure.upstream_code.as_deref(), Some("10605"));
    let frame: Value = serde_json::from_str(&data_frames(&run.out)[0]).unwrap();
    assert_eq!(frame["error"]["code"], "10605");
    assert_eq!(frame["error"]["type"], "model_error");
    let inner: Value = serde_json::from_str(frame["error"]["message"].as_str().unwrap()).unwrap();
    assert_eq!(inner["retryAfterSeconds"], 30);
}

#[test]
fn inner_error_in_a_200_envelope_is_raised() {
    let run = unwrap_all(&fixture("error_inner_fail.sse"));
    assert_closed(&run.out);
    let failure = failure_of(&run);
    assert_eq!(failure.code, FailureCode::Unsupported);
    assert_eq!(failure.upstream_code.as_deref(), Some("400"));
    let frame: Value = serde_json::from_str(&data_frames(&run.out)[1]).unwrap();
    assert_eq!(
        frame["error"]["message"],
        "[FAIL]node:oa_qwen-plus-2025-04-28 msg:Execution failed: null"
    );
}

#[test]
fn error_after_content_is_a_server_error_after_the_content() {
    let run = unwrap_all(&fixture("error_after_content.sse"));
    assert_closed(&run.out);
    assert_eq!(run.classes[1], FrameClass::Content);
    let failure = failure_of(&run);
    assert_eq!(failure.code, FailureCode::Server);
    assert_eq!(failure.status, Some(500));
}

#[test]
fn crlf_stream_unwraps_like_its_lf_twin() {
    let crlf = fixture("crlf.sse");
    assert!(crlf.windows(2).any(|w| w == b"\r\n"));
    let lf = String::from_utf8(crlf.clone())
        .unwrap()
        .replace("\r\n", "\n");
    let a = unwrap_all(&crlf);
    assert_eq!(a, unwrap_all(lf.as_bytes()));
    assert_closed(&a.out);
}

const FIXTURES: [&str; 13] = [
    "text_event_finish.sse",
    "body_done.sse",
    "bare_done.sse",
    "reasoning_tool_call.sse",
    "usage_last_frame_eof.sse",
    "usage_last_frame_finish.sse",
    "error_103_duplicate.sse",
    "error_110_daily_limit.sse",
    "error_10605_queue.sse",
    "error_inner_fail.sse",
    "error_after_content.sse",
    "cut_without_end.sse",
    "crlf.sse",
];

#[test]
fn every_two_way_split_gives_the_same_output() {
    for name in FIXTURES {
        let input = fixture(name);
        let whole = unwrap_all(&input);
        for at in 0..=input.len() {
            let (a, b) = input.split_at(at);
            assert_eq!(
                drive(&mut QoderReturnLeg::default(), &[a, b]),
                whole,
                "{name} split at {at}"
            );
        }
    }
}

#[test]
fn byte_by_byte_feeding_gives_the_same_output() {
    for name in FIXTURES {
        let input = fixture(name);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(
            drive(&mut QoderReturnLeg::default(), &bytes),
            unwrap_all(&input),
            "{name}"
        );
    }
}

#[test]
fn every_fixture_closes_with_one_done_once_failures_are_reported() {
    for name in FIXTURES {
        let mut leg = QoderReturnLeg::default();
        let run = drive(&mut leg, &[&fixture(name)]);
        let mut out = BytesMut::from(&run.out[..]);
        if let Some(FrameClass::Error(f)) = &run.eof {
            leg.fail(f, &mut out);
        }
        assert_closed(&out);
    }
}

#[test]
fn bare_openai_frames_pass_through_unchanged() {
    let chunk = r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi \"there\""}}]}"#;
    let input = format!("data: {chunk}\n\ndata: [DONE]\n\n");
    let run = unwrap_all(input.as_bytes());
    assert_eq!(run.out, input.as_bytes());
    assert_eq!(run.classes, vec![FrameClass::Content, FrameClass::End]);
}

#[test]
fn bare_openai_error_frame_passes_and_fails_the_attempt() {
    let frame =
        r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"429"}}"#;
    let run = unwrap_all(format!("data: {frame}\n\n").as_bytes());
    assert_eq!(data_frames(&run.out), vec![frame, "[DONE]"]);
    assert_eq!(failure_of(&run).code, FailureCode::RateLimit);
}

#[test]
fn bare_code_and_message_without_choices_is_an_error() {
    let run = unwrap_all(b"data: {\"code\":\"103\",\"message\":\"Duplicate request\"}\n\n");
    assert_closed(&run.out);
    assert_eq!(failure_of(&run).code, FailureCode::Duplicate);
}

#[test]
fn error_event_is_an_error() {
    let run =
        unwrap_all(b"event: error\ndata: {\"code\":\"101\",\"message\":\"Signature invalid\"}\n\n");
    assert_closed(&run.out);
    assert_eq!(failure_of(&run).code, FailureCode::Auth);
}

#[test]
fn usage_only_chunks_are_dropped_when_the_request_refused_usage() {
    let input = fixture("text_event_finish.sse");
    let refused = json!({"stream_options":{"include_usage":false}});
    let kept = drive(&mut QoderReturnLeg::default(), &[&input]);
    let dropped = drive(&mut QoderReturnLeg::for_request(&refused), &[&input]);
    assert_eq!(
        data_frames(&kept.out).len(),
        data_frames(&dropped.out).len() + 1
    );
    assert!(!String::from_utf8_lossy(&dropped.out).contains("prompt_tokens"));
    // Usage that shares the finish frame is kept whatever the request said.
    let on_finish = drive(
        &mut QoderReturnLeg::for_request(&refused),
        &[&fixture("usage_last_frame_eof.sse")],
    );
    assert!(String::from_utf8_lossy(&on_finish.out).contains("prompt_tokens"));
    let asked = json!({"stream_options":{"include_usage":true}});
    assert_eq!(UsagePolicy::for_request(&asked), UsagePolicy::Keep);
    assert_eq!(UsagePolicy::for_request(&json!({})), UsagePolicy::Keep);
}

#[test]
fn envelope_split_over_two_data_lines_is_one_line_out() {
    let body = r#"{"choices":[{"delta":{"content":"joined"}}]}"#;
    let env = json!({"body": body, "statusCodeValue": 200}).to_string();
    let (a, b) = env.split_at(env.find("\"statusCodeValue").unwrap());
    let input = format!("data:{a}\ndata:{b}\n\n");
    let run = unwrap_all(input.as_bytes());
    assert_eq!(run.classes, vec![FrameClass::Content]);
    assert_eq!(data_frames(&run.out), vec![body]);
    assert_well_formed(&run.out);
}

#[test]
fn raw_line_breaks_in_the_inner_body_stay_on_one_line() {
    // Pretty-printed inner JSON, and a raw break inside a string.
    let body = "{\n  \"choices\": [{\"delta\": {\"content\": \"a\nb\"}}]\n}";
    let run = unwrap_all(envelope(body).as_bytes());
    assert_well_formed(&run.out);
    assert_eq!(run.classes, vec![FrameClass::Content]);
    let frame: Value = serde_json::from_str(&data_frames(&run.out)[0]).unwrap();
    assert_eq!(frame["choices"][0]["delta"]["content"], "a\nb");
}

#[test]
fn nothing_is_written_after_the_end() {
    let mut leg = QoderReturnLeg::default();
    let mut out = BytesMut::new();
    assert_eq!(
        leg.event(&SseEvent::data("[DONE]"), &mut out),
        FrameClass::End
    );
    let after = SseEvent::data(
        envelope(r#"{"choices":[{"delta":{"content":"late"}}]}"#)
            .trim_start_matches("data:")
            .trim_end()
            .to_owned(),
    );
    assert_eq!(leg.event(&after, &mut out), FrameClass::End);
    assert_eq!(leg.eof(&mut out), FrameClass::End);
    leg.fail(&Failure::new(FailureCode::Timeout, "late"), &mut out);
    assert_eq!(&out[..], b"data: [DONE]\n\n");
}

#[test]
fn text_that_is_not_json_passes_on_one_line() {
    let run = unwrap_all(b"data: hello\ndata: world\n\n");
    assert_eq!(run.classes, vec![FrameClass::NotContent]);
    assert_eq!(run.out, b"data: hello world\n\n");
}

#[test]
fn escaped_envelope_keys_take_the_serde_path_with_the_same_result() {
    let body = r#"{"choices":[{"delta":{"content":"x"}}]}"#;
    let plain = unwrap_all(envelope(body).as_bytes());
    let escaped = envelope(body).replace("\"body\"", "\"bo\\u0064y\"");
    assert_eq!(unwrap_all(escaped.as_bytes()), plain);
}

#[test]
fn envelope_with_a_bad_escape_is_passed_on_as_text() {
    let input = b"data:{\"body\":\"{\\x}\",\"statusCodeValue\":200}\n\n";
    let run = unwrap_all(input);
    assert_eq!(run.classes, vec![FrameClass::NotContent]);
    assert_well_formed_lenient(&run.out);
}

/// Well formed, envelope keys allowed (text that was never JSON).
fn assert_well_formed_lenient(out: &[u8]) {
    let text = std::str::from_utf8(out).unwrap();
    for frame in text.split_terminator("\n\n") {
        assert!(
            frame.starts_with("data: ") && !frame.contains('\n'),
            "{frame:?}"
        );
    }
}

#[test]
fn error_envelope_with_an_unparsable_body_uses_the_text() {
    let run = unwrap_all(b"data:{\"body\":\"Bad Gateway\",\"statusCodeValue\":502}\n\n");
    let failure = failure_of(&run);
    assert_eq!(failure.code, FailureCode::Server);
    let frame: Value = serde_json::from_str(&data_frames(&run.out)[0]).unwrap();
    assert_eq!(
        frame["error"],
        json!({"code":"502","message":"Bad Gateway","type":"model_error"})
    );
}

#[test]
fn ingress_relays_bare_frames_and_ends_once() {
    let input = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n\
                 data: {\"choices\":[{\"delta\":{\"content\":\"ok\"}}]}\n\n\
                 data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5}}\n\n\
                 data: [DONE]\n\n";
    let run = drive(&mut QoderIngress::new(), &[input.as_bytes()]);
    assert_eq!(run.out, input.as_bytes());
    assert_eq!(
        run.classes,
        vec![
            FrameClass::NotContent,
            FrameClass::Content,
            FrameClass::NotContent,
            FrameClass::End
        ]
    );
}

#[test]
fn ingress_error_frame_is_an_error() {
    let run = drive(
        &mut QoderIngress::new(),
        &[b"data: {\"error\":{\"code\":\"QUOTA\",\"message\":\"insufficient balance\"}}\n\n"],
    );
    assert_closed(&run.out);
    assert_eq!(failure_of(&run).code, FailureCode::Quota);
}

#[test]
fn ingress_fail_writes_an_error_frame_and_done() {
    let mut ingress = QoderIngress::new();
    let mut out = BytesMut::new();
    ingress.fail(
        &Failure::new(FailureCode::AutoRoutesExhausted, "all routes failed"),
        &mut out,
    );
    assert_closed(&out);
    assert!(String::from_utf8_lossy(&out).contains("AUTO_ROUTES_EXHAUSTED"));
}

/// Drives a fresh return leg over `input`; the run and its meter.
fn unwrap_metered(pieces: &[&[u8]]) -> (Run, Meter) {
    let mut leg = QoderReturnLeg::default();
    let run = drive(&mut leg, pieces);
    (run, leg.meter())
}

#[test]
fn non_json_envelope_body_is_dropped_and_counted() {
    let body = "<html><head><title>502 Bad Gateway</title></head><body>nginx <script>x()</script></body></html>";
    for chunks in [1, 7] {
        let input = envelope(body);
        let pieces: Vec<&[u8]> = input.as_bytes().chunks(chunks).collect();
        let (run, meter) = unwrap_metered(&pieces);
        assert_eq!(run.classes, vec![FrameClass::NotContent]);
        assert!(run.out.is_empty(), "{}", String::from_utf8_lossy(&run.out));
        assert_eq!(meter.unreadable_frames, 1);
    }
}

#[test]
fn non_json_envelope_body_between_content_is_dropped_and_the_answer_goes_on() {
    let input = [
        envelope(r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#),
        envelope("this is not json <script>"),
        envelope(r#"{"choices":[{"index":0,"delta":{"content":"lo"}}]}"#),
        envelope("[DONE]"),
    ]
    .concat();
    let (run, meter) = unwrap_metered(&[input.as_bytes()]);
    assert_eq!(
        run.classes,
        vec![
            FrameClass::Content,
            FrameClass::NotContent,
            FrameClass::Content,
            FrameClass::End
        ]
    );
    let text = String::from_utf8_lossy(&run.out);
    assert!(
        !text.contains("not json") && !text.contains("script"),
        "{text}"
    );
    assert_eq!(data_frames(&run.out).len(), 3, "{text}");
    assert_closed(&run.out);
    assert_eq!(meter.unreadable_frames, 1);
}

#[test]
fn envelope_bodies_that_are_json_but_no_chunk_are_dropped_too() {
    for body in ["42", "[1,2]", "\"text\"", "true"] {
        let (run, meter) = unwrap_metered(&[envelope(body).as_bytes()]);
        assert_eq!(run.classes, vec![FrameClass::NotContent], "{body}");
        assert!(run.out.is_empty(), "{body}");
        assert_eq!(meter.unreadable_frames, 1, "{body}");
    }
    // The same as a non-string body.
    let (run, meter) = unwrap_metered(&[b"data:{\"body\":[1,2],\"statusCodeValue\":200}\n\n"]);
    assert_eq!(run.classes, vec![FrameClass::NotContent]);
    assert_eq!(meter.unreadable_frames, 1);
}

#[test]
fn envelope_body_with_an_out_of_range_number_is_dropped_not_a_broken_frame() {
    let body =
        r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":{"prompt_tokens":1e400}}"#;
    let (run, meter) = unwrap_metered(&[envelope(body).as_bytes()]);
    assert_eq!(run.classes, vec![FrameClass::NotContent]);
    assert!(run.out.is_empty());
    assert_eq!(meter.unreadable_frames, 1);
}

#[test]
fn heartbeats_and_the_end_stay_what_they_were_next_to_unreadable_bodies() {
    for body in ["null", "", " ", "{}"] {
        let run = unwrap_all(envelope(body).as_bytes());
        assert_eq!(run.classes, vec![FrameClass::NotContent], "{body:?}");
        assert!(run.out.is_empty(), "{body:?}");
    }
    let run = unwrap_all(envelope("[DONE]").as_bytes());
    assert_eq!(run.classes, vec![FrameClass::End]);
    assert_eq!(run.out, b"data: [DONE]\n\n");
}

#[test]
fn bare_chunk_with_an_out_of_range_number_is_still_passed_as_text() {
    let run = unwrap_all(b"data: {\"choices\":[],\"x\":1e400}\n\n");
    assert_eq!(run.classes, vec![FrameClass::NotContent]);
    assert_eq!(run.out, b"data: {\"choices\":[],\"x\":1e400}\n\n");
}

#[test]
fn non_json_body_fuzz_seed_drops_the_page_and_ends_cut() {
    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/qoder_unwrap/non_json_body"
    );
    let bytes = std::fs::read(seed).unwrap();
    let (run, meter) = unwrap_metered(&[&bytes[1..]]);
    assert_eq!(run.classes[1], FrameClass::Content);
    assert_eq!(meter.unreadable_frames, 1);
    assert!(
        !String::from_utf8_lossy(&run.out).contains("DOCTYPE"),
        "the page never reaches the proxy"
    );
    // No finish and no `[DONE]` after the dropped page: a cut stream.
    let cut = |run: &Run| {
        assert!(!String::from_utf8_lossy(&run.out).contains("DOCTYPE"));
        assert!(
            matches!(&run.eof, Some(FrameClass::Error(f)) if f.code == FailureCode::Transport),
            "{:?}",
            run.eof
        );
    };
    cut(&run);
    // The fuzz target's other translators, whole and chunked.
    let no_usage = json!({"stream_options": {"include_usage": false}});
    for size in [bytes.len(), 7] {
        let pieces: Vec<&[u8]> = bytes[1..].chunks(size).collect();
        cut(&drive(&mut QoderReturnLeg::for_request(&no_usage), &pieces));
        cut(&drive(&mut QoderIngress::new(), &pieces));
    }
}

#[test]
fn an_envelope_spelled_with_escaped_keys_is_still_unwrapped() {
    // Bare frames skip the envelope scan; an escaped key may still spell
    // `body` or `statusCodeValue`, so such a frame is scanned as before.
    let inner = r#"{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}"#;
    let frame = format!("data:{{\"b\\u006fdy\":\"{inner}\",\"st\\u0061tusCodeValue\":200}}\n\n");
    let run = unwrap_all(frame.as_bytes());
    assert_eq!(
        String::from_utf8_lossy(&run.out),
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
    );
    assert_eq!(run.classes, vec![FrameClass::Content]);
    // A bare chunk mentioning neither key passes as it is.
    let bare = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"no envelope\"}}]}\n\n";
    assert_eq!(unwrap_all(bare.as_bytes()).out, bare.as_bytes());
}

#[test]
fn the_cached_part_of_the_prompt_is_metered_where_the_usage_names_it() {
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":900,"completion_tokens":7,"prompt_tokens_details":{"cacheable_tokens":900,"cached_tokens":640}}}"#;
    let (_, meter) = unwrap_metered(&[envelope(usage).as_bytes()]);
    assert_eq!(
        (
            meter.prompt_tokens,
            meter.completion_tokens,
            meter.cached_tokens
        ),
        (Some(900), Some(7), Some(640))
    );
    // Escaped keys take the parsed way, with the same reading.
    let escaped = r#"{"choices":[],"usage":{"prompt_tokens":900,"prompt_tokens_details":{"c\u0061ched_tokens":640}}}"#;
    let (_, meter) = unwrap_metered(&[envelope(escaped).as_bytes()]);
    assert_eq!(meter.cached_tokens, Some(640));
    // Not reported, or not a count: nothing is made up.
    for odd in [
        r#"{"choices":[],"usage":{"prompt_tokens":9}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":"5"}}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":-5}}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}"#,
    ] {
        let (_, meter) = unwrap_metered(&[envelope(odd).as_bytes()]);
        assert_eq!(meter.cached_tokens, None, "{odd}");
        assert_eq!(meter.prompt_tokens, Some(9), "{odd}");
    }
}

#[test]
fn a_frame_with_a_line_break_is_read_as_it_is_written() {
    // Found by the qoder_model_wire fuzz target: a raw line break inside
    // `body` (and a member the strict reader refuses) made this broken
    // JSON to the return leg, which passed it on repaired, as one line,
    // where the ingress read the repaired text as an error envelope.
    // Both legs now read the one-line form: the same error.
    let input = b"data:{\"statusCodeValue\":0, \"\":{r},\"body\":\"\ndata:x\"}\n\n";
    let ret = unwrap_all(input);
    assert_eq!(failure_of(&ret).status, Some(0));
    let again = drive(
        &mut QoderIngress::new(),
        &[b"data:{\"statusCodeValue\":0, \"\":{r},\"body\":\"\\nx\"}\n\n"],
    );
    assert_eq!(failure_of(&again).status, Some(0));
}

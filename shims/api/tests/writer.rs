//! The SSE writer's frame shape and its round trip through our parser, so
//! what a shim writes is what the client's EventSource reads.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::{Bytes, BytesMut};
use shimgate_shim_api::sse::{
    parse_all, write_data, write_event, write_sse_event, SseEvent, DONE_FRAME,
};

fn written(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut out = BytesMut::new();
    f(&mut out);
    out.to_vec()
}

#[test]
fn each_line_of_data_gets_its_own_data_line() {
    let out = written(|o| write_data(o, b"a\nb\r\nc\rd"));
    assert_eq!(out, b"data: a\ndata: b\ndata: c\ndata: d\n\n");
}

#[test]
fn frame_ends_in_a_blank_line() {
    for data in [&b""[..], b"x", b"x\n", b"\n\n", b"a\r\n"] {
        let out = written(|o| write_data(o, data));
        assert!(out.ends_with(b"\n\n"), "{out:?}");
        assert!(!out.ends_with(b"\n\n\n"), "one blank line only: {out:?}");
    }
}

#[test]
fn single_line_data_is_one_data_line() {
    assert_eq!(
        written(|o| write_data(o, b"{\"a\":1}")),
        b"data: {\"a\":1}\n\n"
    );
}

#[test]
fn empty_data_is_one_empty_data_line_and_still_dispatches() {
    let out = written(|o| write_data(o, b""));
    assert_eq!(out, b"data: \n\n");
    assert_eq!(parse_all(&out).unwrap(), vec![SseEvent::data("")]);
}

#[test]
fn trailing_newline_in_data_becomes_an_empty_last_data_line() {
    let out = written(|o| write_data(o, b"a\n"));
    assert_eq!(out, b"data: a\ndata: \n\n");
    assert_eq!(parse_all(&out).unwrap(), vec![SseEvent::data("a\n")]);
}

#[test]
fn event_and_id_lines_come_before_the_data() {
    let out = written(|o| write_event(o, Some(b"delta"), Some(b"7"), b"x"));
    assert_eq!(out, b"event: delta\nid: 7\ndata: x\n\n");
}

#[test]
fn line_breaks_and_nul_are_removed_from_event_and_id() {
    let out = written(|o| write_event(o, Some(b"out\nput"), Some(b"1\r\0"), b"x"));
    assert_eq!(out, b"event: output\nid: 1\ndata: x\n\n");
}

#[test]
fn whole_event_writes_retry_too() {
    let ev = SseEvent {
        event: Some(Bytes::from_static(b"e")),
        data: Bytes::from_static(b"d"),
        id: Some(Bytes::from_static(b"i")),
        retry: Some(1500),
    };
    let out = written(|o| write_sse_event(o, &ev));
    assert_eq!(out, b"event: e\nid: i\nretry: 1500\ndata: d\n\n");
}

#[test]
fn done_frame_parses_as_done_data() {
    assert_eq!(
        parse_all(DONE_FRAME).unwrap(),
        vec![SseEvent::data("[DONE]")]
    );
}

#[test]
fn written_events_parse_back_unchanged() {
    let events = vec![
        SseEvent::data("{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}"),
        SseEvent {
            event: Some(Bytes::from_static(b"reasoning")),
            data: Bytes::from_static(b"line one\nline two\n\n  indented: yes"),
            id: Some(Bytes::from_static(b"42")),
            retry: Some(3000),
        },
        // The id persists, so the next event carries it again.
        SseEvent {
            id: Some(Bytes::from_static(b"42")),
            ..SseEvent::data(" leading space, data: inside, \u{FEFF} bom, \0 nul")
        },
        SseEvent {
            event: Some(Bytes::from_static(b" spaced name")),
            data: Bytes::from_static(b""),
            id: Some(Bytes::from_static(b" 43")),
            retry: None,
        },
        SseEvent {
            id: Some(Bytes::from_static(b" 43")),
            ..SseEvent::data("\n")
        },
    ];
    let mut out = BytesMut::new();
    for ev in &events {
        write_sse_event(&mut out, ev);
    }
    assert_eq!(parse_all(&out).unwrap(), events);
}

#[test]
fn cr_and_crlf_in_data_read_back_as_lf() {
    // Documented: the writer splits data at CR, LF and CRLF alike, so a
    // parser joins the lines with LF.
    let out = written(|o| write_data(o, b"a\r\nb\rc\n"));
    assert_eq!(parse_all(&out).unwrap(), vec![SseEvent::data("a\nb\nc\n")]);
}

#[test]
fn frames_written_back_to_back_parse_as_separate_events() {
    let mut out = BytesMut::new();
    write_data(&mut out, b"1");
    write_event(&mut out, Some(b"x"), None, b"2");
    out.extend_from_slice(DONE_FRAME);
    assert_eq!(
        parse_all(&out).unwrap(),
        vec![
            SseEvent::data("1"),
            SseEvent {
                event: Some(Bytes::from_static(b"x")),
                ..SseEvent::data("2")
            },
            SseEvent::data("[DONE]"),
        ]
    );
}

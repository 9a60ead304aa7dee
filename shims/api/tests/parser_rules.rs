//! One named test per WHATWG event-stream parsing rule, plus chunk-split
//! invariance and the size limits, so a regression names the rule it broke.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bytes::Bytes;
use shimgate_shim_api::sse::{
    IncompleteEvent, SseError, SseEvent, SseParser, DEFAULT_MAX_EVENT_BYTES,
};

/// Everything a caller can observe from one stream.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<SseEvent>,
    error: Option<SseError>,
    incomplete: Option<IncompleteEvent>,
    last_id: Bytes,
}

/// Feeds `chunks` to a parser with `limit`, draining after every push, then
/// ends the stream.
fn feed_with_limit<I>(limit: usize, chunks: I) -> Outcome
where
    I: IntoIterator<Item = Bytes>,
{
    let mut parser = SseParser::with_limit(limit);
    let mut events = Vec::new();
    for chunk in chunks {
        parser.push(chunk);
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => events.push(ev),
                Ok(None) => break,
                Err(err) => {
                    return Outcome {
                        events,
                        error: Some(err),
                        incomplete: None,
                        last_id: parser.last_event_id().clone(),
                    }
                }
            }
        }
    }
    let incomplete = parser.finish();
    Outcome {
        events,
        error: None,
        incomplete,
        last_id: parser.last_event_id().clone(),
    }
}

fn feed(chunks: &[&[u8]]) -> Outcome {
    feed_with_limit(
        DEFAULT_MAX_EVENT_BYTES,
        chunks.iter().map(|c| Bytes::copy_from_slice(c)),
    )
}

/// The dispatched events of `input` fed as one chunk.
fn events(input: &[u8]) -> Vec<SseEvent> {
    let out = feed(&[input]);
    assert_eq!(out.error, None);
    out.events
}

fn ev(event: Option<&str>, data: &str, id: Option<&str>, retry: Option<u64>) -> SseEvent {
    SseEvent {
        event: event.map(|e| Bytes::copy_from_slice(e.as_bytes())),
        data: Bytes::copy_from_slice(data.as_bytes()),
        id: id.map(|i| Bytes::copy_from_slice(i.as_bytes())),
        retry,
    }
}

fn data(d: &str) -> SseEvent {
    ev(None, d, None, None)
}

/// Asserts that every 2-way and 3-way split and byte-by-byte feeding of
/// `input` observes exactly what one chunk does.
fn assert_split_invariant(limit: usize, input: &[u8]) {
    let whole = feed_with_limit(limit, [Bytes::copy_from_slice(input)]);
    let bytes = feed_with_limit(limit, input.iter().map(|b| Bytes::copy_from_slice(&[*b])));
    assert_eq!(
        bytes,
        whole,
        "byte by byte: {:?}",
        input.escape_ascii().to_string()
    );
    for i in 0..=input.len() {
        let (a, b) = input.split_at(i);
        let two = feed_with_limit(limit, [a, b].map(Bytes::copy_from_slice));
        assert_eq!(
            two,
            whole,
            "split at {i}: {:?}",
            input.escape_ascii().to_string()
        );
        for j in i..=input.len() {
            let (b, c) = input[i..].split_at(j - i);
            let three = feed_with_limit(limit, [a, b, c].map(Bytes::copy_from_slice));
            assert_eq!(three, whole, "split at {i},{j}");
        }
    }
}

/// Inputs that touch every rule at once; the split tests run over all of them.
const TRICKY: &[&[u8]] = &[
    b"\xEF\xBB\xBFdata: a\r\ndata: b\r\n\r\n",
    b"\xEF\xBB\xBF\xEF\xBB\xBFdata: hi\n\ndata: after\n\n",
    b"\xEF\xBBdata: not a bom\n\ndata: next\n\n",
    b"\xEFdata: x\n\n",
    b"event: e\rid: 1\rdata: x\r\rdata: y\r",
    b": comment\n\ndata\n\ndata: \xC3\xA9\xFF\n\nretry: 10\nid: 2\0\ndata: y\n\n",
    b"data: a\r\n\r\ndata: b\r\r\ndata: c\n\r\n\n",
    b"id: 7\n\nretry: 5\n\ndata:  two\ndata:\tt\ndata\n\nevent\ndata: z\n\n",
    b"data: kept\n\nevent: tail\nid: 9\ndata: part",
    b"data: x\r",
    b"\r\n\r\n\n\r\r",
    b"data:\xE2\x82\xAC\r\n\r\nid\n\ndata: after reset\n\n",
];

// ---- BOM -------------------------------------------------------------------

#[test]
fn bom_is_stripped_once_at_start() {
    assert_eq!(events(b"\xEF\xBB\xBFdata: hi\n\n"), vec![data("hi")]);
}

#[test]
fn bom_split_across_chunks_is_still_stripped() {
    let out = feed(&[b"\xEF", b"\xBB", b"\xBF", b"data: hi\n\n"]);
    assert_eq!(out.events, vec![data("hi")]);
}

#[test]
fn second_bom_is_kept_as_part_of_the_field_name() {
    // The field becomes "\u{FEFF}data", an unknown name, so nothing dispatches.
    assert_eq!(events(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: hi\n\n"), vec![]);
}

#[test]
fn bom_in_mid_stream_is_content() {
    let out = feed(&[b"data: a\n\n", b"\xEF\xBB\xBF", b"data: b\n\n"]);
    assert_eq!(out.events, vec![data("a")]);
}

#[test]
fn partial_bom_at_start_is_kept_as_content() {
    // "\xEF\xBBdata" is not "data": the two bytes must not be dropped.
    assert_eq!(events(b"\xEF\xBBdata: x\n\ndata: y\n\n"), vec![data("y")]);
    let out = feed(&[b"\xEF", b":\n", b"data: y\n\n"]);
    assert_eq!(out.events, vec![data("y")]);
}

#[test]
fn bom_inside_a_value_is_content() {
    assert_eq!(
        events("data: a\u{FEFF}b\n\n".as_bytes()),
        vec![data("a\u{FEFF}b")]
    );
}

// ---- line ends ---------------------------------------------------------------

#[test]
fn lf_ends_a_line() {
    assert_eq!(events(b"data: a\ndata: b\n\n"), vec![data("a\nb")]);
}

#[test]
fn crlf_ends_a_line() {
    assert_eq!(events(b"data: a\r\ndata: b\r\n\r\n"), vec![data("a\nb")]);
}

#[test]
fn lone_cr_ends_a_line() {
    assert_eq!(events(b"data: a\rdata: b\r\r"), vec![data("a\nb")]);
}

#[test]
fn crlf_split_across_chunks_is_one_line_end() {
    let out = feed(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
    assert_eq!(out.events, vec![data("a\nb")]);
}

#[test]
fn cr_at_chunk_end_followed_by_other_byte_is_a_line_end() {
    let out = feed(&[b"data: a\r", b"data: b\n\n"]);
    assert_eq!(out.events, vec![data("a\nb")]);
}

#[test]
fn lone_cr_dispatches_without_waiting_for_the_next_chunk() {
    let mut p = SseParser::new();
    p.push(Bytes::from_static(b"data: x\r\r"));
    assert_eq!(p.next_event().unwrap(), Some(data("x")));
}

#[test]
fn utf8_char_split_across_chunks_is_intact() {
    let out = feed(&[b"data: \xC3", b"\xA9\n\n"]);
    assert_eq!(out.events, vec![data("\u{e9}")]);
    let out = feed(&[b"data: \xE2", b"\x82", b"\xAC\n", b"\n"]);
    assert_eq!(out.events, vec![data("\u{20ac}")]);
}

#[test]
fn invalid_utf8_is_passed_through_as_bytes() {
    let out = events(b"data: a\xFFb\n\n");
    assert_eq!(&out[0].data[..], b"a\xFFb");
}

// ---- fields ----------------------------------------------------------------

#[test]
fn comment_line_is_ignored() {
    assert_eq!(
        events(b": ping\n\n:\ndata: x\n: between\n\n"),
        vec![data("x")]
    );
}

#[test]
fn field_with_no_colon_has_empty_value() {
    assert_eq!(events(b"data\n\n"), vec![data("")]);
    assert_eq!(events(b"data\ndata\n\n"), vec![data("\n")]);
}

#[test]
fn value_is_split_at_the_first_colon_only() {
    assert_eq!(events(b"data: a:b: c\n\n"), vec![data("a:b: c")]);
}

#[test]
fn one_leading_space_is_removed() {
    assert_eq!(
        events(b"data:test\n\ndata: test\n\n"),
        vec![data("test"), data("test")]
    );
}

#[test]
fn only_one_leading_space_is_removed() {
    assert_eq!(events(b"data:  two\n\n"), vec![data(" two")]);
}

#[test]
fn leading_tab_is_kept() {
    assert_eq!(events(b"data:\tx\n\n"), vec![data("\tx")]);
}

#[test]
fn data_lines_are_joined_with_lf() {
    assert_eq!(
        events(b"data: YHOO\ndata: +2\ndata: 10\n\n"),
        vec![data("YHOO\n+2\n10")]
    );
}

#[test]
fn nul_in_data_is_kept() {
    assert_eq!(events(b"data: a\0b\n\n"), vec![data("a\0b")]);
}

#[test]
fn unknown_and_wrongly_cased_fields_are_ignored() {
    assert_eq!(
        events(b"foo: bar\ndata: keep\nData: nope\n\n"),
        vec![data("keep")]
    );
}

#[test]
fn event_field_sets_the_type() {
    assert_eq!(
        events(b"event: add\ndata: x\n\n"),
        vec![ev(Some("add"), "x", None, None)]
    );
}

#[test]
fn empty_event_field_means_message() {
    let out = events(b"event: add\nevent:\ndata: y\n\n");
    assert_eq!(out, vec![data("y")]);
    assert!(out[0].is("message"));
}

#[test]
fn event_type_resets_after_dispatch() {
    assert_eq!(
        events(b"event: add\ndata: x\n\ndata: y\n\n"),
        vec![ev(Some("add"), "x", None, None), data("y")]
    );
}

#[test]
fn event_type_resets_after_a_block_without_data() {
    assert_eq!(events(b"event: ping\n\ndata: x\n\n"), vec![data("x")]);
}

// ---- id ----------------------------------------------------------------------

#[test]
fn id_containing_nul_is_ignored() {
    assert_eq!(
        events(b"id: 1\ndata: a\n\nid: x\0y\ndata: b\n\n"),
        vec![
            ev(None, "a", Some("1"), None),
            ev(None, "b", Some("1"), None)
        ]
    );
}

#[test]
fn last_id_persists_across_events() {
    let out = feed(&[b"id: 7\ndata: a\n\ndata: b\n\n"]);
    assert_eq!(
        out.events,
        vec![
            ev(None, "a", Some("7"), None),
            ev(None, "b", Some("7"), None)
        ]
    );
    assert_eq!(&out.last_id[..], b"7");
}

#[test]
fn bare_id_field_resets_the_last_id() {
    assert_eq!(
        events(b"id: 1\ndata: a\n\nid\ndata: b\n\n"),
        vec![ev(None, "a", Some("1"), None), data("b")]
    );
}

#[test]
fn id_is_committed_at_a_blank_line_even_without_dispatch() {
    let out = feed(&[b"id: 9\n\n"]);
    assert_eq!(out.events, vec![]);
    assert_eq!(&out.last_id[..], b"9");
}

#[test]
fn id_of_an_unterminated_block_is_not_committed() {
    let out = feed(&[b"id: 1\n\nid: 2\ndata: x\n"]);
    assert_eq!(&out.last_id[..], b"1");
}

// ---- retry -------------------------------------------------------------------

#[test]
fn retry_with_only_digits_is_accepted() {
    assert_eq!(
        events(b"retry: 3000\ndata: a\n\n"),
        vec![ev(None, "a", None, Some(3000))]
    );
}

#[test]
fn retry_with_any_non_digit_is_ignored() {
    for bad in [&b"30x0"[..], b"12 ", b"", b"+5", b"-1", b" 5", b"1.5"] {
        // "retry: " then `bad`: the one space after the colon is removed.
        let input = [&b"retry: "[..], bad, b"\ndata: a\n\n"].concat();
        assert_eq!(
            events(&input),
            vec![data("a")],
            "retry: {:?}",
            bad.escape_ascii().to_string()
        );
    }
}

#[test]
fn retry_that_overflows_u64_is_ignored() {
    assert_eq!(
        events(b"retry: 99999999999999999999999\ndata: a\n\n"),
        vec![data("a")]
    );
}

#[test]
fn retry_in_a_block_without_data_attaches_to_the_next_event() {
    assert_eq!(
        events(b"retry: 5000\n\ndata: x\n\ndata: y\n\n"),
        vec![ev(None, "x", None, Some(5000)), data("y")]
    );
}

// ---- dispatch ------------------------------------------------------------------

#[test]
fn event_is_dispatched_only_at_the_blank_line() {
    let mut p = SseParser::new();
    p.push(Bytes::from_static(b"data: a\n"));
    assert_eq!(p.next_event().unwrap(), None);
    p.push(Bytes::from_static(b"\n"));
    assert_eq!(p.next_event().unwrap(), Some(data("a")));
    assert_eq!(p.next_event().unwrap(), None);
}

#[test]
fn no_event_when_the_data_buffer_is_empty() {
    assert_eq!(events(b"event: x\nid: 1\nretry: 5\n: c\n\n\n\n"), vec![]);
}

#[test]
fn one_trailing_lf_is_removed() {
    // Buffer "a\n" + "\n" from the empty second line; only one LF goes.
    assert_eq!(events(b"data: a\ndata:\n\n"), vec![data("a\n")]);
}

#[test]
fn unterminated_event_at_eof_is_discarded_but_visible_via_finish() {
    let out = feed(&[b"data: kept\n\nevent: e\nid: 3\nretry: 7\ndata: lost\ndata: part"]);
    assert_eq!(out.events, vec![data("kept")]);
    assert_eq!(
        out.incomplete,
        Some(IncompleteEvent {
            event: ev(Some("e"), "lost\npart", Some("3"), Some(7))
        })
    );
    assert_eq!(&out.last_id[..], b"");
}

#[test]
fn finish_reports_nothing_when_the_open_block_has_no_data() {
    assert_eq!(feed(&[b"data: a\n\nevent: e\nid: 1\n"]).incomplete, None);
    assert_eq!(feed(&[b"data: a\n\n"]).incomplete, None);
}

#[test]
fn finish_reports_an_empty_event_type_as_the_default() {
    let out = feed(&[b"event:\ndata: x\n"]);
    assert_eq!(out.incomplete, Some(IncompleteEvent { event: data("x") }));
}

#[test]
fn finish_without_draining_still_reads_the_lines_in_order() {
    // A caller that skips next_event must not see "data: a\n\ndata: b" as
    // one line.
    let mut p = SseParser::new();
    p.push(Bytes::from_static(b"data: a\n\ndata: b"));
    assert_eq!(p.finish(), Some(IncompleteEvent { event: data("b") }));
}

#[test]
fn chunk_pushed_before_draining_is_appended() {
    let mut p = SseParser::new();
    p.push(Bytes::from_static(b"data: a\n\ndata: b\r"));
    p.push(Bytes::from_static(b"\n\r\n"));
    assert_eq!(p.next_event().unwrap(), Some(data("a")));
    assert_eq!(p.next_event().unwrap(), Some(data("b")));
    assert_eq!(p.next_event().unwrap(), None);
}

#[test]
fn empty_chunk_changes_nothing() {
    let out = feed(&[b"", b"\xEF\xBB", b"", b"\xBFdata: a\r", b"", b"\n\n"]);
    assert_eq!(out.events, vec![data("a")]);
}

// ---- zero copy -------------------------------------------------------------

fn inside(chunk: &Bytes, part: &Bytes) -> bool {
    let base = chunk.as_ptr() as usize;
    let at = part.as_ptr() as usize;
    at >= base && at + part.len() <= base + chunk.len()
}

#[test]
fn one_chunk_values_are_slices_of_the_chunk() {
    let chunk = Bytes::from_static(b"event: e\nid: 42\ndata: hello\n\n");
    let mut p = SseParser::new();
    p.push(chunk.clone());
    let ev = p.next_event().unwrap().unwrap();
    assert!(inside(&chunk, &ev.data), "data was copied");
    assert!(
        inside(&chunk, ev.event.as_ref().unwrap()),
        "event was copied"
    );
    assert!(inside(&chunk, ev.id.as_ref().unwrap()), "id was copied");
}

#[test]
fn values_stay_zero_copy_in_later_events_of_a_chunk() {
    let chunk = Bytes::from(b"data: one\n\ndata: two\r\n\r\ndata: three\r\r".to_vec());
    let mut p = SseParser::new();
    p.push(chunk.clone());
    for want in ["one", "two", "three"] {
        let ev = p.next_event().unwrap().unwrap();
        assert_eq!(ev, data(want));
        assert!(inside(&chunk, &ev.data), "{want} was copied");
    }
}

#[test]
fn line_straddling_chunks_still_parses() {
    let out = feed(&[b"da", b"ta: hel", b"lo\n", b"\n"]);
    assert_eq!(out.events, vec![data("hello")]);
}

// ---- chunk splits --------------------------------------------------------------

#[test]
fn every_split_of_every_tricky_input_gives_the_same_events() {
    for input in TRICKY {
        assert_split_invariant(DEFAULT_MAX_EVENT_BYTES, input);
    }
}

#[test]
fn every_split_gives_the_same_error_at_a_small_limit() {
    for input in TRICKY {
        assert_split_invariant(8, input);
    }
}

// ---- limits ----------------------------------------------------------------------

/// `data: ` plus `n` bytes of `a`: a line of `n + 6` bytes.
fn data_line(n: usize) -> Vec<u8> {
    let mut line = b"data: ".to_vec();
    line.resize(6 + n, b'a');
    line
}

#[test]
fn line_exactly_at_the_limit_is_accepted() {
    let mut input = data_line(10);
    input.extend_from_slice(b"\n\n");
    assert_split_invariant(16, &input);
    let out = feed_with_limit(16, [Bytes::from(input)]);
    assert_eq!(out.error, None);
    assert_eq!(out.events, vec![data("aaaaaaaaaa")]);
}

#[test]
fn line_one_byte_over_the_limit_is_refused() {
    let mut input = data_line(11);
    input.extend_from_slice(b"\n\n");
    assert_split_invariant(16, &input);
    let out = feed_with_limit(16, [Bytes::from(input)]);
    assert_eq!(out.error, Some(SseError::LineTooLong { limit: 16 }));
}

#[test]
fn unterminated_line_over_the_limit_is_refused_before_its_end_arrives() {
    let mut p = SseParser::with_limit(16);
    p.push(Bytes::from(data_line(10)));
    assert_eq!(p.next_event(), Ok(None));
    p.push(Bytes::from_static(b"a"));
    assert_eq!(p.next_event(), Err(SseError::LineTooLong { limit: 16 }));
}

#[test]
fn comment_line_over_the_limit_is_refused() {
    let out = feed_with_limit(4, [Bytes::from_static(b": hello\n\n")]);
    assert_eq!(out.error, Some(SseError::LineTooLong { limit: 4 }));
}

#[test]
fn event_data_exactly_at_the_limit_is_accepted() {
    // 10 + LF + 5 = 16 bytes of joined data, every line within 16 bytes.
    let input = b"data: aaaaaaaaaa\ndata: bbbbb\n\n";
    assert_split_invariant(16, input);
    let out = feed_with_limit(16, [Bytes::from_static(input)]);
    assert_eq!(out.events, vec![data("aaaaaaaaaa\nbbbbb")]);
}

#[test]
fn event_data_one_byte_over_the_limit_is_refused() {
    let input = b"data: aaaaaaaaaa\ndata: bbbbbb\n\n";
    assert_split_invariant(16, input);
    let out = feed_with_limit(16, [Bytes::from_static(input)]);
    assert_eq!(out.error, Some(SseError::EventTooLarge { limit: 16 }));
}

#[test]
fn error_is_sticky() {
    let mut p = SseParser::with_limit(4);
    p.push(Bytes::from_static(b"data: toolong\n\n"));
    assert!(p.next_event().is_err());
    p.push(Bytes::from_static(b"\n\ndata\n\n"));
    assert_eq!(p.next_event(), Err(SseError::LineTooLong { limit: 4 }));
    assert_eq!(p.finish(), None);
}

/// Feeds `input` as one chunk and in 64 KiB chunks (the straddling path) at
/// the real default limit.
fn at_default_limit(input: Vec<u8>) -> (Outcome, Outcome) {
    let input = Bytes::from(input);
    let whole = feed_with_limit(DEFAULT_MAX_EVENT_BYTES, [input.clone()]);
    let pieces = (0..input.len())
        .step_by(64 * 1024)
        .map(|at| input.slice(at..(at + 64 * 1024).min(input.len())));
    let chunked = feed_with_limit(DEFAULT_MAX_EVENT_BYTES, pieces);
    (whole, chunked)
}

#[test]
fn line_at_the_default_16_mib_limit_is_accepted_and_one_over_refused() {
    let mut input = data_line(DEFAULT_MAX_EVENT_BYTES - 6);
    input.extend_from_slice(b"\n\n");
    for out in <[Outcome; 2]>::from(at_default_limit(input)) {
        assert_eq!(out.error, None);
        assert_eq!(out.events.len(), 1);
        assert_eq!(out.events[0].data.len(), DEFAULT_MAX_EVENT_BYTES - 6);
    }

    let mut input = data_line(DEFAULT_MAX_EVENT_BYTES - 5);
    input.extend_from_slice(b"\n\n");
    for out in <[Outcome; 2]>::from(at_default_limit(input)) {
        assert_eq!(
            out.error,
            Some(SseError::LineTooLong {
                limit: DEFAULT_MAX_EVENT_BYTES
            })
        );
    }
}

#[test]
fn event_data_at_the_default_16_mib_limit_is_accepted_and_one_over_refused() {
    // A full-length line, then a second line that brings the joined data
    // (first + LF + second) to exactly the limit, or one byte over.
    let first = DEFAULT_MAX_EVENT_BYTES - 6;
    for (second, ok) in [(5, true), (6, false)] {
        let mut input = data_line(first);
        input.push(b'\n');
        input.extend_from_slice(&data_line(second));
        input.extend_from_slice(b"\n\n");
        for out in <[Outcome; 2]>::from(at_default_limit(input)) {
            if ok {
                assert_eq!(out.error, None);
                assert_eq!(out.events[0].data.len(), DEFAULT_MAX_EVENT_BYTES);
            } else {
                assert_eq!(
                    out.error,
                    Some(SseError::EventTooLarge {
                        limit: DEFAULT_MAX_EVENT_BYTES
                    })
                );
            }
        }
    }
}

//! SSE writer: events to frames, one `data:` line per line of data, every
//! frame ended by a blank line.
//!
//! Each function appends one whole frame to the caller's buffer, so a frame is
//! never split across two writes: the caller sends the buffer as one chunk.

use bytes::{BufMut, BytesMut};

use super::SseEvent;

/// Appends `data: <line>\n` for each line of `data` (split at LF, CR or
/// CRLF) and the blank line that ends the frame.
pub fn write_data(out: &mut BytesMut, data: &[u8]) {
    write_data_lines(out, data);
    out.put_u8(b'\n');
}

/// Appends a frame with an optional `event:` and `id:` line before the data.
///
/// CR and LF inside `event` or `id` would end the field early, and NUL makes
/// a parser ignore an id, so those bytes are left out rather than corrupting
/// the stream. A NUL in an event type is kept: a parser reads it back as
/// sent, and a relay must give the type back exactly.
pub fn write_event(out: &mut BytesMut, event: Option<&[u8]>, id: Option<&[u8]>, data: &[u8]) {
    if let Some(name) = event {
        put_field(out, b"event", name, EVENT_DROPS);
    }
    if let Some(id) = id {
        put_field(out, b"id", id, ID_DROPS);
    }
    write_data(out, data);
}

/// Appends a whole [`SseEvent`] (event, id, retry, data) as one frame.
pub fn write_sse_event(out: &mut BytesMut, ev: &SseEvent) {
    if let Some(name) = &ev.event {
        put_field(out, b"event", name, EVENT_DROPS);
    }
    if let Some(id) = &ev.id {
        put_field(out, b"id", id, ID_DROPS);
    }
    if let Some(ms) = ev.retry {
        out.put_slice(b"retry: ");
        out.put_slice(ms.to_string().as_bytes());
        out.put_u8(b'\n');
    }
    write_data(out, &ev.data);
}

/// `data: [DONE]\n\n`, the OpenAI end-of-stream frame.
pub const DONE_FRAME: &[u8] = b"data: [DONE]\n\n";

fn write_data_lines(out: &mut BytesMut, data: &[u8]) {
    out.reserve(data.len() + 8);
    let mut rest = data;
    loop {
        out.put_slice(b"data: ");
        match memchr::memchr2(b'\n', b'\r', rest) {
            Some(at) => {
                out.put_slice(&rest[..at]);
                out.put_u8(b'\n');
                let skip = if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[at + skip..];
            }
            None => {
                out.put_slice(rest);
                out.put_u8(b'\n');
                return;
            }
        }
    }
}

/// Bytes an `event:` line leaves out: a line break would end it early.
const EVENT_DROPS: &[u8] = b"\r\n";

/// Bytes an `id:` line leaves out: also NUL, which makes a parser ignore it.
const ID_DROPS: &[u8] = b"\r\n\0";

fn put_field(out: &mut BytesMut, name: &[u8], value: &[u8], drops: &[u8]) {
    out.put_slice(name);
    out.put_slice(b": ");
    for &b in value {
        if !drops.contains(&b) {
            out.put_u8(b);
        }
    }
    out.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::parse_all;

    #[test]
    fn multi_line_data_becomes_one_data_line_each() {
        let mut out = BytesMut::new();
        write_data(&mut out, b"a\nb\r\nc");
        assert_eq!(&out[..], b"data: a\ndata: b\ndata: c\n\n");
    }

    #[test]
    fn empty_data_still_dispatches() {
        let mut out = BytesMut::new();
        write_data(&mut out, b"");
        assert_eq!(parse_all(&out).unwrap(), vec![SseEvent::data("")]);
    }

    #[test]
    fn event_and_id_lines_lose_line_breaks() {
        let mut out = BytesMut::new();
        write_event(&mut out, Some(b"out\nput"), Some(b"1\r"), b"x");
        assert_eq!(&out[..], b"event: output\nid: 1\ndata: x\n\n");
    }

    #[test]
    fn a_nul_is_kept_in_an_event_type_and_left_out_of_an_id() {
        // Found by the qoder_model_wire fuzz target: a relayed event type
        // with a NUL came back without it.
        let ev = SseEvent {
            event: Some(bytes::Bytes::from_static(b"LL\0c")),
            data: bytes::Bytes::from_static(b"[NOTIFICATIONS]"),
            id: Some(bytes::Bytes::from_static(b"7\0")),
            retry: None,
        };
        let mut out = BytesMut::new();
        write_sse_event(&mut out, &ev);
        assert_eq!(&out[..], b"event: LL\0c\nid: 7\ndata: [NOTIFICATIONS]\n\n");
        let back = parse_all(&out).unwrap();
        assert_eq!(back[0].event.as_deref(), Some(&b"LL\0c"[..]));
    }
}

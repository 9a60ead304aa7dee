//! What one event of the model server's SSE answer means to the Qoder CLI,
//! read as its parser reads it (qodercli 1.1.52, one parser for its legacy
//! and model-server transports).
//!
//! Per event, on the `data` with surrounding whitespace trimmed:
//!
//! * `[DONE]` ends the answer.
//! * `[EXCEED_QUOTA]…` (any text after the tag), `[NOT_EXCEED_QUOTA]` and
//!   `[NOTIFICATIONS]…` are sentinels: the CLI's chunk parser skips them;
//!   `[NOTIFICATIONS]#{"notifications":[…]}` is read before that as credit
//!   warnings. Each may also come as the `body` of an envelope.
//! * An envelope is an object with both `statusCodeValue` and `body`. One
//!   whose `statusCodeValue` is not the number 200 is an error the CLI
//!   throws (`Qoder API error: <statusCode> - <body>`), except on an
//!   `event: finish` frame (timings). One with status 200 carries a chunk
//!   (or a sentinel, or nothing) in its `body`.
//! * `event: error` is an error, whatever its data.
//! * An object with an `error` member (not `null`) is an error.
//! * Anything else is a chunk (or a frame the CLI ignores), which the
//!   qoder unwrapper reads.
//!
//! A `data` with a line break is read as the unwrapper will write it, on
//! one line (a break inside a JSON string becomes its escape): that repair
//! can turn broken JSON into an envelope, and the return leg and the
//! ingress must agree on what a frame is.
//!
//! Errors are classified with qoder's business-code table
//! ([`shimgate_shim_qoder::classify`]). The reading never panics and
//! never copies a chunk: only the rare envelopes and error frames are
//! scanned or parsed.

use std::sync::LazyLock;

use bytes::BytesMut;
use memchr::memmem::Finder;
use shimgate_shim_api::json_scan::Cursor;
use shimgate_shim_api::sse::SseEvent;
use shimgate_shim_qoder::classify::{self, UpstreamError};
use shimgate_shim_qoder::put_one_line;

/// The end of the answer.
pub const DONE: &[u8] = b"[DONE]";
/// The quota sentinel's tag (text may follow it).
pub const EXCEED_QUOTA: &[u8] = b"[EXCEED_QUOTA]";
/// The all-clear sentinel, exactly.
pub const NOT_EXCEED_QUOTA: &[u8] = b"[NOT_EXCEED_QUOTA]";
/// The notifications sentinel's tag (the CLI reads
/// `[NOTIFICATIONS]#` followed by JSON).
pub const NOTIFICATIONS: &[u8] = b"[NOTIFICATIONS]";

/// What one event is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// `[DONE]`, bare or as an envelope's body.
    Done,
    /// A sentinel the CLI skips or reads aside.
    Sentinel(Sentinel),
    /// An error the CLI acts on.
    Error(Box<UpstreamError>),
    /// A chunk, a 200 envelope around one, a heartbeat or a timing frame:
    /// the unwrapper's to read.
    Other,
}

/// The sentinels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sentinel {
    /// `[EXCEED_QUOTA]…`: the account is over its quota.
    ExceedQuota,
    /// `[NOT_EXCEED_QUOTA]`.
    NotExceedQuota,
    /// `[NOTIFICATIONS]…`: credit warnings.
    Notifications,
}

impl Sentinel {
    /// The sentinel `text` (trimmed) starts with, as the CLI tells them.
    pub fn of(text: &[u8]) -> Option<Sentinel> {
        if text.starts_with(EXCEED_QUOTA) {
            Some(Sentinel::ExceedQuota)
        } else if text == NOT_EXCEED_QUOTA {
            Some(Sentinel::NotExceedQuota)
        } else if text.starts_with(NOTIFICATIONS) {
            Some(Sentinel::Notifications)
        } else {
            None
        }
    }
}

// Searchers built once: building one per frame cost more than the search.
static STATUS: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"statusCodeValue"));
static ERROR: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"error"));
static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u"));

/// Reads one event.
pub fn read(event: &SseEvent) -> Frame {
    if event.is("error") {
        return Frame::Error(Box::new(classify::event_error(&event.data)));
    }
    let finish = event.is("finish");
    if memchr::memchr2(b'\n', b'\r', &event.data).is_some() {
        let mut one = BytesMut::with_capacity(event.data.len() + 8);
        put_one_line(&mut one, &event.data);
        return read_data(&one, finish);
    }
    read_data(&event.data, finish)
}

/// Reads one event's `data`, on one line.
fn read_data(data: &[u8], finish: bool) -> Frame {
    let data = data.trim_ascii();
    match data.first() {
        Some(b'[') => return bracketed(data),
        Some(b'{') => {}
        _ => return Frame::Other,
    }
    // A member name spelled with `\u` escapes is still that name.
    let escaped = ESCAPE.find(data).is_some();
    let status = escaped || STATUS.find(data).is_some();
    let error = escaped || ERROR.find(data).is_some();
    if !status && !error {
        return Frame::Other;
    }
    match Top::scan(data) {
        Some(top) => top.frame(data, finish),
        None => parsed(data, finish),
    }
}

/// A `data` that starts with `[`: `[DONE]` or a sentinel.
fn bracketed(data: &[u8]) -> Frame {
    if data == DONE {
        return Frame::Done;
    }
    Sentinel::of(data).map_or(Frame::Other, Frame::Sentinel)
}

/// The top-level members of an object frame the CLI looks at.
#[derive(Debug, Default)]
struct Top {
    /// `statusCodeValue`'s raw JSON value.
    status: Option<(usize, usize)>,
    /// `body`'s raw JSON value.
    body: Option<(usize, usize)>,
    /// `error`'s value is something other than `null` or `false`.
    error: bool,
}

impl Top {
    /// The members, read with the strict cursor; `None` when the text is
    /// not an object it is sure of (an escaped key, broken JSON).
    fn scan(data: &[u8]) -> Option<Top> {
        let mut c = Cursor::strict(data);
        c.enter_object()?;
        let mut top = Top::default();
        let mut first = true;
        while let Some(key) = c.next_key(&mut first)? {
            if key.escaped {
                return None;
            }
            c.peek();
            let start = c.offset();
            c.skip_value()?;
            let span = (start, c.offset());
            match key.raw(data) {
                b"statusCodeValue" => top.status = Some(span),
                b"body" => top.body = Some(span),
                b"error" => {
                    let v = data.get(span.0..span.1).unwrap_or_default();
                    top.error = v != b"null" && v != b"false";
                }
                _ => {}
            }
        }
        c.at_end().then_some(top)
    }

    fn frame(&self, data: &[u8], finish: bool) -> Frame {
        let raw = |(s, e): (usize, usize)| data.get(s..e).unwrap_or_default();
        if let (Some(status), Some(body)) = (self.status, self.body) {
            // The CLI compares with the number 200 (`200.0` and `2e2` are
            // that number; the string "200" is not).
            let number = std::str::from_utf8(raw(status))
                .ok()
                .and_then(|s| s.parse::<f64>().ok());
            let body = body_text(raw(body));
            if number != Some(200.0) && !finish {
                let code = number
                    .filter(|n| n.fract() == 0.0 && (0.0..=65535.0).contains(n))
                    .map(|n| n as u16);
                return error(classify::upstream_error(code, body.trim_ascii()));
            }
            let inner = body.trim_ascii();
            if inner.first() == Some(&b'[') {
                return bracketed(inner);
            }
            return Frame::Other;
        }
        if self.error {
            return error(classify::upstream_error(None, data));
        }
        Frame::Other
    }
}

/// The text of an envelope `body` (a JSON value): a string decoded, any
/// other value as its JSON.
fn body_text(raw: &[u8]) -> Vec<u8> {
    if raw.first() == Some(&b'"') {
        if let Ok(s) = serde_json::from_slice::<String>(raw) {
            return s.into_bytes();
        }
    }
    raw.to_vec()
}

/// A frame the cursor was unsure of, read with `serde_json`.
fn parsed(data: &[u8], finish: bool) -> Frame {
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(data) else {
        return Frame::Other;
    };
    if let (Some(status), Some(body)) = (map.get("statusCodeValue"), map.get("body")) {
        let body = match body {
            serde_json::Value::String(s) => s.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        };
        if status.as_f64() != Some(200.0) && !finish {
            let code = status.as_u64().and_then(|s| u16::try_from(s).ok());
            return error(classify::upstream_error(code, body.trim_ascii()));
        }
        let inner = body.trim_ascii();
        return if inner.first() == Some(&b'[') {
            bracketed(inner)
        } else {
            Frame::Other
        };
    }
    match map.get("error") {
        None | Some(serde_json::Value::Null | serde_json::Value::Bool(false)) => Frame::Other,
        Some(_) => error(classify::upstream_error(None, data)),
    }
}

fn error(e: UpstreamError) -> Frame {
    Frame::Error(Box::new(e))
}

#[cfg(test)]
mod tests;

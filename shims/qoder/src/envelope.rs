//! Finds the top-level `body`, `statusCodeValue` and `choices` of a frame
//! without parsing it, so the unwrapper can tell an envelope from a bare
//! OpenAI chunk and copy the body out in one pass.

use std::ops::Range;

use bytes::BytesMut;

use crate::oneline::decode_string;
use crate::scan::{Cursor, RawStr};

/// The envelope's `statusCodeValue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// No `statusCodeValue`, or one that is not a number.
    Absent,
    /// A number that fits an HTTP status.
    Code(u16),
    /// Some other number (negative, fractional, huge): not a success.
    OtherNumber,
}

/// The envelope's `body`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    /// No `body`, or `null`.
    Missing,
    /// A string, not decoded.
    Str(RawStr),
    /// A string, already decoded into the sink given to [`scan_top`].
    Decoded(RawStr),
    /// Any other JSON value, as its raw text.
    Json(Range<usize>),
}

/// What the top level of a frame holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Top {
    pub status: Status,
    pub body: Body,
    pub has_choices: bool,
}

impl Top {
    /// The strict rule (`statusCodeValue` a number and `body` a string), or
    /// a bare string `body` with no `choices`, which no OpenAI chunk has and
    /// which the proxy would drop (the looser Jet-Hub rule).
    pub fn is_envelope(&self) -> bool {
        match self.status {
            Status::Code(_) | Status::OtherNumber => true,
            Status::Absent => {
                matches!(self.body, Body::Str(_) | Body::Decoded(_)) && !self.has_choices
            }
        }
    }
}

impl Status {
    /// Whether the status says success (absent counts as success).
    pub fn is_success(self) -> bool {
        matches!(self, Status::Absent | Status::Code(200))
    }

    /// The status of a failure, when it is a real HTTP status.
    pub fn failed(self) -> Option<u16> {
        match self {
            Status::Code(code) if code != 200 => Some(code),
            _ => None,
        }
    }
}

/// Scans the top level of an object. With a `sink`, a string `body` is
/// decoded into it (on one line) in the same pass that finds its end: most
/// frames are success envelopes, and the caller truncates the sink when the
/// frame turns out to be something else. `None` when the text is not an
/// object the cursor can read with confidence (escaped keys, malformed, a
/// bad escape in `body`): the caller asks `serde_json`.
///
/// A repeated key keeps its last value, as `serde_json` does.
pub(crate) fn scan_top(json: &[u8], mut sink: Option<&mut BytesMut>) -> Option<Top> {
    let sink_start = sink.as_ref().map_or(0, |s| s.len());
    let mut c = Cursor::new(json);
    c.enter_object()?;
    let mut top = Top {
        status: Status::Absent,
        body: Body::Missing,
        has_choices: false,
    };
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        if key.escaped {
            return None;
        }
        match key.raw(json) {
            b"body" => top.body = read_body(&mut c, sink.as_deref_mut(), sink_start)?,
            b"statusCodeValue" => top.status = read_status(&mut c)?,
            b"choices" => {
                top.has_choices = true;
                c.skip_value()?;
            }
            _ => c.skip_value()?,
        }
    }
    c.at_end().then_some(top)
}

fn read_body(c: &mut Cursor<'_>, sink: Option<&mut BytesMut>, sink_start: usize) -> Option<Body> {
    match (c.peek()?, sink) {
        (b'"', Some(out)) => {
            // A repeated `body` replaces what an earlier one decoded.
            out.truncate(sink_start);
            c.string_with(|text| decode_string(text, out))
                .map(Body::Decoded)
        }
        (b'"', None) => c.string().map(Body::Str),
        (b'n', _) => (c.literal()? == b"null").then_some(Body::Missing),
        _ => {
            // `peek` skipped the whitespace: the value starts here.
            let start = c.offset();
            c.skip_value()?;
            Some(Body::Json(start..c.offset()))
        }
    }
}

fn read_status(c: &mut Cursor<'_>) -> Option<Status> {
    match c.peek()? {
        b'-' | b'0'..=b'9' => {
            let digits = c.literal()?;
            // Plain digits are the norm; anything else must be a JSON number.
            let plain = digits.iter().try_fold(0u32, |acc, &d| {
                let digit = char::from(d).to_digit(10)?;
                acc.checked_mul(10)?.checked_add(digit)
            });
            match plain {
                Some(value) => Some(u16::try_from(value).map_or(Status::OtherNumber, Status::Code)),
                None if serde_json::from_slice::<serde_json::Number>(digits).is_ok() => {
                    Some(Status::OtherNumber)
                }
                None => None,
            }
        }
        _ => c.skip_value().map(|()| Status::Absent),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_fields_are_found_in_any_order() {
        let j = br#"{"headers":{"Content-Type":["application/json"]},"body":"{\"a\":1}","statusCodeValue":200,"statusCode":"OK"}"#;
        let top = scan_top(j, None).unwrap();
        assert_eq!(top.status, Status::Code(200));
        let Body::Str(raw) = top.body else {
            panic!("body not a string")
        };
        assert_eq!(raw.raw(j), br#"{\"a\":1}"#);
        assert!(top.is_envelope() && top.status.is_success());
    }

    #[test]
    fn null_and_object_bodies() {
        let top = scan_top(br#"{"statusCodeValue":200,"body":null}"#, None).unwrap();
        assert_eq!(top.body, Body::Missing);
        let j = br#"{"statusCodeValue":200,"body": {"x":[1]} }"#;
        let top = scan_top(j, None).unwrap();
        let Body::Json(range) = top.body.clone() else {
            panic!("body not json")
        };
        assert_eq!(&j[range], br#"{"x":[1]}"#);
    }

    #[test]
    fn body_is_decoded_into_the_sink_in_the_scan() {
        let j = br#"{"body":"{\"a\":\"\u00e9\"}","statusCodeValue":200,"body":"{\"b\":1}"}"#;
        let mut sink = BytesMut::from(&b"data: "[..]);
        let top = scan_top(j, Some(&mut sink)).unwrap();
        assert!(matches!(top.body, Body::Decoded(raw) if raw.escaped));
        assert_eq!(&sink[..], br#"data: {"b":1}"#, "the last body wins");
        let mut sink = BytesMut::new();
        assert!(scan_top(br#"{"body":"\q"}"#, Some(&mut sink)).is_none());
    }

    #[test]
    fn bare_chunk_is_not_an_envelope() {
        let top = scan_top(br#"{"id":"x","choices":[]}"#, None).unwrap();
        assert!(!top.is_envelope());
        let timing = scan_top(br#"{"firstTokenDuration":1}"#, None).unwrap();
        assert!(!timing.is_envelope());
    }

    #[test]
    fn string_body_without_status_or_choices_is_an_envelope() {
        let top = scan_top(br#"{"body":"{}"}"#, None).unwrap();
        assert!(top.is_envelope() && top.status.is_success());
    }

    #[test]
    fn odd_statuses() {
        let top = scan_top(br#"{"statusCodeValue":-1,"body":"x"}"#, None).unwrap();
        assert_eq!(top.status, Status::OtherNumber);
        assert!(!top.status.is_success());
        assert!(scan_top(br#"{"statusCodeValue":2-0,"body":"x"}"#, None).is_none());
        let huge = scan_top(br#"{"statusCodeValue":99999999999,"body":"x"}"#, None).unwrap();
        assert_eq!(huge.status, Status::OtherNumber);
        let fraction = scan_top(br#"{"statusCodeValue":200.0,"body":"x"}"#, None).unwrap();
        assert_eq!(fraction.status, Status::OtherNumber);
        let top = scan_top(br#"{"statusCodeValue":"200","body":"x"}"#, None).unwrap();
        assert_eq!(top.status, Status::Absent);
    }

    #[test]
    fn malformed_or_escaped_keys_are_unsure() {
        assert!(scan_top(br#"{"bo\u0064y":"x"}"#, None).is_none());
        assert!(scan_top(br#"{"body":"x""#, None).is_none());
        assert!(scan_top(br#"{"body":"x"} trailing"#, None).is_none());
    }
}

//! Writes JSON text into an SSE frame on exactly one line, decoding the
//! envelope's `body` string straight into the output buffer on the way.
//!
//! The compression proxy reads only the first `data:` line of an event, so a
//! raw line break inside a chunk would cut it. A break outside a JSON string
//! is whitespace and becomes a space; inside a string it is invalid JSON
//! anyway and becomes its `\n`/`\r` escape, which is what the sender meant.

use bytes::{BufMut, BytesMut};

/// Where the bytes written so far stand in the JSON text being written.
#[derive(Debug, Default)]
struct OneLine {
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escaped: bool,
}

impl OneLine {
    /// Writes one byte of JSON text.
    fn push(&mut self, out: &mut BytesMut, byte: u8) {
        if self.in_string {
            if byte < 0x20 {
                // A raw control byte never belongs in a JSON string.
                self.escaped = false;
                put_control_escape(out, byte);
                return;
            }
            if self.escaped {
                self.escaped = false;
            } else if byte == b'\\' {
                self.escaped = true;
            } else if byte == b'"' {
                self.in_string = false;
            }
            out.put_u8(byte);
        } else {
            match byte {
                b'\n' | b'\r' => out.put_u8(b' '),
                b'"' => {
                    self.in_string = true;
                    out.put_u8(byte);
                }
                _ => out.put_u8(byte),
            }
        }
    }

    /// Writes bytes that hold no quote and no backslash (a raw run of a JSON
    /// string's contents), fast when they hold no line break either.
    fn push_plain_run(&mut self, out: &mut BytesMut, run: &[u8]) {
        if run.is_empty() {
            return;
        }
        if memchr::memchr2(b'\n', b'\r', run).is_some() {
            for &b in run {
                self.push(out, b);
            }
            return;
        }
        // The run's first byte is what a pending backslash escapes.
        self.escaped = false;
        out.extend_from_slice(run);
    }
}

fn put_control_escape(out: &mut BytesMut, byte: u8) {
    match byte {
        b'\n' => out.put_slice(b"\\n"),
        b'\r' => out.put_slice(b"\\r"),
        b'\t' => out.put_slice(b"\\t"),
        _ => {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.put_slice(b"\\u00");
            out.put_u8(HEX[usize::from(byte >> 4)]);
            out.put_u8(HEX[usize::from(byte & 0xf)]);
        }
    }
}

/// Appends `text` (JSON or anything else) to `out` with no CR or LF.
pub(crate) fn put_one_line(out: &mut BytesMut, text: &[u8]) {
    if memchr::memchr2(b'\n', b'\r', text).is_none() {
        out.extend_from_slice(text);
        return;
    }
    let mut state = OneLine::default();
    for &b in text {
        state.push(out, b);
    }
}

/// Decodes the raw contents of a JSON string (between its quotes) into
/// `out`, on one line. `None` for an escape `serde_json` would refuse too
/// (unknown escape, bad hex, lone surrogate); `out` may then hold part of
/// the text and the caller truncates it.
pub(crate) fn unescape_into(raw: &[u8], out: &mut BytesMut) -> Option<()> {
    let mut state = OneLine::default();
    let mut rest = raw;
    out.reserve(raw.len());
    loop {
        let Some(at) = memchr::memchr(b'\\', rest) else {
            state.push_plain_run(out, rest);
            return Some(());
        };
        state.push_plain_run(out, rest.get(..at)?);
        let kind = *rest.get(at + 1)?;
        let mut next = at + 2;
        let decoded = match kind {
            b'"' | b'\\' | b'/' => kind,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let (ch, used) = decode_unicode(rest.get(next..)?)?;
                next += used;
                let mut utf8 = [0u8; 4];
                for &b in ch.encode_utf8(&mut utf8).as_bytes() {
                    state.push(out, b);
                }
                rest = rest.get(next..)?;
                continue;
            }
            _ => return None,
        };
        state.push(out, decoded);
        rest = rest.get(next..)?;
    }
}

/// Decodes the `XXXX` after `\u` (and a following `\uXXXX` low surrogate);
/// returns the character and how many bytes were used.
fn decode_unicode(text: &[u8]) -> Option<(char, usize)> {
    let first = hex4(text)?;
    match first {
        0xD800..=0xDBFF => {
            if text.get(4..6)? != b"\\u" {
                return None;
            }
            let second = hex4(text.get(6..)?)?;
            if !(0xDC00..=0xDFFF).contains(&second) {
                return None;
            }
            let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
            Some((char::from_u32(code)?, 10))
        }
        0xDC00..=0xDFFF => None,
        _ => Some((char::from_u32(first)?, 4)),
    }
}

fn hex4(text: &[u8]) -> Option<u32> {
    text.get(..4)?.iter().try_fold(0u32, |acc, &b| {
        let digit = char::from(b).to_digit(16)?;
        Some(acc * 16 + digit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(raw: &str) -> Option<String> {
        let mut out = BytesMut::new();
        unescape_into(raw.as_bytes(), &mut out)?;
        Some(String::from_utf8(out.to_vec()).unwrap())
    }

    #[test]
    fn escapes_decode_like_serde_json() {
        let raw = r#"{\"a\":\"x\\ny \u00e9 \ud83d\ude00 \/\"}"#;
        let expected: String = serde_json::from_str(&format!("\"{raw}\"")).unwrap();
        assert_eq!(decode(raw).unwrap(), expected);
    }

    #[test]
    fn decoded_break_outside_a_string_becomes_a_space() {
        assert_eq!(decode(r#"{\n\"a\":1\r\n}"#).unwrap(), "{ \"a\":1  }");
    }

    #[test]
    fn decoded_break_inside_a_string_is_escaped_again() {
        let text = decode(r#"{\"a\":\"x\ny\"}"#).unwrap();
        assert_eq!(text, r#"{"a":"x\ny"}"#);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["a"], "x\ny");
    }

    #[test]
    fn escaped_quote_inside_inner_string_keeps_string_state() {
        // Inner text: {"a":"q\"<LF>"} where the LF sits inside the string.
        let text = decode(r#"{\"a\":\"q\\\"\n\"}"#).unwrap();
        assert_eq!(text, r#"{"a":"q\"\n"}"#);
    }

    #[test]
    fn bad_escapes_are_refused() {
        assert!(decode(r"\x").is_none());
        assert!(decode(r"\u12").is_none());
        assert!(decode(r"\ud800").is_none());
        assert!(decode(r"\udc00").is_none());
        assert!(decode("abc\\").is_none());
    }

    #[test]
    fn put_one_line_keeps_line_free_text_byte_for_byte() {
        let mut out = BytesMut::new();
        put_one_line(&mut out, b"{\"a\":\"b\"}");
        assert_eq!(&out[..], b"{\"a\":\"b\"}");
        out.clear();
        put_one_line(&mut out, b"{\"a\":\n\"b\nc\"}");
        assert_eq!(&out[..], b"{\"a\": \"b\\nc\"}");
    }
}

//! A hand-rolled JSON writer for the hot path, so a chunk is written straight
//! into the output buffer instead of through a `serde_json::Value`.
//!
//! The string escaper is kept because `serde_json::to_writer` is 1.65×
//! slower at the same job: `trae_restore` (a 780 KiB body, written by
//! `restore.rs` with this writer, and by the same `restore.rs` compiled
//! against `serde_json::to_writer` in the bench), two criterion runs on
//! 2026-12-01, 2 shared cores with other builds running (load average
//! 2.5–2.9): this writer 0.272–0.274 ms (2.7 GiB/s), `serde_json` 0.448–0.452
//! ms (1.6 GiB/s), naive `Value` restore 0.99–1.01 ms (750 MiB/s). The
//! difference is [`first_escape`], which tests 32 bytes at a time.
//! Integers go through `itoa` (what `serde_json` uses) and small values
//! through `serde_json` itself.

use bytes::BufMut;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What each byte needs inside a JSON string: 0 = itself, `u` = `\u00XX`,
/// anything else = a backslash and that letter.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Appends `s` as a JSON string literal (quotes included).
pub fn string<B: BufMut>(out: &mut B, s: &str) {
    out.put_u8(b'"');
    string_body(out, s.as_bytes());
    out.put_u8(b'"');
}

/// Appends the escaped body of a string literal (no quotes). `bytes` is
/// UTF-8; only ASCII bytes are ever escaped, so multi-byte characters pass
/// through whole.
pub fn string_body<B: BufMut>(out: &mut B, bytes: &[u8]) {
    let mut rest = bytes;
    while let Some(at) = first_escape(rest) {
        let (plain, tail) = rest.split_at(at);
        out.put_slice(plain);
        let Some((&b, after)) = tail.split_first() else {
            break;
        };
        match ESCAPE[usize::from(b)] {
            b'u' => {
                out.put_slice(b"\\u00");
                out.put_u8(HEX[usize::from(b >> 4)]);
                out.put_u8(HEX[usize::from(b & 0x0f)]);
            }
            letter => {
                out.put_u8(b'\\');
                out.put_u8(letter);
            }
        }
        rest = after;
    }
    out.put_slice(rest);
}

/// Bytes tested at a time for [`first_escape`].
const BLOCK: usize = 32;

/// Whether any byte of a block needs escaping: a control byte (< 0x20), `"`
/// or `\\`. No early exit, so the compiler turns it into a few vector
/// compares.
fn block_needs_escape(block: &[u8; BLOCK]) -> bool {
    block.iter().fold(false, |hit, &b| {
        hit | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

/// The index of the first byte that needs escaping. Text is mostly plain,
/// so blocks are tested whole and only a block with a hit is searched byte
/// by byte.
fn first_escape(bytes: &[u8]) -> Option<usize> {
    let mut start = 0;
    for block in bytes.chunks_exact(BLOCK) {
        let Ok(block) = <&[u8; BLOCK]>::try_from(block) else {
            break;
        };
        if block_needs_escape(block) {
            break;
        }
        start += BLOCK;
    }
    let tail = bytes.get(start..)?;
    tail.iter()
        .position(|&b| ESCAPE[usize::from(b)] != 0)
        .map(|at| start + at)
}

/// Appends an unsigned integer in decimal (`itoa`, as `serde_json` does).
pub fn uint<B: BufMut>(out: &mut B, n: u64) {
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends JSON text that is already known to be valid, turning CR and LF
/// into spaces. Valid JSON has raw line breaks only between tokens (a string
/// cannot hold one), so this keeps the value and makes it fit one `data:`
/// line.
pub fn raw_one_line<B: BufMut>(out: &mut B, json: &[u8]) {
    let mut rest = json;
    while let Some(at) = memchr::memchr2(b'\n', b'\r', rest) {
        let (plain, tail) = rest.split_at(at);
        out.put_slice(plain);
        out.put_u8(b' ');
        rest = tail.get(1..).unwrap_or_default();
    }
    out.put_slice(rest);
}

/// Appends a `serde_json::Value` (small, rare values: usage, error data).
pub fn value<B: BufMut>(out: &mut B, v: &serde_json::Value) {
    // Serialising a Value into memory cannot fail: its keys are strings and
    // the writer never errors. Written in place, no buffer of its own.
    let _ = serde_json::to_writer(out.writer(), v);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(s: &str) -> String {
        let mut out = Vec::new();
        string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn escaper_matches_serde_json_for_every_ascii_byte_and_unicode() {
        let mut all: String = (0u8..128).map(char::from).collect();
        all.push_str("中国 😀 \u{2028} \u{7f}");
        let mine = escaped(&all);
        let back: String = serde_json::from_str(&mine).unwrap();
        assert_eq!(back, all);
        assert_eq!(escaped("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(escaped("\u{1}"), r#""\u0001""#);
    }

    #[test]
    fn every_escaped_byte_is_found_at_every_offset_of_a_word() {
        for special in (0u8..0x20).chain([b'"', b'\\']) {
            for len in 1..=70 {
                for at in 0..len {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = special;
                    assert_eq!(
                        first_escape(&bytes),
                        Some(at),
                        "byte {special:#x} at {at} of {len}"
                    );
                }
            }
        }
        let plain: Vec<u8> = (0x20u8..=0xff)
            .filter(|b| *b != b'"' && *b != b'\\')
            .collect();
        for len in 0..plain.len() {
            assert_eq!(first_escape(&plain[..len]), None);
        }
    }

    #[test]
    fn escaping_matches_serde_json_byte_for_byte() {
        let samples = [
            "plain ascii text that runs well past one word",
            "中文内容 with \"quotes\" and \\ backslashes",
            "tabs\tand\nnew lines\r\u{1}\u{1f} and \u{7f} and emoji 😀",
            "",
            "\"",
        ];
        for s in samples {
            for cut in 0..s.len() {
                let Some(s) = s.get(cut..) else { continue };
                assert_eq!(escaped(s), serde_json::to_string(s).unwrap(), "{s:?}");
            }
        }
    }

    #[test]
    fn integers_are_written_in_decimal() {
        for n in [0u64, 7, 10, 123_456, u64::MAX] {
            let mut out = Vec::new();
            uint(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    #[test]
    fn raw_json_loses_its_line_breaks_but_not_its_value() {
        let json = b"{\r\n\"a\":\n1}";
        let mut out = Vec::new();
        raw_one_line(&mut out, json);
        assert!(!out.contains(&b'\n') && !out.contains(&b'\r'));
        let a: serde_json::Value = serde_json::from_slice(json).unwrap();
        let b: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(a, b);
    }
}

//! A hand-rolled JSON writer for the hot path, so a chunk is written straight
//! into the output buffer instead of through a `serde_json::Value`.

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
    while let Some(at) = rest.iter().position(|&b| ESCAPE[usize::from(b)] != 0) {
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

/// Appends an unsigned integer in decimal.
pub fn uint<B: BufMut>(out: &mut B, mut n: u64) {
    // u64::MAX has 20 digits.
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        // n % 10 < 10, so the cast cannot truncate.
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(digits.get(at..).unwrap_or_default());
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
    // the writer never errors.
    if let Ok(text) = serde_json::to_vec(v) {
        out.put_slice(&text);
    } else {
        out.put_slice(b"null");
    }
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

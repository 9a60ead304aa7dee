//! A zero-allocation JSON cursor with just enough structure to find a few
//! keys in an upstream frame, so the hot path never builds a
//! `serde_json::Value` per frame.
//!
//! The cursor trusts well-formed input and only guarantees, for malformed
//! input, that it stops (returns `None`) instead of reading out of bounds:
//! every caller treats `None` as "unsure" and asks `serde_json` instead.

use bytes::BytesMut;
use shimgate_shim_api::json::number_fits;

use crate::oneline::decode_string;

/// From this many bytes on, `memchr` beats the word-at-a-time search; most
/// JSON strings in a chunk (ids, keys, a delta) are shorter.
const LONG_SCAN: usize = 256;
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Marks (bit 7) the bytes of `word` equal to `needle`; only the lowest
/// mark is exact (borrows may mark bytes above it).
#[inline]
fn equal_bytes(word: u64, needle: u8) -> u64 {
    let v = word ^ (ONES * u64::from(needle));
    v.wrapping_sub(ONES) & !v & HIGHS
}

/// The first `a` or `b` in `hay`: eight bytes at a time for short spans
/// (inside an envelope's `body` every inner quote is escaped, so the next
/// quote or backslash is usually a few bytes away and `memchr`'s setup
/// would cost more than the search), `memchr` for long ones.
#[inline]
pub(crate) fn find2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(chunk) = hay.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let mask = equal_bytes(word, a) | equal_bytes(word, b);
        if mask != 0 {
            return Some(at + (mask.trailing_zeros() / 8) as usize);
        }
        at += 8;
        if at >= LONG_SCAN {
            return memchr::memchr2(a, b, hay.get(at..)?).map(|i| i + at);
        }
    }
    let tail = hay.get(at..)?;
    tail.iter().position(|&x| x == a || x == b).map(|i| i + at)
}

/// The first `needle` in `hay`, like [`find2`].
#[inline]
pub(crate) fn find1(needle: u8, hay: &[u8]) -> Option<usize> {
    find2(needle, needle, hay)
}

/// The bytes that matter when skipping a container: quotes and brackets.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table
};

/// [`STRUCTURAL`] plus the bytes that start a number, for a cursor that
/// checks numbers.
const STRUCTURAL_OR_NUMBER: [bool; 256] = {
    let mut table = STRUCTURAL;
    let mut b = b'0';
    while b <= b'9' {
        table[b as usize] = true;
        b += 1;
    }
    table[b'-' as usize] = true;
    table
};

/// The raw contents of a JSON string: the bytes between its quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawStr {
    /// Offset of the first byte after the opening quote.
    pub start: usize,
    /// Offset of the closing quote.
    pub end: usize,
    /// Whether a backslash escape occurs (else the raw bytes are the value).
    pub escaped: bool,
}

impl RawStr {
    /// The raw bytes (escapes not decoded) inside `buf`.
    pub fn raw<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        buf.get(self.start..self.end).unwrap_or_default()
    }

    /// Whether the decoded string is empty (any escape decodes to a byte).
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// A read position in one JSON text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Refuse (`None`) a number `serde_json` cannot hold (`1e400`).
    numbers: bool,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            pos: 0,
            numbers: false,
        }
    }

    /// A cursor that is also unsure (`None`) at a number outside f64's
    /// range, for text that is copied into a frame: `serde_json` refuses
    /// such text, and so would the proxy (see [`shimgate_shim_api::json`]).
    /// Text that is only read (the envelope around a body) need not pay.
    pub fn checking_numbers(buf: &'a [u8]) -> Self {
        Cursor {
            numbers: true,
            ..Cursor::new(buf)
        }
    }

    /// The whole text being read.
    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }

    /// How far the cursor has read.
    pub fn offset(&self) -> usize {
        self.pos
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(b) = self.buf.get(self.pos) {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.pos += 1;
        }
    }

    /// The next non-whitespace byte, not consumed.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.buf.get(self.pos).copied()
    }

    /// Consumes `byte` if it is the next non-whitespace byte.
    #[inline]
    pub fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Whether only whitespace is left.
    #[inline]
    pub fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Reads a string value.
    #[inline]
    pub fn string(&mut self) -> Option<RawStr> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        let mut escaped = false;
        loop {
            let rest = self.buf.get(self.pos..)?;
            let at = find2(b'"', b'\\', rest)?;
            let hit = self.pos + at;
            if rest.get(at) == Some(&b'"') {
                self.pos = hit + 1;
                return Some(RawStr {
                    start,
                    end: hit,
                    escaped,
                });
            }
            // A backslash: the byte after it can never end the string.
            escaped = true;
            self.pos = hit + 2;
        }
    }

    /// Reads a string value, decoding it into `out` on the same pass.
    pub fn string_into(&mut self, out: &mut BytesMut) -> Option<RawStr> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        let (used, escaped) = decode_string(self.buf.get(start..)?, out)?;
        self.pos = start + used;
        Some(RawStr {
            start,
            end: self.pos - 1,
            escaped,
        })
    }

    /// Reads a number or `true`/`false`/`null` token.
    #[inline]
    pub fn literal(&mut self) -> Option<&'a [u8]> {
        self.skip_ws();
        let start = self.pos;
        while let Some(&b) = self.buf.get(self.pos) {
            if matches!(
                b,
                b',' | b'}' | b']' | b':' | b'"' | b'{' | b'[' | b' ' | b'\t' | b'\n' | b'\r'
            ) {
                break;
            }
            self.pos += 1;
        }
        let token = self.buf.get(start..self.pos).filter(|t| !t.is_empty())?;
        let number = matches!(token.first(), Some(b'-' | b'0'..=b'9'));
        if self.numbers && number && !number_fits(token) {
            return None;
        }
        Some(token)
    }

    /// Skips one value of any kind.
    #[inline]
    pub fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => self.skip_container(),
            _ => self.literal().map(drop),
        }
    }

    /// Skips a value and says whether it was `null`.
    #[inline]
    pub fn skip_is_null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            return Some(self.literal()? == b"null");
        }
        self.skip_value().map(|()| false)
    }

    /// Skips a value and says whether it was a non-empty string.
    #[inline]
    pub fn skip_is_nonempty_string(&mut self) -> Option<bool> {
        if self.peek()? == b'"' {
            return self.string().map(|s| !s.is_empty());
        }
        self.skip_value().map(|()| false)
    }

    /// Skips a value and says whether it was an array with an item.
    pub fn skip_is_nonempty_array(&mut self) -> Option<bool> {
        if self.peek()? != b'[' {
            return self.skip_value().map(|()| false);
        }
        let mut ahead = *self;
        ahead.pos += 1;
        let nonempty = ahead.peek()? != b']';
        self.skip_container()?;
        Some(nonempty)
    }

    /// Skips an object or array, brackets balanced, strings respected.
    fn skip_container(&mut self) -> Option<()> {
        let stops = if self.numbers {
            &STRUCTURAL_OR_NUMBER
        } else {
            &STRUCTURAL
        };
        let mut depth = 0usize;
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if stops[usize::from(b)] {
                    break;
                }
                self.pos += 1;
            }
            match *self.buf.get(self.pos)? {
                b'"' => {
                    self.string()?;
                    continue;
                }
                b'-' | b'0'..=b'9' => {
                    // Only a checking cursor stops here; `literal` checks.
                    self.literal()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        self.pos += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
    }

    /// Enters an object (consumes `{`).
    pub fn enter_object(&mut self) -> Option<()> {
        self.eat(b'{').then_some(())
    }

    /// The next key of the object being read, leaving the cursor at its
    /// value; `Some(None)` once the closing brace is consumed. `first` must
    /// start `true` for each object.
    #[inline]
    pub fn next_key(&mut self, first: &mut bool) -> Option<Option<RawStr>> {
        if self.eat(b'}') {
            return Some(None);
        }
        if !std::mem::replace(first, false) && !self.eat(b',') {
            return None;
        }
        let key = self.string()?;
        self.eat(b':').then_some(Some(key))
    }

    /// Enters an array (consumes `[`).
    pub fn enter_array(&mut self) -> Option<()> {
        self.eat(b'[').then_some(())
    }

    /// Whether another item follows, leaving the cursor at it; `Some(false)`
    /// once the closing bracket is consumed. `first` must start `true`.
    #[inline]
    pub fn next_item(&mut self, first: &mut bool) -> Option<bool> {
        if self.eat(b']') {
            return Some(false);
        }
        if !std::mem::replace(first, false) && !self.eat(b',') {
            return None;
        }
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_reports_raw_span_and_escapes() {
        let text = br#"  "a\"b" "#;
        let mut c = Cursor::new(text);
        let s = c.string().unwrap();
        assert_eq!(s.raw(text), br#"a\"b"#);
        assert!(s.escaped);
        assert!(c.at_end());
    }

    #[test]
    fn unterminated_string_is_refused() {
        assert!(Cursor::new(br#""abc\"#).string().is_none());
        assert!(Cursor::new(br#""abc"#).string().is_none());
    }

    #[test]
    fn skip_value_crosses_nested_containers_with_brackets_in_strings() {
        let text = br#"{"a":[1,{"b":"]}"}],"c":null} ,"#;
        let mut c = Cursor::new(text);
        c.skip_value().unwrap();
        assert_eq!(c.peek(), Some(b','));
    }

    #[test]
    fn object_keys_are_walked_in_order() {
        let text = br#"{ "x" : 1 , "y":"z" }"#;
        let mut c = Cursor::new(text);
        c.enter_object().unwrap();
        let mut first = true;
        let mut keys = Vec::new();
        while let Some(k) = c.next_key(&mut first).unwrap() {
            keys.push(k.raw(text).to_vec());
            c.skip_value().unwrap();
        }
        assert_eq!(keys, vec![b"x".to_vec(), b"y".to_vec()]);
        assert!(c.at_end());
    }

    #[test]
    fn missing_comma_between_keys_is_refused() {
        let text = br#"{"x":1 "y":2}"#;
        let mut c = Cursor::new(text);
        c.enter_object().unwrap();
        let mut first = true;
        c.next_key(&mut first).unwrap().unwrap();
        c.skip_value().unwrap();
        assert!(c.next_key(&mut first).is_none());
    }

    #[test]
    fn nonempty_array_and_string_checks() {
        assert_eq!(Cursor::new(b"[ ]").skip_is_nonempty_array(), Some(false));
        assert_eq!(Cursor::new(b"[{}]").skip_is_nonempty_array(), Some(true));
        assert_eq!(Cursor::new(b"null").skip_is_nonempty_array(), Some(false));
        assert_eq!(Cursor::new(br#""""#).skip_is_nonempty_string(), Some(false));
        assert_eq!(
            Cursor::new(br#""\n""#).skip_is_nonempty_string(),
            Some(true)
        );
        assert_eq!(Cursor::new(b"null").skip_is_null(), Some(true));
        assert_eq!(Cursor::new(b"nullx").skip_is_null(), Some(false));
    }

    #[test]
    fn a_checking_cursor_is_unsure_at_out_of_range_numbers_only() {
        let text = br#"{"a":[1,{"b":-2.5e3}],"c":1e-400} "#;
        assert!(Cursor::checking_numbers(text).skip_value().is_some());
        for bad in [
            &br#"{"a":[1,{"b":1e400}]}"#[..],
            br#"[143e33333]"#,
            b"-1E+999",
        ] {
            assert!(Cursor::checking_numbers(bad).skip_value().is_none());
            assert!(Cursor::new(bad).skip_value().is_some(), "only when asked");
        }
        // Digits inside strings are not numbers.
        assert!(Cursor::checking_numbers(br#"["1e400"]"#)
            .skip_value()
            .is_some());
    }

    #[test]
    fn find2_agrees_with_a_plain_search_at_every_length() {
        let mut rng = fastrand::Rng::with_seed(3);
        for len in 0..600 {
            for _ in 0..4 {
                let hay: Vec<u8> = (0..len)
                    .map(|_| {
                        if rng.u8(..) < 4 {
                            b'"'
                        } else if rng.u8(..) < 3 {
                            b'\\'
                        } else {
                            rng.u8(..)
                        }
                    })
                    .collect();
                let expected = hay.iter().position(|&x| x == b'"' || x == b'\\');
                assert_eq!(find2(b'"', b'\\', &hay), expected, "{hay:?}");
                assert_eq!(find1(b'"', &hay), hay.iter().position(|&x| x == b'"'));
            }
        }
    }
}

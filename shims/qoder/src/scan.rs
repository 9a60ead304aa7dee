//! A zero-allocation JSON cursor with just enough structure to find a few
//! keys in an upstream frame, so the hot path never builds a
//! `serde_json::Value` per frame.
//!
//! The cursor trusts well-formed input and only guarantees, for malformed
//! input, that it stops (returns `None`) instead of reading out of bounds:
//! every caller treats `None` as "unsure" and asks `serde_json` instead.

use bytes::BytesMut;

use crate::oneline::decode_string;

/// How many bytes a plain loop checks before handing over to `memchr`:
/// inside an envelope's `body` every inner quote is escaped, so the next
/// quote or backslash is usually a few bytes away and `memchr`'s setup would
/// cost more than the search.
const SHORT_SCAN: usize = 32;

/// The first `a` or `b` in `hay`: a plain loop over the first bytes,
/// `memchr` beyond.
#[inline]
pub(crate) fn find2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    let head = hay.get(..SHORT_SCAN).unwrap_or(hay);
    if let Some(at) = head.iter().position(|&x| x == a || x == b) {
        return Some(at);
    }
    let tail = hay.get(SHORT_SCAN..)?;
    memchr::memchr2(a, b, tail).map(|at| at + SHORT_SCAN)
}

/// The first `needle` in `hay`, like [`find2`].
#[inline]
pub(crate) fn find1(needle: u8, hay: &[u8]) -> Option<usize> {
    let head = hay.get(..SHORT_SCAN).unwrap_or(hay);
    if let Some(at) = head.iter().position(|&x| x == needle) {
        return Some(at);
    }
    let tail = hay.get(SHORT_SCAN..)?;
    memchr::memchr(needle, tail).map(|at| at + SHORT_SCAN)
}

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
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// The whole text being read.
    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }

    /// How far the cursor has read.
    pub fn offset(&self) -> usize {
        self.pos
    }

    fn skip_ws(&mut self) {
        while let Some(b) = self.buf.get(self.pos) {
            if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.pos += 1;
        }
    }

    /// The next non-whitespace byte, not consumed.
    pub fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.buf.get(self.pos).copied()
    }

    /// Consumes `byte` if it is the next non-whitespace byte.
    pub fn eat(&mut self, byte: u8) -> bool {
        if self.peek() == Some(byte) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Whether only whitespace is left.
    pub fn at_end(&mut self) -> bool {
        self.peek().is_none()
    }

    /// Reads a string value.
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
        if self.pos == start {
            None
        } else {
            self.buf.get(start..self.pos)
        }
    }

    /// Skips one value of any kind.
    pub fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' => self.skip_container(),
            _ => self.literal().map(drop),
        }
    }

    /// Skips a value and says whether it was `null`.
    pub fn skip_is_null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            return Some(self.literal()? == b"null");
        }
        self.skip_value().map(|()| false)
    }

    /// Skips a value and says whether it was a non-empty string.
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
        let mut depth = 0usize;
        loop {
            match *self.buf.get(self.pos)? {
                b'"' => {
                    self.string()?;
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
}

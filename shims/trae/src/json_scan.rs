//! A validating JSON scanner that hands out the raw text of an object's
//! top-level members, so the hot `output` frame is read without building a
//! `serde_json::Value`.
//!
//! It accepts exactly what `serde_json` accepts for UTF-8 input (RFC 8259,
//! well-formed surrogate pairs, nesting up to [`MAX_DEPTH`], numbers within
//! f64's range: see [`shimgate_shim_api::json`]); a raw value it returns is
//! therefore valid JSON that can be copied into an output chunk as is.

use shimgate_shim_api::json::number_fits;

/// Deepest nesting accepted; `serde_json` refuses beyond 128 as well, and a
/// limit keeps hostile input from exhausting the stack.
pub const MAX_DEPTH: u32 = 128;

/// The input is not JSON this scanner accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// Whether `input` (UTF-8 already checked by the caller) is one JSON value.
pub fn is_valid(input: &[u8]) -> bool {
    let mut c = Cursor { b: input, i: 0 };
    c.ws();
    c.value(0).is_ok() && {
        c.ws();
        c.i == input.len()
    }
}

/// Calls `member(raw_key, raw_value)` for each top-level member of the
/// object in `input`, after validating the whole text. Keys are string
/// literals with their quotes; values are raw JSON text.
pub fn members<'a>(
    input: &'a [u8],
    member: &mut dyn FnMut(&'a [u8], &'a [u8]),
) -> Result<(), Invalid> {
    let mut spans: [(usize, usize, usize, usize); 8] = [(0, 0, 0, 0); 8];
    let mut more: Vec<(usize, usize, usize, usize)> = Vec::new();
    let mut count = 0usize;
    let mut c = Cursor { b: input, i: 0 };
    c.ws();
    if c.peek() != Some(b'{') {
        return Err(Invalid);
    }
    c.object(1, &mut |span| {
        // Members are reported only once the whole text is known to be
        // valid, so a caller never acts on half of a broken frame.
        match spans.get_mut(count) {
            Some(slot) => *slot = span,
            None => more.push(span),
        }
        count += 1;
    })?;
    c.ws();
    if c.i != input.len() {
        return Err(Invalid);
    }
    for &(ks, ke, vs, ve) in spans.iter().take(count).chain(more.iter()) {
        if let (Some(k), Some(v)) = (input.get(ks..ke), input.get(vs..ve)) {
            member(k, v);
        }
    }
    Ok(())
}

/// Whether a raw JSON string literal is the empty string `""`.
pub fn is_empty_string(raw: &[u8]) -> bool {
    raw == b"\"\""
}

/// Bytes that end a run of plain string bytes: `"`, `\\` and controls.
const STOP: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

type Span = (usize, usize, usize, usize);

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn bump(&mut self) -> Result<u8, Invalid> {
        let b = self.peek().ok_or(Invalid)?;
        self.i += 1;
        Ok(b)
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: u32) -> Result<(), Invalid> {
        match self.peek() {
            Some(b'"') => self.string(),
            Some(b'{') => self.object(depth + 1, &mut |_| {}),
            Some(b'[') => self.array(depth + 1),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(Invalid),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), Invalid> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Invalid)
        }
    }

    fn digits(&mut self) -> Result<(), Invalid> {
        let start = self.i;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.i += 1;
        }
        if self.i == start {
            Err(Invalid)
        } else {
            Ok(())
        }
    }

    fn number(&mut self) -> Result<(), Invalid> {
        let start = self.i;
        self.number_token()?;
        // serde_json refuses a number outside f64's range (`1e400`), and so
        // would the proxy: such text is not JSON to be copied as JSON.
        let token = self.b.get(start..self.i).unwrap_or_default();
        if number_fits(token) {
            Ok(())
        } else {
            Err(Invalid)
        }
    }

    fn number_token(&mut self) -> Result<(), Invalid> {
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        match self.peek() {
            Some(b'0') => self.i += 1,
            Some(b'1'..=b'9') => self.digits()?,
            _ => return Err(Invalid),
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            self.digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.digits()?;
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, Invalid> {
        let mut n = 0u32;
        for _ in 0..4 {
            let d = match self.bump()? {
                b @ b'0'..=b'9' => b - b'0',
                b @ b'a'..=b'f' => b - b'a' + 10,
                b @ b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(Invalid),
            };
            n = n * 16 + u32::from(d);
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<(), Invalid> {
        self.i += 1;
        loop {
            // Most bytes are plain: skip them in a tight loop.
            let rest = self.b.get(self.i..).unwrap_or_default();
            let plain = rest.iter().take_while(|&&b| !STOP[usize::from(b)]).count();
            self.i += plain;
            match self.bump()? {
                b'"' => return Ok(()),
                b'\\' => match self.bump()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        let unit = self.hex4()?;
                        if (0xDC00..0xE000).contains(&unit) {
                            return Err(Invalid);
                        }
                        if (0xD800..0xDC00).contains(&unit) {
                            // A high surrogate must be followed by a low one,
                            // or serde_json (and the agent) reject the text.
                            if self.bump()? != b'\\' || self.bump()? != b'u' {
                                return Err(Invalid);
                            }
                            if !(0xDC00..0xE000).contains(&self.hex4()?) {
                                return Err(Invalid);
                            }
                        }
                    }
                    _ => return Err(Invalid),
                },
                // Only control characters are left: raw ones are not JSON.
                _ => return Err(Invalid),
            }
        }
    }

    fn array(&mut self, depth: u32) -> Result<(), Invalid> {
        if depth > MAX_DEPTH {
            return Err(Invalid);
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            self.value(depth)?;
            self.ws();
            match self.bump()? {
                b',' => {}
                b']' => return Ok(()),
                _ => return Err(Invalid),
            }
        }
    }

    fn object(&mut self, depth: u32, member: &mut dyn FnMut(Span)) -> Result<(), Invalid> {
        if depth > MAX_DEPTH {
            return Err(Invalid);
        }
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return Err(Invalid);
            }
            let key_start = self.i;
            self.string()?;
            let key_end = self.i;
            self.ws();
            if self.bump()? != b':' {
                return Err(Invalid);
            }
            self.ws();
            let value_start = self.i;
            self.value(depth)?;
            member((key_start, key_end, value_start, self.i));
            self.ws();
            match self.bump()? {
                b',' => {}
                b'}' => return Ok(()),
                _ => return Err(Invalid),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agrees_with_serde(text: &str) {
        let serde = serde_json::from_str::<serde_json::Value>(text).is_ok();
        assert_eq!(is_valid(text.as_bytes()), serde, "{text:?}");
    }

    #[test]
    fn scanner_accepts_and_refuses_what_serde_json_does() {
        for text in [
            "{}",
            "[]",
            " {\"a\" : [1, -2.5e+3, true, false, null, \"x\"]} ",
            "\"\\ud83d\\ude00\"",
            "\"\\ud83d\"",
            "\"\\ude00\"",
            "\"\\ud83d\\u0041\"",
            "01",
            "1.",
            "-",
            "1e",
            "{\"a\":1,}",
            "[1,]",
            "\"a\u{1}\"",
            "\"\\x\"",
            "tru",
            "{\"a\" 1}",
            "[1] 2",
            "",
            "\"\\u00e9\\/\"",
            "1e400",
            "[1,143e33333]",
            "{\"a\":-1E+400}",
            "1e-400",
            "0e99999999999",
            "1.7976931348623157e308",
        ] {
            agrees_with_serde(text);
        }
    }

    #[test]
    fn out_of_range_numbers_are_not_json_to_copy() {
        // The trae_convert fuzz crash: `143e33333` was copied as JSON.
        assert!(!is_valid(b"143e33333"));
        let mut n = 0;
        assert!(members(br#"{"response":"a","x":1e400}"#, &mut |_, _| n += 1).is_err());
        assert_eq!(n, 0);
        assert!(is_valid(b"[1e-400,0e400,1.7976931348623157e308]"));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = "[".repeat(100_000);
        assert!(!is_valid(deep.as_bytes()));
        let ok = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(is_valid(ok.as_bytes()));
    }

    #[test]
    fn members_come_back_raw_and_in_order() {
        let mut seen = Vec::new();
        let text = br#"{"response":"a\"b","n":null,"t":[{"x":1}],"k9":1,"k10":2,"k11":3,"k12":4,"k13":5,"k14":6}"#;
        members(text, &mut |k, v| seen.push((k.to_vec(), v.to_vec()))).unwrap();
        assert_eq!(seen.len(), 9);
        assert_eq!(seen[0], (b"\"response\"".to_vec(), b"\"a\\\"b\"".to_vec()));
        assert_eq!(seen[2].1, b"[{\"x\":1}]".to_vec());
        assert_eq!(seen[8].0, b"\"k14\"".to_vec());
    }

    #[test]
    fn members_reports_nothing_for_broken_text() {
        let mut n = 0;
        assert!(members(br#"{"a":1,"b":}"#, &mut |_, _| n += 1).is_err());
        assert!(members(b"[1]", &mut |_, _| n += 1).is_err());
        assert_eq!(n, 0);
    }
}

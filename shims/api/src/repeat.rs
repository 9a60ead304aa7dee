//! What the frames of one answer repeat: the same bytes frame after frame
//! around the one string that changes (the text delta). A translator that
//! read a frame in full keeps the bytes before and after that string; a
//! later frame that starts and ends with the same bytes and holds a valid
//! string's contents in between reads the same way, with that string in
//! place of the old one, and the translator takes it from there without
//! reading the rest again.
//!
//! Why that is the full reading: a strict reading ([`crate::json_scan`],
//! which accepts what `serde_json` accepts) is a function of the bytes,
//! and a string's contents never change how what follows it is read; UTF-8
//! is checked for the new contents, the rest was checked before (the
//! string's quotes are ASCII, so its contents start and end on character
//! boundaries). What keeps the full reading from being the same on a
//! frame (a quote, a raw control byte, a bad escape, bytes that are not
//! UTF-8 in between) fails [`Around::contents`], and the caller reads the
//! frame in full.

use crate::json_scan::is_string_body;

/// The bytes of a frame around one of its strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Around {
    /// Up to the string's contents (its opening quote included).
    prefix: Vec<u8>,
    /// From its closing quote on.
    suffix: Vec<u8>,
}

impl Around {
    /// The bytes of `text` (a frame the caller read in full and accepted)
    /// around the string whose contents are `text[start..end]`; `None`
    /// when the range does not sit between two quotes of `text`.
    pub fn new(text: &[u8], start: usize, end: usize) -> Option<Around> {
        let prefix = text.get(..start)?;
        let suffix = text.get(end..)?;
        if start == 0
            || start > end
            || prefix.last() != Some(&b'"')
            || suffix.first() != Some(&b'"')
        {
            return None;
        }
        Some(Around {
            prefix: prefix.to_vec(),
            suffix: suffix.to_vec(),
        })
    }

    /// The string's contents in `text`, when `text` repeats the bytes
    /// around it and holds a valid string's contents (strict, UTF-8) in
    /// between; `None` otherwise (the caller reads `text` in full).
    pub fn contents<'a>(&self, text: &'a [u8]) -> Option<&'a [u8]> {
        let end = text.len().checked_sub(self.suffix.len())?;
        if end < self.prefix.len()
            || !text.starts_with(&self.prefix)
            || !text.ends_with(&self.suffix)
        {
            return None;
        }
        let contents = text.get(self.prefix.len()..end)?;
        (is_string_body(contents) && std::str::from_utf8(contents).is_ok()).then_some(contents)
    }
}

/// Where `part` (a subslice of `whole`) starts in `whole`.
pub fn offset_in(whole: &[u8], part: &[u8]) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start + part.len() <= whole.len()).then_some(start)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_that_repeats_the_bytes_around_a_valid_string_gives_its_contents() {
        let learned = br#"{"response":"ab","x":1}"#;
        let around = Around::new(learned, 13, 15).unwrap();
        assert_eq!(around.contents(learned), Some(&b"ab"[..]));
        assert_eq!(around.contents(br#"{"response":"","x":1}"#), Some(&b""[..]));
        assert_eq!(
            around.contents(br#"{"response":"c \"d\" \u00e9 \u4e2d","x":1}"#),
            Some(&br#"c \"d\" \u00e9 \u4e2d"#[..])
        );
        for other in [
            &br#"{"response":"a"b","x":1}"#[..],
            br#"{"response":"a\q","x":1}"#,
            b"{\"response\":\"a\nb\",\"x\":1}",
            b"{\"response\":\"\xff\",\"x\":1}",
            br#"{"response":"ab","x":2}"#,
            br#"{"reply":"ab","x":1}"#,
            br#"{"response":"","x":1"#,
        ] {
            assert_eq!(
                around.contents(other),
                None,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        assert_eq!(Around::new(learned, 12, 15), None, "not between quotes");
        let part = &learned[13..15];
        assert_eq!(offset_in(learned, part), Some(13));
    }
}

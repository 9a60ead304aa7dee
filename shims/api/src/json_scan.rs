//! The one JSON cursor both shims read hot frames with: it walks an
//! object's members and skips values without building a
//! `serde_json::Value`, so a frame is read in one pass and copied raw.
//!
//! Kept hand-written because typed, borrowed serde does the same work
//! 1.7–2.0× slower (`benches/README.md`, "2026-12-01 crates vs
//! hand-written"). Two criterion runs on 2026-12-01, each with all three
//! versions back to back, on 2 cores shared with other builds (load
//! average 2.5–2.9), medians:
//!
//! | bench | this cursor | typed serde | naive `Value` | typed / this |
//! |---|---|---|---|---|
//! | `trae_convert` (3,600 SOLO events, 360 KiB) | 1.08–1.18 ms, 297–325 MiB/s | 1.98–1.99 ms, 177–178 MiB/s | 5.5–6.2 ms, 57–64 MiB/s | 1.67–1.84× |
//! | `qoder_unwrap` (4,000 envelopes, 1.2 MiB) | 2.06–2.09 ms, 578–584 MiB/s | 4.02–4.08 ms, 295–300 MiB/s | 8.1–8.3 ms, 145–149 MiB/s | 1.95–1.96× |
//!
//! "Typed serde" is `#[derive(Deserialize)]` structs borrowing `Cow<str>`
//! and `&RawValue`, a validating pass where `RawValue` alone would let
//! `1e400` or a lone surrogate through, and `#[derive(Serialize)]` chunks
//! written with `serde_json::to_writer` (the benches hold it). This file
//! was two copies before (trae's validating scanner, qoder's lenient
//! cursor); qoder's chunk reading moved to the strict mode with no
//! measurable cost (2.19 ms before, 2.06–2.09 ms after, same day) and no
//! longer lets text through that the proxy cannot parse (`{"a":tru}`, a
//! bad `\u` escape, a missing comma inside a skipped object). Against
//! trae's old copy, [`members`] is 7 % slower (230 against 214 µs for the
//! bench's 3,400 `output` frames, one scratch criterion run): 1–2 % of a
//! conversion.
//!
//! Two modes:
//!
//! * **strict** ([`Cursor::strict`], [`is_valid`], [`members`]) accepts
//!   exactly what `serde_json` accepts for UTF-8 input: RFC 8259, escapes
//!   with well-formed surrogate pairs, no raw control bytes in strings,
//!   nesting up to [`MAX_DEPTH`], and numbers within f64's range (see
//!   [`crate::json`]). `serde_json`'s `IgnoredAny` and `RawValue` do not
//!   check the last two, which is one reason to keep this. A value a strict
//!   cursor skipped is valid JSON that can be copied into a frame as is.
//!   UTF-8 is the caller's to check (`std::str::from_utf8`), as outside
//!   strings a non-ASCII byte is a syntax error anyway.
//! * **lenient** ([`Cursor::new`]) trusts well-formed input, for text that
//!   is only read (qoder's envelope around a body, a payload `serde_json`
//!   already accepted). It only guarantees that on malformed input it stops
//!   (`None`) instead of reading out of bounds.
//!
//! Every method returns `None` where the text is not what it expects; a
//! caller treats that as "unsure" and asks `serde_json`, or refuses.

use crate::json::number_fits;

/// Deepest nesting a strict cursor accepts: `serde_json` refuses a 128th
/// level (its recursion limit is 128 and the 128th `[` reaches it), and the
/// limit keeps hostile input from exhausting the stack (a strict skip
/// recurses once per level).
pub const MAX_DEPTH: u32 = 127;

/// The input is not JSON a strict cursor accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Invalid;

/// Whether `input` (UTF-8 already checked by the caller) is one JSON value.
pub fn is_valid(input: &[u8]) -> bool {
    let mut c = Cursor::strict(input);
    c.skip_value().is_some() && c.at_end()
}

/// Calls `member(raw_key, raw_value)` for each top-level member of the
/// object in `input` (UTF-8 already checked), after validating the whole
/// text strictly, so a caller never acts on half of a broken frame. Keys
/// are string literals with their quotes; values are raw JSON text.
pub fn members<'a>(
    input: &'a [u8],
    member: &mut dyn FnMut(&'a [u8], &'a [u8]),
) -> Result<(), Invalid> {
    // Key start, key end, value start, value end; SOLO frames have a few
    // members, so the first eight need no allocation.
    type Span = (usize, usize, usize, usize);
    let mut spans: [Span; 8] = [(0, 0, 0, 0); 8];
    let mut more: Vec<Span> = Vec::new();
    let mut count = 0usize;
    let mut c = Cursor::strict(input);
    c.enter_object().ok_or(Invalid)?;
    let mut first = true;
    while let Some(key) = c.next_key(&mut first).ok_or(Invalid)? {
        c.peek();
        let value_start = c.offset();
        c.skip_value().ok_or(Invalid)?;
        // The key's quotes sit just outside its contents.
        let span = (key.start - 1, key.end + 1, value_start, c.offset());
        match spans.get_mut(count) {
            Some(slot) => *slot = span,
            None => more.push(span),
        }
        count += 1;
    }
    if !c.at_end() {
        return Err(Invalid);
    }
    for &(ks, ke, vs, ve) in spans.iter().take(count).chain(more.iter()) {
        if let (Some(k), Some(v)) = (input.get(ks..ke), input.get(vs..ve)) {
            member(k, v);
        }
    }
    Ok(())
}

/// The value of the top-level string member `key` of the object in
/// `input`, unescaped; `None` when there is none (or `input` is not an
/// object). Skips the other members at scanning speed.
pub fn top_level_string(input: &[u8], key: &str) -> Option<String> {
    let mut c = Cursor::new(input);
    c.enter_object()?;
    let mut first = true;
    while let Some(k) = c.next_key(&mut first)? {
        c.peek();
        let start = c.offset();
        c.skip_value()?;
        if !k.escaped && k.raw(input) == key.as_bytes() {
            return serde_json::from_slice::<String>(input.get(start..c.offset())?).ok();
        }
    }
    None
}

/// Whether `raw` is, whole, the contents of a string a strict cursor
/// accepts (what sits between its quotes: no quote, no raw control byte,
/// only escapes `serde_json` takes). UTF-8 is the caller's to check.
pub fn is_string_body(raw: &[u8]) -> bool {
    let mut c = Cursor::strict(raw);
    loop {
        c.pos += plain_run(raw.get(c.pos..).unwrap_or_default());
        match c.bump() {
            None => return true,
            Some(b'\\') if c.strict_escape().is_some() => {}
            Some(_) => return false,
        }
    }
}

/// A key with an escape, or text the lenient cursor could not walk: the
/// caller reads the value with `serde_json` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsure;

/// The raw value of the member `key` of the object in `input` (its last
/// one, as a parsed object keeps it), read leniently: for text already
/// checked (a chunk a strict cursor accepted). `Ok(None)` when `input` is
/// not an object or has no such member; `Err` when a key holds an escape
/// (it might spell `key`).
pub fn last_member<'a>(input: &'a [u8], key: &[u8]) -> Result<Option<&'a [u8]>, Unsure> {
    let mut c = Cursor::new(input);
    if c.peek() != Some(b'{') {
        return Ok(None);
    }
    c.enter_object().ok_or(Unsure)?;
    let mut first = true;
    let mut found = None;
    while let Some(k) = c.next_key(&mut first).ok_or(Unsure)? {
        if k.escaped {
            return Err(Unsure);
        }
        c.peek();
        let start = c.offset();
        c.skip_value().ok_or(Unsure)?;
        if k.raw(input) == key {
            found = input.get(start..c.offset());
        }
    }
    Ok(found)
}

/// Where each top-level member of the object in `input` sits: its key's
/// contents (no quotes) and its raw value, in order, read leniently as
/// [`last_member`] reads them (the same `Ok`/`Err` for every key): one walk
/// for a reader that looks up several members of one body.
pub fn member_spans(input: &[u8]) -> Result<Vec<MemberSpan>, Unsure> {
    let mut c = Cursor::new(input);
    if c.peek() != Some(b'{') {
        return Ok(Vec::new());
    }
    match walk_members(&mut c) {
        Some((spans, false)) => Ok(spans),
        _ => Err(Unsure),
    }
}

/// [`member_spans`] of an object a strict cursor accepts whole (as
/// [`is_valid`] does), found in the same walk that checks it: `Err` when
/// the text is not such an object; the spans `Err(Unsure)` when a key
/// holds an escape (as [`member_spans`] says then).
pub fn strict_member_spans(input: &[u8]) -> Result<Result<Vec<MemberSpan>, Unsure>, Invalid> {
    let mut c = Cursor::strict(input);
    let (spans, escaped) = walk_members(&mut c).ok_or(Invalid)?;
    if !c.at_end() {
        return Err(Invalid);
    }
    Ok(if escaped { Err(Unsure) } else { Ok(spans) })
}

/// The spans of the members of the object at `c`, and whether a key holds
/// an escape, read as `c` reads (strictly or not); `None` where it refuses
/// the text. `c` is left after the object.
fn walk_members(c: &mut Cursor<'_>) -> Option<(Vec<MemberSpan>, bool)> {
    c.enter_object()?;
    let mut first = true;
    let mut spans = Vec::new();
    let mut escaped = false;
    while let Some(k) = c.next_key(&mut first)? {
        escaped |= k.escaped;
        c.peek();
        let start = c.offset();
        c.skip_value()?;
        spans.push(MemberSpan {
            key: k.start..k.end,
            value: start..c.offset(),
        });
    }
    Some((spans, escaped))
}

/// One member's place in its object's text ([`member_spans`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpan {
    pub key: std::ops::Range<usize>,
    pub value: std::ops::Range<usize>,
}

/// The raw value of the last member named `key` among `spans` of `input`
/// ([`last_member`] of `input`, without walking it again).
pub fn last_of<'a>(input: &'a [u8], spans: &[MemberSpan], key: &[u8]) -> Option<&'a [u8]> {
    spans
        .iter()
        .rev()
        .find(|s| input.get(s.key.clone()) == Some(key))
        .and_then(|s| input.get(s.value.clone()))
}

/// A raw JSON number as `serde_json::Value::as_u64` reads it: digits only
/// (no sign, fraction or exponent) and within `u64`.
pub fn as_u64(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// Whether `raw` (one JSON value a strict cursor accepted) is written
/// exactly as `serde_json` writes the value it holds: no whitespace, each
/// string with only the escapes `serde_json` writes (`\"`, `\\`, `\b`,
/// `\f`, `\n`, `\r`, `\t`, `\u00xx` for the other control bytes), numbers
/// that are integers it keeps as such (no fraction or exponent, no `-0`,
/// within 64 bits), objects without a repeated key. Such text can stand
/// for the value's serialisation (`Value::to_string`) without a parse.
pub fn is_canonical(raw: &[u8]) -> bool {
    let mut at = 0;
    canonical_value(raw, &mut at, 0) && at == raw.len()
}

fn canonical_value(raw: &[u8], at: &mut usize, depth: u32) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match raw.get(*at) {
        Some(b'"') => canonical_string(raw, at).is_some(),
        Some(b'{') => {
            *at += 1;
            let mut keys: Vec<&[u8]> = Vec::new();
            if raw.get(*at) == Some(&b'}') {
                *at += 1;
                return true;
            }
            loop {
                let Some(key) = canonical_string(raw, at) else {
                    return false;
                };
                if keys.contains(&key) || raw.get(*at) != Some(&b':') {
                    return false;
                }
                keys.push(key);
                *at += 1;
                if !canonical_value(raw, at, depth + 1) {
                    return false;
                }
                match raw.get(*at) {
                    Some(b',') => *at += 1,
                    Some(b'}') => {
                        *at += 1;
                        return true;
                    }
                    _ => return false,
                }
            }
        }
        Some(b'[') => {
            *at += 1;
            if raw.get(*at) == Some(&b']') {
                *at += 1;
                return true;
            }
            loop {
                if !canonical_value(raw, at, depth + 1) {
                    return false;
                }
                match raw.get(*at) {
                    Some(b',') => *at += 1,
                    Some(b']') => {
                        *at += 1;
                        return true;
                    }
                    _ => return false,
                }
            }
        }
        Some(b't') | Some(b'f') | Some(b'n') => {
            for word in [&b"true"[..], b"false", b"null"] {
                if raw.get(*at..*at + word.len()) == Some(word) {
                    *at += word.len();
                    return true;
                }
            }
            false
        }
        Some(_) => {
            let start = *at;
            while matches!(raw.get(*at), Some(b'-' | b'0'..=b'9')) {
                *at += 1;
            }
            let token = raw.get(start..*at).unwrap_or_default();
            let digits = token.strip_prefix(b"-").unwrap_or(token);
            let fits = std::str::from_utf8(token)
                .ok()
                .is_some_and(|t| t.parse::<i64>().is_ok() || t.parse::<u64>().is_ok());
            fits && !digits.is_empty()
                && token != b"-0"
                && !matches!(raw.get(*at), Some(b'.' | b'e' | b'E'))
        }
        None => false,
    }
}

/// A canonical string at `at` (its contents, and `at` moved past it).
fn canonical_string<'a>(raw: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    if raw.get(*at) != Some(&b'"') {
        return None;
    }
    let start = *at + 1;
    let mut i = start;
    loop {
        i += plain_run(raw.get(i..)?);
        match raw.get(i)? {
            b'"' => {
                *at = i + 1;
                return raw.get(start..i);
            }
            b'\\' => match raw.get(i + 1)? {
                b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't' => i += 2,
                b'u' => {
                    let hex = raw.get(i + 2..i + 6)?;
                    let lower = hex
                        .iter()
                        .all(|h| h.is_ascii_digit() || (b'a'..=b'f').contains(h));
                    let unit = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
                    let short = matches!(unit, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d);
                    if !lower || unit >= 0x20 || short {
                        return None;
                    }
                    i += 6;
                }
                _ => return None,
            },
            _ => return None,
        }
    }
}

/// Whether a raw JSON string literal is the empty string `""`.
pub fn is_empty_string(raw: &[u8]) -> bool {
    raw == b"\"\""
}

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
pub fn find2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
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
pub fn find1(needle: u8, hay: &[u8]) -> Option<usize> {
    find2(needle, needle, hay)
}

/// The bytes that matter when skipping a container leniently: quotes and
/// brackets.
const STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    table[b'"' as usize] = true;
    table[b'{' as usize] = true;
    table[b'}' as usize] = true;
    table[b'[' as usize] = true;
    table[b']' as usize] = true;
    table
};

/// Bytes that end a run of plain string bytes in a strict string: `"`,
/// `\\` and controls.
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

/// Marks (bit 7 of a byte) the quotes, backslashes and control bytes in
/// eight bytes read little-endian. Bytes above a marked one may be marked
/// falsely (borrows), so only the lowest mark is exact: it is the first
/// such byte, and `trailing_zeros / 8` its offset (8 when there is none).
/// Bytes from 0x80 up are never marked (UTF-8 is checked apart).
#[inline]
pub fn special_mask(word: u64) -> u64 {
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    equal_bytes(word, b'"') | equal_bytes(word, b'\\') | below_space
}

/// How many leading bytes of `hay` are plain string bytes (no quote,
/// backslash or control byte): eight at a time, then one by one.
#[inline]
pub fn plain_run(hay: &[u8]) -> usize {
    let mut at = 0;
    while let Some(chunk) = hay.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let mask = special_mask(u64::from_le_bytes(word));
        if mask != 0 {
            return at + (mask.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at + hay.get(at..).map_or(0, |t| {
        t.iter().take_while(|&&b| !STOP[usize::from(b)]).count()
    })
}

/// The raw contents of a JSON string: the bytes between its quotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStr {
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
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    strict: bool,
    /// Containers entered and not yet left.
    depth: u32,
}

impl<'a> Cursor<'a> {
    /// A lenient cursor at the start of `buf` (see the module doc).
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor {
            buf,
            pos: 0,
            strict: false,
            depth: 0,
        }
    }

    /// A strict cursor at the start of `buf`: unsure (`None`) wherever
    /// `serde_json` would refuse the text.
    pub fn strict(buf: &'a [u8]) -> Self {
        Cursor {
            strict: true,
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
        if self.strict {
            return self.strict_string_rest();
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

    /// Reads a string value with `read`, which gets the text after the
    /// opening quote and returns how many bytes the string took (closing
    /// quote included) and whether it held an escape: a caller that decodes
    /// the string (qoder's envelope `body`) finds its end in the same pass.
    pub fn string_with(
        &mut self,
        read: impl FnOnce(&'a [u8]) -> Option<(usize, bool)>,
    ) -> Option<RawStr> {
        if !self.eat(b'"') {
            return None;
        }
        let start = self.pos;
        let (used, escaped) = read(self.buf.get(start..)?)?;
        if used == 0 || self.buf.get(start + used - 1) != Some(&b'"') {
            return None;
        }
        self.pos = start + used;
        Some(RawStr {
            start,
            end: self.pos - 1,
            escaped,
        })
    }

    /// The rest of a string after its opening quote, checked as
    /// `serde_json` checks it.
    fn strict_string_rest(&mut self) -> Option<RawStr> {
        let start = self.pos;
        let mut escaped = false;
        loop {
            // Most bytes are plain: skip them eight at a time.
            self.pos += plain_run(self.buf.get(self.pos..)?);
            match self.bump()? {
                b'"' => {
                    return Some(RawStr {
                        start,
                        end: self.pos - 1,
                        escaped,
                    })
                }
                b'\\' => {
                    escaped = true;
                    self.strict_escape()?;
                }
                // Only control bytes are left: raw ones are not JSON.
                _ => return None,
            }
        }
    }

    /// The rest of an escape whose backslash was just read, checked as
    /// `serde_json` checks it.
    fn strict_escape(&mut self) -> Option<()> {
        match self.bump()? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(()),
            b'u' => {
                let unit = self.hex4()?;
                if (0xDC00..0xE000).contains(&unit) {
                    return None;
                }
                if (0xD800..0xDC00).contains(&unit) {
                    // A high surrogate must be followed by a low one, or
                    // serde_json (and the agent) reject the text.
                    if self.bump()? != b'\\' || self.bump()? != b'u' {
                        return None;
                    }
                    if !(0xDC00..0xE000).contains(&self.hex4()?) {
                        return None;
                    }
                }
                Some(())
            }
            _ => None,
        }
    }

    fn bump(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut n = 0u32;
        for _ in 0..4 {
            n = n * 16 + char::from(self.bump()?).to_digit(16)?;
        }
        Some(n)
    }

    /// Reads a number or `true`/`false`/`null` token.
    #[inline]
    pub fn literal(&mut self) -> Option<&'a [u8]> {
        self.skip_ws();
        let start = self.pos;
        if self.strict {
            match self.buf.get(start)? {
                b't' => self.word(b"true")?,
                b'f' => self.word(b"false")?,
                b'n' => self.word(b"null")?,
                _ => {
                    self.number()?;
                    // serde_json refuses a number outside f64's range
                    // (`1e400`), and so would the proxy.
                    if !number_fits(self.buf.get(start..self.pos)?) {
                        return None;
                    }
                }
            }
            return self.buf.get(start..self.pos);
        }
        while let Some(&b) = self.buf.get(self.pos) {
            if matches!(
                b,
                b',' | b'}' | b']' | b':' | b'"' | b'{' | b'[' | b' ' | b'\t' | b'\n' | b'\r'
            ) {
                break;
            }
            self.pos += 1;
        }
        self.buf.get(start..self.pos).filter(|t| !t.is_empty())
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        if self.buf.get(self.pos..self.pos + word.len())? == word {
            self.pos += word.len();
            Some(())
        } else {
            None
        }
    }

    fn digits(&mut self) -> Option<()> {
        let start = self.pos;
        while matches!(self.buf.get(self.pos), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        (self.pos > start).then_some(())
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Option<()> {
        if self.buf.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.buf.get(self.pos)? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => self.digits()?,
            _ => return None,
        }
        if self.buf.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            self.digits()?;
        }
        if matches!(self.buf.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.buf.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.digits()?;
        }
        Some(())
    }

    /// Skips one value of any kind.
    #[inline]
    pub fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' | b'[' if self.strict => self.skip_strict_container(),
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
        self.skip_value()?;
        Some(nonempty)
    }

    /// Skips an object or array strictly: every member and item read and
    /// checked, one level of recursion per level of nesting (bounded by
    /// [`MAX_DEPTH`] in [`Cursor::enter_object`] and
    /// [`Cursor::enter_array`]).
    fn skip_strict_container(&mut self) -> Option<()> {
        let mut first = true;
        if self.peek()? == b'{' {
            self.enter_object()?;
            while self.next_key(&mut first)?.is_some() {
                self.skip_value()?;
            }
        } else {
            self.enter_array()?;
            while self.next_item(&mut first)? {
                self.skip_value()?;
            }
        }
        Some(())
    }

    /// Skips an object or array leniently: brackets balanced, strings
    /// respected, nothing else checked.
    fn skip_container(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            while let Some(&b) = self.buf.get(self.pos) {
                if STRUCTURAL[usize::from(b)] {
                    break;
                }
                self.pos += 1;
            }
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

    /// Enters a container (consumes `open`), refusing one too deep.
    fn enter(&mut self, open: u8) -> Option<()> {
        if self.strict && self.depth >= MAX_DEPTH {
            return None;
        }
        self.eat(open).then(|| self.depth += 1)
    }

    /// Enters an object (consumes `{`).
    pub fn enter_object(&mut self) -> Option<()> {
        self.enter(b'{')
    }

    /// The next key of the object being read, leaving the cursor at its
    /// value; `Some(None)` once the closing brace is consumed. `first` must
    /// start `true` for each object.
    #[inline]
    pub fn next_key(&mut self, first: &mut bool) -> Option<Option<RawStr>> {
        if self.eat(b'}') {
            self.depth = self.depth.saturating_sub(1);
            return Some(None);
        }
        // `{"a":1,}` is refused: after a comma only a key may follow.
        if !std::mem::replace(first, false) && !self.eat(b',') {
            return None;
        }
        let key = self.string()?;
        self.eat(b':').then_some(Some(key))
    }

    /// Enters an array (consumes `[`).
    pub fn enter_array(&mut self) -> Option<()> {
        self.enter(b'[')
    }

    /// Whether another item follows, leaving the cursor at it; `Some(false)`
    /// once the closing bracket is consumed. `first` must start `true`.
    #[inline]
    pub fn next_item(&mut self, first: &mut bool) -> Option<bool> {
        if self.eat(b']') {
            // `[1,]` is refused: the item after the comma is not a value.
            self.depth = self.depth.saturating_sub(1);
            return Some(false);
        }
        if !std::mem::replace(first, false) && !self.eat(b',') {
            return None;
        }
        Some(true)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn agrees_with_serde(text: &str) {
        let serde = serde_json::from_str::<serde_json::Value>(text).is_ok();
        assert_eq!(is_valid(text.as_bytes()), serde, "{text:?}");
    }

    #[test]
    fn a_top_level_string_is_found_and_nested_ones_are_not() {
        let body = br#"{"messages":[{"session_id":"inner","content":"say \"session_id\":\"x\""}],"session_id":"s-\u00e9 1","n":1}"#;
        assert_eq!(
            top_level_string(body, "session_id").as_deref(),
            Some("s-\u{e9} 1")
        );
        assert_eq!(top_level_string(br#"{"session_id":7}"#, "session_id"), None);
        assert_eq!(top_level_string(br#"{"a":"b"}"#, "session_id"), None);
        assert_eq!(top_level_string(b"[1]", "session_id"), None);
        assert_eq!(top_level_string(br#"{"session_id":"#, "session_id"), None);
    }

    #[test]
    fn strict_cursor_accepts_and_refuses_what_serde_json_does() {
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
            "[,1]",
            "{,}",
            "\"a\u{1}\"",
            "\"\\x\"",
            "\"\\u12\"",
            "tru",
            "truex",
            "nul",
            "{\"a\" 1}",
            "{\"a\":1 \"b\":2}",
            "[1 2]",
            "[1] 2",
            "",
            " ",
            "\"\\u00e9\\/\"",
            "1e400",
            "[1,143e33333]",
            "{\"a\":-1E+400}",
            "1e-400",
            "0e99999999999",
            "1.7976931348623157e308",
            "{\"a\":tru}",
            "{1:2}",
            "[{\"a\":[{}]},[]]",
        ] {
            agrees_with_serde(text);
        }
    }

    #[test]
    fn strict_agrees_with_serde_json_on_generated_texts() {
        let pieces = [
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "\"a\"",
            "\"\\n\"",
            "\"\\ud83d\"",
            "\"\\ude00\"",
            "1",
            "-0",
            "2.5",
            "1e400",
            "1e-400",
            "01",
            "true",
            "nul",
            "null",
            "\"",
            "\\",
            "x",
            "\u{1}",
        ];
        let mut rng = fastrand::Rng::with_seed(5);
        for _ in 0..50_000 {
            let text: String = (0..rng.usize(1..12))
                .map(|_| pieces[rng.usize(..pieces.len())])
                .collect();
            agrees_with_serde(&text);
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
        let limit = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let objects = |n: usize| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n));
        for n in [126, 127, 128, 129] {
            agrees_with_serde(&limit(n));
            agrees_with_serde(&objects(n));
        }
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
        assert!(members(br#"{"a":1} x"#, &mut |_, _| n += 1).is_err());
        assert_eq!(n, 0);
    }

    #[test]
    fn string_reports_raw_span_and_escapes() {
        let text = br#"  "a\"b" "#;
        let mut c = Cursor::new(text);
        let s = c.string().unwrap();
        assert_eq!(s.raw(text), br#"a\"b"#);
        assert!(s.escaped);
        assert!(c.at_end());
        let s = Cursor::strict(text).string().unwrap();
        assert_eq!(s.raw(text), br#"a\"b"#);
    }

    #[test]
    fn unterminated_string_is_refused() {
        for text in [&br#""abc\"#[..], br#""abc"#] {
            assert!(Cursor::new(text).string().is_none());
            assert!(Cursor::strict(text).string().is_none());
        }
    }

    #[test]
    fn skip_value_crosses_nested_containers_with_brackets_in_strings() {
        let text = br#"{"a":[1,{"b":"]}"}],"c":null} ,"#;
        for mut c in [Cursor::new(text), Cursor::strict(text)] {
            c.skip_value().unwrap();
            assert_eq!(c.peek(), Some(b','));
        }
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
        for strict in [false, true] {
            let c = |t: &'static [u8]| {
                if strict {
                    Cursor::strict(t)
                } else {
                    Cursor::new(t)
                }
            };
            assert_eq!(c(b"[ ]").skip_is_nonempty_array(), Some(false));
            assert_eq!(c(b"[{}]").skip_is_nonempty_array(), Some(true));
            assert_eq!(c(b"null").skip_is_nonempty_array(), Some(false));
            assert_eq!(c(br#""""#).skip_is_nonempty_string(), Some(false));
            assert_eq!(c(br#""\n""#).skip_is_nonempty_string(), Some(true));
            assert_eq!(c(b"null").skip_is_null(), Some(true));
        }
        assert_eq!(Cursor::new(b"nullx").skip_is_null(), Some(false));
    }

    #[test]
    fn only_a_strict_cursor_is_unsure_at_what_serde_json_refuses() {
        let text = br#"{"a":[1,{"b":-2.5e3}],"c":1e-400} "#;
        assert!(Cursor::strict(text).skip_value().is_some());
        for bad in [
            &br#"{"a":[1,{"b":1e400}]}"#[..],
            br#"[143e33333]"#,
            b"-1E+999",
            br#"{"a":tru}"#,
            br#"["x\u12"]"#,
            br#"[1 2]"#,
        ] {
            assert!(Cursor::strict(bad).skip_value().is_none());
            assert!(Cursor::new(bad).skip_value().is_some(), "only when asked");
        }
        // Digits inside strings are not numbers.
        assert!(Cursor::strict(br#"["1e400"]"#).skip_value().is_some());
    }

    #[test]
    fn string_with_hands_the_text_after_the_quote_to_the_reader() {
        let text = br#"{"body":"a\"b","x":1}"#;
        let mut c = Cursor::new(text);
        c.enter_object().unwrap();
        let mut first = true;
        c.next_key(&mut first).unwrap().unwrap();
        let s = c
            .string_with(|rest| {
                assert!(rest.starts_with(br#"a\"b""#));
                Some((5, true))
            })
            .unwrap();
        assert_eq!(s.raw(text), br#"a\"b"#);
        assert_eq!(c.next_key(&mut first).unwrap().unwrap().raw(text), b"x");
        // A reader that does not stop after a quote is refused.
        assert!(Cursor::new(br#""ab""#)
            .string_with(|_| Some((1, false)))
            .is_none());
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

    #[test]
    fn plain_run_stops_where_the_byte_loop_stops_at_every_length() {
        let mut rng = fastrand::Rng::with_seed(5);
        for len in 0..200 {
            for _ in 0..8 {
                let hay: Vec<u8> = (0..len)
                    .map(|_| match rng.u8(..) {
                        0..=3 => b'"',
                        4..=6 => b'\\',
                        7..=12 => rng.u8(..0x20),
                        _ => rng.u8(0x20..),
                    })
                    .collect();
                let expected = hay
                    .iter()
                    .position(|&b| STOP[usize::from(b)])
                    .unwrap_or(hay.len());
                assert_eq!(plain_run(&hay), expected, "{hay:?}");
            }
        }
    }

    #[test]
    fn a_string_body_is_what_a_string_holds_between_its_quotes() {
        for (raw, ok) in [
            (&br"plain text"[..], true),
            (b"", true),
            (br#"a \"quoted\" word\n\u00e9\ud83d\ude00"#, true),
            (br#"a "bare" quote"#, false),
            (br"\q", false),
            (br"\u12", false),
            (br"\ud83d", false),
            (br"\ude00", false),
            (b"tab\there", false),
            (br"ends in \", false),
        ] {
            assert_eq!(is_string_body(raw), ok, "{}", String::from_utf8_lossy(raw));
            let quoted = [&b"\""[..], raw, b"\""].concat();
            let mut c = Cursor::strict(&quoted);
            let whole = c.string().is_some_and(|s| s.end == quoted.len() - 1);
            assert_eq!(whole, ok, "the cursor agrees");
        }
    }

    #[test]
    fn the_last_member_and_its_count_read_as_a_parsed_object_reads_them() {
        let texts = [
            r#"{"usage":{"prompt_tokens":9,"completion_tokens":3}}"#,
            r#"{"usage":{"prompt_tokens":9,"prompt_tokens":11}}"#,
            r#"{"usage":{"prompt_tokens":9.0,"completion_tokens":-3}}"#,
            r#"{"usage":{"prompt_tokens":18446744073709551616}}"#,
            r#"{"usage":{"prompt_tokens":"9"}}"#,
            r#"{"usage":null}"#,
            r#"{"usage":[1],"usage":{"completion_tokens":0}}"#,
            r#"{"other":{"usage":{"prompt_tokens":1}}}"#,
        ];
        for text in texts {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            for key in ["prompt_tokens", "completion_tokens"] {
                let want = v
                    .get("usage")
                    .and_then(|u| u.get(key))
                    .and_then(|n| n.as_u64());
                let usage = last_member(text.as_bytes(), b"usage").unwrap();
                let got = usage
                    .and_then(|u| last_member(u, key.as_bytes()).unwrap())
                    .and_then(as_u64);
                assert_eq!(got, want, "{text} {key}");
            }
        }
        assert_eq!(last_member(br#"{"us\u0061ge":1}"#, b"usage"), Err(Unsure));
    }

    #[test]
    fn member_spans_read_every_key_as_last_member_does() {
        let mut texts: Vec<Vec<u8>> = [
            r#"{"usage":[1],"usage":{"completion_tokens":0},"stream":true}"#,
            r#" { "a" : 1 , "b" : "x\"y" , "a" : [ {"a":2} ] } "#,
            r#"{"us\u0061ge":1,"stream":true}"#,
            r#"{}"#,
            r#"[1,2]"#,
            r#""s""#,
            r#"{"a":"#,
            r#"{"a":1,}"#,
            "",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        // Every prefix and a byte flipped: broken text is answered alike.
        let whole = br#"{"model":"m","stream":false,"messages":[{"role":"user","content":"hi \u00e9"}],"stream":true}"#;
        let mut rng = fastrand::Rng::with_seed(24);
        for end in 0..=whole.len() {
            texts.push(whole[..end].to_vec());
            let mut flipped = whole.to_vec();
            if let Some(b) = flipped.get_mut(rng.usize(..whole.len())) {
                *b = b"{}[]\":,x1 "[rng.usize(..10)];
            }
            texts.push(flipped);
        }
        for text in &texts {
            let spans = member_spans(text);
            for key in ["usage", "stream", "a", "b", "model", "messages", "none"] {
                let want = last_member(text, key.as_bytes());
                let got = spans
                    .as_ref()
                    .map(|s| last_of(text, s, key.as_bytes()))
                    .map_err(|u| *u);
                assert_eq!(got, want, "{} {key}", String::from_utf8_lossy(text));
            }
        }
    }

    #[test]
    fn canonical_text_is_what_serde_json_writes() {
        let mut rng = fastrand::Rng::with_seed(9);
        let samples = [
            r#"{"a":1,"b":[true,false,null],"c":"x\"y\\z\n\u0001"}"#,
            r#"{"a" : 1}"#,
            r#"{"a":1.0}"#,
            r#"{"a":1e2}"#,
            r#"{"a":-0}"#,
            r#"{"a":-5}"#,
            r#"{"a":18446744073709551615}"#,
            r#"{"a":18446744073709551616}"#,
            r#"{"a":"\/"}"#,
            r#"{"a":"\u00e9"}"#,
            r#"{"a":"\u001F"}"#,
            r#"{"a":"\u000a"}"#,
            r#"{"a":1,"a":2}"#,
            r#"[{"x":[]},{},"é"]"#,
            "\"plain\"",
            "12",
        ];
        for text in samples {
            let v: serde_json::Value = serde_json::from_str(text).unwrap();
            // Sound (canonical text is the serialisation); fractions are
            // left to a parse even where they would match.
            if is_canonical(text.as_bytes()) {
                assert_eq!(v.to_string(), text);
            } else {
                let written = v.to_string();
                assert!(written != text || text.contains('.'), "{text}");
            }
        }
        // Generated values written by serde_json are canonical.
        for _ in 0..300 {
            let v = generated_value(&mut rng, 0);
            let text = v.to_string();
            assert!(is_canonical(text.as_bytes()), "{text}");
        }
    }

    fn generated_value(rng: &mut fastrand::Rng, depth: u32) -> serde_json::Value {
        use serde_json::json;
        match rng.u8(..8) {
            0 if depth < 4 => serde_json::Value::Array(
                (0..rng.usize(..4))
                    .map(|_| generated_value(rng, depth + 1))
                    .collect(),
            ),
            1 if depth < 4 => {
                let mut m = serde_json::Map::new();
                for i in 0..rng.usize(..4) {
                    m.insert(format!("k{i}\u{1}\"é"), generated_value(rng, depth + 1));
                }
                serde_json::Value::Object(m)
            }
            2 => json!(rng.i64(..)),
            3 => json!(rng.u64(..)),
            4 => json!(rng.bool()),
            5 => serde_json::Value::Null,
            _ => {
                let s: String = (0..rng.usize(..12))
                    .map(|_| char::from_u32(rng.u32(..0x300)).unwrap_or('x'))
                    .collect();
                json!(s)
            }
        }
    }
}

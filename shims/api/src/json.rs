//! JSON as shimgate reads it, and the one rule both shims follow for a
//! number outside f64's range (`1e400`): RFC 8259 allows it, `serde_json`
//! (and so the proxy, the runtime and most agents) refuses the whole text.
//!
//! The rule: **text holding such a number is not JSON to shimgate, so it is
//! never copied into a frame as JSON; it travels as a JSON string of its
//! original bytes, and the leg that writes the native wire puts those bytes
//! back.** In practice:
//!
//! * stream data: trae carries the event's data as `x_solo.text` (the
//!   ingress writes the text back byte for byte); a qoder envelope `body`
//!   has no such place and becomes an error frame quoting its first bytes;
//! * a request body must still work: [`parse_keeping_numbers`] parses it
//!   with each such number turned into a tagged string
//!   (`"shimgate:number:<mac>:1e400"`), which the proxy passes like any
//!   string, and [`restore_numbers`] turns every tag in the rebuilt body back
//!   into the original token, so the upstream gets what the agent sent.
//!
//! The tag's mac is keyed by a secret drawn once per process, so an agent
//! cannot forge a tag that restore would turn into a number, and folding
//! the same body twice (the return leg re-folds an expired original) gives
//! the same tags.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::OnceLock;

use serde_json::Value;

/// How a tag starts; the mac (16 hex digits), `:` and the token follow.
pub const TAG_PREFIX: &str = "shimgate:number:";

/// Numbers at most this long without an exponent always fit an f64: the
/// integer part is below 10^300 (f64 reaches 1.8·10^308), so only longer
/// ones and ones with an exponent are handed to `serde_json` to decide.
const ALWAYS_FITS: usize = 300;

/// Whether `serde_json` holds the JSON number `token` (its value fits an
/// f64; a tiny one such as `1e-400` fits, as zero). Tokens that are not
/// numbers by the grammar say `false`.
pub fn number_fits(token: &[u8]) -> bool {
    if token.len() <= ALWAYS_FITS && memchr::memchr2(b'e', b'E', token).is_none() {
        return is_number(token);
    }
    serde_json::from_slice::<Value>(token).is_ok()
}

/// Whether `token` is a JSON number by the grammar that `serde_json`
/// refuses because its value is out of f64's range.
pub fn out_of_range(token: &[u8]) -> bool {
    is_number(token) && !number_fits(token)
}

/// Parses `json` like `serde_json::from_slice`, except that a number out
/// of f64's range in a value position becomes its tag (a string). Any other
/// fault still refuses the text, with `serde_json`'s error for the original.
pub fn parse_keeping_numbers(json: &[u8]) -> Result<Value, serde_json::Error> {
    let err = match serde_json::from_slice(json) {
        Ok(value) => return Ok(value),
        Err(err) => err,
    };
    match tag_numbers(json) {
        Some(tagged) => serde_json::from_slice(&tagged).map_err(|_| err),
        None => Err(err),
    }
}

/// Turns every genuine tag in serialised JSON back into its number token.
/// Text without a tag is returned as it is, without a copy.
pub fn restore_numbers(json: Vec<u8>) -> Vec<u8> {
    let needle = [b"\"", TAG_PREFIX.as_bytes()].concat();
    let mut out = Vec::new();
    let mut copied = 0;
    for at in memchr::memmem::find_iter(&json, &needle) {
        if at < copied {
            continue;
        }
        if let Some((end, token)) = tag_at(&json, at) {
            out.extend_from_slice(json.get(copied..at).unwrap_or_default());
            out.extend_from_slice(token);
            copied = end;
        }
    }
    if copied == 0 {
        return json;
    }
    out.extend_from_slice(json.get(copied..).unwrap_or_default());
    out
}

/// The tag's string (without quotes) for an out-of-range `token`.
fn tag(token: &[u8]) -> String {
    format!(
        "{TAG_PREFIX}{:016x}:{}",
        mac(token),
        String::from_utf8_lossy(token)
    )
}

fn mac(token: &[u8]) -> u64 {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).hash_one(token)
}

/// A genuine tag whose opening quote is at `at`: where its string ends
/// (after the closing quote) and its number token.
fn tag_at(json: &[u8], at: usize) -> Option<(usize, &[u8])> {
    let before = json.get(..at)?;
    let backslashes = before.iter().rev().take_while(|&&b| b == b'\\').count();
    if backslashes % 2 == 1 {
        // An escaped quote inside some other string.
        return None;
    }
    let start = at + 1 + TAG_PREFIX.len();
    let hex = std::str::from_utf8(json.get(start..start + 16)?).ok()?;
    let mac_sent = u64::from_str_radix(hex, 16).ok()?;
    let rest = json.get(start + 16..)?.strip_prefix(b":")?;
    let len = memchr::memchr(b'"', rest)?;
    let token = rest.get(..len)?;
    let end = start + 17 + len + 1;
    let next = json.get(end..)?.iter().find(|b| !b.is_ascii_whitespace());
    // A tag is only ever a value; as a key its number would break the text.
    let genuine = out_of_range(token) && mac(token) == mac_sent && next != Some(&b':');
    genuine.then_some((end, token))
}

/// `json` with each out-of-range number in a value position replaced by
/// its tag; `None` when there is none. Only value positions are tagged: a
/// string is valid wherever a number is, and in a key position too, so
/// tagging a number there would turn invalid text into valid JSON.
pub fn tag_numbers(json: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut copied = 0;
    // Open containers, innermost last: `true` for an object.
    let mut objects: Vec<bool> = Vec::new();
    let mut i = 0;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => i = string_end(json, i + 1)?,
            b'{' | b'[' => {
                objects.push(b == b'{');
                i += 1;
            }
            b'}' | b']' => {
                objects.pop();
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let rest = json.get(i..).unwrap_or_default();
                let len = rest
                    .iter()
                    .take_while(|c| matches!(c, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                let token = rest.get(..len).unwrap_or_default();
                let in_object = objects.last() == Some(&true);
                if out_of_range(token) && !(in_object && follows_key_opener(json, i)) {
                    out.extend_from_slice(json.get(copied..i).unwrap_or_default());
                    out.push(b'"');
                    out.extend_from_slice(tag(token).as_bytes());
                    out.push(b'"');
                    copied = i + len;
                }
                i += len;
            }
            _ => i += 1,
        }
    }
    if copied == 0 {
        return None;
    }
    out.extend_from_slice(json.get(copied..).unwrap_or_default());
    Some(out)
}

/// Whether the last byte before `at` (whitespace aside) opens a key: `{`
/// or `,` (the caller knows the container is an object).
fn follows_key_opener(json: &[u8], at: usize) -> bool {
    let before = json.get(..at).unwrap_or_default();
    matches!(
        before.iter().rev().find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b',')
    )
}

/// The index after the closing quote of the string whose contents start
/// at `from`; `None` when it never closes.
fn string_end(json: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        let at = memchr::memchr2(b'"', b'\\', json.get(i..)?)?;
        if json.get(i + at) == Some(&b'"') {
            return Some(i + at + 1);
        }
        // A backslash: the byte after it never ends the string.
        i += at + 2;
    }
}

/// The JSON number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn is_number(token: &[u8]) -> bool {
    fn digits(t: &[u8]) -> usize {
        t.iter().take_while(|b| b.is_ascii_digit()).count()
    }
    let t = token.strip_prefix(b"-").unwrap_or(token);
    let int = digits(t);
    if int == 0 || (int > 1 && t.first() == Some(&b'0')) {
        return false;
    }
    let mut t = t.get(int..).unwrap_or_default();
    if let Some(frac) = t.strip_prefix(b".") {
        let n = digits(frac);
        if n == 0 {
            return false;
        }
        t = frac.get(n..).unwrap_or_default();
    }
    if let Some(exp) = t.strip_prefix(b"e").or_else(|| t.strip_prefix(b"E")) {
        let exp = exp
            .strip_prefix(b"+")
            .or_else(|| exp.strip_prefix(b"-"))
            .unwrap_or(exp);
        let n = digits(exp);
        return n > 0 && n == exp.len();
    }
    t.is_empty()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn number_fits_agrees_with_serde_json() {
        let long_int = "9".repeat(400);
        let long_fits = format!("{}.5", "9".repeat(299));
        for token in [
            "0",
            "-0",
            "1.5",
            "1e400",
            "-1e400",
            "143e33333",
            "1E+400",
            "1e-400",
            "0e99999999999",
            "1e99999999999",
            "1.7976931348623157e308",
            "1.8e308",
            &long_int,
            &long_fits,
            "01",
            "1.",
            "-",
            "1e",
            ".5",
        ] {
            let serde = serde_json::from_str::<Value>(token).is_ok();
            assert_eq!(number_fits(token.as_bytes()), serde, "{token}");
            assert_eq!(
                is_number(token.as_bytes()),
                serde || out_of_range(token.as_bytes())
            );
        }
        assert!(out_of_range(b"1e400") && out_of_range(long_int.as_bytes()));
        assert!(!out_of_range(b"1e") && !out_of_range(b"1e-400"));
    }

    #[test]
    fn out_of_range_values_become_tags_and_come_back_as_their_bytes() {
        let text = br#"{"a":1e400,"b":[ -2E+999 ,1],"c":"1e400","d":{"e":143e33333}}"#;
        let value = parse_keeping_numbers(text).unwrap();
        let tag_a = value["a"].as_str().unwrap();
        assert!(tag_a.starts_with(TAG_PREFIX) && tag_a.ends_with(":1e400"));
        assert_eq!(value["b"][1], 1);
        assert_eq!(value["c"], "1e400");
        let back = restore_numbers(serde_json::to_vec(&value).unwrap());
        assert_eq!(
            back,
            br#"{"a":1e400,"b":[-2E+999,1],"c":"1e400","d":{"e":143e33333}}"#
        );
    }

    #[test]
    fn text_without_tags_is_left_alone() {
        let text = br#"{"a":"shimgate:number:0123456789abcdef:1e400","b":"\"shimgate:number:x"}"#;
        assert_eq!(restore_numbers(text.to_vec()), text.to_vec());
        let value = parse_keeping_numbers(b"[1, 2.5e3]").unwrap();
        assert_eq!(value, serde_json::json!([1, 2500.0]));
    }

    #[test]
    fn a_tag_escaped_inside_another_string_or_used_as_a_key_stays_text() {
        let tagged = tag(b"1e400");
        let inner = format!(r#"{{"s":"x\"{tagged}\"","k":{{"{tagged}":1}}}}"#);
        assert_eq!(
            restore_numbers(inner.clone().into_bytes()),
            inner.into_bytes()
        );
    }

    #[test]
    fn other_faults_are_still_refused() {
        for bad in [
            &br#"{1e400:1}"#[..],
            br#"{"a":1,1e400:1}"#,
            br#"{"a":1e400,}"#,
            br#"{"a":1e400"#,
            br#"[1e400 1]"#,
            br#"[1e400"]"#,
            br#"{"a":"1e400}"#,
            b"1e400x",
        ] {
            let err = parse_keeping_numbers(bad);
            assert!(err.is_err(), "{}", String::from_utf8_lossy(bad));
        }
        let err = parse_keeping_numbers(b"{\"a\":1e400,}").unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
    }
}

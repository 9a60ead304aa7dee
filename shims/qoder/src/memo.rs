//! The frames of one answer repeat themselves around the one string that
//! changes: the envelope, the chunk's id, model and choice layout are the
//! same bytes frame after frame, and only the text delta differs. After a
//! frame the unwrapper read in full, the memo keeps what came before and
//! after that string, as the upstream sent it and as the frame was
//! written; a later frame that starts and ends with the same bytes and
//! holds a valid string in between is written from the memo, and only
//! the string is checked and copied (one pass).
//!
//! Why that is the full reading: both readings (the envelope's and the
//! chunk's strict one) are functions of the bytes, and a string's contents
//! never change how what follows it is read. So a frame that repeats the
//! bytes around a string of other valid contents is the same envelope
//! around the same chunk, with that string in place of the old one: the
//! same frame class (content exactly when the string is not empty: the
//! memo is only kept for chunks whose one answer string is their only
//! content) and the same finish. What would make the full reading differ
//! sends the frame down the full path, which then learns from it: a quote
//! or control byte, an escape other than `\"`, `\\` and `\/` in an
//! envelope's body (the decoding would take its careful path), a string
//! `serde_json` refuses, bytes that are not UTF-8.

use bytes::BytesMut;
use shimgate_shim_api::json_scan::{is_string_body, plain_run};
use shimgate_shim_api::translate::chars;

use crate::chunk::Varying;
use crate::scan::RawStr;

const DATA_PREFIX: &[u8] = b"data: ";

/// What a frame read from the memo says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hit {
    /// The string is not empty: the frame is content.
    pub content: bool,
    /// Characters of the string as written (the meter's count).
    pub chars: usize,
    /// The chunk has a `finish_reason`.
    pub finish: bool,
}

/// The bytes around the varying string of the last frame read in full.
#[derive(Debug)]
struct Template {
    /// The event data up to the string's contents (its opening quote
    /// included, escaped as the frame escapes it).
    raw_prefix: Vec<u8>,
    /// The event data from the string's closing quote on.
    raw_suffix: Vec<u8>,
    /// What the frame's prefix wrote: `data: ` and the chunk up to the
    /// string's contents.
    out_prefix: Vec<u8>,
    /// What its suffix wrote: the rest of the chunk and the blank line.
    out_suffix: Vec<u8>,
    /// The string sits inside an envelope's `body` string: its bytes are
    /// decoded once (`\"`, `\\`, `\/` only) before they are the chunk's.
    enveloped: bool,
    finish: bool,
}

/// One stream's memo (empty until a frame was read in full).
#[derive(Debug)]
pub(crate) struct Memo {
    template: Option<Template>,
    enabled: bool,
}

impl Default for Memo {
    fn default() -> Self {
        Memo {
            template: None,
            enabled: true,
        }
    }
}

impl Memo {
    /// A memo that never matches: every frame takes the full path (the
    /// reference the memo is tested against).
    pub fn disabled() -> Self {
        Memo {
            template: None,
            enabled: false,
        }
    }

    /// Writes the frame for event data `data` from the memo, when it
    /// repeats the memo's bytes around a valid string; `None` (nothing
    /// written) sends it down the full path.
    pub fn apply(&self, data: &[u8], out: &mut BytesMut) -> Option<Hit> {
        let t = self.template.as_ref()?;
        let mid_end = data.len().checked_sub(t.raw_suffix.len())?;
        if mid_end < t.raw_prefix.len()
            || !data.starts_with(&t.raw_prefix)
            || !data.ends_with(&t.raw_suffix)
        {
            return None;
        }
        let mid = data.get(t.raw_prefix.len()..mid_end)?;
        let start = out.len();
        out.extend_from_slice(&t.out_prefix);
        let text_start = out.len();
        let copied = if t.enveloped {
            decode_simple(mid, out)
        } else {
            out.extend_from_slice(mid);
            Some(())
        };
        let text = out.get(text_start..).unwrap_or_default();
        let valid = copied.is_some() && is_string_body(text) && std::str::from_utf8(text).is_ok();
        if !valid {
            out.truncate(start);
            return None;
        }
        let hit = Hit {
            content: !text.is_empty(),
            chars: chars(text) as usize,
            finish: t.finish,
        };
        out.extend_from_slice(&t.out_suffix);
        Some(hit)
    }

    /// Learns from a bare chunk read in full: `data` is the event data,
    /// written as it is, and `varying` its string.
    pub fn learn_bare(&mut self, data: &[u8], (varying, finish): (Varying, bool)) {
        if !self.enabled {
            return;
        }
        let (Some(before), Some(after)) = (data.get(..varying.start), data.get(varying.end..))
        else {
            return;
        };
        self.template = Some(Template {
            raw_prefix: before.to_vec(),
            raw_suffix: after.to_vec(),
            out_prefix: [DATA_PREFIX, before].concat(),
            out_suffix: [after, b"\n\n"].concat(),
            enveloped: false,
            finish,
        });
    }

    /// Learns from an envelope read in full: `data` is the event data,
    /// `body` its `body` string, `decoded` that string as the frame wrote
    /// it, and `varying` the chunk's string in `decoded`. Nothing is
    /// learned when the body holds anything but plain bytes and `\"`,
    /// `\\`, `\/` escapes (where the decoding is a byte-for-byte map).
    pub fn learn_envelope(
        &mut self,
        data: &[u8],
        body: RawStr,
        decoded: &[u8],
        (varying, finish): (Varying, bool),
    ) {
        if !self.enabled {
            return;
        }
        self.template = None;
        // Where the string's contents start and end in the raw body: plain
        // bytes map one to one (skipped a word at a time), `\"`, `\\`
        // and `\/` two to one.
        let (mut raw, mut written) = (body.start, 0usize);
        let (mut start, mut end) = (None, None);
        loop {
            if written == varying.start && start.is_none() {
                start = Some(raw);
            }
            if written == varying.end && end.is_none() {
                end = Some(raw);
            }
            if raw >= body.end {
                break;
            }
            let next = if start.is_none() {
                varying.start
            } else if end.is_none() {
                varying.end
            } else {
                usize::MAX
            };
            let run = plain_run(data.get(raw..body.end).unwrap_or_default())
                .min(next.saturating_sub(written));
            if run > 0 {
                raw += run;
                written += run;
                continue;
            }
            match (data.get(raw), data.get(raw + 1)) {
                (Some(b'\\'), Some(b'"' | b'\\' | b'/')) => raw += 2,
                _ => return,
            }
            written += 1;
        }
        let (Some(start), Some(end)) = (start, end) else {
            return;
        };
        if raw != body.end || written != decoded.len() {
            return;
        }
        let (Some(before), Some(after)) =
            (decoded.get(..varying.start), decoded.get(varying.end..))
        else {
            return;
        };
        let (Some(raw_prefix), Some(raw_suffix)) = (data.get(..start), data.get(end..)) else {
            return;
        };
        self.template = Some(Template {
            raw_prefix: raw_prefix.to_vec(),
            raw_suffix: raw_suffix.to_vec(),
            out_prefix: [DATA_PREFIX, before].concat(),
            out_suffix: [after, b"\n\n"].concat(),
            enveloped: true,
            finish,
        });
    }
}

/// Decodes the bytes of an envelope's body string that hold only plain
/// bytes and `\"`, `\\`, `\/` escapes; `None` at anything else.
fn decode_simple(raw: &[u8], out: &mut BytesMut) -> Option<()> {
    let mut at = 0;
    loop {
        let rest = raw.get(at..)?;
        let plain = plain_run(rest);
        out.extend_from_slice(rest.get(..plain)?);
        at += plain;
        match (raw.get(at), raw.get(at + 1)) {
            (None, _) => return Some(()),
            (Some(b'\\'), Some(&kind @ (b'"' | b'\\' | b'/'))) => {
                out.extend_from_slice(&[kind]);
                at += 2;
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests;

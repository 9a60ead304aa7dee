//! The one check of bare OpenAI SSE: what the return leg owes a compression
//! proxy, as the proxy reads it (billion-context reads only the
//! first `data:` line of an event, merges frames a single `\n` apart into
//! one unparseable blob and drops frames without `choices`). The tests, the
//! fuzz targets, the test proxy and `shimgate translate --check` all use it.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;

use serde_json::Value;

/// Keys only a qoder envelope has: a chunk still wrapped.
const ENVELOPE_KEYS: [&str; 3] = ["statusCodeValue", "body", "headers"];

/// One problem in a stream, as a proxy would see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based frame number (0 for the stream as a whole).
    pub frame: usize,
    /// What is wrong.
    pub what: String,
}

impl Problem {
    fn at(frame: usize, what: impl Into<String>) -> Problem {
        Problem {
            frame,
            what: what.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.frame == 0 {
            write!(f, "stream: {}", self.what)
        } else {
            write!(f, "frame {}: {}", self.frame, self.what)
        }
    }
}

/// Every problem [`check_openai`] found, in stream order (the count of
/// `[DONE]` frames last).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl Deref for Problems {
    type Target = [Problem];

    fn deref(&self) -> &[Problem] {
        &self.0
    }
}

impl IntoIterator for Problems {
    type Item = Problem;
    type IntoIter = std::vec::IntoIter<Problem>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// Checks a stream meant to be bare OpenAI SSE (what the return leg sends a
/// proxy, and what the ingress reads from one). Well formed is: UTF-8 with
/// `\n` line ends; every frame exactly one `data:` line (one optional space
/// after the colon) followed by one blank line; its data a JSON object
/// with `choices` or `error` and none of an envelope's keys; exactly one
/// `data: [DONE]`, and nothing after it. Every rule broken is reported,
/// with the frame it was broken in.
pub fn check_openai(bytes: &[u8]) -> Result<(), Problems> {
    let mut problems = Vec::new();
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => Cow::Borrowed(t),
        Err(e) => {
            problems.push(Problem::at(0, format!("not UTF-8 ({e})")));
            String::from_utf8_lossy(bytes)
        }
    };
    // CR line ends are reported once, then read as `\n` so the frames are
    // still checked one by one.
    let text = if text.contains('\r') {
        problems.push(Problem::at(
            0,
            "CR (\\r) line ends: a proxy that splits events on \\n\\n reads them as one",
        ));
        Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        text
    };
    let pieces: Vec<&str> = text.split("\n\n").collect();
    let mut frame = 0;
    let mut dones = 0;
    // The frame a run of extra blank lines was last reported after.
    let mut blank_after = None;
    for (i, piece) in pieces.iter().enumerate() {
        let last = i + 1 == pieces.len();
        // A piece is never more than one `\n` short of a separator.
        let (blank, body) = match piece.strip_prefix('\n') {
            Some(rest) => (true, rest),
            None => (piece.is_empty() && !last, *piece),
        };
        if blank && blank_after != Some(frame) {
            blank_after = Some(frame);
            let what = if frame == 0 {
                "starts with a blank line (an empty event)"
            } else {
                "followed by a blank line too many (an empty event)"
            };
            problems.push(Problem::at(frame, what));
        }
        if body.is_empty() {
            continue;
        }
        frame += 1;
        if last {
            problems.push(Problem::at(
                frame,
                "the last frame is not ended by a blank line",
            ));
        }
        if dones > 0 {
            problems.push(Problem::at(frame, "a frame after data: [DONE]"));
        }
        check_frame(frame, body, &mut dones, &mut problems);
    }
    match dones {
        0 => problems.push(Problem::at(0, "no data: [DONE]")),
        1 => {}
        n => problems.push(Problem::at(0, format!("{n} data: [DONE] frames"))),
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Problems(problems))
    }
}

/// The lines of one frame (no blank line inside).
fn check_frame(n: usize, frame: &str, dones: &mut usize, problems: &mut Vec<Problem>) {
    let lines: Vec<&str> = frame.lines().filter(|l| !l.is_empty()).collect();
    let data: Vec<&str> = lines
        .iter()
        .filter_map(|l| {
            l.strip_prefix("data:")
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
        })
        .collect();
    if data.is_empty() {
        problems.push(Problem::at(n, "no data: line (a proxy drops it)"));
        return;
    }
    if data.len() > 1 {
        problems.push(Problem::at(n, format!("{} data: lines in one event: frames separated by a single \\n? a proxy reads only the first", data.len())));
    }
    if lines.iter().any(|l| l.starts_with("event:")) {
        problems.push(Problem::at(
            n,
            "an event: line (a proxy ignores it; the data alone must carry the meaning)",
        ));
    }
    if let Some(other) = lines
        .iter()
        .find(|l| !l.starts_with("data:") && !l.starts_with("event:"))
    {
        problems.push(Problem::at(
            n,
            format!("a line that is not data: ({other:?}): a frame is one data: line"),
        ));
    }
    for d in data {
        if d == "[DONE]" {
            *dones += 1;
            continue;
        }
        match serde_json::from_str::<Value>(d) {
            Ok(Value::Object(chunk)) => {
                if ENVELOPE_KEYS.iter().any(|k| chunk.contains_key(*k)) {
                    problems.push(Problem::at(
                        n,
                        "envelope keys left (statusCodeValue/body): the chunk is still wrapped",
                    ));
                } else if !chunk.contains_key("choices") && !chunk.contains_key("error") {
                    problems.push(Problem::at(
                        n,
                        "no choices: a proxy drops this frame silently",
                    ));
                }
            }
            Ok(_) => problems.push(Problem::at(n, "data is not a JSON object")),
            Err(_) => problems.push(Problem::at(n, "data is not JSON")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHUNK: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    fn whats(bytes: &[u8]) -> Vec<String> {
        check_openai(bytes)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn a_clean_stream_has_no_problems() {
        assert_eq!(
            check_openai(format!("{CHUNK}{CHUNK}{DONE}").as_bytes()),
            Ok(())
        );
        // One space after the colon is optional, as in SSE.
        assert_eq!(
            check_openai(b"data:{\"choices\":[]}\n\ndata:[DONE]\n\n"),
            Ok(())
        );
        assert_eq!(
            check_openai(b"data: {\"error\":{\"code\":\"X\"}}\n\ndata: [DONE]\n\n"),
            Ok(())
        );
    }

    #[test]
    fn frames_a_single_newline_apart_are_one_problem() {
        let p = whats(b"data: {\"choices\":[]}\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("frame 1: 2 data: lines"), "{p:?}");
    }

    #[test]
    fn envelopes_and_choiceless_frames_are_reported() {
        let p = whats(b"data: {\"headers\":{},\"body\":\"{}\",\"statusCodeValue\":200}\n\ndata: {\"id\":1}\n\n");
        assert_eq!(
            p,
            [
                "frame 1: envelope keys left (statusCodeValue/body): the chunk is still wrapped",
                "frame 2: no choices: a proxy drops this frame silently",
                "stream: no data: [DONE]",
            ]
        );
        // Any one envelope key is enough.
        assert!(
            whats(format!("data: {{\"body\":\"x\",\"choices\":[]}}\n\n{DONE}").as_bytes())[0]
                .contains("envelope keys left")
        );
    }

    #[test]
    fn done_must_be_single_and_last() {
        let p = whats(format!("{DONE}{CHUNK}{DONE}").as_bytes());
        assert_eq!(
            p,
            [
                "frame 2: a frame after data: [DONE]",
                "frame 3: a frame after data: [DONE]",
                "stream: 2 data: [DONE] frames",
            ]
        );
    }

    #[test]
    fn data_must_be_a_json_object() {
        let p = whats(format!("data: [1]\n\ndata: {{oops\n\n{DONE}").as_bytes());
        assert_eq!(
            p,
            [
                "frame 1: data is not a JSON object",
                "frame 2: data is not JSON"
            ]
        );
    }

    #[test]
    fn other_lines_and_blank_lines_are_reported() {
        let p =
            whats(format!("event: output\n{CHUNK}: ping\n{CHUNK}\n{CHUNK}\n\n{DONE}").as_bytes());
        assert_eq!(
            p,
            [
                "frame 1: an event: line (a proxy ignores it; the data alone must carry the meaning)",
                "frame 2: a line that is not data: (\": ping\"): a frame is one data: line",
                "frame 2: followed by a blank line too many (an empty event)",
                "frame 3: followed by a blank line too many (an empty event)",
            ]
        );
        assert_eq!(
            whats(b"event: ping\n\ndata: [DONE]\n\n"),
            ["frame 1: no data: line (a proxy drops it)"]
        );
        assert_eq!(
            whats(format!("\n{DONE}").as_bytes()),
            ["stream: starts with a blank line (an empty event)"]
        );
    }

    #[test]
    fn a_cut_last_frame_and_cr_line_ends_are_reported() {
        assert_eq!(
            whats(format!("{CHUNK}data: [DONE]\n").as_bytes()),
            ["frame 2: the last frame is not ended by a blank line"]
        );
        let crlf = format!("{CHUNK}{DONE}").replace('\n', "\r\n");
        assert_eq!(
            whats(crlf.as_bytes()),
            ["stream: CR (\\r) line ends: a proxy that splits events on \\n\\n reads them as one"]
        );
    }

    #[test]
    fn empty_and_non_utf8_streams_are_reported() {
        assert_eq!(whats(b""), ["stream: no data: [DONE]"]);
        let p = whats(b"data: {\"choices\":[\"\xff\"]}\n\ndata: [DONE]\n\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].starts_with("stream: not UTF-8"), "{p:?}");
    }
}

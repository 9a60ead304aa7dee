//! `shimgate frames`: an SSE byte stream on stdin to one JSON object per
//! dispatched event, printed as soon as the event is complete, for looking at
//! captures and live streams.

use std::borrow::Cow;
use std::io::{self, Read, Write};
use std::process::ExitCode;

use bytes::Bytes;
use serde::Serialize;
use shimgate_shim_api::sse::{SseError, SseEvent, SseParser};

/// How much is read from the input at a time. A read returns whatever has
/// arrived (up to this), so a small event is printed at once, not after 64 KiB.
const READ_BUF_BYTES: usize = 64 * 1024;

/// What a finished run saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FramesSummary {
    /// Bytes read from the input.
    pub bytes: u64,
    /// Dispatched events printed.
    pub events: u64,
    /// Whether an unterminated trailing event was printed.
    pub incomplete_printed: bool,
}

/// Why a run stopped early.
#[derive(Debug, thiserror::Error)]
pub enum FramesError {
    /// Reading the input or writing the output failed.
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The stream broke a parser limit; events before it were printed.
    #[error("{source} (stopped after {read} bytes of input)")]
    Sse {
        /// The parser's refusal.
        source: SseError,
        /// Bytes read when it refused.
        read: u64,
    },
}

/// One output line. Fields a client would see as absent or default are left
/// out: `event` when it is the default `message`, `id` when it is empty.
#[derive(Serialize)]
struct FrameLine<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    event: Option<Cow<'a, str>>,
    data: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    incomplete: bool,
}

impl<'a> FrameLine<'a> {
    fn new(ev: &'a SseEvent, incomplete: bool) -> Self {
        // SSE is UTF-8 by definition, but a capture may not be: show it
        // lossily (U+FFFD) rather than refuse it.
        FrameLine {
            event: ev
                .event
                .as_deref()
                .filter(|_| !ev.is("message"))
                .map(String::from_utf8_lossy),
            data: String::from_utf8_lossy(&ev.data),
            id: ev.id.as_deref().map(String::from_utf8_lossy),
            retry: ev.retry,
            incomplete,
        }
    }
}

fn print(output: &mut impl Write, ev: &SseEvent, incomplete: bool) -> io::Result<()> {
    serde_json::to_writer(&mut *output, &FrameLine::new(ev, incomplete))?;
    output.write_all(b"\n")
}

/// Reads SSE bytes from `input` as they arrive and writes one JSON object per
/// dispatched event to `output`, flushing after every read so a live stream
/// shows each event as soon as its blank line arrives.
///
/// With `include_incomplete`, an event left open at end of input (which the
/// spec discards) is printed too, with `"incomplete":true`.
pub fn run(
    mut input: impl Read,
    mut output: impl Write,
    include_incomplete: bool,
) -> Result<FramesSummary, FramesError> {
    let mut parser = SseParser::new();
    let mut summary = FramesSummary::default();
    let mut buf = vec![0u8; READ_BUF_BYTES];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        summary.bytes += n as u64;
        parser.push(Bytes::copy_from_slice(&buf[..n]));
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => {
                    print(&mut output, &ev, false)?;
                    summary.events += 1;
                }
                Ok(None) => break,
                Err(source) => {
                    output.flush()?;
                    return Err(FramesError::Sse {
                        source,
                        read: summary.bytes,
                    });
                }
            }
        }
        output.flush()?;
    }
    if let Some(tail) = parser.finish() {
        if include_incomplete {
            print(&mut output, &tail.event, true)?;
            summary.incomplete_printed = true;
        }
    }
    output.flush()?;
    Ok(summary)
}

/// Runs the command on stdin/stdout; errors go to stderr with exit code 1.
pub fn run_stdio(include_incomplete: bool) -> ExitCode {
    let stdin = io::stdin().lock();
    // Buffered, and flushed by `run` after each read: one write per batch
    // of events rather than one per line.
    let stdout = io::BufWriter::new(io::stdout().lock());
    match run(stdin, stdout, include_incomplete) {
        Ok(_) => ExitCode::SUCCESS,
        // The reader went away (`| head`): nothing left to show it.
        Err(FramesError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shimgate frames: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    fn frames(input: &[u8], include_incomplete: bool) -> String {
        let mut out = Vec::new();
        run(input, &mut out, include_incomplete).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn crlf_data_lines_print_as_one_joined_data_field() {
        assert_eq!(
            frames(b"data: a\r\ndata: b\r\n\r\n", false),
            "{\"data\":\"a\\nb\"}\n"
        );
    }

    #[test]
    fn fields_print_in_order_and_absent_ones_are_omitted() {
        let out = frames(
            b"event: e\nid: 7\nretry: 10\ndata: x\n\ndata: y\n\nid\nevent: message\ndata: z\n\n",
            false,
        );
        assert_eq!(
            out,
            "{\"event\":\"e\",\"data\":\"x\",\"id\":\"7\",\"retry\":10}\n\
             {\"data\":\"y\",\"id\":\"7\"}\n\
             {\"data\":\"z\"}\n"
        );
    }

    #[test]
    fn invalid_utf8_prints_as_replacement_characters() {
        assert_eq!(
            frames(b"event: \xFE\ndata: a\xFFb\n\n", false),
            "{\"event\":\"\u{FFFD}\",\"data\":\"a\u{FFFD}b\"}\n"
        );
    }

    #[test]
    fn incomplete_tail_is_printed_only_when_asked() {
        let input = b"data: kept\n\nevent: e\ndata: tail";
        assert_eq!(frames(input, false), "{\"data\":\"kept\"}\n");
        assert_eq!(
            frames(input, true),
            "{\"data\":\"kept\"}\n{\"event\":\"e\",\"data\":\"tail\",\"incomplete\":true}\n"
        );
    }

    #[test]
    fn empty_input_prints_nothing() {
        assert_eq!(frames(b"", true), "");
    }

    /// A reader that hands out one piece per read and, before each later
    /// read, records what the writer had received by then.
    struct Pieces {
        pieces: Vec<&'static [u8]>,
        seen: Rc<RefCell<Vec<u8>>>,
        seen_before_read: Vec<usize>,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.seen_before_read.push(self.seen.borrow().len());
            if self.pieces.is_empty() {
                return Ok(0);
            }
            let piece = self.pieces.remove(0);
            buf[..piece.len()].copy_from_slice(piece);
            Ok(piece.len())
        }
    }

    struct Shared(Rc<RefCell<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_event_is_written_before_the_next_read() {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let mut reader = Pieces {
            pieces: vec![b"data: 1\n\nda", b"ta: 2\n", b"\n"],
            seen: Rc::clone(&seen),
            seen_before_read: Vec::new(),
        };
        run(&mut reader, Shared(Rc::clone(&seen)), false).unwrap();
        let one = "{\"data\":\"1\"}\n".len();
        let two = one + "{\"data\":\"2\"}\n".len();
        assert_eq!(reader.seen_before_read, vec![0, one, one, two]);
    }

    #[test]
    fn over_limit_line_is_an_error_after_earlier_events_are_printed() {
        let mut input = b"data: ok\n\ndata: ".to_vec();
        input.resize(
            input.len() + shimgate_shim_api::sse::DEFAULT_MAX_EVENT_BYTES,
            b'a',
        );
        let mut out = Vec::new();
        let err = run(&input[..], &mut out, false).unwrap_err();
        assert!(matches!(
            err,
            FramesError::Sse {
                source: SseError::LineTooLong { .. },
                ..
            }
        ));
        assert_eq!(out, b"{\"data\":\"ok\"}\n");
    }
}

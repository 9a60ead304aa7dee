//! Incremental, zero-copy server-sent-events parser following the WHATWG
//! "server-sent events" parsing rules.
//!
//! Input arrives as `Bytes` chunks split at any byte. A field value that lies
//! inside one chunk is handed out as a [`Bytes::slice`] of that chunk; only a
//! line that straddles chunks, or an event that joins several `data` lines,
//! copies. Line ends are found with `memchr`. Every buffer the parser grows is
//! capped by [`SseParser::with_limit`] (default [`DEFAULT_MAX_EVENT_BYTES`]).

use bytes::{Bytes, BytesMut};

/// Largest line, and largest joined `data` of one event, accepted by default.
///
/// 16 MiB is far above any real chunk (a reasoning model's whole answer rarely
/// reaches 1 MiB) and low enough that a hostile stream cannot grow us without
/// bound.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One dispatched event.
///
/// Fields are raw bytes: SSE is UTF-8 by definition, but a byte-level proxy
/// must not fail on a stream that is not; decode with
/// `String::from_utf8_lossy` where text is needed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` type; `None` when absent or empty (the spec's "message").
    pub event: Option<Bytes>,
    /// The joined `data` lines, without the trailing LF.
    pub data: Bytes,
    /// The last event ID at dispatch; `None` when it is empty.
    pub id: Option<Bytes>,
    /// A `retry:` value seen since the previous dispatched event.
    pub retry: Option<u64>,
}

impl SseEvent {
    /// An event with only `data`.
    pub fn data(data: impl Into<Bytes>) -> Self {
        SseEvent {
            data: data.into(),
            ..SseEvent::default()
        }
    }

    /// Whether the event type equals `name` (`None` matches `"message"`).
    pub fn is(&self, name: &str) -> bool {
        match &self.event {
            Some(e) => e.as_ref() == name.as_bytes(),
            None => name == "message",
        }
    }
}

/// An event that was still open when the stream ended (never dispatched by
/// the spec; offered for diagnostics only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncompleteEvent {
    /// What the event would have been had a blank line followed.
    pub event: SseEvent,
}

/// Why the parser refused the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseError {
    /// A single line exceeded the limit.
    LineTooLong {
        /// The configured limit in bytes.
        limit: usize,
    },
    /// The joined `data` of one event exceeded the limit.
    EventTooLarge {
        /// The configured limit in bytes.
        limit: usize,
    },
}

impl std::fmt::Display for SseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SseError::LineTooLong { limit } => write!(f, "sse line longer than {limit} bytes"),
            SseError::EventTooLarge { limit } => {
                write!(f, "sse event data larger than {limit} bytes")
            }
        }
    }
}

impl std::error::Error for SseError {}

/// The `data` buffer of the event being built: most events have one line,
/// which stays a zero-copy slice.
#[derive(Debug, Default)]
enum DataBuf {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl DataBuf {
    fn len(&self) -> usize {
        match self {
            DataBuf::Empty => 0,
            DataBuf::One(b) => b.len(),
            DataBuf::Many(m) => m.len(),
        }
    }
}

/// Where the parser is in the byte stream: the chunk being read and the
/// line-level state that carries across chunks.
#[derive(Debug)]
struct Input {
    /// The chunk being read and how far.
    chunk: Bytes,
    pos: usize,
    /// A line that began in an earlier chunk.
    partial: BytesMut,
    /// The previous chunk ended in CR: a leading LF belongs to it.
    skip_lf: bool,
    /// How many BOM bytes were matched at the start; `None` once decided.
    bom_matched: Option<u8>,
}

/// The WHATWG per-stream state: the event being built plus the last event
/// ID and retry, which outlive one event.
///
/// Kept apart from [`Input`] so that a line can be read from the chunk while
/// the block is updated, with no field moved out and back on the hot path.
#[derive(Debug)]
struct Block {
    limit: usize,
    data: DataBuf,
    event_type: Option<Bytes>,
    /// The last event ID buffer (persists across events).
    id_buf: Bytes,
    /// The last event ID string, committed at every blank line.
    last_id: Bytes,
    retry: Option<u64>,
}

/// The incremental parser. Push chunks with [`push`](Self::push), drain
/// events with [`next_event`](Self::next_event) until it yields `None`, and
/// call [`finish`](Self::finish) at end of stream.
///
/// Memory: besides the current chunk, the parser holds at most one partial
/// line and one event's data, each capped by the limit. An `id` or `event`
/// value that is a slice keeps its chunk alive until it is replaced.
#[derive(Debug)]
pub struct SseParser {
    input: Input,
    block: Block,
    failed: Option<SseError>,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with [`DEFAULT_MAX_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_MAX_EVENT_BYTES)
    }

    /// A parser that refuses lines or event data longer than `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            input: Input {
                chunk: Bytes::new(),
                pos: 0,
                partial: BytesMut::new(),
                skip_lf: false,
                bom_matched: Some(0),
            },
            block: Block {
                limit,
                data: DataBuf::Empty,
                event_type: None,
                id_buf: Bytes::new(),
                last_id: Bytes::new(),
                retry: None,
            },
            failed: None,
        }
    }

    /// Hands the parser the next chunk.
    ///
    /// Drain [`next_event`](Self::next_event) before pushing again: a chunk
    /// pushed while the previous one is unread is appended by copying.
    pub fn push(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        let input = &mut self.input;
        if input.pos < input.chunk.len() {
            let mut joined = BytesMut::with_capacity(input.chunk.len() - input.pos + chunk.len());
            joined.extend_from_slice(&input.chunk[input.pos..]);
            joined.extend_from_slice(&chunk);
            input.chunk = joined.freeze();
        } else {
            input.chunk = chunk;
        }
        input.pos = 0;
    }

    /// The next dispatched event from the pushed input, or `None` when the
    /// input is used up. After an error every call returns that error.
    pub fn next_event(&mut self) -> Result<Option<SseEvent>, SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        match self.drain() {
            Ok(ev) => Ok(ev),
            Err(err) => {
                self.failed = Some(err.clone());
                self.input.chunk = Bytes::new();
                self.input.pos = 0;
                self.input.partial = BytesMut::new();
                self.block.data = DataBuf::Empty;
                Err(err)
            }
        }
    }

    /// The last event ID string (committed at each blank line).
    pub fn last_event_id(&self) -> &Bytes {
        &self.block.last_id
    }

    /// Ends the stream. Per the spec an unterminated event is discarded; it is
    /// returned here so a caller can show it.
    ///
    /// Call it once [`next_event`](Self::next_event) has returned `None`:
    /// complete lines still unread are interpreted first, but any event they
    /// dispatch is dropped, since this method can return only the tail.
    pub fn finish(&mut self) -> Option<IncompleteEvent> {
        loop {
            match self.next_event() {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => return None,
            }
        }
        let Input {
            partial,
            bom_matched,
            ..
        } = &mut self.input;
        // A stream that ended inside a would-be BOM: those bytes start the
        // (unterminated) first line.
        if let Some(matched) = bom_matched.take() {
            partial.extend_from_slice(&BOM[..usize::from(matched)]);
        }
        // What is left has no line end; EOF ends it. It is not empty, so it
        // cannot dispatch.
        if !partial.is_empty() {
            let line = partial.split().freeze();
            if self.block.line(&line, None).is_err() {
                return None;
            }
        }
        let block = &mut self.block;
        let data = match std::mem::take(&mut block.data) {
            DataBuf::Empty => return None,
            DataBuf::One(b) => b,
            DataBuf::Many(m) => m.freeze(),
        };
        Some(IncompleteEvent {
            event: SseEvent {
                event: block.event_type.take().filter(|t| !t.is_empty()),
                data,
                id: (!block.id_buf.is_empty()).then(|| block.id_buf.clone()),
                retry: block.retry.take(),
            },
        })
    }

    /// Reads lines from the current chunk until one dispatches an event or
    /// the chunk is used up.
    // Inlined into `next_event`, so the event is built in its return slot
    // instead of being copied out through two frames (measured: +30 %).
    #[inline(always)]
    fn drain(&mut self) -> Result<Option<SseEvent>, SseError> {
        let Input {
            chunk,
            pos,
            partial,
            skip_lf,
            bom_matched,
        } = &mut self.input;
        let block = &mut self.block;
        let limit = block.limit;
        let bytes = &chunk[..];
        while *pos < bytes.len() {
            if bom_matched.is_some() && strip_bom(bom_matched, partial, bytes[*pos]) {
                *pos += 1;
                continue;
            }
            if *skip_lf {
                *skip_lf = false;
                if bytes[*pos] == b'\n' {
                    *pos += 1;
                    continue;
                }
            }
            let start = *pos;
            // Fast path for the LF blank line that ends almost every event:
            // no scan needed.
            if bytes[start] == b'\n' && partial.is_empty() {
                *pos += 1;
                match block.dispatch() {
                    Some(ev) => return Ok(Some(ev)),
                    None => continue,
                }
            }
            let Some(len) = memchr::memchr2(b'\n', b'\r', &bytes[start..]) else {
                // No line end in this chunk: keep the tail for the next one.
                let rest = &bytes[start..];
                if partial.len() + rest.len() > limit {
                    return Err(SseError::LineTooLong { limit });
                }
                partial.extend_from_slice(rest);
                release(chunk, pos);
                return Ok(None);
            };
            let end = start + len;
            *pos = end + 1;
            if bytes[end] == b'\r' {
                // CR ends the line at once (a lone CR is a line end); an LF
                // right after it belongs to it, even in the next chunk.
                match bytes.get(*pos) {
                    Some(b'\n') => *pos += 1,
                    Some(_) => {}
                    None => *skip_lf = true,
                }
            }
            let ev = if partial.is_empty() {
                if len > limit {
                    return Err(SseError::LineTooLong { limit });
                }
                block.line(&bytes[start..end], Some((chunk, start)))?
            } else {
                if partial.len() + len > limit {
                    return Err(SseError::LineTooLong { limit });
                }
                // The line straddles chunks: join it in `partial`, which is
                // cleared, not dropped, so its capacity is reused.
                partial.extend_from_slice(&bytes[start..end]);
                let ev = block.line(partial, None);
                partial.clear();
                ev?
            };
            if ev.is_some() {
                return Ok(ev);
            }
        }
        release(chunk, pos);
        Ok(None)
    }
}

/// Lets go of a used-up chunk. It is a slice of the connection's read
/// buffer, so keeping it would pin that whole buffer for as long as the
/// stream idles (measured: about 8 KiB per idle stream per parser).
#[inline(always)]
fn release(chunk: &mut Bytes, pos: &mut usize) {
    *chunk = Bytes::new();
    *pos = 0;
}

/// Feeds one byte to the BOM check at the very start of the stream. Returns
/// whether the byte was part of the BOM (the caller skips it).
fn strip_bom(bom_matched: &mut Option<u8>, partial: &mut BytesMut, byte: u8) -> bool {
    let Some(matched) = *bom_matched else {
        return false;
    };
    if byte == BOM[usize::from(matched)] {
        *bom_matched = (matched < 2).then_some(matched + 1);
        return true;
    }
    // Not a BOM: the bytes matched so far start the first line.
    partial.extend_from_slice(&BOM[..usize::from(matched)]);
    *bom_matched = None;
    false
}

impl Block {
    /// Interprets one line (without its line end); returns an event when it
    /// was a dispatching blank line.
    ///
    /// `src` is the chunk the line lies in and its offset there, so that a
    /// value can be handed out as a slice of it; `None` for a line that was
    /// joined from several chunks, whose value is copied.
    fn line(
        &mut self,
        line: &[u8],
        src: Option<(&Bytes, usize)>,
    ) -> Result<Option<SseEvent>, SseError> {
        // Fast path for the field nearly every line carries.
        if let Some(rest) = line.strip_prefix(b"data:") {
            let value_at = 5 + usize::from(rest.first() == Some(&b' '));
            let value = &line[value_at..];
            return self
                .append_data(value, || match src {
                    Some((chunk, offset)) => chunk.slice(offset + value_at..offset + line.len()),
                    None => Bytes::copy_from_slice(value),
                })
                .map(|()| None);
        }
        let (name, value_at) = match memchr::memchr(b':', line) {
            // A blank line dispatches; a leading colon is a comment.
            None if line.is_empty() => return Ok(self.dispatch()),
            Some(0) => return Ok(None),
            Some(colon) => {
                let skip = usize::from(line.get(colon + 1) == Some(&b' '));
                (&line[..colon], colon + 1 + skip)
            }
            None => (line, line.len()),
        };
        let value = &line[value_at..];
        let owned = || match src {
            Some((chunk, offset)) => chunk.slice(offset + value_at..offset + line.len()),
            None => Bytes::copy_from_slice(value),
        };
        match name {
            b"data" => self.append_data(value, owned)?,
            b"event" => self.event_type = Some(owned()),
            // An id containing NUL is ignored whole.
            b"id" if memchr::memchr(0, value).is_none() => self.id_buf = owned(),
            b"retry" => {
                if let Some(ms) = parse_retry(value) {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
        Ok(None)
    }

    /// Adds one `data` line. The first line is kept as handed over (a slice
    /// of the chunk); a second one joins them into an owned buffer.
    fn append_data(&mut self, value: &[u8], owned: impl FnOnce() -> Bytes) -> Result<(), SseError> {
        let grown = match self.data {
            DataBuf::Empty => value.len(),
            _ => self.data.len() + 1 + value.len(),
        };
        if grown > self.limit {
            return Err(SseError::EventTooLarge { limit: self.limit });
        }
        self.data = match std::mem::take(&mut self.data) {
            DataBuf::Empty => DataBuf::One(owned()),
            DataBuf::One(first) => {
                let mut joined = BytesMut::with_capacity(grown);
                joined.extend_from_slice(&first);
                joined.extend_from_slice(b"\n");
                joined.extend_from_slice(value);
                DataBuf::Many(joined)
            }
            DataBuf::Many(mut joined) => {
                joined.extend_from_slice(b"\n");
                joined.extend_from_slice(value);
                DataBuf::Many(joined)
            }
        };
        Ok(())
    }

    // Inlined for the same reason as `drain`.
    #[inline(always)]
    fn dispatch(&mut self) -> Option<SseEvent> {
        // The id is committed even when no event follows (the spec's step 1).
        // Comparing where the two point, not their bytes, is enough to skip
        // the refcount bump when nothing changed since the last blank line.
        if self.last_id.as_ptr() != self.id_buf.as_ptr() || self.last_id.len() != self.id_buf.len()
        {
            self.last_id = self.id_buf.clone();
        }
        let event_type = self.event_type.take();
        let data = match std::mem::take(&mut self.data) {
            DataBuf::Empty => return None,
            DataBuf::One(b) => b,
            DataBuf::Many(m) => m.freeze(),
        };
        Some(SseEvent {
            event: event_type.filter(|t| !t.is_empty()),
            data,
            id: (!self.last_id.is_empty()).then(|| self.last_id.clone()),
            retry: self.retry.take(),
        })
    }
}

/// The spec's `retry` rule: one or more ASCII digits, nothing else. A value
/// too large for `u64` is ignored too (the spec leaves overflow open).
fn parse_retry(value: &[u8]) -> Option<u64> {
    if value.is_empty() {
        return None;
    }
    value.iter().try_fold(0u64, |ms, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        ms.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

/// Parses a whole byte string at once (tests, tools).
pub fn parse_all(input: &[u8]) -> Result<Vec<SseEvent>, SseError> {
    let mut parser = SseParser::new();
    parser.push(Bytes::copy_from_slice(input));
    let mut out = Vec::new();
    while let Some(ev) = parser.next_event()? {
        out.push(ev);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(Bytes::copy_from_slice(c));
            while let Some(ev) = p.next_event().unwrap() {
                out.push(ev);
            }
        }
        out
    }

    #[test]
    fn crlf_lines_join_data_with_lf() {
        let ev = events(&[b"data: a\r\ndata: b\r\n\r\n"]);
        assert_eq!(ev, vec![SseEvent::data("a\nb")]);
    }

    #[test]
    fn single_line_value_is_a_slice_of_the_chunk() {
        let chunk = Bytes::from_static(b"data: hello\n\n");
        let mut p = SseParser::new();
        p.push(chunk.clone());
        let ev = p.next_event().unwrap().unwrap();
        let base = chunk.as_ptr() as usize;
        let at = ev.data.as_ptr() as usize;
        assert!(at >= base && at < base + chunk.len(), "data was copied");
    }

    #[test]
    fn cr_at_chunk_end_then_lf_is_one_line_end() {
        let ev = events(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(ev, vec![SseEvent::data("a\nb")]);
    }

    #[test]
    fn lone_cr_at_end_dispatches_at_once() {
        let mut p = SseParser::new();
        p.push(Bytes::from_static(b"data: x\r\r"));
        assert_eq!(p.next_event().unwrap(), Some(SseEvent::data("x")));
    }
}

//! The decoder of a chunked response body (RFC 9112 §7.1): the upstream's
//! SSE arrives this way, one chunk per write, so every streamed piece goes
//! through here.
//!
//! Written by hand: no crate decodes chunked framing incrementally from
//! the bytes of each read without owning the socket (hyper's decoder is
//! private to its connection). It takes each read's bytes as they came,
//! hands out the chunk data in them as slices and keeps its place between
//! reads, so no byte is held back from one read to the next. The
//! chunk-size line, its extensions and the trailer section are bounded,
//! and none of them is kept (only the size is), so a peer cannot make it
//! buffer anything. Self-contained (no dependency at all): the
//! `http_chunked` fuzz target compiles this file as it is.

/// The longest chunk-size line accepted, extensions included.
pub const MAX_SIZE_LINE: usize = 4096;

/// The most trailer bytes accepted after the last chunk.
pub const MAX_TRAILERS: usize = 16 * 1024;

/// Why a chunked body is malformed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedError(pub &'static str);

impl std::fmt::Display for ChunkedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed chunked body: {}", self.0)
    }
}

impl std::error::Error for ChunkedError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Hex digits of the chunk size.
    Size,
    /// Whitespace after the size, before `;` or the line's end.
    SizeSpace,
    /// A chunk extension: skipped to the line's end.
    Extension,
    /// The LF of the size line.
    SizeLf,
    /// The chunk's data, this much left.
    Data(u64),
    /// The CR after a chunk's data.
    DataCr,
    /// The LF after a chunk's data.
    DataLf,
    /// The start of a trailer line (or the empty line that ends the body).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// The LF of a trailer line.
    TrailerLf,
    /// The LF of the body's final empty line.
    EndLf,
    Done,
}

/// The decoder's place in a chunked body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    digits: u32,
    /// Bytes of the current size line, or of the trailers.
    line: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size,
            size: 0,
            digits: 0,
            line: 0,
        }
    }

    /// The body's end was decoded.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `input`, the bytes read after those decoded before,
    /// handing each piece of chunk data to `data` (slices of `input`, in
    /// order, never empty). Returns how many bytes of `input` belong to the
    /// body: all of them, unless it ended inside `input` (then the rest
    /// came after its end).
    pub fn decode<'a>(
        &mut self,
        input: &'a [u8],
        mut data: impl FnMut(&'a [u8]),
    ) -> Result<usize, ChunkedError> {
        let mut at = 0;
        while at < input.len() {
            match self.state {
                State::Done => return Ok(at),
                State::Data(left) => {
                    let rest = input.len() - at;
                    let take = usize::try_from(left).map_or(rest, |l| l.min(rest));
                    data(&input[at..at + take]);
                    at += take;
                    let left = left - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data(left)
                    };
                }
                _ => {
                    self.step(input[at])?;
                    at += 1;
                }
            }
        }
        Ok(at)
    }

    /// One byte of framing (everything but chunk data).
    fn step(&mut self, byte: u8) -> Result<(), ChunkedError> {
        match self.state {
            State::Size | State::SizeSpace | State::Extension | State::SizeLf => {
                self.line += 1;
                if self.line > MAX_SIZE_LINE {
                    return Err(ChunkedError("chunk-size line too long"));
                }
                self.size_line(byte)
            }
            State::DataCr => self.expect(byte, b'\r', State::DataLf, "no CRLF after chunk data"),
            State::DataLf => self.expect(byte, b'\n', State::Size, "no CRLF after chunk data"),
            State::TrailerStart | State::Trailer | State::TrailerLf | State::EndLf => {
                self.line += 1;
                if self.line > MAX_TRAILERS {
                    return Err(ChunkedError("trailer section too long"));
                }
                self.trailer(byte)
            }
            State::Data(_) | State::Done => Ok(()),
        }
    }

    fn size_line(&mut self, byte: u8) -> Result<(), ChunkedError> {
        match (self.state, byte) {
            (State::Size, b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F') => {
                let digit = (byte as char).to_digit(16).unwrap_or(0) as u64;
                self.digits += 1;
                if self.digits > 15 {
                    return Err(ChunkedError("chunk size too large"));
                }
                self.size = self.size * 16 + digit;
            }
            (State::Size, _) if self.digits == 0 => {
                return Err(ChunkedError("chunk size is not hexadecimal"))
            }
            (State::Size | State::SizeSpace, b' ' | b'\t') => self.state = State::SizeSpace,
            (State::Size | State::SizeSpace, b';') => self.state = State::Extension,
            (State::Size | State::SizeSpace | State::Extension, b'\r') => {
                self.state = State::SizeLf
            }
            (State::Size | State::SizeSpace, _) => {
                return Err(ChunkedError("unexpected byte in the chunk-size line"))
            }
            (State::Extension, b'\n') => {
                return Err(ChunkedError("bare LF in the chunk-size line"))
            }
            (State::Extension, _) => {}
            (State::SizeLf, b'\n') => self.chunk_starts(),
            (State::SizeLf, _) => return Err(ChunkedError("no LF after the chunk size")),
            _ => {}
        }
        Ok(())
    }

    /// The size line is read: data follows, or the trailers of the last chunk.
    fn chunk_starts(&mut self) {
        self.line = 0;
        self.digits = 0;
        self.state = if self.size == 0 {
            State::TrailerStart
        } else {
            State::Data(self.size)
        };
        self.size = 0;
    }

    fn trailer(&mut self, byte: u8) -> Result<(), ChunkedError> {
        self.state = match (self.state, byte) {
            (State::TrailerStart, b'\r') => State::EndLf,
            (State::TrailerStart | State::Trailer, b'\n') => {
                return Err(ChunkedError("bare LF in the trailers"))
            }
            (State::Trailer, b'\r') => State::TrailerLf,
            (State::TrailerStart | State::Trailer, _) => State::Trailer,
            (State::TrailerLf, b'\n') => State::TrailerStart,
            (State::EndLf, b'\n') => State::Done,
            _ => return Err(ChunkedError("no LF after CR in the trailers")),
        };
        Ok(())
    }

    fn expect(
        &mut self,
        byte: u8,
        want: u8,
        next: State,
        why: &'static str,
    ) -> Result<(), ChunkedError> {
        if byte != want {
            return Err(ChunkedError(why));
        }
        self.state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces of `step` bytes: the data, and the
    /// bytes after the end (`None`: no end seen).
    fn decode_in_steps(
        input: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, Option<Vec<u8>>), ChunkedError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut at = 0;
        for piece in input.chunks(step.max(1)) {
            let used = d.decode(piece, |data| {
                assert!(!data.is_empty());
                out.extend_from_slice(data)
            })?;
            at += used;
            if d.is_done() {
                return Ok((out, Some(input[at..].to_vec())));
            }
            assert_eq!(used, piece.len(), "all of a piece is taken before the end");
        }
        Ok((out, None))
    }

    #[test]
    fn chunks_in_any_pieces_give_the_data_and_the_end() {
        let input = b"5\r\nhello\r\n1;name=v\r\n \r\nA\r\n0123456789\r\n0\r\n\r\n";
        for step in 1..input.len() {
            let (data, end) = decode_in_steps(input, step).expect("valid");
            assert_eq!(data, b"hello 0123456789", "step {step}");
            assert_eq!(end, Some(Vec::new()), "step {step}");
        }
    }

    #[test]
    fn trailers_are_read_past() {
        let input = b"3\r\nabc\r\n0\r\nx-a: 1\r\nx-b: 2\r\n\r\n";
        assert_eq!(
            decode_in_steps(input, 2),
            Ok((b"abc".to_vec(), Some(Vec::new())))
        );
    }

    #[test]
    fn bytes_after_the_end_are_not_taken() {
        let input = b"1\r\na\r\n0\r\n\r\nHTTP/1.1";
        for step in 1..input.len() {
            assert_eq!(
                decode_in_steps(input, step),
                Ok((b"a".to_vec(), Some(b"HTTP/1.1".to_vec()))),
                "step {step}"
            );
        }
    }

    #[test]
    fn size_with_whitespace_and_upper_hex() {
        assert_eq!(
            decode_in_steps(b"1F \t\r\n", 1).map(|r| r.1),
            Ok(None),
            "a size line with whitespace before its end is taken"
        );
        let body = [b"1F\r\n".as_slice(), &[b'x'; 31], b"\r\n0\r\n\r\n"].concat();
        assert_eq!(
            decode_in_steps(&body, 7),
            Ok((vec![b'x'; 31], Some(Vec::new())))
        );
    }

    #[test]
    fn malformed_bodies_are_refused() {
        for bad in [
            &b"\r\n"[..],
            b"g\r\n",
            b"5\nhello",
            b"5\r\nhelloX\r\n",
            b"5\r\nhello\rX",
            b"1 2\r\n",
            b"ffffffffffffffff\r\n",
            b"0\r\nx\n",
            b"0\r\n\rX",
        ] {
            assert!(
                decode_in_steps(bad, 1).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_endless_size_line_or_trailer_is_refused() {
        let long_ext = [b"1;".as_slice(), &vec![b'a'; MAX_SIZE_LINE]].concat();
        assert!(decode_in_steps(&long_ext, 100).is_err());
        let long_trailer = [b"0\r\n".as_slice(), &vec![b'a'; MAX_TRAILERS + 1]].concat();
        assert!(decode_in_steps(&long_trailer, 1000).is_err());
    }
}

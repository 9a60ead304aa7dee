//! A response body read from its connection by whoever polls it: a
//! streamed answer's chunk goes from the socket to the translator in one
//! task, with no connection task and channel between them. Read to its
//! end, the connection goes back to the pool; dropped before, it is
//! closed.
//!
//! Each read goes into a buffer on the stack; the body's data in it is
//! copied out into one exact-size frame (an SSE piece is a few hundred
//! bytes), and the chunked framing around it is decoded in place. So a
//! stream holds no buffer between reads, and a stream waiting for its
//! next piece costs its socket and a few words (2,000 idle streams
//! stay within shimgate's memory bound, `docs/security.md`); a read costs one small allocation.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::io::{AsyncRead, ReadBuf};

use super::chunked::ChunkedDecoder;
use super::connect::{Io, Origin};
use super::pool::Pool;
use super::wire::Framing;
use super::ClientError;

/// The most one read takes (a TLS record's plaintext is at most 16 KiB).
const READ_SIZE: usize = 16 * 1024;

/// The body of an upstream's answer.
pub struct UpstreamBody {
    /// `None` once the body ended or broke.
    reading: Option<Reading>,
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("ended", &self.reading.is_none())
            .finish()
    }
}

/// Where the body is delimited.
enum Left {
    Bytes(u64),
    Chunked(ChunkedDecoder),
    /// Until the peer closes.
    Close,
}

struct Reading {
    io: Io,
    left: Left,
    /// Bytes read with the head, past it: decoded before any read.
    early: Option<Bytes>,
    /// The connection may be reused once the body is read to its end (and
    /// the peer sent nothing past it).
    keep_alive: bool,
    pool: Arc<Pool>,
    origin: Origin,
}

impl UpstreamBody {
    /// The body after a head, with the bytes read past the head.
    pub(super) fn new(
        io: Io,
        framing: Framing,
        early: Bytes,
        keep_alive: bool,
        (pool, origin): (Arc<Pool>, Origin),
    ) -> UpstreamBody {
        let left = match framing {
            Framing::Empty => Left::Bytes(0),
            Framing::Length(n) => Left::Bytes(n),
            Framing::Chunked => Left::Chunked(ChunkedDecoder::new()),
            Framing::Close => Left::Close,
        };
        let mut body = UpstreamBody {
            reading: Some(Reading {
                io,
                left,
                early: (!early.is_empty()).then_some(early),
                keep_alive,
                pool,
                origin,
            }),
        };
        body.finish_if_read();
        body
    }

    /// When the body is read to its end: its connection goes back to the
    /// pool if the peer keeps it and sent nothing past the body.
    fn finish_if_read(&mut self) {
        let done = match &self.reading {
            Some(r) => match &r.left {
                Left::Bytes(n) => *n == 0,
                Left::Chunked(d) => d.is_done(),
                Left::Close => false,
            },
            None => false,
        };
        if !done {
            return;
        }
        if let Some(r) = self.reading.take() {
            if r.keep_alive && r.early.is_none() {
                r.pool.put(&r.origin, r.io);
            }
        }
    }
}

impl Reading {
    /// The body's data in `input` (the bytes that came after those taken
    /// before) as one frame; `None` when it held framing only.
    fn take(&mut self, input: &[u8]) -> Result<Option<Bytes>, ClientError> {
        let data = match &mut self.left {
            Left::Bytes(n) => {
                let take = usize::try_from(*n).map_or(input.len(), |n| n.min(input.len()));
                *n -= take as u64;
                if take < input.len() {
                    // Bytes past the body: the connection is not reused.
                    self.keep_alive = false;
                }
                copied(&input[..take])
            }
            Left::Close => copied(input),
            Left::Chunked(decoder) => {
                let mut pieces = Pieces::default();
                let used = decoder
                    .decode(input, |piece| pieces.push(piece, input.len()))
                    .map_err(|e| ClientError::body(&self.origin, e))?;
                if used < input.len() {
                    self.keep_alive = false;
                }
                pieces.into_bytes()
            }
        };
        Ok(data)
    }

    /// The peer closed: the end of a body read to its close, else a cut.
    fn at_close(&self) -> Result<(), ClientError> {
        let why = match self.left {
            Left::Close => return Ok(()),
            Left::Bytes(n) => format!("the connection closed {n} bytes before the body's end"),
            Left::Chunked(_) => "the connection closed before the chunked body's end".into(),
        };
        Err(ClientError::body(
            &self.origin,
            std::io::Error::new(std::io::ErrorKind::UnexpectedEof, why),
        ))
    }
}

/// A frame's data: `None` for no bytes, else one exact-size copy.
fn copied(data: &[u8]) -> Option<Bytes> {
    (!data.is_empty()).then(|| Bytes::copy_from_slice(data))
}

/// The data pieces of one read, joined into one frame: a single piece (the
/// common read: one chunk) is copied once, more are joined.
#[derive(Default)]
struct Pieces<'a> {
    first: Option<&'a [u8]>,
    joined: Vec<u8>,
}

impl<'a> Pieces<'a> {
    fn push(&mut self, piece: &'a [u8], room: usize) {
        if self.first.is_none() && self.joined.is_empty() {
            self.first = Some(piece);
            return;
        }
        if let Some(first) = self.first.take() {
            self.joined.reserve(room);
            self.joined.extend_from_slice(first);
        }
        self.joined.extend_from_slice(piece);
    }

    fn into_bytes(self) -> Option<Bytes> {
        match self.first {
            Some(first) => copied(first),
            None => (!self.joined.is_empty()).then(|| Bytes::from(self.joined)),
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = ClientError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        let this = &mut *self;
        loop {
            let Some(r) = this.reading.as_mut() else {
                return Poll::Ready(None);
            };
            let taken = if let Some(early) = r.early.take() {
                r.take(&early)
            } else {
                let mut scratch = [MaybeUninit::<u8>::uninit(); READ_SIZE];
                let mut buf = ReadBuf::uninit(&mut scratch);
                match Pin::new(&mut r.io).poll_read(cx, &mut buf) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => Err(ClientError::body(&r.origin, e)),
                    Poll::Ready(Ok(())) if buf.filled().is_empty() => {
                        // The peer closed: the end, or a cut.
                        let end = r.at_close();
                        this.reading = None;
                        return match end {
                            Ok(()) => Poll::Ready(None),
                            Err(e) => Poll::Ready(Some(Err(e))),
                        };
                    }
                    Poll::Ready(Ok(())) => r.take(buf.filled()),
                }
            };
            match taken {
                Err(e) => {
                    // A broken body: its connection is closed.
                    this.reading = None;
                    return Poll::Ready(Some(Err(e)));
                }
                Ok(data) => {
                    this.finish_if_read();
                    if let Some(data) = data {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.reading.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.reading {
            None => SizeHint::with_exact(0),
            Some(Reading {
                left: Left::Bytes(n),
                ..
            }) => SizeHint::with_exact(*n),
            Some(_) => SizeHint::default(),
        }
    }
}

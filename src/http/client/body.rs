//! A response body read from its connection by whoever polls it: a
//! streamed answer's chunk goes from the socket to the translator in one
//! task, with no connection task and channel between them. Read to its
//! end, the connection goes back to the pool; dropped before, it is
//! closed.
//!
//! Between reads it holds no buffer: one is allocated when a read is
//! tried and given up when the read would wait with nothing left over, so
//! a stream that waits for its next piece costs its socket and a few words
//! (2,000 idle streams, DESIGN's memory bound).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};

use super::chunked::{ChunkedDecoder, Decoded};
use super::connect::{Io, Origin};
use super::pool::Pool;
use super::wire::Framing;
use super::ClientError;

/// A read asks for at least this much room.
const READ_SIZE: usize = 8 * 1024;

/// Reads that fill their room double it, up to this (a large answer read
/// in few system calls).
const MAX_READ_SIZE: usize = 256 * 1024;

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
    /// Bytes read and not yet given out.
    buf: BytesMut,
    read_size: usize,
    /// The connection may be reused once the body is read to its end.
    keep_alive: bool,
    pool: Arc<Pool>,
    origin: Origin,
}

impl UpstreamBody {
    /// The body after a head, with the bytes read past the head.
    pub(super) fn new(
        io: Io,
        framing: Framing,
        buf: BytesMut,
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
                buf,
                read_size: READ_SIZE,
                keep_alive,
                pool,
                origin,
            }),
        };
        if matches!(framing, Framing::Empty) {
            body.finish();
        }
        body
    }

    /// An empty body with no connection (tests and error answers).
    pub fn empty() -> UpstreamBody {
        UpstreamBody { reading: None }
    }

    /// The body is read: its connection goes back to the pool when the
    /// peer keeps it and sent nothing past the body.
    fn finish(&mut self) {
        if let Some(r) = self.reading.take() {
            if r.keep_alive && r.buf.is_empty() {
                r.pool.put(&r.origin, r.io);
            }
        }
    }

    fn fail(&mut self, error: ClientError) -> Poll<Option<Result<Frame<Bytes>, ClientError>>> {
        self.reading = None;
        Poll::Ready(Some(Err(error)))
    }
}

impl Reading {
    /// The next piece of data the buffer holds, or `None` when it needs
    /// more; `Err` for a malformed chunked body.
    fn take(&mut self) -> Result<Step, ClientError> {
        match &mut self.left {
            Left::Bytes(0) => Ok(Step::End),
            Left::Bytes(n) if !self.buf.is_empty() => {
                let take = usize::try_from(*n).map_or(self.buf.len(), |n| n.min(self.buf.len()));
                *n -= take as u64;
                Ok(Step::Data(self.buf.split_to(take).freeze()))
            }
            Left::Chunked(decoder) => match decoder.decode(&mut self.buf) {
                Ok(Decoded::Data(data)) => Ok(Step::Data(data)),
                Ok(Decoded::End) => Ok(Step::End),
                Ok(Decoded::NeedMore) => Ok(Step::Read),
                Err(e) => Err(ClientError::body(&self.origin, e)),
            },
            Left::Close if !self.buf.is_empty() => Ok(Step::Data(self.buf.split().freeze())),
            Left::Bytes(_) | Left::Close => Ok(Step::Read),
        }
    }

    /// Reads into the buffer: the bytes read (0 at the peer's close).
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        if self.buf.capacity() - self.buf.len() < READ_SIZE {
            self.buf.reserve(self.read_size);
        }
        let room = self.buf.capacity() - self.buf.len();
        let read = tokio_util::io::poll_read_buf(Pin::new(&mut self.io), cx, &mut self.buf);
        match read {
            Poll::Ready(Ok(n)) => {
                self.read_size = if n == room {
                    (self.read_size * 2).min(MAX_READ_SIZE)
                } else {
                    READ_SIZE
                };
            }
            Poll::Pending if self.buf.is_empty() => self.buf = BytesMut::new(),
            _ => {}
        }
        read
    }

    /// The peer closed: the end of a body read to its close, else a cut.
    fn at_close(&self) -> Result<(), ClientError> {
        match self.left {
            Left::Close => Ok(()),
            Left::Bytes(n) => Err(ClientError::body(
                &self.origin,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the connection closed {n} bytes before the body's end"),
                ),
            )),
            Left::Chunked(_) => Err(ClientError::body(
                &self.origin,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the connection closed before the chunked body's end",
                ),
            )),
        }
    }
}

enum Step {
    Data(Bytes),
    End,
    Read,
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
            match r.take() {
                Ok(Step::Data(data)) => {
                    if matches!(r.left, Left::Bytes(0)) {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Ok(Step::End) => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Ok(Step::Read) => {}
                Err(e) => return this.fail(e),
            }
            match r.poll_read(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => {
                    let end = r.at_close();
                    this.reading = None;
                    return match end {
                        Ok(()) => Poll::Ready(None),
                        Err(e) => Poll::Ready(Some(Err(e))),
                    };
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    let e = ClientError::body(&r.origin, e);
                    return this.fail(e);
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

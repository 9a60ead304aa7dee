//! Request bodies read whole, within the size limit: a failed attempt can
//! then be sent again to the next route, and a body over the limit is
//! refused with 413 before it is buffered.
//!
//! A refusal answered while the client is still sending must reach it: a
//! server that closes a socket with unread bytes in it makes the kernel
//! reset the connection, and a client still writing its body then sees
//! "connection reset" (or a broken pipe) instead of the answer. So the rest
//! of a refused body is read and dropped ([`linger`]), for a bounded time
//! and amount, while the answer goes out, as servers that promise a 413 do
//! (nginx's lingering close, Apache's discard of the request body).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::body::{self, Body, ErrorCode};

/// A refused body is read and dropped for at most this long after the
/// refusal: long enough for a client on loopback to finish sending and read
/// the answer, short enough that a client that never stops costs little.
pub const LINGER_TIME: Duration = Duration::from_secs(10);

/// ... and at most this many bytes of it (a loopback client writes this
/// much in well under a second); past it the connection is closed.
pub const LINGER_BYTES: u64 = 256 * 1024 * 1024;

/// The setting that bounds an agent's request body, named in its 413.
pub const MAX_BODY_KEY: &str = "limits.max_body_bytes";

/// Why a request body could not be read.
pub enum BodyError {
    TooLarge(u64),
    Broken(String),
}

impl BodyError {
    /// The client-facing answer: 413 or 400.
    pub fn into_response(self) -> Response<Body> {
        self.into_response_of(None)
    }

    /// [`BodyError::into_response`], the 413 naming the setting the bound
    /// comes from (`limits.max_body_bytes`, or what the return leg allows
    /// on top of it).
    pub fn into_response_of(self, bound: Option<&str>) -> Response<Body> {
        match self {
            BodyError::TooLarge(limit) => body::error_response(
                ErrorCode::RequestTooLarge,
                &match bound {
                    Some(bound) => format!("request body is over the {limit}-byte limit ({bound})"),
                    None => format!("request body is over the {limit}-byte limit"),
                },
            ),
            BodyError::Broken(why) => body::error_response(
                ErrorCode::BadRequest,
                &format!("could not read the request body: {why}"),
            ),
        }
    }
}

/// Reads a request body whole, refusing more than `limit` bytes (the rest
/// of a refused body is [`linger`]ed on). Bodies are buffered so a failed
/// attempt can be sent again to the next route.
pub async fn read_body(
    mut body: Incoming,
    declared: Option<u64>,
    limit: u64,
) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|n| n > limit) {
        linger(body);
        return Err(BodyError::TooLarge(limit));
    }
    // Chunks as they came: one chunk (the common small body) is kept as
    // it is, more are joined once at the end.
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total: u64 = 0;
    loop {
        match body.frame().await {
            None => break,
            Some(Err(e)) => return Err(BodyError::Broken(e.to_string())),
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers
                };
                total = total.saturating_add(data.len() as u64);
                if total > limit {
                    linger(body);
                    return Err(BodyError::TooLarge(limit));
                }
                if !data.is_empty() {
                    chunks.push(data);
                }
                // All the declared length is in: done without waiting for
                // hyper to say so, which would take another turn of the
                // connection's task (the common body comes whole, with
                // its head). hyper reads the finished body's end itself.
                if http_body::Body::is_end_stream(&body) {
                    break;
                }
            }
        }
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.swap_remove(0),
        _ => {
            let mut joined = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
            for c in &chunks {
                joined.extend_from_slice(c);
            }
            joined.freeze()
        }
    })
}

/// Reads the rest of a body that will not be used and drops it, in a task
/// of its own, for at most [`LINGER_TIME`] and [`LINGER_BYTES`], so the
/// answer that refused it reaches a client still sending (see the module
/// doc). A body read to its end leaves the connection usable; one cut at a
/// bound closes it.
pub fn linger(body: Incoming) {
    if http_body::Body::is_end_stream(&body) {
        return;
    }
    tokio::spawn(drain(body, LINGER_BYTES, LINGER_TIME));
}

/// Reads and drops `body` until it ends, breaks, or `max_bytes` or
/// `max_time` are reached; the bytes read.
pub async fn drain<B>(mut body: B, max_bytes: u64, max_time: Duration) -> u64
where
    B: http_body::Body + Unpin,
{
    let deadline = tokio::time::Instant::now() + max_time;
    let mut read: u64 = 0;
    while read < max_bytes {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    read = read.saturating_add(bytes::Buf::remaining(data) as u64);
                }
            }
            // Its end, a break, or the time is up.
            _ => break,
        }
    }
    read
}

/// The declared `content-length`, if any.
pub fn content_length<T>(req: &Request<T>) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::body::ChannelBody;

    fn chunk(n: usize) -> Result<Bytes, crate::http::body::BoxError> {
        Ok(Bytes::from(vec![0u8; n]))
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_body_is_read_to_its_end() {
        let (tx, body) = ChannelBody::channel();
        let sender = tokio::spawn(async move {
            for _ in 0..10 {
                tx.send(chunk(1000)).await.unwrap();
            }
        });
        assert_eq!(drain(body, 1_000_000, LINGER_TIME).await, 10_000);
        sender.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn lingering_stops_at_the_byte_bound() {
        let (tx, body) = ChannelBody::channel();
        // Sends on until the drain stops reading.
        let sender = tokio::spawn(async move { while tx.send(chunk(1000)).await.is_ok() {} });
        assert_eq!(drain(body, 5_000, LINGER_TIME).await, 5_000);
        sender.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn lingering_stops_at_the_time_bound() {
        let (tx, body) = ChannelBody::channel();
        let started = tokio::time::Instant::now();
        tx.send(chunk(4)).await.unwrap();
        // The client then goes quiet without closing.
        assert_eq!(drain(body, LINGER_BYTES, LINGER_TIME).await, 4);
        assert_eq!(started.elapsed(), LINGER_TIME);
        drop(tx);
    }
}

//! A scripted upstream on raw TCP: it answers each request with a list of
//! steps (head, chunks, pauses, reset, clean close, hold open), so a test or
//! a bench controls the wire byte for byte and can stamp the moment a frame
//! leaves; it counts and (unless told not to) records every request.
//!
//! Test support: a socket that cannot be bound is a failed test, so the
//! setup unwraps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// The placeholder a [`Step::Stamped`] chunk carries; replaced at write time
/// by the nanoseconds since [`origin`], zero-padded to the same width so
/// the chunk length (and every framing byte around it) stays fixed.
pub const STAMP: &[u8; 16] = b"@@@@@@@@@@@@@@@@";

/// Headers a request head may carry: shimgate forwards the agent's, a few
/// dozen at most; a head with more is refused (the connection is closed).
const MAX_HEADERS: usize = 128;

/// Pending connections the listener queues: the load bench opens
/// thousands at once.
const BACKLOG: u32 = 4096;

/// The clock stamps are read against (upstream and agent share the
/// process).
pub fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds since [`origin`].
pub fn now_ns() -> u64 {
    origin().elapsed().as_nanos() as u64
}

/// When the last request any upstream of this process finished reading
/// arrived ([`now_ns`]): with one call in flight at a time, the moment the
/// call's request reached the upstream, which splits a time to first
/// token into the request's way in and the answer's way out.
pub fn last_request_ns() -> u64 {
    LAST_REQUEST.load(Ordering::Relaxed)
}

static LAST_REQUEST: AtomicU64 = AtomicU64::new(0);

/// One request as received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One step of a scripted answer.
#[derive(Debug, Clone)]
pub enum Step {
    /// Status line and headers; the body is chunked unless a
    /// `content-length` header is given.
    Head(u16, Vec<(String, String)>),
    /// A body piece, written (and framed as one HTTP chunk) on its own.
    Chunk(Bytes),
    /// A body piece whose [`STAMP`]s are replaced by the send time.
    Stamped(Bytes),
    /// Bytes written as they are, whatever the framing.
    Raw(Bytes),
    /// Wait.
    Sleep(Duration),
    /// Drop the connection with a TCP reset, mid-answer.
    Reset,
    /// Close the connection cleanly (FIN) in the middle of the body.
    Close,
    /// Send nothing more and keep the connection open until the peer
    /// closes it.
    Hold,
    /// End the chunked body (`0\r\n\r\n`); the connection stays usable.
    End,
}

/// A scripted answer.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub steps: Vec<Step>,
}

impl Reply {
    /// An SSE answer head (200, text/event-stream, chunked).
    pub fn sse() -> Self {
        Reply::head(200, &[("content-type", "text/event-stream")])
    }

    /// A head with any status and headers.
    pub fn head(status: u16, headers: &[(&str, &str)]) -> Self {
        Reply {
            steps: vec![Step::Head(
                status,
                headers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )],
        }
    }

    /// A whole JSON answer (chunked).
    pub fn json(status: u16, body: &str) -> Self {
        Reply::json_with(status, &[], body)
    }

    /// A whole JSON answer with extra headers (chunked).
    pub fn json_with(status: u16, headers: &[(&str, &str)], body: &str) -> Self {
        let mut h = vec![("content-type", "application/json")];
        h.extend_from_slice(headers);
        Reply::head(status, &h).chunk(body).end()
    }

    /// A whole JSON answer with extra headers and a `content-length` (the
    /// common small reply; the connection stays usable).
    pub fn json_sized(status: u16, headers: &[(&str, &str)], body: &str) -> Self {
        let len = body.len().to_string();
        let mut h = vec![
            ("content-type", "application/json"),
            ("content-length", len.as_str()),
        ];
        h.extend_from_slice(headers);
        Reply::head(status, &h).chunk(body)
    }

    /// Adds a body chunk.
    pub fn chunk(self, bytes: impl AsRef<[u8]>) -> Self {
        self.then(Step::Chunk(Bytes::copy_from_slice(bytes.as_ref())))
    }

    /// Adds a chunk stamped with its send time (see [`STAMP`]).
    pub fn stamped(self, bytes: impl Into<Bytes>) -> Self {
        self.then(Step::Stamped(bytes.into()))
    }

    /// Adds a chunk for each split of `bytes` into pieces of `size`.
    pub fn split(mut self, bytes: impl AsRef<[u8]>, size: usize) -> Self {
        for piece in bytes.as_ref().chunks(size.max(1)) {
            self.steps.push(Step::Chunk(Bytes::copy_from_slice(piece)));
        }
        self
    }

    /// Adds `bytes` cut into writes of 1 to `max` bytes (random sizes).
    pub fn scatter(mut self, bytes: &[u8], max: usize) -> Self {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = fastrand::usize(1..=max.max(1)).min(rest.len());
            self.steps
                .push(Step::Chunk(Bytes::copy_from_slice(&rest[..n])));
            rest = &rest[n..];
        }
        self
    }

    /// Adds a pause of `ms` milliseconds.
    pub fn sleep(self, ms: u64) -> Self {
        self.then(Step::Sleep(Duration::from_millis(ms)))
    }

    /// Ends with a TCP reset.
    pub fn reset(self) -> Self {
        self.then(Step::Reset)
    }

    /// Ends by holding the connection open.
    pub fn hold(self) -> Self {
        self.then(Step::Hold)
    }

    /// Ends the chunked body.
    pub fn end(self) -> Self {
        self.then(Step::End)
    }

    /// Adds any step.
    pub fn then(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }
}

type Script = dyn Fn(&Recorded, usize) -> Reply + Send + Sync;

/// How an upstream listens and what it keeps.
#[derive(Debug, Clone)]
pub struct Options {
    /// Shrinks the kernel send buffer of accepted sockets (bytes), so a
    /// stalled reader stops the writer early (back-pressure runs); `None`
    /// keeps the kernel default.
    pub send_buffer: Option<u32>,
    /// Keep every request for [`Upstream::requests`]; a long load run
    /// turns it off rather than hold every body it was sent.
    pub record: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            send_buffer: None,
            record: true,
        }
    }
}

/// A running scripted upstream.
#[derive(Clone)]
pub struct Upstream {
    pub addr: std::net::SocketAddr,
    log: Arc<Mutex<Vec<Recorded>>>,
    record: bool,
    hits: Arc<AtomicUsize>,
    /// Connections that ended because the peer went away while we wrote
    /// or held them open.
    pub peer_gone: Arc<AtomicUsize>,
    /// Body bytes written so far, all connections together.
    pub bytes_out: Arc<AtomicU64>,
}

impl Upstream {
    /// Starts an upstream whose answer to the n-th request (0-based) is
    /// `script(req, n)`.
    pub async fn start(
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        Upstream::start_with(Options::default(), script).await
    }

    /// [`Upstream::start`] with options.
    pub async fn start_with(
        options: Options,
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        let socket = TcpSocket::new_v4().expect("socket");
        if let Some(n) = options.send_buffer {
            socket.set_send_buffer_size(n).expect("SO_SNDBUF");
        }
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
            .expect("bind");
        let listener: TcpListener = socket.listen(BACKLOG).expect("listen");
        let up = Upstream {
            addr: listener.local_addr().expect("addr"),
            log: Arc::default(),
            record: options.record,
            hits: Arc::default(),
            peer_gone: Arc::default(),
            bytes_out: Arc::default(),
        };
        let script: Arc<Script> = Arc::new(script);
        let up2 = up.clone();
        tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(serve(stream, up2.clone(), script.clone()));
                    }
                    // Out of descriptors under a big load: wait, do not spin.
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        });
        up
    }

    /// Always the same answer.
    pub async fn always(reply: Reply) -> Upstream {
        Upstream::start(move |_, _| reply.clone()).await
    }

    /// Answers in order, repeating the last one.
    pub async fn sequence(replies: Vec<Reply>) -> Upstream {
        Upstream::start(move |_, n| replies[n.min(replies.len() - 1)].clone()).await
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many requests arrived.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Every request so far (none when not recording).
    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }
}

async fn serve(mut stream: TcpStream, up: Upstream, script: Arc<Script>) {
    let mut buf = BytesMut::with_capacity(8192);
    while let Some(req) = read_request(&mut stream, &mut buf).await {
        LAST_REQUEST.store(now_ns(), Ordering::Relaxed);
        let n = up.hits.fetch_add(1, Ordering::SeqCst);
        if up.record {
            up.log.lock().unwrap().push(req.clone());
        }
        let reply = script(&req, n);
        let mut chunked = true;
        for step in reply.steps {
            let result = match step {
                Step::Head(status, headers) => {
                    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
                    chunked = !headers
                        .iter()
                        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"));
                    for (k, v) in &headers {
                        head.push_str(&format!("{k}: {v}\r\n"));
                    }
                    if chunked {
                        head.push_str("transfer-encoding: chunked\r\n");
                    }
                    head.push_str("\r\n");
                    stream.write_all(head.as_bytes()).await
                }
                Step::Chunk(bytes) => write_piece(&mut stream, &up, &bytes, chunked).await,
                Step::Stamped(bytes) => {
                    write_piece(&mut stream, &up, &stamp(&bytes), chunked).await
                }
                Step::Raw(bytes) => write_piece(&mut stream, &up, &bytes, false).await,
                Step::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    Ok(())
                }
                Step::Reset => {
                    // SO_LINGER 0 makes the close a TCP reset; blocking on
                    // drop does not matter with nothing left to send.
                    #[allow(deprecated)]
                    let _ = stream.set_linger(Some(Duration::ZERO));
                    return;
                }
                Step::Close => return,
                Step::Hold => {
                    let mut sink = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut sink).await {
                        if n == 0 {
                            break;
                        }
                    }
                    up.peer_gone.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                Step::End => stream.write_all(b"0\r\n\r\n").await,
            };
            if result.is_err() {
                up.peer_gone.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    }
}

/// Writes one body piece: as one HTTP chunk (size line, bytes and CRLF in
/// one write, so a 1-byte piece is one segment, not three), or as it is.
async fn write_piece(
    stream: &mut TcpStream,
    up: &Upstream,
    bytes: &[u8],
    chunked: bool,
) -> std::io::Result<()> {
    if chunked {
        let mut out = Vec::with_capacity(bytes.len() + 12);
        out.extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
        stream.write_all(&out).await?;
    } else {
        stream.write_all(bytes).await?;
    }
    up.bytes_out
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(())
}

/// Replaces every [`STAMP`] in `bytes` by the current time.
fn stamp(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let now = format!("{:016}", now_ns());
    let mut from = 0;
    while let Some(i) = memchr::memmem::find(&out[from..], STAMP) {
        let at = from + i;
        out[at..at + STAMP.len()].copy_from_slice(now.as_bytes());
        from = at + STAMP.len();
    }
    out
}

/// A request head as `httparse` reads it from the start of a buffer.
enum Head {
    /// More bytes are needed.
    Partial,
    /// Not HTTP/1: the connection is dropped.
    Bad,
    /// The request without its body, the head's length and the body's
    /// (`content-length`, else none).
    Complete(Recorded, usize, usize),
}

fn parse_head(buf: &[u8]) -> Head {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Head::Partial,
        Err(_) => return Head::Bad,
    };
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_string(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();
    let body_len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let recorded = Recorded {
        method: req.method.unwrap_or_default().to_string(),
        path: req.path.unwrap_or_default().to_string(),
        headers,
        body: Vec::new(),
    };
    Head::Complete(recorded, head_len, body_len)
}

async fn read_request(stream: &mut TcpStream, buf: &mut BytesMut) -> Option<Recorded> {
    let (mut req, head_len, body_len) = loop {
        match parse_head(buf) {
            Head::Complete(req, head_len, body_len) => break (req, head_len, body_len),
            Head::Bad => return None,
            Head::Partial => {
                if stream.read_buf(buf).await.ok()? == 0 {
                    return None;
                }
            }
        }
    };
    buf.advance(head_len);
    while buf.len() < body_len {
        if stream.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
    req.body = buf.split_to(body_len).to_vec();
    Some(req)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_read_with_its_headers_and_body_length() {
        let raw = b"POST /a?b=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nX-Call:  7 \r\n\r\nabc";
        let Head::Complete(req, head_len, body_len) = parse_head(raw) else {
            panic!("not complete");
        };
        assert_eq!((req.method.as_str(), req.path.as_str()), ("POST", "/a?b=1"));
        assert_eq!(req.header("x-call"), Some("7"));
        assert_eq!((head_len, body_len), (raw.len() - 3, 3));
        assert!(matches!(parse_head(&raw[..20]), Head::Partial));
        assert!(matches!(
            parse_head(b"\x00\x01 nonsense\r\n\r\n"),
            Head::Bad
        ));
    }

    #[test]
    fn stamps_keep_the_length() {
        let mut piece = b"~1.0:".to_vec();
        piece.extend_from_slice(STAMP);
        piece.push(b'~');
        let out = stamp(&piece);
        assert_eq!(out.len(), piece.len());
        assert!(!out.windows(STAMP.len()).any(|w| w == STAMP));
    }

    #[tokio::test]
    async fn an_upstream_plays_its_script_and_records_the_request() {
        let up = Upstream::always(Reply::json(201, "{\"ok\":true}")).await;
        let mut s = TcpStream::connect(up.addr).await.unwrap();
        s.write_all(b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        let mut got = Vec::new();
        while !got.ends_with(b"0\r\n\r\n") {
            let mut b = [0u8; 256];
            let n = s.read(&mut b).await.unwrap();
            assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&b[..n]);
        }
        let text = String::from_utf8_lossy(&got);
        assert!(text.starts_with("HTTP/1.1 201 Status\r\n"), "{text}");
        assert!(text.contains("b\r\n{\"ok\":true}\r\n"), "{text}");
        assert_eq!(up.hits(), 1);
        assert_eq!(up.requests()[0].json(), serde_json::json!({}));
    }
}

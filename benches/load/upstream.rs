//! A scripted upstream on raw TCP: each request is answered with a list of
//! steps (head, chunks, pauses, reset, clean close, hold open), so a bench
//! controls the wire byte for byte and can stamp the moment a frame leaves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The placeholder a [`Step::Stamped`] chunk carries; replaced at write time
/// by the nanoseconds since [`origin`], zero-padded to the same width so
/// the chunk length (and every framing byte around it) stays fixed.
pub const STAMP: &[u8; 16] = b"@@@@@@@@@@@@@@@@";

/// The shared clock of the bench process (upstream and agent live in it).
pub fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Nanoseconds since [`origin`].
pub fn now_ns() -> u64 {
    origin().elapsed().as_nanos() as u64
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Request {
    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
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
    /// A body piece whose [`STAMP`] is replaced by the send time.
    Stamped(Bytes),
    /// Wait.
    Sleep(Duration),
    /// Drop the connection with a TCP reset.
    Reset,
    /// Close the connection cleanly (FIN) in the middle of the body.
    Close,
    /// Send nothing more and keep the connection open until the peer leaves.
    Hold,
    /// End the chunked body; the connection stays usable.
    End,
}

/// A scripted answer.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub steps: Vec<Step>,
}

impl Reply {
    /// A 200 `text/event-stream` head (chunked body follows).
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

    /// A whole JSON answer with a `content-length` (the common small reply).
    pub fn json(status: u16, extra: &[(&str, &str)], body: &str) -> Self {
        let len = body.len().to_string();
        let mut h = vec![
            ("content-type", "application/json"),
            ("content-length", &len),
        ];
        h.extend_from_slice(extra);
        let mut r = Reply::head(status, &h);
        r.steps.push(Step::Chunk(Bytes::from(body.to_string())));
        r
    }

    /// Adds a body piece.
    pub fn chunk(mut self, bytes: impl Into<Bytes>) -> Self {
        self.steps.push(Step::Chunk(bytes.into()));
        self
    }

    /// Adds a piece stamped with its send time.
    pub fn stamped(mut self, bytes: impl Into<Bytes>) -> Self {
        self.steps.push(Step::Stamped(bytes.into()));
        self
    }

    /// Adds `bytes` cut into writes of 1 to `max` bytes (random sizes).
    pub fn split(mut self, bytes: &[u8], max: usize) -> Self {
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = fastrand::usize(1..=max.max(1)).min(rest.len());
            self.steps
                .push(Step::Chunk(Bytes::copy_from_slice(&rest[..n])));
            rest = &rest[n..];
        }
        self
    }

    /// Adds a pause.
    pub fn sleep(mut self, d: Duration) -> Self {
        self.steps.push(Step::Sleep(d));
        self
    }

    /// Adds a final step (reset, close, hold, end).
    pub fn then(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }
}

type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// A running scripted upstream.
#[derive(Clone)]
pub struct Upstream {
    pub addr: std::net::SocketAddr,
    /// Body bytes written so far, all connections together.
    pub bytes_out: Arc<AtomicU64>,
    /// Requests answered so far.
    pub requests: Arc<AtomicU64>,
}

impl Upstream {
    /// Starts an upstream answering every request with `script(request)`.
    /// `send_buffer` (bytes) shrinks the kernel send buffer of accepted
    /// sockets, so a stalled reader stops the writer early (back-pressure
    /// tests); `None` keeps the kernel default.
    pub async fn start(
        send_buffer: Option<u32>,
        script: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        if let Some(n) = send_buffer {
            socket.set_send_buffer_size(n).expect("SO_SNDBUF");
        }
        socket.set_reuseaddr(true).expect("SO_REUSEADDR");
        socket
            .bind("127.0.0.1:0".parse().expect("addr"))
            .expect("bind");
        let listener: TcpListener = socket.listen(4096).expect("listen");
        let up = Upstream {
            addr: listener.local_addr().expect("addr"),
            bytes_out: Arc::default(),
            requests: Arc::default(),
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

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn serve(mut stream: TcpStream, up: Upstream, script: Arc<Script>) {
    let mut buf = BytesMut::with_capacity(8192);
    while let Some(req) = read_request(&mut stream, &mut buf).await {
        up.requests.fetch_add(1, Ordering::Relaxed);
        let reply = script(&req);
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
                    let stamped = stamp(&bytes);
                    write_piece(&mut stream, &up, &stamped, chunked).await
                }
                Step::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    Ok(())
                }
                Step::Reset => {
                    // SO_LINGER 0 turns the close into a TCP reset.
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
                    return;
                }
                Step::End => stream.write_all(b"0\r\n\r\n").await,
            };
            if result.is_err() {
                return;
            }
        }
    }
}

async fn write_piece(
    stream: &mut TcpStream,
    up: &Upstream,
    bytes: &[u8],
    chunked: bool,
) -> std::io::Result<()> {
    if chunked {
        // One write per piece: the size line, the bytes and the CRLF go
        // out together so a 1-byte piece is one segment, not three.
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

async fn read_request(stream: &mut TcpStream, buf: &mut BytesMut) -> Option<Request> {
    let head_end = loop {
        if let Some(i) = memchr::memmem::find(buf, b"\r\n\r\n") {
            break i;
        }
        if stream.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let method = first.next()?.to_string();
    let path = first.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let _ = buf.split_to(head_end + 4);
    while buf.len() < len {
        if stream.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
    let body = buf.split_to(len).freeze();
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        402 => "Payment Required",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

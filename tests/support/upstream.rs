//! A scripted upstream on raw TCP: it answers each request with a list of
//! steps (head, chunks, pauses, reset, hold open), so tests control the wire
//! byte for byte, and it records every request it received.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// One step of a scripted answer.
#[derive(Debug, Clone)]
pub enum Step {
    /// Status line and headers (chunked body follows unless `Raw`).
    Head(u16, Vec<(String, String)>),
    /// A body chunk (sent as one HTTP chunk, flushed).
    Chunk(Vec<u8>),
    /// Bytes written as is (for non-chunked answers).
    Raw(Vec<u8>),
    /// Wait.
    Sleep(Duration),
    /// Drop the connection with a TCP reset, mid-answer.
    Reset,
    /// Keep the connection open without sending anything more, until the
    /// peer closes it.
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
        Reply {
            steps: vec![Step::Head(
                200,
                vec![("content-type".into(), "text/event-stream".into())],
            )],
        }
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

    /// A whole JSON answer.
    pub fn json(status: u16, body: &str) -> Self {
        Reply::head(status, &[("content-type", "application/json")])
            .chunk(body)
            .end()
    }

    /// A whole JSON answer with extra headers.
    pub fn json_with(status: u16, headers: &[(&str, &str)], body: &str) -> Self {
        let mut h = vec![("content-type", "application/json")];
        h.extend_from_slice(headers);
        Reply::head(status, &h).chunk(body).end()
    }

    /// Adds a body chunk.
    pub fn chunk(mut self, bytes: impl AsRef<[u8]>) -> Self {
        self.steps.push(Step::Chunk(bytes.as_ref().to_vec()));
        self
    }

    /// Adds a chunk for each split of `bytes` into pieces of `size`.
    pub fn split(mut self, bytes: impl AsRef<[u8]>, size: usize) -> Self {
        for piece in bytes.as_ref().chunks(size.max(1)) {
            self.steps.push(Step::Chunk(piece.to_vec()));
        }
        self
    }

    /// Adds a pause.
    pub fn sleep(mut self, ms: u64) -> Self {
        self.steps.push(Step::Sleep(Duration::from_millis(ms)));
        self
    }

    /// Ends with a TCP reset.
    pub fn reset(mut self) -> Self {
        self.steps.push(Step::Reset);
        self
    }

    /// Ends by holding the connection open.
    pub fn hold(mut self) -> Self {
        self.steps.push(Step::Hold);
        self
    }

    /// Ends the chunked body.
    pub fn end(mut self) -> Self {
        self.steps.push(Step::End);
        self
    }
}

type Script = dyn Fn(&Recorded, usize) -> Reply + Send + Sync;

/// A running scripted upstream.
#[derive(Clone)]
pub struct Upstream {
    pub addr: std::net::SocketAddr,
    log: Arc<Mutex<Vec<Recorded>>>,
    hits: Arc<AtomicUsize>,
    /// Connections that ended because the peer went away while we wrote.
    pub peer_gone: Arc<AtomicUsize>,
}

impl Upstream {
    /// Starts an upstream whose answer to the n-th request (0-based) is `script(req, n)`.
    pub async fn start(
        script: impl Fn(&Recorded, usize) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let up = Upstream {
            addr,
            log: Arc::default(),
            hits: Arc::default(),
            peer_gone: Arc::default(),
        };
        let script: Arc<Script> = Arc::new(script);
        let up2 = up.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve_conn(stream, up2.clone(), script.clone()));
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

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }
}

async fn serve_conn(mut stream: TcpStream, up: Upstream, script: Arc<Script>) {
    let mut buf = Vec::new();
    loop {
        let Some(req) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let n = up.hits.fetch_add(1, Ordering::SeqCst);
        up.log.lock().unwrap().push(req.clone());
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
                Step::Chunk(bytes) => {
                    if chunked {
                        let mut out = format!("{:x}\r\n", bytes.len()).into_bytes();
                        out.extend_from_slice(&bytes);
                        out.extend_from_slice(b"\r\n");
                        stream.write_all(&out).await
                    } else {
                        stream.write_all(&bytes).await
                    }
                }
                Step::Raw(bytes) => stream.write_all(&bytes).await,
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
                Step::Hold => {
                    let mut sink = [0u8; 1024];
                    loop {
                        match stream.read(&mut sink).await {
                            Ok(0) | Err(_) => {
                                up.peer_gone.fetch_add(1, Ordering::SeqCst);
                                return;
                            }
                            Ok(_) => {}
                        }
                    }
                }
                Step::End => stream.write_all(b"0\r\n\r\n").await,
            };
            if result.is_err() {
                up.peer_gone.fetch_add(1, Ordering::SeqCst);
                return;
            }
            let _ = stream.flush().await;
        }
    }
}

async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Recorded> {
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
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
    buf.drain(..head_end + 4);
    while buf.len() < len {
        let mut chunk = [0u8; 65536];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Vec<u8> = buf.drain(..len).collect();
    Some(Recorded {
        method,
        path,
        headers,
        body,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        402 => "Payment Required",
        403 => "Forbidden",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

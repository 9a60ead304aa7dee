//! The agent's HTTP side: one keep-alive HTTP/1.1 connection per virtual
//! agent (reopened when a cut stream closed it), TCP_NODELAY, TLS when
//! asked (trusting the local CA's root only), and body readers that either
//! collect the answer or time each numbered piece.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use shimgate_testkit::upstream::now_ns;

/// What an agent speaking TLS connects with: rustls trusting the local
/// CA's root alone, ALPN http/1.1, on ring as shimgate.
pub struct TlsClient {
    connector: tokio_rustls::TlsConnector,
}

impl TlsClient {
    /// A client trusting the root PEM at `root`.
    pub fn trusting(root: &std::path::Path) -> std::sync::Arc<TlsClient> {
        use tokio_rustls::rustls::pki_types::pem::PemObject as _;
        use tokio_rustls::rustls::pki_types::CertificateDer;
        let mut roots = tokio_rustls::rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(root).expect("root PEM") {
            roots.add(c.expect("certificate")).expect("root");
        }
        let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let mut config = tokio_rustls::rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        std::sync::Arc::new(TlsClient {
            connector: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
        })
    }
}

/// One agent connection.
pub struct Conn {
    addr: SocketAddr,
    sender: Option<SendRequest<Full<Bytes>>>,
    tls: Option<std::sync::Arc<TlsClient>>,
}

impl Conn {
    /// A connection to `addr`, opened on first use.
    pub fn new(addr: SocketAddr) -> Conn {
        Conn {
            addr,
            sender: None,
            tls: None,
        }
    }

    /// The same over TLS (the address as the name: no SNI, a leaf for the IP).
    pub fn tls(addr: SocketAddr, client: std::sync::Arc<TlsClient>) -> Conn {
        Conn {
            addr,
            sender: None,
            tls: Some(client),
        }
    }

    async fn ready(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, String> {
        let usable = match &mut self.sender {
            Some(s) => !s.is_closed() && s.ready().await.is_ok(),
            None => false,
        };
        if !usable {
            let tcp = TcpStream::connect(self.addr)
                .await
                .map_err(|e| format!("connect {}: {e}", self.addr))?;
            let _ = tcp.set_nodelay(true);
            let sender = match &self.tls {
                None => {
                    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                        .await
                        .map_err(|e| format!("handshake: {e}"))?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    sender
                }
                Some(client) => {
                    let name = tokio_rustls::rustls::pki_types::ServerName::IpAddress(
                        self.addr.ip().into(),
                    );
                    let tls = client
                        .connector
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS handshake: {e}"))?;
                    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                        .await
                        .map_err(|e| format!("handshake: {e}"))?;
                    tokio::spawn(async move {
                        let _ = conn.await;
                    });
                    sender
                }
            };
            self.sender = Some(sender);
        }
        self.sender
            .as_mut()
            .ok_or_else(|| "no connection".to_string())
    }

    /// Sends one request (origin-form path) and returns the streaming answer.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<Response<Incoming>, String> {
        let host = self.addr.to_string();
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", host);
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| format!("request: {e}"))?;
        let sender = self.ready().await?;
        match sender.send_request(req).await {
            Ok(r) => Ok(r),
            Err(e) => {
                self.sender = None;
                Err(format!("send: {e}"))
            }
        }
    }
}

/// A whole answer.
pub struct Whole {
    pub status: u16,
    pub sse: bool,
    pub body: Bytes,
    /// The body broke (reset, cut) instead of ending.
    pub broken: Option<String>,
}

fn is_sse(resp: &Response<Incoming>) -> bool {
    resp.headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

/// Reads the whole answer, giving up after `limit`.
pub async fn collect(resp: Response<Incoming>, limit: Duration) -> Whole {
    let status = resp.status().as_u16();
    let sse = is_sse(&resp);
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(f) => {
                    if let Ok(d) = f.into_data() {
                        buf.extend_from_slice(&d);
                    }
                }
                Err(e) => return Some(format!("body broke: {e}")),
            }
        }
        None
    };
    let broken = match tokio::time::timeout(limit, read).await {
        Ok(b) => b,
        Err(_) => Some(format!("no end within {} s", limit.as_secs())),
    };
    Whole {
        status,
        sse,
        body: buf.freeze(),
        broken,
    }
}

/// When each numbered piece (`~call.k:STAMP~`) arrived.
#[derive(Debug, Default, Clone)]
pub struct Timed {
    /// (arrival ns, send ns stamped by the upstream), in arrival order.
    pub pieces: Vec<(u64, u64)>,
    /// When the whole body had arrived.
    pub end_ns: u64,
    pub broken: Option<String>,
}

/// Reads an answer noting the arrival time of every stamped piece.
pub async fn timed(resp: Response<Incoming>, limit: Duration) -> Timed {
    let mut t = Timed::default();
    let mut body = resp.into_body();
    // Only the unscanned tail is kept: a marker may straddle two reads.
    let mut tail: Vec<u8> = Vec::new();
    let read = async {
        while let Some(frame) = body.frame().await {
            let at = now_ns();
            match frame {
                Ok(f) => {
                    if let Ok(d) = f.into_data() {
                        tail.extend_from_slice(&d);
                        let used = scan_stamps(&tail, at, &mut t.pieces);
                        tail.drain(..used);
                    }
                }
                Err(e) => return Some(format!("body broke: {e}")),
            }
        }
        None
    };
    t.broken = match tokio::time::timeout(limit, read).await {
        Ok(b) => b,
        Err(_) => Some("timed out".into()),
    };
    t.end_ns = now_ns();
    t
}

/// Finds complete `~c.k:NNNN~` markers in `buf`, records them at `at`, and
/// returns how many leading bytes are done with.
fn scan_stamps(buf: &[u8], at: u64, out: &mut Vec<(u64, u64)>) -> usize {
    let mut pos = 0;
    while let Some(i) = memchr::memchr(b'~', &buf[pos..]) {
        let start = pos + i;
        let Some(j) = memchr::memchr(b'~', &buf[start + 1..]) else {
            return start;
        };
        let end = start + 1 + j;
        let marker = &buf[start + 1..end];
        match marker.iter().position(|&b| b == b':') {
            Some(colon) => {
                let sent = std::str::from_utf8(&marker[colon + 1..])
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok());
                if let Some(sent) = sent {
                    out.push((at, sent));
                }
                pos = end + 1;
            }
            // Not a stamped marker: the second `~` may open the next one.
            None => pos = end,
        }
    }
    buf.len()
}

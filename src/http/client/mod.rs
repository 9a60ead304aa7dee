//! The HTTP/1.1 client every upstream send goes through (the chain's
//! routes, the ingress's call to the compression proxy, the reference
//! compressor's forward): pooled keep-alive connections, TCP_NODELAY, a
//! connect timeout, https via rustls.
//!
//! Our own rather than hyper-util's pooled client, for what a stream
//! costs while it is open. hyper's client gives every connection a task of
//! its own and a request channel, and reads into buffers it keeps for the
//! connection's life: every upstream chunk crossed from that task to the
//! one translating it, and each open stream held about 50 KB for its two
//! client connections (the 8 KiB write-head buffer, the channel's block of
//! 32 request slots, the read buffer, the connection future). Here the
//! body is read from the socket by whoever polls it ([`UpstreamBody`]),
//! the head is written once from an exact buffer, and a stream that waits
//! holds no buffer at all. Measured in the load tool's `streams` and
//! `latency` phases against the hyper-util client it replaced
//! (benches/README.md, 2026-12-02, "our own HTTP/1.1 client"). HTTP
//! parsing is `httparse`'s; the chunked decoder is ours (`chunked.rs`, its
//! header says why).

mod body;
mod chunked;
mod connect;
mod pool;
pub mod proxy;
mod wire;

#[cfg(test)]
mod tests;

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use tokio::io::AsyncWriteExt;

pub use body::UpstreamBody;
pub use connect::{pem_roots, Io, Roots, Tls};

use connect::Origin;
use pool::Pool;

/// How long an idle pooled connection is kept (upstream LBs commonly close at 60 s+).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// The room a response head is first read into (most heads are a few
/// hundred bytes; a longer one grows it up to [`wire::MAX_HEAD`]).
const HEAD_READ: usize = 4096;

/// A request extension: send this request through the proxy (the chain
/// sets it from the route's setting; without it the client connects
/// directly, as the compressor call always does).
#[derive(Clone)]
pub struct Through(pub Arc<proxy::ProxyUrl>);

/// The upstream client; cheap to clone (the clones share one pool).
#[derive(Clone)]
pub struct HttpClient {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Arc<Pool>,
    tls: Tls,
    connect_timeout: Duration,
}

/// Builds a client with the given connect timeout, trusting the webpki roots.
pub fn client(connect_timeout: Duration) -> HttpClient {
    HttpClient::with_tls(connect_timeout, Tls::webpki())
}

impl HttpClient {
    /// A client with its own TLS trust.
    pub fn with_tls(connect_timeout: Duration, tls: Tls) -> HttpClient {
        HttpClient {
            inner: Arc::new(Inner {
                pool: Pool::new(POOL_IDLE_TIMEOUT),
                tls,
                connect_timeout,
            }),
        }
    }

    /// A connection of its own (never pooled) to `host:port`, through
    /// `proxy` when given, TLS verified as every upstream's is when `tls`:
    /// what the capture listener forwards a request on unchanged, or runs
    /// a WebSocket over. The connect timeout bounds it.
    pub async fn open(
        &self,
        tls: bool,
        host: &str,
        port: u16,
        proxy: Option<Arc<proxy::ProxyUrl>>,
    ) -> Result<Io, ClientError> {
        let origin = Origin {
            tls,
            host: host.into(),
            port,
            proxy,
        };
        connect::connect(&origin, &self.inner.tls, self.inner.connect_timeout)
            .await
            .map_err(|e| ClientError::new(Kind::Connect, origin.to_string(), e))
    }

    /// A byte tunnel to `host:port` (TCP only, nothing read or decrypted),
    /// through `proxy` when given, within the connect timeout.
    pub async fn tunnel(
        &self,
        host: &str,
        port: u16,
        proxy: Option<&proxy::ProxyUrl>,
    ) -> Result<tokio::net::TcpStream, ClientError> {
        let shown = || match proxy {
            Some(p) => format!("{host}:{port} through proxy {p}"),
            None => format!("{host}:{port}"),
        };
        let open = async {
            match proxy {
                Some(p) => proxy::tunnel(p, host, port).await,
                None => connect::tcp_to(host, port).await,
            }
        };
        match tokio::time::timeout(self.inner.connect_timeout, open).await {
            Ok(Ok(tcp)) => Ok(tcp),
            Ok(Err(e)) => Err(ClientError::new(Kind::Connect, shown(), e)),
            Err(_) => Err(ClientError::new(
                Kind::Connect,
                shown(),
                format!(
                    "connect timed out after {} ms",
                    self.inner.connect_timeout.as_millis()
                ),
            )),
        }
    }

    /// Idle connections kept for reuse.
    pub fn idle_connections(&self) -> usize {
        self.inner.pool.idle_count()
    }

    /// Sends `req` and reads the answer's head; the body is read as it is
    /// polled. The caller bounds the wait for the head.
    pub async fn request(
        &self,
        req: Request<Bytes>,
    ) -> Result<Response<UpstreamBody>, ClientError> {
        let (parts, body) = req.into_parts();
        let Some(mut origin) = Origin::of(&parts.uri) else {
            return Err(ClientError::new(
                Kind::Connect,
                parts.uri.to_string(),
                "the URL is not http:// or https:// with a host",
            ));
        };
        origin.proxy = parts.extensions.get::<Through>().map(|t| t.0.clone());
        let head = wire::request_head(&parts, &origin, body.len());
        let io = self.send(&origin, &head, &body).await?;
        drop(head);
        let (io, head, rest) = read_head(io, &parts.method, &origin).await?;
        let body = UpstreamBody::new(
            io,
            head.framing,
            rest,
            head.keep_alive,
            (self.inner.pool.clone(), origin),
        );
        let mut resp = Response::new(body);
        *resp.status_mut() = head.status;
        *resp.version_mut() = head.version;
        *resp.headers_mut() = head.headers;
        Ok(resp)
    }

    /// Writes the request on a pooled connection or a new one. A pooled
    /// one that fails before it took a byte (its peer closed it meanwhile)
    /// is dropped and the request written on a new one: nothing of it
    /// left, so it cannot reach the upstream twice.
    async fn send(&self, origin: &Origin, head: &[u8], body: &[u8]) -> Result<Io, ClientError> {
        if let Some(mut io) = self.inner.pool.take(origin) {
            match write_request(&mut io, head, body).await {
                Ok(()) => return Ok(io),
                Err((e, 0)) => {
                    tracing::debug!(%origin, error = %e, "a pooled connection was closed; connecting anew")
                }
                Err((e, _)) => return Err(ClientError::new(Kind::Send, origin.to_string(), e)),
            }
        }
        // Boxed: a new connection (and a TLS handshake) is the rare case,
        // and inline its state (1.3 KiB) would size every attempt's future,
        // and the call's box, on a pooled connection too.
        let mut io = Box::pin(connect::connect(
            origin,
            &self.inner.tls,
            self.inner.connect_timeout,
        ))
        .await
        .map_err(|e| ClientError::new(Kind::Connect, origin.to_string(), e))?;
        write_request(&mut io, head, body)
            .await
            .map_err(|(e, written)| {
                let mut error = ClientError::new(Kind::Send, origin.to_string(), e);
                error.unsent = written == 0;
                error
            })?;
        Ok(io)
    }
}

/// Writes head and body (one system call for the two when it can), then
/// flushes. `Err` carries how many bytes were taken before the error.
async fn write_request(
    io: &mut Io,
    head: &[u8],
    body: &[u8],
) -> Result<(), (std::io::Error, usize)> {
    let total = head.len() + body.len();
    let mut written = 0;
    while written < total {
        let slices = if written < head.len() {
            [IoSlice::new(&head[written..]), IoSlice::new(body)]
        } else {
            [
                IoSlice::new(&body[written - head.len()..]),
                IoSlice::new(&[]),
            ]
        };
        match io.write_vectored(&slices).await {
            Ok(0) => return Err((std::io::ErrorKind::WriteZero.into(), written)),
            Ok(n) => written += n,
            Err(e) => return Err((e, written)),
        }
    }
    io.flush().await.map_err(|e| (e, written))
}

/// Reads the response head; the bytes read past it start the body.
async fn read_head(
    mut io: Io,
    method: &http::Method,
    origin: &Origin,
) -> Result<(Io, wire::Head, Bytes), ClientError> {
    let mut buf = BytesMut::with_capacity(HEAD_READ);
    loop {
        if buf.capacity() == buf.len() {
            buf.reserve(buf.capacity().max(HEAD_READ));
        }
        let n = tokio_util::io::read_buf(&mut io, &mut buf)
            .await
            .map_err(|e| ClientError::new(Kind::Head, origin.to_string(), e))?;
        if n == 0 {
            return Err(ClientError::new(
                Kind::Head,
                origin.to_string(),
                "the connection closed before a response head",
            ));
        }
        match wire::parse_head(&mut buf, method) {
            Ok(Some(head)) => return Ok((io, head, buf.freeze())),
            Ok(None) => {}
            Err(e) => return Err(ClientError::new(Kind::Head, origin.to_string(), e)),
        }
    }
}

/// What the client was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Resolving, connecting, the TLS handshake (the request never left).
    Connect,
    Send,
    Head,
    Body,
}

/// A failed request or body read: what failed, where, and why.
#[derive(Debug)]
pub struct ClientError {
    kind: Kind,
    origin: String,
    source: Box<dyn std::error::Error + Send + Sync>,
    /// Not a byte of the request was written.
    unsent: bool,
}

impl ClientError {
    fn new(
        kind: Kind,
        origin: String,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> ClientError {
        ClientError {
            kind,
            origin,
            source: source.into(),
            unsent: kind == Kind::Connect,
        }
    }

    fn body(origin: &Origin, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        ClientError::new(Kind::Body, origin.to_string(), source)
    }

    /// The connection could not be made.
    pub fn is_connect(&self) -> bool {
        self.kind == Kind::Connect
    }

    /// Not a byte of the request left: it surely never reached the
    /// upstream (no connection, or a write that failed at once).
    pub fn never_sent(&self) -> bool {
        self.unsent
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.kind {
            Kind::Connect => "cannot connect to",
            Kind::Send => "cannot send the request to",
            Kind::Head => "no response head from",
            Kind::Body => "the response body broke from",
        };
        write!(f, "{what} {}", self.origin)
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

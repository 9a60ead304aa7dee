//! The reference compressor: a small OpenAI-compatible compression proxy
//! that behaves like the real ones shimgate sits behind (same path forwarded
//! to one upstream base, old turns shortened past a threshold, a preamble
//! always added, answers streamed), so the demo and the tests need nothing
//! from outside.

mod proxy;
pub mod rewrite;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::os;

pub use rewrite::{Policy, Rewrite, DEFAULT_KEEP_TURNS, PREAMBLE, SIDE_REQUEST_MAX_TOKENS};

/// Default threshold: compress once message content passes this many characters.
pub const DEFAULT_THRESHOLD_CHARS: usize = 8000;

/// Request bodies above this answer 413 (32 MiB, shimgate's own default).
pub const MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;

/// Time allowed for the upstream's response head (a model may think long
/// before its first byte).
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(120);

/// TCP connect timeout towards the upstream.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Running totals, readable while the compressor serves.
#[derive(Debug, Default)]
pub struct Stats {
    requests: AtomicU64,
    rewritten: AtomicU64,
    compressed: AtomicU64,
    untouched: AtomicU64,
    rejected: AtomicU64,
    upstream_errors: AtomicU64,
    chars_before: AtomicU64,
    chars_after: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Every request received.
    pub requests: u64,
    /// Chat requests rewritten (preamble added, maybe summarised).
    pub rewritten: u64,
    /// Of those, the ones whose older turns were summarised.
    pub compressed: u64,
    /// Chat requests forwarded byte for byte (side requests, no messages).
    pub untouched: u64,
    /// Requests refused (malformed JSON, body too large).
    pub rejected: u64,
    /// Requests whose upstream could not be reached or did not answer.
    pub upstream_errors: u64,
    /// Message content characters of rewritten requests, before.
    pub chars_before: u64,
    /// The same, after.
    pub chars_after: u64,
}

impl Stats {
    /// The current values.
    pub fn snapshot(&self) -> Counters {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            requests: get(&self.requests),
            rewritten: get(&self.rewritten),
            compressed: get(&self.compressed),
            untouched: get(&self.untouched),
            rejected: get(&self.rejected),
            upstream_errors: get(&self.upstream_errors),
            chars_before: get(&self.chars_before),
            chars_after: get(&self.chars_after),
        }
    }
}

/// Why the compressor could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The upstream is not an http(s) base URL.
    #[error("--upstream {url:?}: {why}")]
    BadUpstream { url: String, why: String },
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// How long requests in flight may run on after a stop event before the
/// process ends anyway (`serve`'s own grace).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A running compressor; it stops accepting when dropped (requests in
/// flight finish, idle connections close).
pub struct Compressor {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: CancellationToken,
    /// The accept loop: it ends once every connection has.
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl Compressor {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, what shimgate's `compressor.url` should say.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        self.stats.snapshot()
    }

    /// Stops accepting, closes idle connections and waits up to `grace`
    /// for the requests in flight (a stream included) to finish. Whether
    /// they all did.
    pub async fn shutdown(mut self, grace: Duration) -> bool {
        self.stop.cancel();
        match self.serving.take() {
            Some(serving) => tokio::time::timeout(grace, serving).await.is_ok(),
            None => true,
        }
    }
}

impl Drop for Compressor {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Checks an upstream base URL and drops its trailing slash.
fn upstream_base(url: &str) -> Result<String, StartError> {
    let bad = |why: &str| StartError::BadUpstream {
        url: url.to_string(),
        why: why.to_string(),
    };
    let base = url.trim_end_matches('/');
    let uri: http::Uri = base
        .parse()
        .map_err(|e: http::uri::InvalidUri| bad(&e.to_string()))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("must start with http:// or https://"));
    }
    if uri.authority().is_none() {
        return Err(bad("has no host"));
    }
    if uri.query().is_some() {
        return Err(bad(
            "must not carry a query (the request's own query is appended)",
        ));
    }
    Ok(base.to_string())
}

/// Binds `listen` (port 0 picks a free port) and serves until the returned
/// handle is dropped, forwarding every request to `upstream` + its path.
pub async fn start(
    listen: SocketAddr,
    upstream: &str,
    policy: Policy,
) -> Result<Compressor, StartError> {
    let upstream = upstream_base(upstream)?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(listen);
    if !addr.ip().is_loopback() {
        warn!(%addr, "the compressor listens beyond loopback: anyone who can reach it can use the upstream");
    }
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let shared = Arc::new(proxy::Shared {
        upstream,
        policy,
        stats: stats.clone(),
        client: crate::http::client::client(CONNECT_TIMEOUT),
    });
    let serving = tokio::spawn(accept_loop(listener, shared, stop.clone()));
    Ok(Compressor {
        addr,
        stats,
        stop,
        serving: Some(serving),
    })
}

/// Serves each connection until `stop`; then tells every connection to
/// close once its request is answered and returns when all have.
async fn accept_loop(listener: TcpListener, shared: Arc<proxy::Shared>, stop: CancellationToken) {
    let connections = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly
                // instead of spinning.
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        let service = service_fn(move |req| {
            let shared = shared.clone();
            async move { Ok::<_, Infallible>(proxy::handle(shared, req).await) }
        });
        let conn = hyper::server::conn::http1::Builder::new()
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        let conn = connections.watch(conn);
        // Connection errors are the peer's business (resets, bad HTTP).
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    connections.shutdown().await;
}

/// `shimgate compressor`: runs until a stop event of the OS
/// ([`os::stop_events`]: Ctrl-C, SIGTERM, a closed terminal or console,
/// logoff, shutdown), then lets the requests in flight finish (up to
/// [`SHUTDOWN_GRACE`]). Prints `listening ADDR` on stdout once bound, so
/// scripts using port 0 learn it.
pub fn run(listen: SocketAddr, upstream: &str, policy: Policy) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shimgate compressor: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        // Handlers first: a signal sent as soon as `listening` appears must
        // reach them, not the default action (an end without a drain).
        let events = os::stop_events();
        let compressor = match start(listen, upstream, policy).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("shimgate compressor: {e}");
                return ExitCode::from(2);
            }
        };
        // Scripts using port 0 read this line; a closed stdout is not fatal.
        {
            use std::io::Write as _;
            let mut out = std::io::stdout();
            let _ = writeln!(out, "listening {}", compressor.addr());
            let _ = out.flush();
        }
        info!(
            addr = %compressor.addr(),
            upstream,
            threshold_chars = policy.threshold_chars,
            keep_turns = policy.keep_turns,
            "compressor ready"
        );
        let why = events.until_any().await;
        info!("stopping ({why})");
        let stats = compressor.stats.clone();
        if !compressor.shutdown(SHUTDOWN_GRACE).await {
            warn!(grace = ?SHUTDOWN_GRACE, "requests still in flight at the end of the grace period were cut");
        }
        let c = stats.snapshot();
        info!(
            requests = c.requests,
            compressed = c.compressed,
            chars_before = c.chars_before,
            chars_after = c.chars_after,
            "compressor stopped"
        );
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_bases_are_checked_and_trimmed() {
        assert_eq!(
            upstream_base("http://127.0.0.1:47011/").unwrap(),
            "http://127.0.0.1:47011"
        );
        assert_eq!(
            upstream_base("http://127.0.0.1:1/v1").unwrap(),
            "http://127.0.0.1:1/v1"
        );
        for bad in ["127.0.0.1:47011", "ftp://x", "http://", "http://x/?a=1", ""] {
            assert!(upstream_base(bad).is_err(), "{bad}");
        }
    }
}

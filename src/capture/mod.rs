//! The capture listener (`[capture] listen`, `docs/capture.md`): a
//! loopback HTTP proxy for clients that reach their provider only through
//! a proxy (TRAE IDE's built-in models, the Qoder CLI and IDE on their
//! `legacy` transport, the Qoder JetBrains plugin).
//!
//! - `CONNECT host:port` to a host of `[capture] intercept`: TLS with a
//!   leaf of the local CA ([`intercept`]), then each request goes where it
//!   belongs: a provider's inference call to its shim, as if the client
//!   had called the shim's listener (same host code, compressor, chain and
//!   counters, [`route`]); every other request to the real host unchanged
//!   ([`forward`]: the user's `[upstream]` proxy rules, the host's
//!   certificate verified, streaming both ways, WebSocket upgrades passed
//!   through).
//! - `CONNECT` to any other host, to a loopback one, or to a listed host
//!   whose client refused shimgate's certificate too often (or that the CA
//!   cannot sign for): a byte tunnel, never decrypted ([`tunnel`]).
//! - An absolute-form request (`GET http://host/…`, and the `https://`
//!   ones some clients send a proxy in the clear): served as the same
//!   request would be inside a tunnel to that host ([`request`]).
//! - Anything else (an origin-form `GET /path`: what a web page's fetch to
//!   this port is) is refused with `400 NOT_A_PROXY_REQUEST`, no CORS.
//!
//! shimgate's own onward connections never go through this listener: a
//! proxy setting that names it is ignored (`app`), and `[upstream] proxy`
//! naming it is refused by the config check.

mod forward;
mod intercept;
mod request;
pub mod route;
mod tunnel;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::app::App;
use crate::config::ClientLimits;
use crate::host::Shims;

/// The answer to a connection beyond the cap: written at once, then closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 93\r\nconnection: close\r\n\r\n{\"error\":{\"code\":\"TOO_MANY_CONNECTIONS\",\"message\":\"too many open connections; try again\"}}";

/// What every connection of the capture listener shares.
#[derive(Clone)]
pub struct Ctx {
    pub app: Arc<App>,
    pub shims: Arc<Shims>,
    limits: ClientLimits,
    /// Every connection's task and the tunnels' (shutdown waits for them).
    tracker: TaskTracker,
    /// Cancelled at shutdown: HTTP connections finish the request in
    /// flight; tunnels and WebSockets, whose bytes shimgate cannot read
    /// (it cannot tell a stream in flight from an idle connection), close.
    draining: CancellationToken,
    /// The client connection's place under `[limits] max_connections`,
    /// held by every task that serves it (a tunnel outlives the HTTP
    /// connection it came from).
    permit: Option<Arc<OwnedSemaphorePermit>>,
}

/// Binds the capture listener at `addr` (`SO_REUSEADDR`, the shims'
/// backlog).
pub fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Accepts connections until `accepting` is cancelled.
pub async fn accept_loop(
    app: Arc<App>,
    shims: Arc<Shims>,
    listener: TcpListener,
    (tracker, accepting, draining): (TaskTracker, CancellationToken, CancellationToken),
) {
    let limits = app.config().client.clone();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let ctx = Ctx {
        app,
        shims,
        limits,
        tracker,
        draining,
        permit: None,
    };
    loop {
        let accepted = tokio::select! {
            biased;
            () = accepting.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                warn!(error = %e, "capture: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            let _ = stream.try_write(REFUSAL);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let mine = Ctx {
            permit: Some(Arc::new(permit)),
            ..ctx.clone()
        };
        ctx.tracker.spawn(serve(mine, stream));
    }
}

/// Runs an HTTP connection until it ends; at shutdown it finishes the
/// request in flight and closes.
macro_rules! drain_with {
    ($conn:expr, $draining:expr) => {{
        let conn = $conn;
        tokio::pin!(conn);
        tokio::select! {
            _ = conn.as_mut() => {}
            () = $draining.cancelled() => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
    }};
}
pub(crate) use drain_with;

/// Serves one client connection: proxy requests until it closes (or a
/// `CONNECT` takes it over).
async fn serve(ctx: Ctx, stream: tokio::net::TcpStream) {
    let onward = request::Onwards::default();
    let c = ctx.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (ctx, onward) = (c.clone(), onward.clone());
        async move { Ok::<_, std::convert::Infallible>(request::handle(ctx, onward, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.limits.header_read_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    drain_with!(conn, ctx.draining);
}

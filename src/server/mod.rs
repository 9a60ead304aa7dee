//! The listeners: one HTTP/1.1 server per enabled shim, TLS and plain HTTP
//! on the same port, TCP_NODELAY on every socket, client limits (`conn`),
//! and a graceful shutdown that closes idle
//! connections at once and lets streams finish within a grace period before
//! ending them with a final error frame.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::app::stats::HISTORY_EVERY;
use crate::app::App;
use crate::config::Config;
use crate::host::{self, Shims};

mod conn;
mod dispatch;

pub use conn::Connections;

/// How long in-flight streams may run on after a shutdown signal before they
/// are ended with a final error frame.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// After the grace period, time for the final error frames to be flushed.
const FLUSH_AFTER_HARD_STOP: Duration = Duration::from_secs(2);

/// A running set of listeners.
pub struct Running {
    pub app: Arc<App>,
    pub shims: Arc<Shims>,
    addrs: BTreeMap<&'static str, SocketAddr>,
    /// The capture listener's address, when it listens.
    capture: Option<SocketAddr>,
    accepting: CancellationToken,
    accept_loops: JoinSet<()>,
    /// Every client connection's task.
    connections: TaskTracker,
    /// Cancelled at shutdown: connections close once their request is done.
    draining: CancellationToken,
    /// The route state file's writer (saves once more at shutdown).
    route_writer: tokio::task::JoinHandle<()>,
    /// The savings file's writer (saves once more at shutdown).
    ledger_writer: tokio::task::JoinHandle<()>,
    /// Samples the counters for the panel's chart.
    sampler: tokio::task::JoinHandle<()>,
}

impl Running {
    /// The bound address of a shim's listener (`None` if it did not start,
    /// or the shim rides on another's).
    pub fn addr(&self, shim: &str) -> Option<SocketAddr> {
        self.addrs.get(shim).copied()
    }

    /// The capture listener's bound address (`None`: not configured, or
    /// it could not bind).
    pub fn capture_addr(&self) -> Option<SocketAddr> {
        self.capture
    }

    /// The `/status` document.
    pub fn status(&self) -> serde_json::Value {
        crate::admin::status::document(&self.app, &self.shims)
    }

    /// Stops accepting, closes idle connections at once, lets streams
    /// finish up to `grace`, then ends the rest with a final error frame.
    pub async fn shutdown(mut self, grace: Duration) {
        self.accepting.cancel();
        while self.accept_loops.join_next().await.is_some() {}
        self.connections.close();
        self.draining.cancel();
        let in_flight = self.connections.len();
        if in_flight > 0 {
            info!(
                connections = in_flight,
                grace_ms = grace.as_millis() as u64,
                "waiting for in-flight requests"
            );
        }
        if tokio::time::timeout(grace, self.connections.wait())
            .await
            .is_err()
        {
            warn!("grace period over: ending the remaining streams with an error frame");
            self.app.hard_stop.cancel();
            let _ = tokio::time::timeout(FLUSH_AFTER_HARD_STOP, self.connections.wait()).await;
        }
        self.route_writer.abort();
        self.ledger_writer.abort();
        self.sampler.abort();
        self.app.route_file.save(&self.app.chain).await;
        self.app.ledger.save().await;
    }
}

/// Binds every enabled shim's listener and starts serving. A listener that
/// cannot bind is reported (log and `startError`) and the others keep going.
pub async fn start(config: Config) -> Running {
    let app = App::new(config);
    let shims = Arc::new(host::all());
    let config = app.config();
    let accepting = CancellationToken::new();
    let draining = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut accept_loops = JoinSet::new();
    let mut addrs = BTreeMap::new();
    // The CA, if one is there: its fingerprint in the log, and a warning
    // when it no longer matches `[ca] names` or ends soon.
    app.tls.at_start();
    // A shim that rides on another (qoder's model-server wire) is served
    // by its host's listener.
    let listens = |name: &str| crate::registry::find(name).is_none_or(|f| f.listens());
    for shim in config.shims.iter().filter(|s| s.enabled && listens(s.name)) {
        let name = shim.name;
        match bind(shim.listen) {
            Ok(listener) => {
                let addr = listener.local_addr().unwrap_or(shim.listen);
                addrs.insert(name, addr);
                for served in crate::registry::served_by(name) {
                    app.shim_stats(served.name).listening(addr);
                }
                info!(shim = name, %addr, "listening");
                if shim.routes.is_empty() {
                    info!(shim = name, "no routes are configured: calls this shim must send upstream get 502 NO_ROUTES");
                }
                let connections =
                    Connections::new(config.client.clone(), tracker.clone(), draining.clone())
                        .with_tls(app.tls.clone());
                let trust = crate::admin::Listener {
                    remote: !addr.ip().is_loopback(),
                };
                accept_loops.spawn(accept_loop(
                    app.clone(),
                    shims.clone(),
                    (name, trust),
                    listener,
                    accepting.clone(),
                    connections,
                ));
            }
            Err(e) => {
                let message = format!("cannot listen on {}: {e}", shim.listen);
                error!(shim = name, "{message}");
                for served in crate::registry::served_by(name) {
                    app.shim_stats(served.name).start_failed(message.clone());
                }
            }
        }
    }
    let capture = start_capture(
        &app,
        &shims,
        &mut accept_loops,
        (&tracker, &accepting, &draining),
    );
    let route_writer = tokio::spawn(app.route_file.clone().writer(app.chain.clone()));
    let ledger_writer = tokio::spawn(app.ledger.clone().writer());
    let sampler = tokio::spawn(sample_counters(app.clone()));
    if config.compressor.is_none() && config.shims.iter().all(|s| s.compressor.is_none()) {
        info!("no compressor is configured: direct mode (requests go upstream uncompressed)");
    }
    Running {
        app,
        shims,
        addrs,
        capture,
        accepting,
        accept_loops,
        connections: tracker,
        draining,
        route_writer,
        ledger_writer,
        sampler,
    }
}

/// Binds the capture listener when `[capture] listen` is set; one that
/// cannot bind is reported (log and `/status` `capture.startError`) and
/// the shims keep going.
fn start_capture(
    app: &Arc<App>,
    shims: &Arc<Shims>,
    accept_loops: &mut JoinSet<()>,
    (tracker, accepting, draining): (&TaskTracker, &CancellationToken, &CancellationToken),
) -> Option<SocketAddr> {
    let listen = app.config().capture.listen?;
    match crate::capture::bind(listen) {
        Ok(listener) => {
            let addr = listener.local_addr().unwrap_or(listen);
            app.capture.listening(Ok(addr));
            info!(%addr, intercept = ?app.config().capture.intercept, "capture listening");
            accept_loops.spawn(crate::capture::accept_loop(
                app.clone(),
                shims.clone(),
                listener,
                (tracker.clone(), accepting.clone(), draining.clone()),
            ));
            Some(addr)
        }
        Err(e) => {
            let message = format!("cannot listen on {listen}: {e}");
            error!("capture: {message}");
            app.capture.listening(Err(message));
            None
        }
    }
}

/// Samples every shim's counters each [`HISTORY_EVERY`] (the panel's chart).
async fn sample_counters(app: Arc<App>) {
    let mut tick = tokio::time::interval(HISTORY_EVERY);
    loop {
        tick.tick().await;
        let now = std::time::SystemTime::now();
        for name in crate::registry::names() {
            app.shim_stats(name).sample(now);
        }
    }
}

/// Pending connections a listener queues before it accepts them.
/// `TcpListener::bind` uses 128: a burst of more connects than that (many
/// agents starting at once) had SYNs dropped and waited a 1 s retransmit,
/// so the connection cap (`limits.max_connections`, 1,024 by default,
/// answered with `503` at once) was never what a burst met.
const LISTEN_BACKLOG: u32 = 1024;

/// Binds a listener as `TcpListener::bind` does (`SO_REUSEADDR`), with a
/// backlog of [`LISTEN_BACKLOG`].
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

async fn accept_loop(
    app: Arc<App>,
    shims: Arc<Shims>,
    (shim, trust): (&'static str, crate::admin::Listener),
    listener: TcpListener,
    accepting: CancellationToken,
    connections: Connections,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = accepting.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, _peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly
                // instead of spinning.
                warn!(shim, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (app, shims) = (app.clone(), shims.clone());
        connections.serve(stream, move |req| {
            dispatch::handle(app.clone(), shims.clone(), shim, trust, req)
        });
    }
}

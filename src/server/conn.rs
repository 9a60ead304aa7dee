//! Client connections: each served by hyper's HTTP/1.1 server in a task of
//! its own, with the limits a loopback gateway next to a long-running
//! agent needs (DESIGN §7): a request head must arrive within the
//! header-read timeout (slowloris), a connection with no request in flight
//! is closed after the idle timeout, at most `max_connections` are open
//! per listener (beyond that a new one gets `503` at once), and shutdown
//! closes idle connections at once while streams in flight get a grace
//! period.
//!
//! TLS and plain HTTP share each port: the first byte tells them apart (a
//! TLS connection opens with a handshake record, `0x16`; an HTTP request
//! with a method's letter). A TLS connection is handed to `crate::tls`
//! for its handshake, within the same header-read timeout as a plain
//! request's first byte, then served by the same code over the TLS stream.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

use crate::config::ClientLimits;
use crate::host::ResponseFuture;
use crate::http::body::{Body, BoxError};
use crate::tls::{OverTls, Tls};

/// The first byte of a TLS connection: a handshake record (RFC 8446 §5.1).
const TLS_HANDSHAKE: u8 = 0x16;

/// The answer to a connection beyond the cap: written at once, then closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 93\r\nconnection: close\r\n\r\n{\"error\":{\"code\":\"TOO_MANY_CONNECTIONS\",\"message\":\"too many open connections; try again\"}}";

/// Every connection of one listener.
#[derive(Clone)]
pub struct Connections {
    limits: ClientLimits,
    permits: Arc<Semaphore>,
    tracker: TaskTracker,
    /// Cancelled at shutdown: connections finish their request in flight
    /// (if any) and close.
    draining: CancellationToken,
    refused: Arc<AtomicU64>,
    /// TLS on this listener's port (`None`: plain HTTP only).
    tls: Option<Arc<Tls>>,
}

impl Connections {
    /// Connections under `limits`, closing when `draining` is cancelled.
    pub fn new(limits: ClientLimits, tracker: TaskTracker, draining: CancellationToken) -> Self {
        Connections {
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            tracker,
            draining,
            refused: Arc::default(),
            tls: None,
        }
    }

    /// The same connections, answering TLS too on the same port.
    pub fn with_tls(mut self, tls: Arc<Tls>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Serves one accepted socket with `handle`, or refuses it when the
    /// listener is at its cap.
    pub fn serve<F>(&self, stream: TcpStream, handle: F)
    where
        F: Fn(Request<Incoming>) -> ResponseFuture + Send + Sync + Clone + 'static,
    {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                warn!(
                    refused = n,
                    cap = self.limits.max_connections,
                    "too many open client connections: refusing new ones"
                );
            }
            // Best effort: a full socket buffer just drops the answer.
            let _ = stream.try_write(REFUSAL);
            return;
        };
        let _ = stream.set_nodelay(true);
        let this = self.clone();
        self.tracker
            .spawn(async move { this.run(stream, handle, permit).await });
    }

    /// Tells TLS from plain HTTP by the first byte, completes a TLS
    /// handshake, then serves HTTP over whichever stream it is. Waiting
    /// for the first byte and the handshake are bounded by the header-read
    /// timeout, and end at shutdown.
    async fn run<F>(&self, stream: TcpStream, handle: F, permit: OwnedSemaphorePermit)
    where
        F: Fn(Request<Incoming>) -> ResponseFuture + Send + Sync + Clone + 'static,
    {
        let Some(tls) = &self.tls else {
            return self.serve_http(stream, handle, false, permit).await;
        };
        let deadline = Instant::now() + self.limits.header_read_timeout;
        let mut first = [0u8; 1];
        let peeked = tokio::select! {
            peeked = tokio::time::timeout_at(deadline, stream.peek(&mut first)) => peeked,
            () = self.draining.cancelled() => return,
        };
        // A silent client, one gone, or a socket error: closed, as hyper's
        // header-read timeout closes a silent plain connection.
        if !matches!(peeked, Ok(Ok(1))) {
            return;
        }
        if first[0] != TLS_HANDSHAKE {
            return self.serve_http(stream, handle, false, permit).await;
        }
        let accepted = tokio::select! {
            accepted = tls.accept(stream, deadline) => accepted,
            () = self.draining.cancelled() => return,
        };
        if let Some(stream) = accepted {
            self.serve_http(stream, handle, true, permit).await;
        }
    }

    /// Serves HTTP/1.1 on `stream` (plain or TLS: one code for both) until
    /// the client closes, the idle timeout, or shutdown; requests of a TLS
    /// connection carry [`OverTls`].
    async fn serve_http<S, F>(
        &self,
        stream: S,
        handle: F,
        secure: bool,
        _permit: OwnedSemaphorePermit,
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        F: Fn(Request<Incoming>) -> ResponseFuture + Send + Sync + Clone + 'static,
    {
        let activity = Arc::new(Activity::new());
        let a = activity.clone();
        let service = service_fn(move |mut req: Request<Incoming>| {
            if secure {
                req.extensions_mut().insert(OverTls);
            }
            let guard = a.begin();
            // Boxed by the handler: hyper keeps its in-flight service
            // future for as long as the connection lives, and this one holds
            // only a pointer; the handler's own state, in a box sized for
            // the branch the request took, is freed once the head is out.
            let fut = handle(req);
            async move {
                let resp = fut.await;
                Ok::<_, Infallible>(resp.map(|b| {
                    Body::new(Tracked {
                        inner: b,
                        _guard: guard,
                    })
                }))
            }
        });
        // hyper's defaults on purpose: no server setting shrinks a
        // connection's buffers (the read buffer starts at 8 KiB whatever
        // `max_buf_size` says, the write-head buffer is a fixed 8 KiB), and
        // `half_close`, `writev(false)` and `max_headers` measured no
        // change in memory per idle stream (benches/README.md, 2026-12-02).
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .keep_alive(true)
            .serve_connection(TokioIo::new(stream), service);
        tokio::pin!(conn);
        let idle = activity.idle_for(self.limits.idle_timeout);
        tokio::pin!(idle);
        let draining = self.draining.cancelled();
        tokio::pin!(draining);
        let mut beside = Beside::new();
        let mut closing = false;
        std::future::poll_fn(|cx| loop {
            // Connection errors are the peer's business (resets, bad HTTP).
            if conn.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
            if closing {
                return Poll::Pending;
            }
            // The shutdown signal and the idle timer, polled only when one
            // of them woke the task: nearly every wake-up is the
            // connection's own.
            match beside.poll(cx, |cx| {
                let stop = draining.as_mut().poll(cx).is_ready();
                stop || idle.as_mut().poll(cx).is_ready()
            }) {
                true => {
                    closing = true;
                    conn.as_mut().graceful_shutdown();
                }
                false => return Poll::Pending,
            }
        })
        .await
    }

    /// Connections refused at the cap so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

/// Polls the futures beside a connection (the shutdown signal, the idle
/// timer) only when one of their own wakers fired, through a waker of its
/// own that notes it and wakes the task: the connection's task wakes for
/// every chunk it reads or writes, and polling those futures each time
/// (each locks a mutex) cost more than it decided.
struct Beside {
    flag: Arc<BesideFlag>,
    waker: std::task::Waker,
}

#[derive(Default)]
struct BesideFlag {
    woken: std::sync::atomic::AtomicBool,
    task: futures_util::task::AtomicWaker,
}

impl std::task::Wake for BesideFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl Beside {
    fn new() -> Beside {
        let flag = Arc::new(BesideFlag::default());
        // Polled on the first turn, to register.
        flag.woken.store(true, Ordering::Relaxed);
        Beside {
            waker: std::task::Waker::from(flag.clone()),
            flag,
        }
    }

    /// `poll_sides` (with the side waker) when a side woke the task since
    /// its last poll; `false` otherwise.
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        poll_sides: impl FnOnce(&mut Context<'_>) -> bool,
    ) -> bool {
        self.flag.task.register(cx.waker());
        if !self.flag.woken.swap(false, Ordering::AcqRel) {
            return false;
        }
        poll_sides(&mut Context::from_waker(&self.waker))
    }
}

/// Requests in flight on one connection, and when the last one ended.
struct Activity {
    active: AtomicUsize,
    /// Milliseconds from `start` to the end of the last request.
    last_done_ms: AtomicU64,
    start: Instant,
    /// Told whenever a request ends.
    ended: Notify,
}

impl Activity {
    fn new() -> Self {
        Activity {
            active: AtomicUsize::new(0),
            last_done_ms: AtomicU64::new(0),
            start: Instant::now(),
            ended: Notify::new(),
        }
    }

    fn begin(self: &Arc<Self>) -> ActiveGuard {
        self.active.fetch_add(1, Ordering::AcqRel);
        ActiveGuard(self.clone())
    }

    /// Resolves once no request has been in flight for `idle`.
    async fn idle_for(&self, idle: Duration) {
        loop {
            let ended = self.ended.notified();
            if self.active.load(Ordering::Acquire) > 0 {
                ended.await;
                continue;
            }
            let last = Duration::from_millis(self.last_done_ms.load(Ordering::Acquire));
            let deadline = self.start + last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = ended => {}
            }
        }
    }
}

/// Marks a request in flight until its response body is done (or dropped).
struct ActiveGuard(Arc<Activity>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let a = &self.0;
        let ms = a.start.elapsed().as_millis() as u64;
        a.last_done_ms.store(ms, Ordering::Release);
        a.active.fetch_sub(1, Ordering::AcqRel);
        a.ended.notify_one();
    }
}

/// A response body that keeps its request counted as in flight.
struct Tracked {
    inner: Body,
    _guard: ActiveGuard,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_with_no_request_in_flight() {
        let a = Arc::new(Activity::new());
        let guard = a.begin();
        let idle = a.idle_for(Duration::from_secs(120));
        tokio::pin!(idle);
        tokio::select! {
            () = &mut idle => panic!("idle while a request is in flight"),
            () = tokio::time::sleep(Duration::from_secs(600)) => {}
        }
        drop(guard);
        let t0 = Instant::now();
        idle.await;
        assert_eq!(
            t0.elapsed().as_secs(),
            120,
            "idle 120 s after the request ended"
        );
    }
}

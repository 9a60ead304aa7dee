//! Response bodies: one boxed type for everything a listener sends, a
//! channel-fed streaming body, and small JSON helpers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TryRecvError;

/// Error type of every body we produce.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every response a listener sends.
pub type Body = http_body_util::combinators::BoxBody<Bytes, BoxError>;

/// Frames in flight between a streaming task and the client connection.
///
/// Small on purpose: a slow client fills it and the task stops reading the
/// upstream, so back-pressure reaches the upstream socket instead of our
/// memory (at most this many frames, each one upstream read, are buffered).
pub const BODY_CHANNEL_FRAMES: usize = 8;

/// The future that writes into a [`ChannelBody`]'s sender, when the body
/// polls it itself (see [`ChannelBody::fed_by`]).
pub type Feed = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A body fed through a bounded channel: by a task of its own, or by a
/// [`Feed`] the body polls in its reader's task. An `Err` item aborts the
/// connection (the client sees a cut body rather than a clean end).
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
    /// Polled from `poll_frame`; the mutex only makes the body `Sync`
    /// (it is reached through `get_mut`, never locked).
    feed: Mutex<Option<Feed>>,
    /// Data went out since the body last said `Pending`.
    sent: bool,
    /// An error held back for one turn (see [`ChannelBody::poll_chunk`]).
    error: Option<BoxError>,
    /// Set by [`ChannelBody::fed_by`]: after the first data the body gives
    /// one turn back before it polls the feed (see there).
    flush_first: bool,
}

impl ChannelBody {
    /// A body and the sender that feeds it.
    pub fn channel() -> (mpsc::Sender<Result<Bytes, BoxError>>, ChannelBody) {
        let (tx, rx) = mpsc::channel(BODY_CHANNEL_FRAMES);
        (tx, ChannelBody::new(rx))
    }

    /// Wraps an existing receiver.
    pub fn new(rx: mpsc::Receiver<Result<Bytes, BoxError>>) -> Self {
        ChannelBody {
            rx,
            feed: Mutex::new(None),
            sent: false,
            error: None,
            flush_first: false,
        }
    }

    /// Has `feed` (the future holding the sender) run by the
    /// body's own polls, in the task that reads it, instead of in a task of
    /// its own: a chunk the upstream delivers wakes only the client's
    /// connection task, where a feeding task would wake itself and then
    /// the connection's, a cross-thread hand-off per chunk. Dropped before
    /// the feed finished (the client went away), the body closes the
    /// channel and hands the feed to a task, so it sees the closed sender
    /// at once and ends as it would have in a task of its own.
    ///
    /// The data already in the channel when the body is first polled (a
    /// stream's held frames, its first content among them) is given one
    /// turn of its own: the body says `Pending` (and wakes its task at
    /// once) before it polls the feed, so hyper writes the head and that
    /// data first, and the feed's work (a call's books, the next upstream
    /// read) comes after the first content left.
    pub fn fed_by(&mut self, feed: Feed) {
        *self.feed.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(feed);
        self.flush_first = true;
    }

    /// Receives the next chunk (for callers that consume the body themselves).
    pub async fn recv(&mut self) -> Option<Result<Bytes, BoxError>> {
        std::future::poll_fn(|cx| self.poll_chunk(cx)).await
    }

    /// The next chunk. An error right behind data is held back for one
    /// `Pending` (the task woken at once): hyper aborts the connection on a
    /// body error without writing what it buffered, and the head and the
    /// chunks before a break must reach the client (a fed body often has
    /// them all ready in one poll).
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        if let Some(e) = self.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        let next = self.poll_item(cx);
        match next {
            Poll::Ready(Some(Err(e))) if self.sent => {
                self.sent = false;
                self.error = Some(e);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(Some(Ok(_))) => {
                self.sent = true;
                next
            }
            Poll::Pending => {
                self.sent = false;
                next
            }
            other => other,
        }
    }

    fn poll_item(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, BoxError>>> {
        loop {
            match self.rx.try_recv() {
                Ok(item) => return Poll::Ready(Some(item)),
                Err(TryRecvError::Disconnected) => return Poll::Ready(None),
                Err(TryRecvError::Empty) => {}
            }
            if std::mem::take(&mut self.flush_first) && self.sent {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let slot = self.feed.get_mut().unwrap_or_else(|p| p.into_inner());
            let Some(feed) = slot.as_mut() else {
                return self.rx.poll_recv(cx);
            };
            match feed.as_mut().poll(cx) {
                // Done: what it sent is drained by the next turn, then the
                // dropped sender ends the body.
                Poll::Ready(()) => *slot = None,
                // Waiting on the upstream (or a full channel): whatever it
                // sent before is taken now; otherwise its own wakers bring
                // the reader back, so nothing else needs registering.
                Poll::Pending => {
                    return match self.rx.try_recv() {
                        Ok(item) => Poll::Ready(Some(item)),
                        Err(TryRecvError::Disconnected) => Poll::Ready(None),
                        Err(TryRecvError::Empty) => Poll::Pending,
                    }
                }
            }
        }
    }
}

impl Drop for ChannelBody {
    fn drop(&mut self) {
        let slot = self.feed.get_mut().unwrap_or_else(|p| p.into_inner());
        if let (Some(feed), Ok(rt)) = (slot.take(), tokio::runtime::Handle::try_current()) {
            self.rx.close();
            rt.spawn(feed);
        }
    }
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.poll_chunk(cx)
            .map(|item| item.map(|r| r.map(Frame::data)))
    }
}

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// A streaming body from a channel.
pub fn streaming(body: ChannelBody) -> Body {
    body.boxed()
}

/// A JSON response.
pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut resp = Response::new(full(bytes));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// An OpenAI-shaped error response (`{"error":{code,message,type}}`), which
/// SDKs and proxies parse.
pub fn error_response(code: ErrorCode, message: &str) -> Response<Body> {
    error_with_status(code.status(), code, message)
}

/// A shimgate error JSON with a status other than the code's own (the
/// demo's scripted providers answer as a provider would).
pub fn error_with_status(status: StatusCode, code: ErrorCode, message: &str) -> Response<Body> {
    json_response(
        status,
        &serde_json::json!({"error": {"code": code.as_str(), "message": message, "type": "shimgate_error"}}),
    )
}

/// The stable codes of the errors shimgate itself answers (the chain's
/// failure codes, `RATE_LIMIT`, `AUTO_ROUTES_EXHAUSTED`, …, are
/// `shimgate_shim_api::FailureCode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Malformed JSON or an unreadable body (400).
    BadRequest,
    /// A body over `limits.max_body_bytes` (413).
    RequestTooLarge,
    /// A method the path does not take (405).
    MethodNotAllowed,
    /// A return-leg call for an unknown or expired rid (410).
    RidGone,
    /// `POST /reload` with a bad file (400).
    ConfigInvalid,
    /// The compression proxy failed after the return leg took the request (502).
    CompressorFailed,
    /// The compressor's upstream could not be reached (502).
    UpstreamUnreachable,
    /// The compressor's upstream did not answer in time (504).
    UpstreamTimeout,
    /// The shim has no routes (502).
    NoRoutes,
    /// shimgate is shutting down (503).
    ShuttingDown,
    /// A demo provider refused a request it was scripted to refuse.
    DemoProviderRefused,
    /// A hand control named a shim the registry does not know (404).
    UnknownShim,
    /// A hand control named a route the shim does not have (404).
    UnknownRoute,
    /// An admin request whose `Host` is not a loopback or allowed name
    /// (DNS rebinding; 403).
    ForbiddenHost,
    /// A state-changing admin request from another origin (403).
    ForbiddenOrigin,
    /// An admin request on a remote listener without the admin token (401).
    Unauthorized,
    /// A path under the admin surface that names no endpoint (404).
    NotFound,
    /// A write to the config file that cannot be made: no file, a
    /// read-only one, or one that no longer matches what runs (409).
    ConfigConflict,
    /// A request to the capture listener that is not a proxy's (`CONNECT`
    /// or an absolute-form target): a web page's fetch, or a client that
    /// took the proxy for a server (400).
    NotAProxyRequest,
    /// The capture listener could not reach the host a client asked for
    /// (directly or through the upstream proxy), or it did not answer in
    /// time (502).
    HostUnreachable,
}

impl ErrorCode {
    /// The stable upper-snake spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::RequestTooLarge => "REQUEST_TOO_LARGE",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::RidGone => "RID_GONE",
            ErrorCode::ConfigInvalid => "CONFIG_INVALID",
            ErrorCode::CompressorFailed => "COMPRESSOR_FAILED",
            ErrorCode::UpstreamUnreachable => "UPSTREAM_UNREACHABLE",
            ErrorCode::UpstreamTimeout => "UPSTREAM_TIMEOUT",
            ErrorCode::NoRoutes => "NO_ROUTES",
            ErrorCode::ShuttingDown => "SHUTTING_DOWN",
            ErrorCode::DemoProviderRefused => "DEMO_PROVIDER_REFUSED",
            ErrorCode::UnknownShim => "UNKNOWN_SHIM",
            ErrorCode::UnknownRoute => "UNKNOWN_ROUTE",
            ErrorCode::ForbiddenHost => "FORBIDDEN_HOST",
            ErrorCode::ForbiddenOrigin => "FORBIDDEN_ORIGIN",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::ConfigConflict => "CONFIG_CONFLICT",
            ErrorCode::NotAProxyRequest => "NOT_A_PROXY_REQUEST",
            ErrorCode::HostUnreachable => "HOST_UNREACHABLE",
        }
    }

    /// The HTTP status it answers with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest | ErrorCode::ConfigInvalid | ErrorCode::NotAProxyRequest => {
                StatusCode::BAD_REQUEST
            }
            ErrorCode::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::RidGone => StatusCode::GONE,
            ErrorCode::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorCode::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::UnknownShim | ErrorCode::UnknownRoute | ErrorCode::NotFound => {
                StatusCode::NOT_FOUND
            }
            ErrorCode::ForbiddenHost | ErrorCode::ForbiddenOrigin => StatusCode::FORBIDDEN,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::ConfigConflict => StatusCode::CONFLICT,
            ErrorCode::CompressorFailed
            | ErrorCode::UpstreamUnreachable
            | ErrorCode::NoRoutes
            | ErrorCode::HostUnreachable
            | ErrorCode::DemoProviderRefused => StatusCode::BAD_GATEWAY,
        }
    }
}

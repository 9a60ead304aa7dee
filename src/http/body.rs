//! Response bodies: one boxed type for everything a listener sends, a
//! channel-fed streaming body, and small JSON helpers.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use tokio::sync::mpsc;

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

/// A body fed by a task through a bounded channel. An `Err` item aborts the
/// connection (the client sees a cut body rather than a clean end).
pub struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
}

impl ChannelBody {
    /// A body and the sender that feeds it.
    pub fn channel() -> (mpsc::Sender<Result<Bytes, BoxError>>, ChannelBody) {
        let (tx, rx) = mpsc::channel(BODY_CHANNEL_FRAMES);
        (tx, ChannelBody { rx })
    }

    /// Wraps an existing receiver.
    pub fn new(rx: mpsc::Receiver<Result<Bytes, BoxError>>) -> Self {
        ChannelBody { rx }
    }

    /// Receives the next chunk (for callers that consume the body themselves).
    pub async fn recv(&mut self) -> Option<Result<Bytes, BoxError>> {
        self.rx.recv().await
    }
}

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(bytes))) => Poll::Ready(Some(Ok(Frame::data(bytes)))),
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
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
    /// A hand control from a peer that is not on loopback (403).
    NotLoopback,
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
            ErrorCode::NotLoopback => "NOT_LOOPBACK",
        }
    }

    /// The HTTP status it answers with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest | ErrorCode::ConfigInvalid => StatusCode::BAD_REQUEST,
            ErrorCode::RequestTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::RidGone => StatusCode::GONE,
            ErrorCode::UpstreamTimeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorCode::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::UnknownShim | ErrorCode::UnknownRoute => StatusCode::NOT_FOUND,
            ErrorCode::NotLoopback => StatusCode::FORBIDDEN,
            ErrorCode::CompressorFailed
            | ErrorCode::UpstreamUnreachable
            | ErrorCode::NoRoutes
            | ErrorCode::DemoProviderRefused => StatusCode::BAD_GATEWAY,
        }
    }
}

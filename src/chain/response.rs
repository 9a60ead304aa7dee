//! What a call produces: a committed stream, an upstream answer passed on
//! whole, or the reason nothing could be sent (with the per-route list).

use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use serde_json::json;
use shimgate_shim_api::{Failure, FailureCode};

use super::state::RouteReport;
use crate::clock::iso8601;
use crate::http::body::{self, Body, ChannelBody, ErrorCode};

/// What a call produced.
pub enum ChainResponse {
    /// Committed: the answer streams from `body`.
    Stream {
        status: StatusCode,
        headers: HeaderMap,
        body: ChannelBody,
        route: String,
        /// The first route the call tried, when another one answered.
        switched_from: Option<String>,
    },
    /// An upstream answer passed on whole (an error that ends the call
    /// without switching, e.g. a context-window 400).
    Verbatim {
        status: StatusCode,
        headers: HeaderMap,
        /// The answer as the client of this call reads it (an HTTP error
        /// body verbatim, or the translated frames of an in-band error).
        body: Bytes,
        /// The failure it is, and the route that gave it.
        failure: Option<(Failure, String)>,
        /// The upstream's own bytes (for an in-band error; an HTTP error
        /// body is `body` itself).
        native: Option<Bytes>,
    },
    /// Nothing was sent: the call failed.
    Failed(ChainError),
}

impl ChainResponse {
    /// The HTTP response to hand the client as is.
    pub fn into_response(self) -> Response<Body> {
        match self {
            ChainResponse::Stream {
                status,
                headers,
                body,
                ..
            } => {
                let mut resp = Response::new(body::streaming(body));
                *resp.status_mut() = status;
                *resp.headers_mut() = headers;
                resp
            }
            ChainResponse::Verbatim {
                status,
                headers,
                body,
                ..
            } => {
                let mut resp = Response::new(body::full(body));
                *resp.status_mut() = status;
                *resp.headers_mut() = headers;
                resp
            }
            ChainResponse::Failed(e) => e.into_response(),
        }
    }
}

/// The provider's own answer that ended the last try of a call whose
/// routes all failed: what the agent reads instead of a JSON 502 its
/// client cannot show ("token expired, sign in again"). An in-band error
/// (a SOLO `event: error`, a qoder error envelope), in the agent's own
/// wire; or, on a wire whose client acts on them
/// ([`super::CallSpec::last_http_error`]), the provider's HTTP error.
#[derive(Debug, Clone)]
pub struct LastAnswer {
    /// The failure it was, and the route that gave it.
    pub failure: Failure,
    pub route: String,
    /// `None`: an in-band error, read in a 200 stream; `Some`: the
    /// provider's HTTP error, its status and headers.
    pub http: Option<(StatusCode, HeaderMap)>,
    /// The answer as the client of this call reads it (its translator's
    /// frames up to the error; an HTTP error's body as it came).
    pub translated: Bytes,
    /// The upstream's own bytes (up to the error; an HTTP error's body).
    pub native: Bytes,
}

/// Why a call produced no answer.
#[derive(Debug, Clone)]
pub enum ChainError {
    /// The shim has no routes configured.
    NoRoutes { shim: &'static str },
    /// Every route failed; `last` is the provider's own answer that ended
    /// the last try, when the agent is to read it ([`LastAnswer`]).
    Exhausted {
        reports: Vec<RouteReport>,
        last: Option<Box<LastAnswer>>,
    },
    /// The user's rules (disables, route windows) leave no route to try:
    /// each route with why, and when the first window opens again.
    NoActiveRoute {
        reports: Vec<RouteReport>,
        next_opening: Option<SystemTime>,
    },
    /// shimgate is shutting down.
    ShuttingDown,
    /// The client went away (nobody will read this).
    Aborted,
}

impl ChainError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            ChainError::NoRoutes { .. } => ErrorCode::NoRoutes.as_str(),
            ChainError::Exhausted { .. } => FailureCode::AutoRoutesExhausted.as_str(),
            ChainError::NoActiveRoute { .. } => FailureCode::NoActiveRoute.as_str(),
            ChainError::ShuttingDown => ErrorCode::ShuttingDown.as_str(),
            ChainError::Aborted => FailureCode::Aborted.as_str(),
        }
    }

    /// One line for logs and `lastError`.
    pub fn message(&self) -> String {
        match self {
            ChainError::NoRoutes { shim } => {
                let path = crate::registry::find(shim)
                    .map_or_else(|| format!("shims.{shim}.routes"), |f| f.routes_path());
                format!(
                    "no routes are configured for the {shim} shim: add [[{path}]] to the config"
                )
            }
            ChainError::Exhausted { reports, .. } => {
                let tried = reports.iter().filter(|r| r.tries > 0).count();
                let mut text = format!("all {} routes failed ({tried} tried)", reports.len());
                for (i, r) in reports.iter().enumerate() {
                    let reason = r
                        .reason
                        .clone()
                        .unwrap_or_else(|| r.code.map_or("?", FailureCode::as_str).to_string());
                    text.push_str(&format!(
                        "; {}) {} -> {} ({} ms, {} tries)",
                        i + 1,
                        r.route,
                        reason,
                        r.elapsed.as_millis(),
                        r.tries
                    ));
                }
                text
            }
            ChainError::NoActiveRoute {
                reports,
                next_opening,
            } => {
                let mut text = String::from("no route may be tried now (your rules leave none)");
                for (i, r) in reports.iter().enumerate() {
                    let reason = r.reason.as_deref().unwrap_or("?");
                    text.push_str(&format!("; {}) {} -> {reason}", i + 1, r.route));
                }
                if let Some(at) = next_opening {
                    text.push_str(&format!("; the next window opens at {}", iso8601(*at)));
                }
                text
            }
            ChainError::ShuttingDown => "shimgate is shutting down".to_string(),
            ChainError::Aborted => "the client went away".to_string(),
        }
    }

    /// As a `Failure` (for in-band error frames).
    pub fn failure(&self) -> Failure {
        let code = match self {
            ChainError::Exhausted { .. } => FailureCode::AutoRoutesExhausted,
            ChainError::NoActiveRoute { .. } => FailureCode::NoActiveRoute,
            ChainError::Aborted => FailureCode::Aborted,
            ChainError::NoRoutes { .. } | ChainError::ShuttingDown => FailureCode::Server,
        };
        Failure::new(code, self.message())
    }

    /// The 502 (or 503) JSON answer, listing each route; or, when the last
    /// try ended in the provider's own answer the agent reads
    /// ([`LastAnswer`]), that answer (an in-band error in a 200 stream of
    /// its wire, an HTTP error as it came; the route list is in
    /// `/status.chain.calls` and the log).
    pub fn into_response(self) -> Response<Body> {
        if let ChainError::Exhausted {
            last: Some(last), ..
        } = self
        {
            let mut resp = Response::new(body::full(last.translated));
            *resp.headers_mut() = super::sse_headers(&last.route);
            if let Some((status, headers)) = last.http {
                *resp.status_mut() = status;
                *resp.headers_mut() = headers;
                // The body's length is its own (it may have been cut at
                // the error bound); the route is named as on any answer.
                resp.headers_mut().remove(header::CONTENT_LENGTH);
                if let Ok(v) = HeaderValue::from_str(&last.route) {
                    resp.headers_mut().insert(super::ROUTE_HEADER, v);
                }
            }
            return resp;
        }
        let (status, document) = self.into_json();
        body::json_response(status, &document)
    }

    /// The status and JSON document of [`ChainError::into_response`].
    pub fn into_json(self) -> (StatusCode, serde_json::Value) {
        let status = match self {
            ChainError::ShuttingDown | ChainError::NoActiveRoute { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            _ => StatusCode::BAD_GATEWAY,
        };
        let routes: Vec<_> = match &self {
            ChainError::Exhausted { reports, .. } | ChainError::NoActiveRoute { reports, .. } => {
                reports.iter().map(RouteReport::to_json).collect()
            }
            _ => Vec::new(),
        };
        let mut document = json!({"error": {
            "code": self.code(),
            "message": self.message(),
            "type": "shimgate_error",
            "routes": routes,
        }});
        if let ChainError::NoActiveRoute {
            next_opening: Some(at),
            ..
        } = &self
        {
            document["error"]["nextOpening"] = json!(iso8601(*at));
        }
        (status, document)
    }
}

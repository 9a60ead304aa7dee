//! How a call builds its upstream request for each attempt.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::{HeaderMap, Request};
use shimgate_shim_api::{Failure, FailureCode};

use crate::config::Route;

/// The future an [`Outbound`] returns.
pub type OutboundFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Request<Bytes>, Failure>> + Send + 'a>>;

/// Builds the upstream request of one attempt on one route. Called again for
/// every attempt, so a codec can sign each retry afresh.
pub trait Outbound: Send + Sync + 'static {
    /// The request for `route` (full URL, headers, body).
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a>;
}

/// An outbound request that is the same for every attempt: method, the
/// request path appended to the route's base URL, headers and a body.
pub struct FixedOutbound {
    pub method: http::Method,
    /// Path and query, starting with `/`.
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Outbound for FixedOutbound {
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a> {
        Box::pin(async move {
            let uri = format!("{}{}", route.url, self.path_and_query);
            let mut req = Request::builder()
                .method(self.method.clone())
                .uri(&uri)
                .body(self.body.clone())
                .map_err(|e| {
                    Failure::new(
                        FailureCode::Unsupported,
                        format!("bad upstream URL {uri}: {e}"),
                    )
                })?;
            *req.headers_mut() = self.headers.clone();
            Ok(req)
        })
    }
}

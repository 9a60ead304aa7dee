//! Request bodies read whole, within the size limit: a failed attempt can
//! then be sent again to the next route, and a body over the limit is
//! refused with 413 before it is buffered.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use super::body::{self, Body, ErrorCode};

/// Why a request body could not be read.
pub enum BodyError {
    TooLarge(u64),
    Broken(String),
}

impl BodyError {
    /// The client-facing answer: 413 or 400.
    pub fn into_response(self) -> Response<Body> {
        match self {
            BodyError::TooLarge(limit) => body::error_response(
                ErrorCode::RequestTooLarge,
                &format!("request body is over the {limit}-byte limit (limits.max_body_bytes)"),
            ),
            BodyError::Broken(why) => body::error_response(
                ErrorCode::BadRequest,
                &format!("could not read the request body: {why}"),
            ),
        }
    }
}

/// Reads a request body whole, refusing more than `limit` bytes. Bodies are
/// buffered so a failed attempt can be sent again to the next route.
pub async fn read_body(
    body: Incoming,
    declared: Option<u64>,
    limit: u64,
) -> Result<Bytes, BodyError> {
    if declared.is_some_and(|n| n > limit) {
        return Err(BodyError::TooLarge(limit));
    }
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, cap).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge(limit)),
        Err(e) => Err(BodyError::Broken(e.to_string())),
    }
}

/// The declared `content-length`, if any.
pub fn content_charsgth<T>(req: &Request<T>) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

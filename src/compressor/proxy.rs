//! One request through the reference compressor: chat requests are
//! rewritten, everything else is forwarded unchanged, and answers stream
//! back chunk by chunk as the upstream sends them.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use tracing::{debug, warn};

use super::rewrite::{self, Policy};
use super::{Stats, FIRST_BYTE_TIMEOUT, MAX_BODY_BYTES};
use crate::http::body::ErrorCode;
use crate::http::body::{self, Body, BoxError};
use crate::http::client::HttpClient;
use crate::http::error_chain;
use crate::http::headers;
use crate::http::read::read_body;

/// What every connection of one compressor shares.
pub(super) struct Shared {
    /// Upstream base URL without a trailing slash.
    pub upstream: String,
    pub policy: Policy,
    pub stats: Arc<Stats>,
    pub client: HttpClient,
}

/// Whether a path is one the compressor rewrites (any prefix, so the rid
/// segment of `/{shim}/{rid}/chat/completions` and a `/v1` both pass).
fn is_chat(path: &str) -> bool {
    path.trim_end_matches('/').ends_with("/chat/completions")
}

/// Handles one request; never fails (errors become JSON answers).
pub(super) async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    shared.stats.requests.fetch_add(1, Ordering::Relaxed);
    let (parts, incoming) = req.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let bytes = match read_body(incoming, declared, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            shared.stats.rejected.fetch_add(1, Ordering::Relaxed);
            return e.into_response();
        }
    };
    let rewrites = !shared.policy.pass_through;
    let body = if rewrites && parts.method == Method::POST && is_chat(parts.uri.path()) {
        match prepare(&shared, bytes) {
            Ok(b) => b,
            Err(why) => {
                shared.stats.rejected.fetch_add(1, Ordering::Relaxed);
                return body::error_response(ErrorCode::BadRequest, &why);
            }
        }
    } else {
        bytes
    };
    forward(&shared, parts, body).await
}

/// Parses and rewrites a chat request; `Err` is the reason for a 400.
fn prepare(shared: &Shared, bytes: Bytes) -> Result<Bytes, String> {
    let mut value: Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("the request body is not JSON: {e}"))?;
    if !value.is_object() {
        return Err("the request body is JSON but not an object".into());
    }
    let stats = &shared.stats;
    let Some(r) = rewrite::rewrite(&mut value, &shared.policy) else {
        stats.untouched.fetch_add(1, Ordering::Relaxed);
        debug!("side request or no messages: forwarded untouched");
        return Ok(bytes);
    };
    stats.rewritten.fetch_add(1, Ordering::Relaxed);
    if r.summarised > 0 {
        stats.compressed.fetch_add(1, Ordering::Relaxed);
    }
    stats
        .chars_before
        .fetch_add(r.before as u64, Ordering::Relaxed);
    stats
        .chars_after
        .fetch_add(r.after as u64, Ordering::Relaxed);
    debug!(
        before = r.before,
        after = r.after,
        summarised = r.summarised,
        "rewrote a chat request"
    );
    serde_json::to_vec(&value)
        .map(Bytes::from)
        .map_err(|e| format!("the rewritten body could not be written: {e}"))
}

/// Sends the request to `upstream + path?query` and relays the answer.
async fn forward(shared: &Shared, parts: http::request::Parts, body: Bytes) -> Response<Body> {
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path_and_query}", shared.upstream);
    let mut req = match Request::builder()
        .method(parts.method.clone())
        .uri(&url)
        .body(body)
    {
        Ok(r) => r,
        Err(e) => {
            return body::error_response(
                ErrorCode::BadRequest,
                &format!("cannot forward to {url}: {e}"),
            )
        }
    };
    *req.headers_mut() = headers::for_upstream(&parts.headers);
    let sent = tokio::time::timeout(FIRST_BYTE_TIMEOUT, shared.client.request(req)).await;
    let resp = match sent {
        Ok(Ok(resp)) => resp,
        Ok(Err(e)) => {
            shared.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
            let why = format!("the upstream {url} failed: {}", error_chain(&e));
            warn!("{why}");
            return body::error_response(ErrorCode::UpstreamUnreachable, &why);
        }
        Err(_) => {
            shared.stats.upstream_errors.fetch_add(1, Ordering::Relaxed);
            let why = format!(
                "the upstream {url} sent no answer within {} s",
                FIRST_BYTE_TIMEOUT.as_secs()
            );
            warn!("{why}");
            return body::error_response(ErrorCode::UpstreamTimeout, &why);
        }
    };
    let (mut head, incoming) = resp.into_parts();
    headers::strip_hop_by_hop(&mut head.headers);
    // hyper derives the length from the body again; a stale one would be wrong
    // if the two ever disagreed.
    head.headers.remove(header::CONTENT_LENGTH);
    // The upstream's body yields each read as it comes off the socket, so
    // SSE frames reach the client as the upstream writes them, never
    // collected.
    let streamed = incoming.map_err(|e| Box::new(e) as BoxError).boxed();
    Response::from_parts(head, streamed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_paths_are_recognised_with_any_prefix() {
        assert!(is_chat("/trae/ab12/chat/completions"));
        assert!(is_chat("/v1/chat/completions/"));
        assert!(is_chat("/chat/completions"));
        assert!(!is_chat("/v1/models"));
        assert!(!is_chat("/v1/chat/completions/x"));
    }
}

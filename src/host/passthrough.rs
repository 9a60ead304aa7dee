//! Requests the shims do not take over go upstream byte for byte through
//! the chain with the shim's routes, and their answers come back as they
//! are (the ingress also uses this for a request it cannot read).

use std::sync::Arc;

use bytes::Bytes;
use http::Response;

use crate::app::App;
use crate::chain::{self, is_housekeeping, CallSpec, FixedOutbound};
use crate::http::body::Body;
use crate::http::headers;

/// Sends a request (already read) upstream through the chain unchanged and
/// passes the answer back unchanged.
pub async fn forward_raw(
    app: &App,
    shim: &'static str,
    kind: &'static str,
    parts: http::request::Parts,
    body: Bytes,
    received: std::time::Instant,
) -> Response<Body> {
    let config = match parts.extensions.get::<super::RunsOn>() {
        Some(super::RunsOn(config)) => config.clone(),
        None => app.config(),
    };
    let housekeeping = is_housekeeping(&body);
    let agent = Arc::new(parts.headers);
    let idempotent = !matches!(parts.method, http::Method::POST | http::Method::PATCH);
    let outbound = Arc::new(FixedOutbound {
        method: parts.method,
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        headers: headers::for_upstream(&agent),
        body,
    });
    let mut spec = CallSpec::new(&config, shim, kind, outbound, received);
    spec.housekeeping = housekeeping;
    spec.secrets = headers::Secrets::of(agent);
    spec.passthrough = true;
    spec.idempotent = idempotent;
    let resp = chain::call(&app.chain_ctx(), spec).await;
    if let chain::ChainResponse::Failed(e) = &resp {
        app.shim_stats(shim).error(e.message());
    }
    resp.into_response()
}

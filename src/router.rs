//! Request dispatch on a shim listener: `/status`, then the shims' own
//! paths, then pass-through of everything else through the chain.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::app::App;
use crate::body::{self, Body};
use crate::chain::{self, CallSpec, FixedOutbound};
use crate::headers;
use crate::host;
use crate::status;

/// Handles one request on the listener of `shim`.
pub async fn handle(app: Arc<App>, shim: &'static str, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path();
    match (req.method(), path) {
        (&Method::GET, "/status") => {
            return body::json_response(StatusCode::OK, &status::document(&app));
        }
        (&Method::GET, "/metrics") => {
            let mut resp = Response::new(body::full(crate::metrics::render(&app)));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            return resp;
        }
        (&Method::POST, "/reload") => return reload(&app),
        _ => {}
    }
    if let Some((name, rid)) = host::return_leg_path(path) {
        if let Some(h) = app.host(name) {
            let rid = rid.to_string();
            return h.return_leg(app, rid, req).await;
        }
    }
    let carried = host::carried_rid(path, req.uri().query(), req.headers()).or_else(|| {
        // A proxy that forwards only `Authorization` on its own calls
        // (context-guardian's summary): the newest live rid of that agent.
        let identity = host::proxy_identity(path, req.headers())?;
        app.rids.newest_for(identity).map(|e| e.rid.clone())
    });
    if let Some(rid) = carried {
        // A proxy that compresses one fixed path: the rid names the shim.
        let shim_of_rid = app.rids.get(&rid).map(|e| e.shim);
        return match shim_of_rid.and_then(|name| app.host(name)) {
            Some(h) => h.return_leg(app, rid, req).await,
            None => body::error_response(
                StatusCode::GONE,
                "RID_GONE",
                &format!(
                    "rid {rid} is unknown or expired (entries live 120 s, the newest 256 are kept)"
                ),
            ),
        };
    }
    let path_and_query = req.uri().path_and_query().map_or(path, |p| p.as_str());
    if let Some(h) = app.host(shim) {
        if h.is_inference(req.method().as_str(), path_and_query) {
            return h.ingress(app, req).await;
        }
    }
    passthrough(app, shim, req).await
}

/// `POST /reload`: re-reads the config file; a bad file is refused with its
/// key-path error and the running config stays.
fn reload(app: &App) -> Response<Body> {
    match app.reload() {
        Ok(config) => {
            tracing::info!("config reloaded (POST /reload)");
            body::json_response(
                StatusCode::OK,
                &serde_json::json!({"ok": true, "path": config.source.as_ref().map(|p| p.display().to_string())}),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "config reload rejected; the old config stays");
            body::error_response(StatusCode::BAD_REQUEST, "CONFIG_INVALID", &e.to_string())
        }
    }
}

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
                StatusCode::PAYLOAD_TOO_LARGE,
                "REQUEST_TOO_LARGE",
                &format!("request body is over the {limit}-byte limit (limits.max_body_bytes)"),
            ),
            BodyError::Broken(why) => body::error_response(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
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
pub fn content_length<T>(req: &Request<T>) -> Option<u64> {
    req.headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Whether a JSON body marks a housekeeping call (`purpose` compaction or
/// session-title): those pass straight through without failover.
pub fn is_housekeeping(body: &[u8]) -> bool {
    if memchr::memmem::find(body, b"\"purpose\"").is_none() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("purpose").and_then(|p| p.as_str()).map(str::to_owned))
        .is_some_and(|p| p == "compaction" || p == "session-title")
}

/// Forwards a request the shim does not intercept, byte for byte, through
/// the chain with the shim's routes.
pub async fn passthrough(
    app: Arc<App>,
    shim: &'static str,
    req: Request<Incoming>,
) -> Response<Body> {
    let received = std::time::Instant::now();
    let limit = app.config().max_body_bytes;
    let declared = content_length(&req);
    let (parts, incoming) = req.into_parts();
    let bytes = match read_body(incoming, declared, limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let span = tracing::info_span!("passthrough", shim);
    let forward = forward_raw(&app, shim, "passthrough", parts, bytes, received);
    tracing::Instrument::instrument(forward, span).await
}

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
    let config = app.config();
    let housekeeping = is_housekeeping(&body);
    let outbound = Arc::new(FixedOutbound {
        method: parts.method,
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
        headers: headers::for_upstream(&parts.headers),
        body,
    });
    let mut spec = CallSpec::new(&config, shim, kind, outbound, received);
    spec.housekeeping = housekeeping;
    let resp = chain::call(&app.chain_ctx(), spec).await;
    if let chain::ChainResponse::Failed(e) = &resp {
        app.shim_stats(shim).error(e.message());
    }
    resp.into_response()
}

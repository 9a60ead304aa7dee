//! Request dispatch on a shim listener: the admin surface (answered by
//! shimgate itself behind the trust rules, whatever the method), then the
//! return legs (any shim's, on every listener), then the shim's own
//! inference path, then pass-through of everything else through the chain.

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;

use crate::admin;
use crate::app::App;
use crate::host::{self, passthrough, ResponseFuture, Shims};
use crate::http::body::ErrorCode;
use crate::http::body::{self, Body};
use crate::http::read::{content_length, read_body};

/// Handles one request on the listener of `shim`. The branch is chosen
/// here, before any await, and each branch's future is boxed on its own:
/// one `async fn` over every branch was as large as the largest (the
/// pass-through and the admin surface, 2–3 KiB), allocated and copied for
/// every request, an inference call's included, which then boxed its own
/// handler again (`benches/README.md`, "2026-12-03 (09:30 UTC)").
pub fn handle(
    app: Arc<App>,
    shims: Arc<Shims>,
    shim: &'static str,
    listener: admin::Listener,
    req: Request<Incoming>,
) -> ResponseFuture {
    if let Some(refused) = not_servable(&req) {
        return answered(refused);
    }
    let path = req.uri().path();
    if admin::is_admin_path(path) {
        return Box::pin(async move { admin::serve(&app, &shims, listener, req).await });
    }
    if let Some((name, rid)) = host::return_leg_path(path) {
        if let Some(h) = shims.get(name) {
            let rid = rid.to_string();
            return h.return_leg(app, rid, req);
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
        return match shim_of_rid.and_then(|name| shims.get(name)) {
            Some(h) => h.return_leg(app, rid, req),
            None => answered(body::error_response(
                ErrorCode::RidGone,
                &format!(
                    "rid {rid} is unknown or expired (entries live 120 s, the newest 256 are kept)"
                ),
            )),
        };
    }
    let path_and_query = req.uri().path_and_query().map_or(path, |p| p.as_str());
    // The listener's shim and the shims that ride on it (qoder's
    // model-server wire on the qoder listener).
    for served in crate::registry::served_by(shim) {
        if let Some(h) = shims.get(served.name) {
            if h.is_inference(req.method().as_str(), path_and_query) {
                return h.ingress(app, req);
            }
        }
    }
    Box::pin(forward(app, shim, req))
}

/// An answer known before any await.
fn answered(response: Response<Body>) -> ResponseFuture {
    Box::pin(std::future::ready(response))
}

/// Requests no route can take, answered at once: `CONNECT` (shimgate is
/// not a forward proxy; passed on, it reached the route as a tunnel
/// request and the client got a closed connection) and a request target
/// that is not a path (`OPTIONS *`: appended to a route's base URL it made
/// `http://host:port*`, which connected to port 80 of the route's host).
/// An absolute-form target (`GET http://other.example/x`) is served: only
/// its path is used, on the configured routes.
fn not_servable<T>(req: &Request<T>) -> Option<Response<Body>> {
    if req.method() == http::Method::CONNECT {
        return Some(body::error_response(
            ErrorCode::MethodNotAllowed,
            "CONNECT is not served: shimgate is a gateway to its configured routes, not a forward proxy",
        ));
    }
    let path = req.uri().path();
    if !path.starts_with('/') {
        return Some(body::error_response(
            ErrorCode::BadRequest,
            &format!(
                "request target {:?} is not an origin-form path (it must start with /)",
                path.chars().take(64).collect::<String>()
            ),
        ));
    }
    None
}

/// Forwards a request the shim does not intercept, byte for byte, through
/// the chain with the shim's routes.
async fn forward(app: Arc<App>, shim: &'static str, req: Request<Incoming>) -> Response<Body> {
    let received = std::time::Instant::now();
    let limit = app.config().max_body_bytes;
    let declared = content_length(&req);
    let (parts, incoming) = req.into_parts();
    let bytes = match read_body(incoming, declared, limit).await {
        Ok(b) => b,
        Err(e) => return e.into_response_of(Some(crate::http::read::MAX_BODY_KEY)),
    };
    let span = tracing::info_span!("passthrough", shim);
    let forward = passthrough::forward_raw(&app, shim, "passthrough", parts, bytes, received);
    tracing::Instrument::instrument(forward, span).await
}

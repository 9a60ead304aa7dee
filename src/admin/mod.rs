//! The operator's endpoints on every listener: `GET /status`, `GET
//! /metrics`, `POST /reload`, and the route hand controls (`POST
//! /routes/…`, [`routes`]). They read the state the rest keeps and change
//! only the config and the hand-set route state.

pub mod metrics;
pub mod reload;
pub mod routes;
pub mod status;

use http::{Method, Response, StatusCode};

use crate::app::App;
use crate::host::Shims;
use crate::http::body::{self, Body, ErrorCode};

/// The admin paths and the method each takes: any other method on them is
/// `405`, never passed upstream (`HEAD` is served as `GET`).
const ADMIN_PATHS: [(&str, Method); 3] = [
    ("/status", Method::GET),
    ("/metrics", Method::GET),
    ("/reload", Method::POST),
];

/// The answer to an admin request, or `None` when the request is not one.
pub fn handle(app: &App, shims: &Shims, method: &Method, path: &str) -> Option<Response<Body>> {
    let (path, wants) = ADMIN_PATHS.iter().find(|(p, _)| *p == path)?;
    let as_get = method == Method::HEAD && *wants == Method::GET;
    if method != wants && !as_get {
        let mut resp = body::error_response(
            ErrorCode::MethodNotAllowed,
            &format!("{path} takes {wants}, not {method}"),
        );
        let allow = if *wants == Method::GET {
            "GET, HEAD"
        } else {
            "POST"
        };
        resp.headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static(allow));
        return Some(resp);
    }
    match *path {
        "/status" => Some(body::json_response(
            StatusCode::OK,
            &status::document(app, shims),
        )),
        "/metrics" => {
            let mut resp = Response::new(body::full(metrics::render(app, shims)));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            Some(resp)
        }
        _ => Some(reload::reload(app)),
    }
}

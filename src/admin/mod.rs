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
use crate::http::body::{self, Body};

/// The answer to an admin request, or `None` when the request is not one.
pub fn handle(app: &App, shims: &Shims, method: &Method, path: &str) -> Option<Response<Body>> {
    match (method, path) {
        (&Method::GET, "/status") => Some(body::json_response(
            StatusCode::OK,
            &status::document(app, shims),
        )),
        (&Method::GET, "/metrics") => {
            let mut resp = Response::new(body::full(metrics::render(app, shims)));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            Some(resp)
        }
        (&Method::POST, "/reload") => Some(reload::reload(app)),
        _ => None,
    }
}

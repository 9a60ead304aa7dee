//! The admin surface on every listener (DESIGN §7, §8, §9): `GET /status`,
//! `GET /metrics`, `GET /switches`, the panel (`GET /ui`, [`ui`]), `POST
//! /reload`, the route hand controls (`POST /routes/…`, [`routes`]) and
//! the config writes (`POST /routes/{shim}/order`, `POST /ordering`,
//! [`config_write`]). They read the state the rest keeps and change only
//! the config and the hand-set route state.
//!
//! Every request under an admin prefix is answered here, whatever its
//! method or path: first the trust rules ([`trust`]: Host, token, Origin),
//! then the endpoint table; an unknown path is a local `404`, `OPTIONS` a
//! local `204` with `Allow`, a wrong method `405`. Nothing under these
//! prefixes ever reaches an upstream, and no answer grants CORS.

pub mod config_write;
pub mod metrics;
pub mod reload;
pub mod routes;
pub mod status;
pub mod trust;
pub mod ui;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use crate::app::admin::Refused;
use crate::app::App;
use crate::host::Shims;
use crate::http::body::{self, Body, ErrorCode};
use routes::Control;

/// The path prefixes of the admin surface: each one itself and everything
/// below it (`/routes/…`).
const PREFIXES: [&str; 7] = [
    "/status",
    "/metrics",
    "/switches",
    "/ui",
    "/reload",
    "/routes",
    "/ordering",
];

/// Whether `path` is on the admin surface (answered here, never upstream).
pub fn is_admin_path(path: &str) -> bool {
    PREFIXES.iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// The listener a request came to, as the trust rules need it.
#[derive(Debug, Clone, Copy)]
pub struct Listener {
    /// Bound to a non-loopback address (`allow_remote`): the token is
    /// required for every admin request.
    pub remote: bool,
}

/// One admin endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Status,
    Metrics,
    Switches,
    Reload,
    Ordering,
    Ui(ui::Asset),
    Control(Control),
}

impl Endpoint {
    /// The endpoint at `path`, or `None` for a path under a prefix that
    /// names none.
    fn at(path: &str) -> Option<Endpoint> {
        match path {
            "/status" => Some(Endpoint::Status),
            "/metrics" => Some(Endpoint::Metrics),
            "/switches" => Some(Endpoint::Switches),
            "/reload" => Some(Endpoint::Reload),
            "/ordering" => Some(Endpoint::Ordering),
            _ if path.starts_with("/ui") => ui::Asset::at(path).map(Endpoint::Ui),
            _ => routes::parse(path).map(Endpoint::Control),
        }
    }

    /// The method it takes (`HEAD` is served as `GET`).
    fn method(&self) -> Method {
        match self {
            Endpoint::Status | Endpoint::Metrics | Endpoint::Switches | Endpoint::Ui(_) => {
                Method::GET
            }
            Endpoint::Reload | Endpoint::Ordering | Endpoint::Control(_) => Method::POST,
        }
    }
}

/// Answers a request on the admin surface ([`is_admin_path`]).
pub async fn serve(
    app: &App,
    shims: &Shims,
    listener: Listener,
    req: Request<Incoming>,
) -> Response<Body> {
    let config = app.config();
    let path = req.uri().path().to_string();
    let asked = trust::Asked {
        method: req.method(),
        headers: req.headers(),
        query: req.uri().query(),
        panel: path == "/ui",
        tls: req.extensions().get::<crate::tls::OverTls>().is_some(),
    };
    let token = app.admin.token();
    let guard = trust::Guard {
        remote: listener.remote,
        allowed_hosts: &config.admin.allowed_hosts,
        token: token.as_ref(),
    };
    let grant = match trust::check(asked, guard) {
        Ok(grant) => grant,
        Err(refusal) => return refused(app, req.method(), &path, refusal),
    };
    let mut resp = answer(app, shims, &path, req).await;
    let headers = resp.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if let Some(cookie) = grant
        .set_cookie
        .and_then(|t| HeaderValue::from_str(&trust::token_cookie(&t)).ok())
    {
        headers.insert(header::SET_COOKIE, cookie);
    }
    resp
}

/// The endpoint's answer, after the trust rules let the request through.
async fn answer(app: &App, shims: &Shims, path: &str, req: Request<Incoming>) -> Response<Body> {
    let Some(endpoint) = Endpoint::at(path) else {
        return body::error_response(
            ErrorCode::NotFound,
            &format!("{path} is not an admin endpoint of shimgate (README: Paths)"),
        );
    };
    let wants = endpoint.method();
    let allow = if wants == Method::GET {
        "GET, HEAD, OPTIONS"
    } else {
        "POST, OPTIONS"
    };
    let method = req.method().clone();
    if method == Method::OPTIONS {
        let mut resp = Response::new(body::full(""));
        *resp.status_mut() = StatusCode::NO_CONTENT;
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        return resp;
    }
    if method != wants && !(method == Method::HEAD && wants == Method::GET) {
        let mut resp = body::error_response(
            ErrorCode::MethodNotAllowed,
            &format!("{path} takes {wants}, not {method}"),
        );
        resp.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(allow));
        return resp;
    }
    match endpoint {
        Endpoint::Status => body::json_response(StatusCode::OK, &status::document(app, shims)),
        Endpoint::Metrics => {
            let mut resp = Response::new(body::full(metrics::render(app, shims)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            resp
        }
        Endpoint::Switches => {
            let session = req
                .uri()
                .query()
                .and_then(|q| trust::query_value(q, "session"));
            let switches = app.chain.switches(session.as_deref());
            body::json_response(
                StatusCode::OK,
                &serde_json::json!({"session": session, "switches": switches}),
            )
        }
        Endpoint::Reload => reload::reload(app),
        Endpoint::Ordering => config_write::mode(app, req.into_body()).await,
        Endpoint::Ui(asset) => asset.response(),
        Endpoint::Control(control) => routes::handle(app, control, req.into_body()).await,
    }
}

/// The answer to a request the trust rules refused: counted, logged
/// (never with a header value), and no data.
fn refused(app: &App, method: &Method, path: &str, refusal: trust::Refusal) -> Response<Body> {
    app.admin.refused(refusal.why);
    let code = match refusal.why {
        Refused::Host => ErrorCode::ForbiddenHost,
        Refused::Origin => ErrorCode::ForbiddenOrigin,
        Refused::Token => ErrorCode::Unauthorized,
    };
    tracing::warn!(%method, path, code = code.as_str(), "admin request refused");
    let mut resp = body::error_response(code, &refusal.message);
    if refusal.why == Refused::Token {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"shimgate admin\""),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_prefixes_cover_their_subpaths_only() {
        for p in [
            "/status",
            "/status/x",
            "/metrics",
            "/switches",
            "/ui",
            "/ui/panel.js",
            "/reload",
            "/routes",
            "/routes/reset",
            "/routes/trae/a/disable",
            "/ordering",
        ] {
            assert!(is_admin_path(p), "{p}");
        }
        for p in [
            "/statusx",
            "/uix",
            "/api/status",
            "/trae/rid/chat/completions",
            "/api/agent/v3/llm_utils_chat",
            "/",
            "//status",
        ] {
            assert!(!is_admin_path(p), "{p}");
        }
    }

    #[test]
    fn endpoints_take_one_method() {
        assert_eq!(Endpoint::at("/status"), Some(Endpoint::Status));
        assert_eq!(Endpoint::at("/status/x"), None);
        assert_eq!(Endpoint::at("/routes"), None);
        assert_eq!(
            Endpoint::at("/reload").map(|e| e.method()),
            Some(Method::POST)
        );
        assert_eq!(
            Endpoint::at("/routes/reset"),
            Some(Endpoint::Control(Control::Reset))
        );
    }
}

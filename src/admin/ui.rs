//! The panel (`docs/panel.md`): one page on every listener, its HTML, CSS and
//! script inside the binary (`ui/`), loading nothing from any other
//! origin (its Content-Security-Policy says so to the browser too) and
//! never framed by another page. The script reads `/status` and
//! `/switches` and posts to the endpoints curl uses; it adds no behaviour
//! (it redraws from a POST's answer at once, writes every time in the
//! browser's zone, and keeps its words in one table per language).

use http::{header, HeaderValue, Response};

use crate::http::body::{self, Body};

const HTML: &str = include_str!("ui/panel.html");
const CSS: &str = include_str!("ui/panel.css");
const JS: &str = include_str!("ui/panel.js");

/// Only this origin, for everything; no frames, no forms, no plugins.
const POLICY: &str =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One file of the panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    Page,
    Style,
    Script,
}

impl Asset {
    /// The asset at `path`, or `None` (a local 404).
    pub fn at(path: &str) -> Option<Asset> {
        match path {
            "/ui" => Some(Asset::Page),
            "/ui/panel.css" => Some(Asset::Style),
            "/ui/panel.js" => Some(Asset::Script),
            _ => None,
        }
    }

    /// The asset's answer.
    pub fn response(self) -> Response<Body> {
        let (text, kind) = match self {
            Asset::Page => (HTML, "text/html; charset=utf-8"),
            Asset::Style => (CSS, "text/css; charset=utf-8"),
            Asset::Script => (JS, "text/javascript; charset=utf-8"),
        };
        let mut resp = Response::new(body::full(text));
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(POLICY),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        resp
    }

    /// The panel's weight: bytes of HTML, CSS and script together.
    pub fn weight() -> usize {
        HTML.len() + CSS.len() + JS.len()
    }
}

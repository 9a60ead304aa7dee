//! One request to the capture listener, by its target: `CONNECT
//! host:port` (decrypted, or a tunnel), an absolute-form target
//! (`GET http://host/…`: served as inside a tunnel to that host), or
//! anything else, refused (`400 NOT_A_PROXY_REQUEST`, no CORS: an
//! origin-form `GET /path` is what a web page's fetch to this port is; no
//! page can send `CONNECT` or an absolute-form target).

use std::sync::{Arc, Mutex};

use http::{Method, Request, Response};
use hyper::body::Incoming;

use super::forward::Onward;
use super::intercept;
use super::route::Target;
use super::tunnel;
use super::Ctx;
use crate::app::capture::Taken;
use crate::http::body::{self, Body, ErrorCode};
use crate::http::client::proxy::is_loopback;

/// What a request to the capture listener asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// `CONNECT host:port`.
    Connect { host: String, port: u16 },
    /// An absolute-form target.
    Absolute(Target),
    /// Not a proxy request, with why.
    NotProxy(String),
}

/// Reads what `req` asks for from its method and target.
pub fn asked<T>(req: &Request<T>) -> Asked {
    let uri = req.uri();
    let host_of = |a: &http::uri::Authority| {
        let h = a.host();
        h.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(h)
            .to_ascii_lowercase()
    };
    if req.method() == Method::CONNECT {
        return match (uri.authority(), uri.authority().and_then(|a| a.port_u16())) {
            (Some(a), Some(port)) if !a.host().is_empty() && port != 0 => Asked::Connect {
                host: host_of(a),
                port,
            },
            _ => Asked::NotProxy(format!(
                "CONNECT needs a host:port target, got {:?}",
                shown(&uri.to_string())
            )),
        };
    }
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        Some(other) => {
            return Asked::NotProxy(format!(
                "the scheme {:?} is not proxied (http:// and https:// only)",
                shown(other)
            ))
        }
        None => {
            return Asked::NotProxy(format!(
                "this is shimgate's capture listener, an HTTP proxy: it takes CONNECT and absolute-form requests (set it as a client's HTTPS_PROXY), not {} {}; shimgate's own pages are on its shim listeners",
                req.method(),
                shown(&uri.to_string())
            ))
        }
    };
    match uri.authority() {
        Some(a) if !a.host().is_empty() => Asked::Absolute(Target {
            tls,
            host: host_of(a),
            port: a.port_u16().unwrap_or(if tls { 443 } else { 80 }),
        }),
        _ => Asked::NotProxy("an absolute-form target needs a host".to_owned()),
    }
}

/// A target as an error text may show it: printable, at most 100 characters.
fn shown(text: &str) -> String {
    text.chars().filter(|c| !c.is_control()).take(100).collect()
}

/// The onward connection of a client connection's absolute-form requests
/// (one host at a time: a request for another replaces it).
#[derive(Clone, Default)]
pub struct Onwards(Arc<Mutex<Option<Arc<Onward>>>>);

impl Onwards {
    fn for_target(&self, target: &Target) -> Arc<Onward> {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(o) if o.target == *target => o.clone(),
            _ => {
                let o = Arc::new(Onward::new(target.clone()));
                *slot = Some(o.clone());
                o
            }
        }
    }
}

/// Answers one request to the capture listener.
pub async fn handle(ctx: Ctx, onwards: Onwards, req: Request<Incoming>) -> Response<Body> {
    match asked(&req) {
        Asked::Connect { host, port } => connect(&ctx, req, host, port).await,
        Asked::Absolute(target) => {
            let config = ctx.app.config();
            let listed = config.capture.intercepts(&target.host);
            ctx.app.capture.absolute(&target.host, listed);
            let onward = onwards.for_target(&target);
            if listed && !is_loopback(&target.host) {
                intercept::on_host(&ctx, &target, &onward, req).await
            } else {
                onward.send(&ctx, req).await
            }
        }
        Asked::NotProxy(why) => {
            ctx.app.capture.not_a_proxy_request();
            // The body is left unread: the connection closes after this
            // answer rather than read what a page may send.
            let mut resp = body::error_response(ErrorCode::NotAProxyRequest, &why);
            resp.headers_mut().insert(
                http::header::CONNECTION,
                http::HeaderValue::from_static("close"),
            );
            resp
        }
    }
}

/// A `CONNECT`: decrypted when the host is listed, not loopback, not
/// tunnelled after refusals, and the CA may sign for it; else a tunnel.
async fn connect(ctx: &Ctx, req: Request<Incoming>, host: String, port: u16) -> Response<Body> {
    if is_loopback(&host) {
        return tunnel::open(ctx, req, &host, port, Taken::Loopback).await;
    }
    let config = ctx.app.config();
    if !config.capture.intercepts(&host) || ctx.app.capture.tripped(&host) {
        return tunnel::open(ctx, req, &host, port, Taken::Tunnelled).await;
    }
    if let Err(why) = ctx.app.tls.can_sign(&host).await {
        let why = format!("not decrypted, tunnelled: {why}");
        tracing::warn!(host, "capture: {why}");
        ctx.app.capture.failed(&host, true, why);
        return tunnel::open(ctx, req, &host, port, Taken::Tunnelled).await;
    }
    let target = Target {
        tls: true,
        host,
        port,
    };
    intercept::start(ctx, req, target)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &str, target: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(target)
            .body(())
            .unwrap()
    }

    #[test]
    fn the_target_says_what_is_asked() {
        assert_eq!(
            asked(&req("CONNECT", "API2.qoder.sh:443")),
            Asked::Connect {
                host: "api2.qoder.sh".into(),
                port: 443
            }
        );
        assert_eq!(
            asked(&req("CONNECT", "[::1]:8443")),
            Asked::Connect {
                host: "::1".into(),
                port: 8443
            }
        );
        assert!(matches!(
            asked(&req("CONNECT", "api2.qoder.sh")),
            Asked::NotProxy(_)
        ));
        assert_eq!(
            asked(&req("GET", "https://203.107.1.1/183012/ss")),
            Asked::Absolute(Target {
                tls: true,
                host: "203.107.1.1".into(),
                port: 443
            })
        );
        assert_eq!(
            asked(&req("POST", "http://example.com:8080/x")),
            Asked::Absolute(Target {
                tls: false,
                host: "example.com".into(),
                port: 8080
            })
        );
        let Asked::NotProxy(why) = asked(&req("GET", "/status")) else {
            panic!("origin-form is refused");
        };
        assert!(why.contains("capture listener"), "{why}");
        assert!(matches!(
            asked(&req("GET", "ftp://h/x")),
            Asked::NotProxy(_)
        ));
        assert!(matches!(asked(&req("OPTIONS", "*")), Asked::NotProxy(_)));
    }
}

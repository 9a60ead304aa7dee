//! A request on a captured host that is not an inference call goes to the
//! real host unchanged: the same method, target, headers and body (less
//! the hop-by-hop headers every proxy drops), streamed both ways, over a
//! connection of its own to that host through the user's `[upstream]`
//! proxy rules, its certificate verified as every upstream's is. One
//! onward connection follows one client connection (HTTP/1.1 serves one
//! request at a time), opened on its first forwarded request and again
//! when the host closed it. A WebSocket upgrade passes through: the
//! host's `101` goes back and the two connections are spliced.

use std::sync::Mutex;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tracing::debug;

use super::route::Target;
use super::Ctx;
use crate::http::body::{self, Body, BoxError, ErrorCode};
use crate::http::client::proxy;
use crate::http::headers;

/// The onward connection of one client connection to one host.
pub struct Onward {
    pub target: Target,
    sender: Mutex<Option<SendRequest<Body>>>,
}

impl Onward {
    /// No connection yet (opened on the first request).
    pub fn new(target: Target) -> Onward {
        Onward {
            target,
            sender: Mutex::new(None),
        }
    }

    /// The open connection, if any (taken: it is given back once the
    /// answer's head is in).
    fn take(&self) -> Option<SendRequest<Body>> {
        self.sender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .filter(|s| !s.is_closed())
    }

    fn give_back(&self, sender: SendRequest<Body>) {
        *self.sender.lock().unwrap_or_else(|p| p.into_inner()) = Some(sender);
    }

    /// Opens a connection to the host, through the proxy the rules give it.
    async fn open(&self, ctx: &Ctx) -> Result<SendRequest<Body>, String> {
        let live = ctx.app.live();
        let t = &self.target;
        let via = proxy::resolve(
            None,
            live.config.upstream_proxy.as_ref(),
            &live.env,
            &t.base_url(),
        );
        if let Some(broken) = via.broken {
            return Err(broken.to_string());
        }
        let io = live
            .client
            .open(t.tls, &t.host, t.port, via.proxy)
            .await
            .map_err(|e| crate::http::error_chain(&e))?;
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("{}: {e}", t.base_url()))?;
        // Ends when the sender and the answer are dropped, or the host
        // closes; an upgraded connection lives on in its splice.
        ctx.tracker.spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                debug!(error = %e, "capture: an onward connection ended");
            }
        });
        Ok(sender)
    }

    /// Sends `req` (origin-form, as the client sent it) to the host and
    /// passes its answer back unchanged; a host that cannot be reached is
    /// `502 HOST_UNREACHABLE` with why (no secret in it).
    pub async fn send(&self, ctx: &Ctx, mut req: Request<Incoming>) -> Response<Body> {
        let upgrade = is_upgrade(req.headers()).then(|| hyper::upgrade::on(&mut req));
        let outgoing = self.outgoing(req, upgrade.is_some());
        let sender = match self.take() {
            Some(s) => Ok(s),
            None => self.open(ctx).await,
        };
        let mut sender = match sender {
            Ok(s) => s,
            Err(why) => return self.unreachable(ctx, why),
        };
        let wait = ctx.app.config().timeouts.first_byte;
        let sent = tokio::time::timeout(wait, async {
            sender.ready().await?;
            sender.send_request(outgoing).await
        })
        .await;
        let mut resp = match sent {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => return self.unreachable(ctx, format!("{}: {e}", self.target.base_url())),
            Err(_) => {
                return self.unreachable(
                    ctx,
                    format!(
                        "{} sent no answer within {} ms ([upstream] first_byte_timeout_ms)",
                        self.target.base_url(),
                        wait.as_millis()
                    ),
                )
            }
        };
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            if let Some(client) = upgrade {
                // The onward connection is the WebSocket's now.
                let host = hyper::upgrade::on(&mut resp);
                splice(ctx, client, host);
                return head_only(resp);
            }
        }
        self.give_back(sender);
        let (mut parts, incoming) = resp.into_parts();
        headers::strip_hop_by_hop(&mut parts.headers);
        let body = incoming.map_err(|e| Box::new(e) as BoxError).boxed();
        Response::from_parts(parts, body)
    }

    /// The request as it goes on: origin-form, `Host` kept (set from the
    /// target when the client sent none), hop-by-hop headers dropped, but
    /// for an upgrade its `Connection: upgrade` and `Upgrade`.
    fn outgoing(&self, req: Request<Incoming>, upgrade: bool) -> Request<Body> {
        let (mut parts, incoming) = req.into_parts();
        let kept_upgrade = parts.headers.get(header::UPGRADE).cloned();
        headers::strip_hop_by_hop(&mut parts.headers);
        if upgrade {
            if let Some(u) = kept_upgrade {
                parts.headers.insert(header::UPGRADE, u);
                parts
                    .headers
                    .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            }
        }
        if !parts.headers.contains_key(header::HOST) {
            let t = &self.target;
            let default = if t.tls { 443 } else { 80 };
            let host = if t.port == default {
                t.host.clone()
            } else {
                format!("{}:{}", t.host, t.port)
            };
            if let Ok(v) = HeaderValue::from_str(&host) {
                parts.headers.insert(header::HOST, v);
            }
        }
        let target = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .unwrap_or_else(|_| http::Uri::from_static("/"));
        parts.uri = target;
        parts.version = http::Version::HTTP_11;
        parts.extensions = http::Extensions::new();
        Request::from_parts(parts, incoming.map_err(|e| Box::new(e) as BoxError).boxed())
    }

    fn unreachable(&self, ctx: &Ctx, why: String) -> Response<Body> {
        let listed = ctx.app.config().capture.intercepts(&self.target.host);
        ctx.app
            .capture
            .failed(&self.target.host, listed, why.clone());
        tracing::warn!(host = %self.target.host, "capture: {why}");
        body::error_response(ErrorCode::HostUnreachable, &why)
    }
}

/// Whether a request asks to switch protocols (a WebSocket).
fn is_upgrade(h: &http::HeaderMap) -> bool {
    h.contains_key(header::UPGRADE)
        && h.get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// The host's `101` as the client gets it: status and headers, no body.
fn head_only(resp: Response<Incoming>) -> Response<Body> {
    let (parts, _) = resp.into_parts();
    Response::from_parts(parts, body::full(Bytes::new()))
}

/// Copies bytes both ways between the client's and the host's upgraded
/// connections until either closes, or shimgate stops.
fn splice(ctx: &Ctx, client: hyper::upgrade::OnUpgrade, host: hyper::upgrade::OnUpgrade) {
    let (draining, held) = (ctx.draining.clone(), ctx.permit.clone());
    ctx.tracker.spawn(async move {
        let (Ok(client), Ok(host)) = (client.await, host.await) else {
            return;
        };
        let (mut a, mut b) = (TokioIo::new(client), TokioIo::new(host));
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
            () = draining.cancelled() => {}
        }
        // The connection's place under the cap is given back now.
        drop(held);
    });
}

//! A `CONNECT` to a host of `[capture] intercept`, decrypted: the `200`
//! goes back at once, then TLS with a leaf of the local CA for that host,
//! then HTTP/1.1 inside, each request where it belongs ([`on_host`]).
//!
//! A client that refuses the leaf (an alert about it, or closing the
//! connection then: it does not trust the local CA) is counted for the
//! host with the reason TLS gave; after `[capture] tunnel_after_refusals`
//! in a row the host is tunnelled instead (`app::capture`), and the log
//! says so.

use std::sync::Arc;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::time::Instant;
use tracing::{info_span, warn, Instrument};

use super::forward::Onward;
use super::route::{self, Target};
use super::Ctx;
use crate::app::capture::Taken;
use crate::host::RunsOn;
use crate::http::body::{self, Body};
use crate::tls::Outcome;

/// Answers the `CONNECT` and decrypts what follows.
pub fn start(ctx: &Ctx, mut req: Request<Incoming>, target: Target) -> Response<Body> {
    let upgrade = hyper::upgrade::on(&mut req);
    let c = ctx.clone();
    ctx.tracker.spawn(
        async move {
            let Ok(upgraded) = upgrade.await else {
                return;
            };
            let deadline = Instant::now() + c.limits.header_read_timeout;
            let io = TokioIo::new(upgraded);
            let tls = tokio::select! {
                r = c.app.tls.accept_as(io, &target.host, deadline) => r,
                () = c.draining.cancelled() => return,
            };
            match tls {
                Ok(stream) => {
                    c.app.capture.accepted(&target.host);
                    c.app
                        .capture
                        .connected(&target.host, true, Taken::Intercepted);
                    serve(c, target, stream).await;
                }
                Err((outcome, detail)) => refused(&c, &target.host, outcome, &detail),
            }
        }
        .instrument(info_span!("capture")),
    );
    Response::new(body::full(bytes::Bytes::new()))
}

/// A handshake that failed: a client refusal counts towards tunnelling.
fn refused(ctx: &Ctx, host: &str, outcome: Outcome, detail: &str) {
    if outcome != Outcome::ClientRefused {
        return;
    }
    // The reason as TLS gave it, without the name (the row is the host's).
    let reason = detail
        .split_once(": ")
        .map_or(detail, |(_, why)| why)
        .chars()
        .take(200)
        .collect::<String>();
    let threshold = ctx.app.config().capture.tunnel_after_refusals;
    if let Some(why) = ctx.app.capture.refused(host, &reason, threshold) {
        warn!(host, "capture: {why}");
    }
}

/// HTTP/1.1 inside the decrypted tunnel, until the client closes.
async fn serve<S>(ctx: Ctx, target: Target, stream: S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let onward = Arc::new(Onward::new(target.clone()));
    let c = ctx.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (ctx, target, onward) = (c.clone(), target.clone(), onward.clone());
        async move { Ok::<_, std::convert::Infallible>(on_host(&ctx, &target, &onward, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.limits.header_read_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    super::drain_with!(conn, ctx.draining);
}

/// One request for a captured host: an inference call of an enabled shim
/// goes to that shim's ingress (with the implicit route when its wire has
/// no written routes); anything else to the real host unchanged.
pub async fn on_host(
    ctx: &Ctx,
    target: &Target,
    onward: &Onward,
    mut req: Request<Incoming>,
) -> Response<Body> {
    let live = ctx.app.live();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let method = req.method().as_str().to_owned();
    let inference = ctx.shims.iter().find(|h| {
        live.config.shim(h.name()).is_some_and(|s| s.enabled)
            && h.is_inference(&method, &path_and_query)
    });
    let Some(shim) = inference.cloned() else {
        ctx.app.capture.forwarded(&target.host);
        return onward.send(ctx, req).await;
    };
    let (own, route) = route::runs_on(&live.config, shim.name(), target, &live.env);
    ctx.app
        .capture
        .handed(&target.host, shim.name(), route.as_deref());
    if let Some(config) = own {
        req.extensions_mut().insert(RunsOn(config));
    }
    // The path as a shim's listener sees it (an absolute-form target
    // carried the scheme and host).
    if req.uri().scheme().is_some() {
        if let Ok(uri) = path_and_query.parse() {
            *req.uri_mut() = uri;
        }
    }
    shim.ingress(ctx.app.clone(), req).await
}

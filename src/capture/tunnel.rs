//! Byte tunnels: a `CONNECT` to a host shimgate does not decrypt gets a
//! TCP connection to it (through the user's `[upstream]` proxy rules; a
//! loopback host always directly), and the bytes are copied both ways,
//! never read. The connection is made before the `200` goes back, so a
//! host that cannot be reached is a `502` with why, as a proxy answers.

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::Ctx;
use crate::app::capture::Taken;
use crate::http::body::{self, Body, ErrorCode};
use crate::http::client::proxy;

/// Opens the tunnel for `req` (a `CONNECT` to `host:port`) and answers it.
pub async fn open(
    ctx: &Ctx,
    mut req: Request<Incoming>,
    host: &str,
    port: u16,
    taken: Taken,
) -> Response<Body> {
    let live = ctx.app.live();
    let listed = live.config.capture.intercepts(host);
    // How a TLS connection to it would go: the rules judge `https`.
    let url = if host.contains(':') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    };
    let via = proxy::resolve(None, live.config.upstream_proxy.as_ref(), &live.env, &url);
    if let Some(broken) = via.broken {
        ctx.app.capture.failed(host, listed, broken.to_string());
        return body::error_response(ErrorCode::HostUnreachable, &broken);
    }
    let onward = match live.client.tunnel(host, port, via.proxy.as_deref()).await {
        Ok(tcp) => tcp,
        Err(e) => {
            let why = crate::http::error_chain(&e);
            tracing::warn!(host, port, "capture: tunnel: {why}");
            ctx.app.capture.failed(host, listed, why.clone());
            return body::error_response(ErrorCode::HostUnreachable, &why);
        }
    };
    ctx.app.capture.connected(host, listed, taken);
    let upgrade = hyper::upgrade::on(&mut req);
    let (draining, held) = (ctx.draining.clone(), ctx.permit.clone());
    ctx.tracker.spawn(async move {
        let Ok(client) = upgrade.await else {
            return;
        };
        let (mut client, mut onward) = (TokioIo::new(client), onward);
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut onward) => {}
            () = draining.cancelled() => {}
        }
        // The connection's place under the cap is given back now.
        drop(held);
    });
    Response::new(body::full(bytes::Bytes::new()))
}

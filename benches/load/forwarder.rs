//! The yardstick: a bare hyper forwarding proxy with nothing but what any
//! HTTP/1.1 proxy must do (pooled keep-alive client, TCP_NODELAY, hop-by-hop
//! headers dropped, bodies streamed both ways untouched). shimgate's added
//! latency is judged against this, in the same run.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Body = BoxBody<bytes::Bytes, hyper::Error>;

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "transfer-encoding",
    "host",
];

/// `load --forwarder URL`: serves a forwarder in this process until killed,
/// on the runtime shimgate runs on by default (`[limits] workers`: one
/// thread, tokio's current-thread scheduler; `benches/README.md`,
/// "2026-12-02 (16:00 UTC)" and "(20:40 UTC)"), so that shimgate gains
/// nothing on the ratio from a setting the yardstick lacks.
pub fn serve_forever(upstream: String) -> ! {
    let runtime =
        shimgate::cmd::serve::runtime(shimgate::config::DEFAULT_WORKERS).expect("runtime");
    runtime.block_on(async move {
        let addr = start(upstream).await;
        println!("listening {addr}");
        std::future::pending::<()>().await;
    });
    std::process::exit(0)
}

/// Starts a forwarder in front of `upstream` (`http://host:port`); returns
/// its address.
pub async fn start(upstream: String) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(50))
        .build(http);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let client = client.clone();
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req| {
                    let client = client.clone();
                    let upstream = upstream.clone();
                    async move { Ok::<_, Infallible>(forward(&client, &upstream, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn forward(
    client: &Client<HttpConnector, Incoming>,
    upstream: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let Ok(uri) = format!("{upstream}{path}").parse() else {
        return failed(StatusCode::BAD_REQUEST);
    };
    parts.uri = uri;
    for name in HOP_BY_HOP {
        parts.headers.remove(name);
    }
    match client.request(Request::from_parts(parts, body)).await {
        Ok(resp) => {
            let (mut parts, body) = resp.into_parts();
            for name in HOP_BY_HOP {
                parts.headers.remove(name);
            }
            Response::from_parts(parts, body.boxed())
        }
        Err(_) => failed(StatusCode::BAD_GATEWAY),
    }
}

fn failed(status: StatusCode) -> Response<Body> {
    let mut r = Response::new(
        Full::new(bytes::Bytes::from_static(
            b"{\"error\":{\"code\":\"FORWARDER\"}}",
        ))
        .map_err(|never| match never {})
        .boxed(),
    );
    *r.status_mut() = status;
    r
}

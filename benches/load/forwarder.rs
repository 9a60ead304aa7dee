//! The yardstick: a bare hyper forwarding proxy with nothing but what any
//! HTTP/1.1 proxy must do (pooled keep-alive client, TCP_NODELAY, hop-by-hop
//! headers dropped, bodies streamed both ways untouched). shimgate's added
//! latency is judged against this, in the same run. For the TLS variant it
//! serves TLS with a leaf of shimgate's local CA, minted once by the same
//! code and presented through the same rustls config as shimgate's.

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
pub fn serve_forever(upstream: String, tls_state: Option<std::path::PathBuf>) -> ! {
    let runtime =
        shimgate::cmd::serve::runtime(shimgate::config::DEFAULT_WORKERS).expect("runtime");
    runtime.block_on(async move {
        let tls = tls_state.map(|state| acceptor(&state));
        let addr = start_with(upstream, tls).await;
        println!("listening {addr}");
        std::future::pending::<()>().await;
    });
    std::process::exit(0)
}

/// A TLS acceptor presenting a leaf for 127.0.0.1 from the local CA in
/// the state dir `state` (shimgate's own minting and server config).
fn acceptor(state: &std::path::Path) -> tokio_rustls::TlsAcceptor {
    use shimgate::tls::{ca, leaf, names::LeafName};
    let authority = ca::load(&ca::CaFiles::in_state_dir(state)).expect("the bench's local CA");
    let ip = std::net::IpAddr::from([127, 0, 0, 1]);
    let leaf =
        leaf::mint(&authority, &LeafName::Ip(ip), std::time::SystemTime::now()).expect("leaf");
    tokio_rustls::TlsAcceptor::from(leaf.config.clone())
}

/// Starts a forwarder in front of `upstream` (`http://host:port`); returns
/// its address.
pub async fn start(upstream: String) -> SocketAddr {
    start_with(upstream, None).await
}

/// [`start`], serving TLS through `tls` when given.
async fn start_with(upstream: String, tls: Option<tokio_rustls::TlsAcceptor>) -> SocketAddr {
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
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            serve_conn(stream, client, upstream).await;
                        }
                    }
                    None => serve_conn(stream, client, upstream).await,
                }
            });
        }
    });
    addr
}

/// HTTP/1.1 on one connection, plain or TLS.
async fn serve_conn<S>(stream: S, client: Client<HttpConnector, Incoming>, upstream: String)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let client = client.clone();
        let upstream = upstream.clone();
        async move { Ok::<_, Infallible>(forward(&client, &upstream, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
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

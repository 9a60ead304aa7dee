//! The HTTP client every upstream send goes through: pooled keep-alive
//! connections, TCP_NODELAY, a connect timeout, https via rustls.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The client type.
pub type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// How long an idle pooled connection is kept (upstream LBs commonly close at 60 s+).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(50);

/// Each upstream connection reads into a fixed buffer of this size instead
/// of hyper's adaptive one (8 KiB and up). SSE frames are small and the
/// parser takes chunks of any size, while a long-running gateway holds one
/// buffer per open stream: 4 KiB keeps 2,000 idle streams well inside
/// 200 MB (measured by the load tool's streams phase). It is also the
/// largest response head hyper accepts on these connections (an exact
/// buffer never grows), which is why it stays at 4 KiB: 2 KiB saves about
/// 4.7 KiB per idle stream on the full path (2026-12-02) but is within
/// reach of a provider's head with its rate-limit headers and cookies.
const READ_BUFFER: usize = 4096;

/// Builds a client with the given connect timeout.
pub fn client(connect_timeout: Duration) -> HttpClient {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .http1_read_buf_exact_size(READ_BUFFER)
        .build(https)
}

//! The demo's agents: each keeps a growing conversation, sends it on its
//! provider's wire to its shim, and checks that the answer it reads is the
//! scripted one, on its own wire, complete.

pub mod qoder;
pub mod trae;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

pub use qoder::QoderAgent;
pub use trae::TraeAgent;

/// Time allowed for one whole answer (everything is on loopback; a turn
/// normally takes milliseconds).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest piece of an error body quoted in a failure reason.
const QUOTE_LIMIT: usize = 300;

/// The agents' HTTP client.
pub type Client = hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>;

/// A client for the agents.
pub fn client() -> Client {
    let mut http = HttpConnector::new();
    http.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(http)
}

/// A whole answer and how long it took from sending to its last byte.
pub struct Answer {
    pub body: Bytes,
    pub elapsed: Duration,
}

/// POSTs `body` and reads the whole answer; any non-2xx status, a body that
/// is not an event stream, or a timeout is a failure with its reason.
pub async fn post(
    client: &Client,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Result<Answer, String> {
    let mut req = Request::builder().method(Method::POST).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("cannot build the request to {url}: {e}"))?;
    let start = Instant::now();
    let exchange = async {
        let resp = client
            .request(req)
            .await
            .map_err(|e| format!("request to {url} failed: {}", crate::http::error_chain(&e)))?;
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| format!("the answer broke off: {e}"))?
            .to_bytes();
        Ok::<_, String>((parts, body))
    };
    let (parts, body) = tokio::time::timeout(ANSWER_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete answer within {} s", ANSWER_TIMEOUT.as_secs()))??;
    let elapsed = start.elapsed();
    if parts.status != StatusCode::OK {
        return Err(format!("HTTP {}: {}", parts.status, quote(&body)));
    }
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !crate::http::headers::is_event_stream(&parts.headers) {
        return Err(format!(
            "content-type {ct:?} instead of text/event-stream: {}",
            quote(&body)
        ));
    }
    Ok(Answer { body, elapsed })
}

/// The start of a body, as text, for error messages.
pub fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut q: String = text.chars().take(QUOTE_LIMIT).collect();
    if text.chars().count() > QUOTE_LIMIT {
        q.push('…');
    }
    q
}

//! A small HTTP client for tests: whole responses, or the body as it streams.

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// A whole response.
#[derive(Debug)]
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Resp {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends a request and returns the response with its body still streaming.
pub async fn open(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> http::Response<Incoming> {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    client()
        .request(req.body(Full::new(body.into())).unwrap())
        .await
        .unwrap_or_else(|e| panic!("request to {url} failed: {e}"))
}

/// Sends a request and reads the whole response.
pub async fn send(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Resp {
    let resp = open(method, url, headers, body).await;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    Resp {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// GET.
pub async fn get(url: &str) -> Resp {
    send(Method::GET, url, &[], Bytes::new()).await
}

/// POST a JSON value.
pub async fn post_json(url: &str, body: &serde_json::Value) -> Resp {
    send(
        Method::POST,
        url,
        &[("content-type", "application/json")],
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

/// Reads one body chunk (None at the end or on error).
pub async fn next_chunk(body: &mut Incoming) -> Option<Bytes> {
    loop {
        match body.frame().await {
            Some(Ok(f)) => {
                if let Ok(d) = f.into_data() {
                    return Some(d);
                }
            }
            _ => return None,
        }
    }
}

/// Whether a GET answers 2xx (false on connection errors).
pub async fn get_ok(url: &str) -> bool {
    let req = Request::builder()
        .uri(url)
        .body(Full::new(Bytes::new()))
        .unwrap();
    matches!(client().request(req).await, Ok(r) if r.status().is_success())
}

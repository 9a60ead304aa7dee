//! HTTP/1.1 served by hyper over any stream (a TLS session, a proxy's
//! tunnel, a plain socket), each request recorded with the host it was
//! for and answered by a script that returns the scripted upstream's
//! [`Reply`] (head, chunks, pauses, hold open, reset). The Qoder CLI's
//! loopback world and its scripted model server are built on it; unlike
//! the raw-TCP upstream it reads any request framing a real client sends
//! (chunked bodies, absolute-form targets, `CONNECT`).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

pub use super::upstream::{Recorded, Reply, Step};

/// One request as a server of the loopback world received it.
#[derive(Debug, Clone)]
pub struct Call {
    /// The host it was for (`CONNECT` target, absolute-form authority, or
    /// the server's own `host:port`), without the default port.
    pub host: String,
    /// How it arrived: `tunnel` (TLS inside `CONNECT`), `absolute` (a
    /// plain proxy request), `direct` (to the server itself).
    pub via: &'static str,
    pub request: Recorded,
}

impl Call {
    /// The path and query (absolute-form targets reduced to them).
    pub fn path(&self) -> &str {
        &self.request.path
    }
}

/// What a server does with a request: the reply, given the call and how
/// many calls that server answered before it.
pub type Script = dyn Fn(&Call, usize) -> Reply + Send + Sync;

/// The calls a server (or a whole world) received, in arrival order.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<Call>>>);

impl Log {
    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.0.lock().unwrap().clone()
    }

    /// Appends a call; returns how many came before it.
    pub fn push(&self, call: Call) -> usize {
        let mut calls = self.0.lock().unwrap();
        calls.push(call);
        calls.len() - 1
    }
}

/// The response body: frames sent by a task that plays the reply's steps.
type Body =
    StreamBody<futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, std::io::Error>>>;

/// Serves HTTP/1.1 on `io` until the peer closes: each request is
/// recorded as a call for `host` and answered by `script`.
pub async fn serve<I>(io: I, host: String, via: &'static str, log: Log, script: Arc<Script>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let (host, log, script) = (host.clone(), log.clone(), script.clone());
        async move {
            let call = record(req, host, via).await;
            let reply = script(&call, log.push(call.clone()));
            Ok::<_, Infallible>(respond(reply))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

/// Reads a whole request (any framing) into a [`Call`].
pub async fn record(req: Request<hyper::body::Incoming>, host: String, via: &'static str) -> Call {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| parts.uri.to_string());
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    Call {
        host,
        via,
        request: Recorded {
            method: parts.method.as_str().to_owned(),
            path,
            headers,
            body,
        },
    }
}

/// Plays `reply` as a hyper response: its head, then its body steps from
/// a task (pauses kept, `Hold` keeps the body open until the client goes,
/// `Reset`/`Close` abort the connection, the end of the steps ends the
/// body).
pub fn respond(reply: Reply) -> Response<Body> {
    let mut steps = reply.steps.into_iter();
    let (status, headers) = match steps.next() {
        Some(Step::Head(status, headers)) => (status, headers),
        _ => (
            500,
            vec![("content-type".to_owned(), "text/plain".to_owned())],
        ),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(16);
    let rest: Vec<Step> = steps.collect();
    tokio::spawn(async move {
        for step in rest {
            let frame = match step {
                Step::Chunk(b) | Step::Stamped(b) | Step::Raw(b) => Ok(Frame::data(b)),
                Step::Sleep(d) => {
                    tokio::time::sleep(d).await;
                    continue;
                }
                Step::Hold => {
                    tx.closed().await;
                    return;
                }
                Step::Reset | Step::Close => Err(std::io::Error::other("scripted abort")),
                Step::Head(..) => continue,
                Step::End => return,
            };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Response::new(StreamBody::new(futures_util::StreamExt::boxed(stream)));
    *response.status_mut() = http::StatusCode::from_u16(status).unwrap();
    for (k, v) in headers {
        // hyper frames the body itself (chunked unless a length is given).
        if k.eq_ignore_ascii_case("transfer-encoding") {
            continue;
        }
        response.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(&v).unwrap(),
        );
    }
    response
}

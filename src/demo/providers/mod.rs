//! The demo's scripted providers: loopback HTTP servers that check each
//! request the way the real upstream would and answer on the provider's own
//! wire, one frame per write, so the demo needs no network.

pub mod qoder;
pub mod trae;

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::http::body::ErrorCode;
use crate::http::body::{self, Body, ChannelBody};
use crate::http::read::read_body;

/// Longest a provider holds a connection open after its last frame (the
/// real qoder gateway does; shimgate must stop reading at the sentinel and
/// close). The cap only keeps a misbehaving client from piling up tasks.
const HOLD_LIMIT: Duration = Duration::from_secs(60);

/// Request bodies above this are refused (far above any demo turn).
const MAX_BODY_BYTES: u64 = 8 * 1024 * 1024;

/// What a provider saw, for the demo's checks and summary.
#[derive(Debug, Default)]
pub struct Log {
    answered: AtomicU64,
    held: AtomicU64,
    released: AtomicU64,
    problems: Mutex<Vec<String>>,
    request_ids: Mutex<HashSet<String>>,
}

impl Log {
    /// Notes a request the real upstream would have rejected.
    pub fn problem(&self, what: impl Into<String>) {
        self.problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(what.into());
    }

    /// Problems so far.
    pub fn problems(&self) -> Vec<String> {
        self.problems
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Remembers a request id; false if it was seen before.
    pub fn first_use(&self, id: &str) -> bool {
        self.request_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string())
    }

    /// Answers sent.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Connections held open after the last frame, and how many of those
    /// the client has closed since.
    pub fn holds(&self) -> (u64, u64) {
        (
            self.held.load(Ordering::Relaxed),
            self.released.load(Ordering::Relaxed),
        )
    }
}

/// A provider's answer to one request.
pub enum Reply {
    /// `200 text/event-stream`, each frame written separately; `hold` keeps
    /// the connection open afterwards until the client closes it.
    Stream { frames: Vec<Bytes>, hold: bool },
    /// An error status with a JSON body.
    Refuse(StatusCode, String),
}

/// How a provider answers: from the request head and body.
pub type Script = fn(&Log, &http::request::Parts, &[u8]) -> Reply;

/// A running provider; it stops accepting when dropped.
pub struct Provider {
    addr: SocketAddr,
    log: Arc<Log>,
    stop: CancellationToken,
}

impl Provider {
    /// Starts a provider on a free loopback port.
    pub async fn start(script: Script) -> std::io::Result<Provider> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let log = Arc::new(Log::default());
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(listener, script, log.clone(), stop.clone()));
        Ok(Provider { addr, log, stop })
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What it saw.
    pub fn log(&self) -> &Log {
        &self.log
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn accept_loop(
    listener: TcpListener,
    script: Script,
    log: Arc<Log>,
    stop: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else {
            // Out of descriptors or the like: retry shortly rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let log = log.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let log = log.clone();
                async move { Ok::<_, Infallible>(serve(script, log, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve(script: Script, log: Arc<Log>, req: Request<Incoming>) -> Response<Body> {
    let (parts, incoming) = req.into_parts();
    let bytes = match read_body(incoming, None, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    match script(&log, &parts, &bytes) {
        Reply::Refuse(status, why) => {
            log.problem(why.clone());
            body::error_with_status(status, ErrorCode::DemoProviderRefused, &why)
        }
        Reply::Stream { frames, hold } => {
            log.answered.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = ChannelBody::channel();
            tokio::spawn(async move {
                for frame in frames {
                    if tx.send(Ok(frame)).await.is_err() {
                        return;
                    }
                }
                if hold {
                    log.held.fetch_add(1, Ordering::Relaxed);
                    // Resolves when the client closes the connection (hyper
                    // drops the body); the limit only bounds a stuck client.
                    if tokio::time::timeout(HOLD_LIMIT, tx.closed()).await.is_ok() {
                        log.released.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
            let mut resp = Response::new(body::streaming(rx));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            resp
        }
    }
}

/// The text of a message's content: a string, or its text parts joined.
pub fn content_text(message: &serde_json::Value) -> String {
    match message.get("content") {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(serde_json::Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The turn of the last user message that carries a `[turn N]` marker.
pub fn last_turn(messages: &[serde_json::Value]) -> Option<u32> {
    messages
        .iter()
        .rev()
        .filter(|m| m.get("role").and_then(serde_json::Value::as_str) == Some("user"))
        .find_map(|m| super::script::turn_of(&content_text(m)))
}

/// Splits `text` into word-sized pieces, as models stream it.
pub fn pieces(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive(' ')
}

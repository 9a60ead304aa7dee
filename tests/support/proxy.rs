//! A test compression proxy: forwards `POST …/chat/completions` to its
//! upstream base with the same path, shortens old messages past a threshold
//! (and always adds a system preamble, as real proxies do), and checks every
//! frame it relays with [`check_openai`]: one `data:` line,
//! `\n\n`-terminated, valid JSON, no envelope keys, exactly one `[DONE]` at
//! the end. Any violation is recorded and fails the test that looks at it.
//!
//! `Mode::Bili` behaves as billion-context was measured to
//! (as measured against the real billion-context): content frames pass byte for byte,
//! the upstream's finish, usage and `[DONE]` frames are swallowed, and it
//! writes its own `stop` finish with usage and `[DONE]`. It keeps one
//! session per `hash(Authorization, conversation id)` and compresses only
//! when the *same session's* previous turn reported `prompt_tokens` at 75 %
//! of its window or more; a 400/413 whose body says the context overflowed
//! teaches the session its real window and makes the next turn compress.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use shimgate_testkit::check_openai;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A proxy that answers without ever calling its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehave {
    /// 200 with bytes that are not an event stream.
    Garbage,
    /// 200 with a JSON body.
    Json,
    /// 200 event-stream head, one frame, then the stream ends.
    CutStream,
}

fn misbehave(m: Misbehave) -> Response<BoxBody> {
    let (ct, body) = match m {
        Misbehave::Garbage => ("text/plain", "\u{1}\u{2}garbage, not a stream"),
        Misbehave::Json => (
            "application/json",
            r#"{"choices":[{"message":{"content":"from the proxy"}}]}"#,
        ),
        Misbehave::CutStream => (
            "text/event-stream",
            "data: {\"choices\":[{\"delta\":{\"content\":\"half\"}}]}\n\n",
        ),
    };
    let mut r = whole(StatusCode::OK, body);
    r.headers_mut().insert("content-type", ct.parse().unwrap());
    r
}

/// How the proxy treats the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Relay byte for byte (validating).
    Pass,
    /// Swallow finish/usage/[DONE], write its own (as bili does).
    Bili,
}

/// Proxy behaviour.
#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// Compress once the total message content passes this many chars.
    pub threshold: usize,
    /// Messages kept verbatim at the end.
    pub keep_recent: usize,
    /// Answer every request with this status without forwarding.
    pub fail_with: Option<u16>,
    /// Answer every request this way without forwarding.
    pub misbehave: Option<Misbehave>,
    /// POST the same URL this many extra times before the real one (a tool loop).
    pub extra_posts: usize,
    /// `Mode::Bili`: the context window in tokens (its pressure band is
    /// 75 % of it).
    pub window_tokens: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::Pass,
            threshold: 4000,
            keep_recent: 4,
            fail_with: None,
            misbehave: None,
            extra_posts: 0,
            window_tokens: 16_000,
        }
    }
}

impl Options {
    /// The defaults, behaving as billion-context was measured to
    /// (`Mode::Bili`).
    pub fn bili() -> Self {
        Options {
            mode: Mode::Bili,
            ..Options::default()
        }
    }
}

/// A running test proxy.
#[derive(Clone)]
pub struct TestProxy {
    pub addr: std::net::SocketAddr,
    pub violations: Arc<Mutex<Vec<String>>>,
    pub requests: Arc<AtomicUsize>,
    /// Bodies received from the ingress (before compression).
    pub received: Arc<Mutex<Vec<Value>>>,
    /// The path (and query) of each of them: the return leg's, rid included.
    pub paths: Arc<Mutex<Vec<String>>>,
    /// The `Authorization` of every request received.
    pub authorizations: Arc<Mutex<Vec<String>>>,
    /// `Mode::Bili` sessions by key.
    pub sessions: Arc<Mutex<HashMap<String, Session>>>,
    /// Answers from upstream that were not SSE, as the proxy saw them.
    pub errors: Arc<Mutex<Vec<Answer>>>,
}

/// An upstream answer the proxy passed on whole.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: Value,
}

/// One `Mode::Bili` session.
#[derive(Debug, Clone, Default)]
pub struct Session {
    /// Requests seen.
    pub requests: u32,
    /// Requests it compressed.
    pub compressed: u32,
    /// `prompt_tokens` the upstream reported on the last turn.
    pub last_prompt_tokens: u64,
    /// The window learned from an overflow error.
    pub learned_window: Option<u64>,
    /// Overflow errors seen.
    pub overflows: u32,
}

/// The conversation headers bili reads, first non-empty wins
/// (billion-context's own).
const CONVERSATION_HEADERS: [&str; 7] = [
    "x-claude-code-session-id",
    "x-session-affinity",
    "x-acp-session",
    "x-session-id",
    "x-opencode-session",
    "session-id",
    "session_id",
];

/// The phrases bili's `inspectContextOverflow` looks for.
const OVERFLOW_PHRASES: [&str; 12] = [
    "context_length_exceeded",
    "context length exceeded",
    "maximum context length",
    "max context length",
    "maximum context size",
    "exceeds the context window",
    "exceeded model token limit",
    "prompt is too long",
    "prompt_too_long",
    "prompt_is_too_long",
    "request_too_large",
    "token limit exceeded",
];

/// bili's session key: `Authorization` and the conversation id (the first
/// user message when no conversation header is sent).
fn session_key(headers: &http::HeaderMap, body: &Value) -> String {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let conversation = CONVERSATION_HEADERS
        .iter()
        .find_map(|h| {
            headers
                .get(*h)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
        })
        .map(str::to_owned)
        .unwrap_or_else(|| {
            body["messages"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["role"] == "user"))
                .map(|m| m["content"].to_string())
                .unwrap_or_default()
        });
    format!("{auth}\u{0}{conversation}")
}

/// The window an overflow message names, as bili's `parseOverflowWindow`
/// reads it (`maximum context length is N`, `limit of N tokens`).
fn overflow_window(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    [
        "maximum context length is ",
        "maximum context length of ",
        "limit of ",
    ]
    .iter()
    .find_map(|p| {
        let at = lower.find(p)? + p.len();
        let digits: String = lower[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().ok().filter(|n| *n >= 1000)
    })
}

impl TestProxy {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `Mode::Bili` sessions so far.
    pub fn sessions(&self) -> Vec<Session> {
        self.sessions.lock().unwrap().values().cloned().collect()
    }

    /// Non-SSE answers seen so far.
    pub fn errors(&self) -> Vec<Answer> {
        self.errors.lock().unwrap().clone()
    }

    /// Violations seen so far.
    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    /// Starts a proxy in front of `upstream` (a shim listener base URL).
    pub async fn start(upstream: String, options: Options) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = TestProxy {
            addr: listener.local_addr().unwrap(),
            violations: Arc::default(),
            requests: Arc::default(),
            received: Arc::default(),
            paths: Arc::default(),
            authorizations: Arc::default(),
            sessions: Arc::default(),
            errors: Arc::default(),
        };
        let p = proxy.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let p = p.clone();
                let upstream = upstream.clone();
                let options = options.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let p = p.clone();
                        let upstream = upstream.clone();
                        let options = options.clone();
                        async move { Ok::<_, Infallible>(p.handle(req, &upstream, &options).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        proxy
    }

    async fn handle(
        &self,
        req: Request<Incoming>,
        upstream: &str,
        options: &Options,
    ) -> Response<BoxBody> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if let Some(m) = options.misbehave {
            return misbehave(m);
        }
        if let Some(status) = options.fail_with {
            return whole(StatusCode::from_u16(status).unwrap(), "proxy says no");
        }
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default();
        let mut headers = req.headers().clone();
        self.authorizations.lock().unwrap().push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
        );
        headers.remove("host");
        headers.remove("content-length");
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let mut value: Value = serde_json::from_slice(&body).unwrap();
        self.received.lock().unwrap().push(value.clone());
        self.paths.lock().unwrap().push(path.clone());
        let session = (options.mode == Mode::Bili).then(|| session_key(&headers, &value));
        match &session {
            Some(key) => {
                let mut sessions = self.sessions.lock().unwrap();
                let s = sessions.entry(key.clone()).or_default();
                s.requests += 1;
                let window = s.learned_window.unwrap_or(options.window_tokens);
                if s.last_prompt_tokens * 4 >= window * 3 {
                    s.compressed += 1;
                    summarise(&mut value, options.keep_recent);
                }
                preamble(&mut value);
            }
            None => compress(&mut value, options),
        }
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let make = || {
            let mut r = Request::post(format!("{upstream}{path}"))
                .body(Full::new(Bytes::from(serde_json::to_vec(&value).unwrap())))
                .unwrap();
            *r.headers_mut() = headers.clone();
            r
        };
        for _ in 0..options.extra_posts {
            if let Ok(resp) = client.request(make()).await {
                let _ = resp.into_body().collect().await;
            }
        }
        let resp = match client.request(make()).await {
            Ok(r) => r,
            Err(e) => {
                return whole(
                    StatusCode::BAD_GATEWAY,
                    &format!("proxy upstream failed: {e}"),
                )
            }
        };
        let (parts, incoming) = resp.into_parts();
        let sse = parts
            .headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if !sse {
            let bytes = incoming
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            self.errors.lock().unwrap().push(Answer {
                status: parts.status.as_u16(),
                retry_after: parts
                    .headers
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            });
            let text = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
            let overflow = matches!(parts.status.as_u16(), 400 | 413)
                && OVERFLOW_PHRASES.iter().any(|p| text.contains(p));
            if let (Some(key), true) = (&session, overflow) {
                let mut sessions = self.sessions.lock().unwrap();
                let s = sessions.entry(key.clone()).or_default();
                s.overflows += 1;
                s.learned_window = overflow_window(&text).or(s.learned_window);
                let floor = s.learned_window.unwrap_or(options.window_tokens);
                s.last_prompt_tokens = s.last_prompt_tokens.max(floor);
            }
            let mut out = whole(parts.status, "");
            *out.body_mut() = Full::new(bytes).map_err(|n| match n {}).boxed();
            *out.headers_mut() = parts.headers;
            out.headers_mut().remove("transfer-encoding");
            return out;
        }
        let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(16);
        let violations = self.violations.clone();
        let mode = options.mode;
        let usage_to = session.map(|key| (self.sessions.clone(), key));
        tokio::spawn(relay(incoming, tx, violations, mode, usage_to));
        let mut out = Response::new(BodyExt::boxed(StreamBody::new(ReceiverStream(rx))));
        *out.status_mut() = parts.status;
        out.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        out
    }
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn whole(status: StatusCode, text: &str) -> Response<BoxBody> {
    let mut r = Response::new(
        Full::new(Bytes::from(text.to_string()))
            .map_err(|n| match n {})
            .boxed(),
    );
    *r.status_mut() = status;
    r
}

struct ReceiverStream(mpsc::Receiver<Result<Frame<Bytes>, Infallible>>);

impl futures_util::Stream for ReceiverStream {
    type Item = Result<Frame<Bytes>, Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}

/// Shortens old messages past the threshold and adds a preamble.
pub fn compress(body: &mut Value, options: &Options) {
    let total: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            m.get("content")
                .and_then(Value::as_str)
                .map_or(0, |s| s.chars().count())
        })
        .sum();
    if total > options.threshold {
        summarise(body, options.keep_recent);
    }
    preamble(body);
}

/// Replaces all but the last `keep_recent` messages (system ones stay) by
/// one summary message.
fn summarise(body: &mut Value, keep_recent: usize) {
    let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) else {
        return;
    };
    if messages.len() > keep_recent + 1 {
        let cut = messages.len() - keep_recent;
        let (older, recent) = messages.split_at(cut);
        let mut kept: Vec<Value> = older
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .cloned()
            .collect();
        let dropped = older.len() - kept.len();
        kept.push(
            json!({"role": "user", "content": format!("[summary of {dropped} earlier messages]")}),
        );
        kept.extend(recent.iter().cloned());
        *messages = kept;
    }
}

/// Adds the proxy's system preamble, as real proxies do.
fn preamble(body: &mut Value) {
    if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
        messages.insert(
            0,
            json!({"role": "system", "content": "You work behind a test compression proxy."}),
        );
    }
}

type UsageSink = (Arc<Mutex<HashMap<String, Session>>>, String);

/// The JSON of a frame that is one `data:` line (anything else is not
/// relayed in `Mode::Bili`, and the frame check reports it).
fn one_json_frame(frame: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(frame).ok()?;
    if text.contains(['\n', '\r']) {
        return None;
    }
    let payload = text
        .strip_prefix("data: ")
        .or_else(|| text.strip_prefix("data:"))?;
    serde_json::from_str(payload).ok()
}

async fn relay(
    mut incoming: Incoming,
    tx: mpsc::Sender<Result<Frame<Bytes>, Infallible>>,
    violations: Arc<Mutex<Vec<String>>>,
    mode: Mode,
    usage_to: Option<UsageSink>,
) {
    // Everything relayed, for the one frame check at the end.
    let mut seen = Vec::new();
    let mut buf = BytesMut::new();
    let mut usage = Value::Null;
    let flag = |v: String| violations.lock().unwrap().push(v);
    while let Some(frame) = incoming.frame().await {
        let Ok(frame) = frame else {
            flag("the upstream body broke".into());
            break;
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen.extend_from_slice(&data);
        if mode == Mode::Pass {
            let _ = tx.send(Ok(Frame::data(data))).await;
            continue;
        }
        buf.extend_from_slice(&data);
        while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
            let frame = buf.split_to(end + 2);
            let Some(chunk) = one_json_frame(&frame[..end]) else {
                continue;
            };
            // Content frames pass byte for byte; finish, usage and
            // [DONE] are swallowed; errors without choices are dropped.
            let finish = chunk["choices"][0]["finish_reason"].is_string();
            if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
                usage = u.clone();
            }
            let has_choices = chunk["choices"].as_array().is_some_and(|c| !c.is_empty());
            if has_choices && !finish {
                let _ = tx.send(Ok(Frame::data(frame.freeze()))).await;
            }
        }
    }
    if let Err(problems) = check_openai(&seen) {
        for p in problems {
            flag(p.to_string());
        }
    }
    if let (Some((sessions, key)), Some(tokens)) = (usage_to, usage["prompt_tokens"].as_u64()) {
        if let Some(s) = sessions.lock().unwrap().get_mut(&key) {
            s.last_prompt_tokens = tokens;
        }
    }
    if mode == Mode::Bili {
        let finish = json!({"id": "chatcmpl-proxy-1", "object": "chat.completion.chunk", "created": 1, "model": "x",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"], "total_tokens": usage["total_tokens"]}});
        let _ = tx
            .send(Ok(Frame::data(Bytes::from(format!("data: {finish}\n\n")))))
            .await;
        let _ = tx
            .send(Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n"))))
            .await;
    }
}

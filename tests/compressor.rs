//! `shimgate compressor` as a user runs it: the real binary on port 0, in
//! front of a small scripted upstream, checked on what reaches the upstream
//! and what comes back.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

const PREAMBLE_START: &str = "[shimgate reference compressor]";
const THRESHOLD: usize = 2000;

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// One request as the upstream received it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// A scripted upstream on hyper that records every request.
struct Upstream {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Upstream {
    async fn start(
        answer: impl Fn(&Seen) -> Response<BoxBody> + Send + Sync + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let answer = Arc::new(answer);
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, answer) = (log.clone(), answer.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (log, answer) = (log.clone(), answer.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let seen = Seen {
                                method: parts.method,
                                path: parts.uri.path_and_query().unwrap().to_string(),
                                headers: parts.headers,
                                body: body.collect().await.unwrap().to_bytes(),
                            };
                            log.lock().unwrap().push(seen.clone());
                            Ok::<_, Infallible>(answer(&seen))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Upstream { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn whole(status: u16, headers: &[(&str, &str)], body: &str) -> Response<BoxBody> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    for (k, v) in headers {
        r.headers_mut().insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    r
}

fn ok_json() -> Response<BoxBody> {
    whole(
        200,
        &[("content-type", "application/json")],
        r#"{"ok":true}"#,
    )
}

/// The real binary, killed when dropped.
struct Bin {
    child: Child,
    url: String,
}

impl Bin {
    fn start(upstream: &str) -> Bin {
        Bin::start_with(upstream, &[])
    }

    fn start_with(upstream: &str, extra: &[&str]) -> Bin {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shimgate"))
            .args([
                "compressor",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                upstream,
            ])
            .args(["--threshold-chars", &THRESHOLD.to_string()])
            .args(extra)
            .stdout(Stdio::piped())
            .env("RUST_LOG", "warn")
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("first line is not `listening ADDR`: {line:?}"));
        Bin {
            url: format!("http://{addr}"),
            child,
        }
    }
}

impl Drop for Bin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn open(
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Response<Incoming> {
    let mut req = Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    client()
        .request(req.body(Full::new(body.into())).unwrap())
        .await
        .unwrap()
}

async fn send(url: &str, body: impl Into<Bytes>) -> (StatusCode, HeaderMap, Bytes) {
    let resp = open(
        Method::POST,
        url,
        &[("content-type", "application/json")],
        body,
    )
    .await;
    let (parts, body) = resp.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn chat(turns: usize) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    for t in 0..turns {
        messages.push(json!({"role": "user", "content": format!("turn {t}: {}", "look at the parser ".repeat(12))}));
        messages.push(json!({"role": "assistant", "content": format!("answer {t}")}));
    }
    json!({"model": "m", "stream": true, "max_tokens": 4096, "messages": messages})
}

fn content_chars(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().map_or(0, |s| s.chars().count()))
        .sum()
}

#[tokio::test]
async fn path_query_and_headers_reach_the_upstream_unchanged() {
    let up = Upstream::start(|_| ok_json()).await;
    let bin = Bin::start(&up.url);
    let path = "/trae/a1b2c3/chat/completions?shimgate_rid=a1b2c3&x=1";
    let resp = open(
        Method::POST,
        &format!("{}{path}", bin.url),
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer shimgate-rid-a1b2c3"),
            ("x-session-id", "s-42"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "only for the next hop"),
        ],
        serde_json::to_vec(&chat(1)).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        br#"{"ok":true}"#,
        "the upstream's answer passes through"
    );
    let get = open(
        Method::GET,
        &format!("{}/v1/models?limit=5", bin.url),
        &[],
        "",
    )
    .await;
    assert_eq!(get.status(), StatusCode::OK);
    let seen = up.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].method, Method::POST);
    assert_eq!(seen[0].path, path, "path, rid segment and query are kept");
    let h = &seen[0].headers;
    assert_eq!(h["authorization"], "Bearer shimgate-rid-a1b2c3");
    assert_eq!(h["x-session-id"], "s-42");
    assert_eq!(h["content-type"], "application/json");
    assert!(
        h.get("x-hop").is_none(),
        "hop-by-hop headers stop at the proxy"
    );
    assert_eq!(
        h["host"],
        up.url.trim_start_matches("http://"),
        "host names the upstream"
    );
    assert_eq!(seen[1].method, Method::GET);
    assert_eq!(seen[1].path, "/v1/models?limit=5");
    assert!(seen[1].body.is_empty());
}

#[tokio::test]
async fn below_the_threshold_only_the_preamble_is_added() {
    let up = Upstream::start(|_| ok_json()).await;
    let bin = Bin::start(&up.url);
    let sent = chat(2);
    assert!(content_chars(&sent) < THRESHOLD);
    let (status, _, _) = send(
        &format!("{}/qoder/r1/chat/completions", bin.url),
        serde_json::to_vec(&sent).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let got = up.seen()[0].json();
    let messages = got["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .starts_with(PREAMBLE_START));
    assert_eq!(messages[1..], sent["messages"].as_array().unwrap()[..]);
    assert_eq!(got["max_tokens"], 4096, "other fields are kept");
}

/// A 20-turn chat (past the threshold) through a compressor started with
/// `extra` flags: what the agent sent and what reached the upstream.
async fn compress_twenty_turns(extra: &[&str]) -> (Value, Value) {
    let up = Upstream::start(|_| ok_json()).await;
    let bin = Bin::start_with(&up.url, extra);
    let sent = chat(20);
    assert!(content_chars(&sent) > THRESHOLD);
    let (status, _, _) = send(
        &format!("{}/trae/r2/chat/completions", bin.url),
        serde_json::to_vec(&sent).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let got = up.seen()[0].json();
    (sent, got)
}

#[tokio::test]
async fn past_the_threshold_older_turns_fold_into_one_summary() {
    let (sent, got) = compress_twenty_turns(&[]).await;
    let messages = got["messages"].as_array().unwrap();
    let original = sent["messages"].as_array().unwrap();
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .starts_with(PREAMBLE_START));
    assert_eq!(messages[1], original[0], "the agent's system message stays");
    assert_eq!(messages[2]["role"], "user");
    let summary = messages[2]["content"].as_str().unwrap();
    assert!(
        summary.starts_with("[summary of 36 earlier messages: turn 0: look at"),
        "{summary}"
    );
    assert_eq!(
        messages[3..],
        original[original.len() - 4..],
        "the last two turns are kept verbatim"
    );
    assert!(content_chars(&got) < content_chars(&sent) / 2);
}

#[tokio::test]
async fn keep_turns_sets_how_many_latest_turns_stay_verbatim() {
    let (sent, got) = compress_twenty_turns(&["--keep-turns", "5"]).await;
    let messages = got["messages"].as_array().unwrap();
    let original = sent["messages"].as_array().unwrap();
    let summary = messages[2]["content"].as_str().unwrap();
    assert!(
        summary.starts_with("[summary of 30 earlier messages:"),
        "{summary}"
    );
    assert_eq!(messages[3..], original[original.len() - 10..]);
}

#[tokio::test]
async fn tiny_max_tokens_requests_pass_byte_for_byte() {
    let up = Upstream::start(|_| ok_json()).await;
    let bin = Bin::start(&up.url);
    let mut sent = chat(20);
    sent["max_tokens"] = json!(200);
    // Odd spacing shows the bytes are not even re-serialised.
    let bytes = serde_json::to_string_pretty(&sent).unwrap();
    let (status, _, _) = send(
        &format!("{}/trae/r3/chat/completions", bin.url),
        bytes.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up.seen()[0].body, Bytes::from(bytes));
}

#[tokio::test]
async fn pass_through_forwards_chat_requests_byte_for_byte() {
    let up = Upstream::start(|_| ok_json()).await;
    let bin = Bin::start_with(&up.url, &["--pass-through"]);
    // Past the threshold, and spaced oddly: neither summarised nor
    // re-serialised, and no preamble.
    let bytes = serde_json::to_string_pretty(&chat(20)).unwrap();
    let (status, _, _) = send(
        &format!("{}/trae/r4/chat/completions", bin.url),
        bytes.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(up.seen()[0].body, Bytes::from(bytes));
}

#[tokio::test]
async fn sse_answers_stream_frame_by_frame() {
    // The upstream writes one frame, then waits for the test: a compressor
    // that buffered the answer would never deliver the first frame.
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let rx = Arc::new(Mutex::new(Some(rx)));
    let up = Upstream::start(move |_| {
        let rx = rx.lock().unwrap().take().expect("one streamed answer");
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        });
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        r
    })
    .await;
    let bin = Bin::start(&up.url);
    let first = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    let second = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n";
    tx.send(Bytes::from_static(first)).await.unwrap();
    let resp = open(
        Method::POST,
        &format!("{}/qoder/r4/chat/completions", bin.url),
        &[("content-type", "application/json")],
        serde_json::to_vec(&chat(1)).unwrap(),
    )
    .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    assert_eq!(next(&mut body).await.unwrap(), Bytes::from_static(first));
    tx.send(Bytes::from_static(second)).await.unwrap();
    assert_eq!(next(&mut body).await.unwrap(), Bytes::from_static(second));
    tx.send(Bytes::from_static(b"data: [DONE]\n\n"))
        .await
        .unwrap();
    assert_eq!(
        next(&mut body).await.unwrap(),
        Bytes::from_static(b"data: [DONE]\n\n")
    );
    drop(tx);
    assert!(
        next(&mut body).await.is_none(),
        "the answer ends when the upstream's does"
    );
}

/// A stop signal while a stream is open: the compressor stops accepting,
/// lets the stream run to its end, then exits 0 (the same event source as
/// `serve`'s, `os::stop_events`; Windows' console events are tested by
/// its unit tests and `.ci/windows`).
#[cfg(unix)]
#[tokio::test]
async fn a_stop_signal_lets_a_stream_in_flight_finish() {
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    let rx = Arc::new(Mutex::new(Some(rx)));
    let up = Upstream::start(move |_| {
        let rx = rx.lock().unwrap().take().expect("one streamed answer");
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
        });
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(frames)));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        r
    })
    .await;
    let mut bin = Bin::start(&up.url);
    let first = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n";
    tx.send(Bytes::from_static(first)).await.unwrap();
    let resp = open(
        Method::POST,
        &format!("{}/qoder/r9/chat/completions", bin.url),
        &[("content-type", "application/json")],
        serde_json::to_vec(&chat(1)).unwrap(),
    )
    .await;
    let mut body = resp.into_body();
    assert_eq!(next(&mut body).await.unwrap(), Bytes::from_static(first));

    let pid = rustix::process::Pid::from_raw(bin.child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    // The listener closes; the open stream does not.
    let addr = bin.url.trim_start_matches("http://").to_owned();
    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(&addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the compressor still accepts after SIGTERM");
    assert!(
        bin.child.try_wait().unwrap().is_none(),
        "it waits for the stream"
    );
    let done = b"data: [DONE]\n\n";
    tx.send(Bytes::from_static(done)).await.unwrap();
    assert_eq!(next(&mut body).await.unwrap(), Bytes::from_static(done));
    drop(tx);
    assert!(next(&mut body).await.is_none(), "the stream ends whole");
    let mut status = None;
    for _ in 0..250 {
        status = bin.child.try_wait().unwrap();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        status.is_some_and(|s| s.success()),
        "exit after the drain: {status:?}"
    );
}

/// The next body chunk; a compressor that held chunks back fails here.
async fn next(body: &mut Incoming) -> Option<Bytes> {
    let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
        .await
        .expect("a frame arrives while the upstream is still streaming");
    frame.map(|f| f.unwrap().into_data().unwrap())
}

#[tokio::test]
async fn malformed_json_is_a_400_with_the_reason_and_nothing_is_forwarded() {
    let up = Upstream::start(|_| ok_json()).await;
    let bin = Bin::start(&up.url);
    for (body, reason) in [
        (&b"{\"messages\": [tru"[..], "not JSON"),
        (&b"[1, 2]"[..], "not an object"),
        (&b"\xff\xfe"[..], "not JSON"),
    ] {
        let (status, _, answer) = send(
            &format!("{}/trae/r5/chat/completions", bin.url),
            Bytes::copy_from_slice(body),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let v: Value = serde_json::from_slice(&answer).unwrap();
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message}");
    }
    assert!(up.seen().is_empty());
    // The compressor is still serving.
    let (status, _, _) = send(
        &format!("{}/trae/r5/chat/completions", bin.url),
        serde_json::to_vec(&chat(1)).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn concurrent_requests_each_keep_their_own_rid() {
    // The upstream echoes the path it got; sixteen requests are in flight at once.
    let up = Upstream::start(|seen| {
        let body = json!({"path": seen.path}).to_string();
        whole(200, &[("content-type", "application/json")], &body)
    })
    .await;
    let bin = Bin::start(&up.url);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let url = format!("{}/trae/rid{i}/chat/completions", bin.url);
        tasks.push(tokio::spawn(async move {
            let (status, _, body) = send(&url, serde_json::to_vec(&chat(i % 12)).unwrap()).await;
            assert_eq!(status, StatusCode::OK);
            let v: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(v["path"], format!("/trae/rid{i}/chat/completions"));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(up.seen().len(), 16);
}

#[tokio::test]
async fn upstream_errors_pass_through_with_status_and_headers() {
    let up = Upstream::start(|_| {
        whole(
            429,
            &[("content-type", "application/json"), ("retry-after", "7")],
            r#"{"error":{"message":"slow down"}}"#,
        )
    })
    .await;
    let bin = Bin::start(&up.url);
    let (status, headers, body) = send(
        &format!("{}/qoder/r6/chat/completions", bin.url),
        serde_json::to_vec(&chat(1)).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(&body[..], br#"{"error":{"message":"slow down"}}"#);
}

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_with_the_reason() {
    // Bind and drop to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin = Bin::start(&format!("http://127.0.0.1:{port}"));
    let (status, _, body) = send(
        &format!("{}/qoder/r7/chat/completions", bin.url),
        serde_json::to_vec(&chat(1)).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["code"], "UPSTREAM_UNREACHABLE");
}

#[test]
fn a_bad_upstream_url_exits_2_with_the_reason() {
    let out = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args([
            "compressor",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "localhost:1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("http://"), "{err}");
}

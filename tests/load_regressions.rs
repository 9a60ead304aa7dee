//! Bugs the load tool (`cargo bench --bench load`) found, each reduced to
//! one small failing test on real loopback servers: shimgate in-process,
//! the reference compressor in-process, scripted raw-TCP upstreams. Each is
//! named after the bug it pins down; all are fixed and run on every test run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/mod.rs"]
mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use shimgate::compressor::{Compressor, Policy};
use shimgate::config::Config;
use tokio::net::TcpListener;
use tokio::sync::Notify;

use support::client;
use support::qoder::{answer, ask, read_answer, PATH as QODER_PATH};
use support::upstream::{Reply, Upstream};
use support::Gate;

/// A qoder route on `up`, fast retries, plus `extra` TOML.
fn qoder_config(up: &Upstream, extra: &str) -> String {
    format!(
        "[retry]\ninitial_delay_ms = 10\nmax_delay_ms = 2000\njitter_ratio = 0\n{extra}\n\
         [[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{}\"\n",
        up.url()
    )
}

/// Points a running shimgate at `compressor_url` (the compressor needs the
/// shim's port and the shim the compressor's: bind first, then swap).
fn use_compressor(gate: &Gate, compressor_url: &str, base: &str) {
    let mut cfg =
        Config::from_toml(&format!("[compressor]\nurl = \"{compressor_url}\"\n{base}")).unwrap();
    cfg.listen_on_free_ports();
    gate.running.as_ref().unwrap().app.replace_config(cfg);
}

/// shimgate behind the reference compressor, qoder routed to `up`.
async fn behind_compressor(up: &Upstream, extra: &str) -> (Gate, Compressor) {
    let base = qoder_config(up, extra);
    let gate = Gate::start(&base).await;
    let compressor = shimgate::compressor::start(
        "127.0.0.1:0".parse().unwrap(),
        &gate.qoder,
        Policy {
            threshold_chars: 8000,
            keep_turns: 2,
            pass_through: false,
        },
    )
    .await
    .unwrap();
    use_compressor(&gate, &compressor.url(), &base);
    (gate, compressor)
}

async fn send_ask(gate: &Gate) -> client::Resp {
    client::send(
        Method::POST,
        &format!("{}{QODER_PATH}", gate.qoder),
        &[("content-type", "application/json")],
        serde_json::to_vec(&ask(&[json!({"role": "user", "content": "hi"})])).unwrap(),
    )
    .await
}

// Bug 1 (fixed in 84c184c). The ingress waited for the compressor's answer
// head at most `first_byte_timeout` (src/host/ingress.rs, the
// `tokio::time::timeout` around `live.client.request(r)`), but that head
// only comes once the return leg's chain has committed, i.e. after all of
// its retries. When the first try stalled past the first-byte timeout (or a
// Retry-After was honoured, below) the ingress gave up first: the rid was
// already claimed, so the agent got 502 COMPRESSOR_FAILED, and dropping the
// proxy request aborted the return leg's retry that would have succeeded.
#[tokio::test]
async fn a_first_byte_stall_behind_the_compressor_is_retried_not_failed() {
    let up = Upstream::sequence(vec![
        Reply::default().hold(),
        answer("the second try answers", 10),
    ])
    .await;
    let (gate, _compressor) =
        behind_compressor(&up, "[upstream]\nfirst_byte_timeout_ms = 300\n").await;
    let resp = send_ask(&gate).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let (text, done, errors) = read_answer(&resp.body);
    assert_eq!(text, "the second try answers");
    assert!(done && errors.is_empty(), "{}", resp.text());
    assert_eq!(up.hits(), 2, "one stalled try, one retry");
    let q = &gate.status().await["qoderShim"];
    assert_eq!(
        (q["forwarded"].as_u64(), q["fallback"].as_u64()),
        (Some(1), Some(0))
    );
}

#[tokio::test]
async fn a_retry_after_honoured_behind_the_compressor_does_not_fail_the_call() {
    let up = Upstream::sequence(vec![
        Reply::json_with(
            429,
            &[("retry-after", "1")],
            r#"{"error":{"message":"slow down"}}"#,
        ),
        answer("after the wait", 10),
    ])
    .await;
    let (gate, _compressor) =
        behind_compressor(&up, "[upstream]\nfirst_byte_timeout_ms = 300\n").await;
    let resp = send_ask(&gate).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(read_answer(&resp.body).0, "after the wait");
    assert_eq!(up.hits(), 2);
}

// Bug 2 (fixed in 84c184c). The rid registry kept 256 entries and evicted
// the oldest one on insert whatever its state (src/rid.rs,
// `RidRegistry::insert`). When more than 256 intercepted calls waited for
// the compressor at once (2,000 slow streams opened over 3 s did), the rids
// of the earliest ones were gone before the compressor forwarded them: the
// return leg answered 410, the ingress fell back and those calls went
// upstream uncompressed (816-950 of 2,000 in the load run). The proxy here
// holds every request until all have arrived, which makes that
// deterministic.
#[tokio::test]
async fn three_hundred_calls_waiting_on_the_compressor_all_reach_the_return_leg() {
    const CALLS: usize = 300;
    let up = Upstream::always(answer("compressed path", 10)).await;
    let base = qoder_config(&up, "");
    let gate = Gate::start(&base).await;
    let proxy = HoldingProxy::start(gate.qoder.clone(), CALLS).await;
    use_compressor(&gate, &proxy, &base);
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        let url = format!("{}{QODER_PATH}", gate.qoder);
        calls.push(tokio::spawn(async move {
            client::send(
                Method::POST,
                &url,
                &[("content-type", "application/json")],
                serde_json::to_vec(&ask(&[json!({"role": "user", "content": "hi"})])).unwrap(),
            )
            .await
        }));
    }
    for c in calls {
        let resp = c.await.unwrap();
        assert_eq!(read_answer(&resp.body).0, "compressed path");
    }
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["fallback"], 0, "{}", q["lastError"]);
    assert_eq!(q["forwarded"].as_u64(), Some(CALLS as u64));
}

/// A forwarding proxy that holds every request until `wait_for` have
/// arrived (or two seconds passed), then forwards them all: many calls
/// waiting on a compressor at once, on purpose.
struct HoldingProxy;

impl HoldingProxy {
    async fn start(upstream: String, wait_for: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let arrived = Arc::new(AtomicUsize::new(0));
        let all_in = Arc::new(Notify::new());
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (arrived, all_in, client) = (arrived.clone(), all_in.clone(), client.clone());
                let upstream = upstream.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (arrived, all_in) = (arrived.clone(), all_in.clone());
                        let (client, upstream) = (client.clone(), upstream.clone());
                        async move {
                            let (parts, body) = req.into_parts();
                            let body = body.collect().await.unwrap().to_bytes();
                            let waiting = all_in.notified();
                            if arrived.fetch_add(1, Ordering::SeqCst) + 1 >= wait_for {
                                all_in.notify_waiters();
                            } else {
                                let _ = tokio::time::timeout(Duration::from_secs(2), waiting).await;
                            }
                            let path = parts.uri.path_and_query().unwrap().as_str();
                            let mut out = Request::post(format!("{upstream}{path}"))
                                .body(Full::new(body))
                                .unwrap();
                            for (k, v) in &parts.headers {
                                if k != "host" && k != "content-length" {
                                    out.headers_mut().insert(k.clone(), v.clone());
                                }
                            }
                            let resp = client.request(out).await.unwrap();
                            let (mut parts, body) = resp.into_parts();
                            parts.headers.remove("transfer-encoding");
                            parts.headers.remove("content-length");
                            Ok::<_, Infallible>(Response::from_parts(parts, body))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        url
    }
}

//! shimgate's own HTTP/1.1 client (`src/http/client/`) against the
//! hyper-util pooled client it replaced, in the same run, on the same
//! loopback upstream: a streamed answer (16 chunked SSE pieces, read to
//! the end) and a small call (a `content-length` answer). Both clients keep
//! their connection between iterations, as in the gateway. The upstream
//! runs on a thread and runtime of its own; each client on a two-worker
//! runtime shaped like the binary's, each request in a task of its own (as
//! a connection's request is), so hyper-util's connection task and the
//! hand-offs to it are counted as they cost in the gateway.
//!
//! Run: `cargo bench --bench client` (about a minute): criterion's
//! figures, then a table of 5,000 interleaved requests of each per case. Figures:
//! benches/README.md ("our own HTTP/1.1 client").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[allow(dead_code)]
#[path = "load/stats.rs"]
mod stats;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, Criterion};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use stats::{us, Summary};

/// Interleaved requests of each client per case for the p50/p99 table.
const SAMPLES: usize = 5000;

/// Pieces of the streamed answer.
const PIECES: usize = 16;

/// The request body: a small chat request.
const ASK: &[u8] = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// Starts the upstream on a thread of its own: `/stream` answers 16
/// chunked SSE pieces (a write each), anything else a 2-byte body.
fn upstream() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                stream.set_nodelay(true).unwrap();
                tokio::spawn(serve(stream));
            }
        });
    });
    rx.recv().unwrap()
}

async fn serve(mut stream: tokio::net::TcpStream) {
    let mut buf = Vec::with_capacity(4096);
    loop {
        // The head, then its content-length body.
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            if stream.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                return;
            }
        }
        buf.drain(..head_end + length);
        if head.starts_with("post /stream") {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            for i in 0..PIECES {
                let frame = format!(
                    "data: {{\"choices\":[{{\"delta\":{{\"content\":\"piece {i}\"}}}}]}}\n\n"
                );
                let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
                let _ = stream.write_all(chunk.as_bytes()).await;
            }
            let _ = stream.write_all(b"0\r\n\r\n").await;
        } else {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The two clients under test.
#[derive(Clone)]
struct Clients {
    ours: shimgate::http::client::HttpClient,
    hyper: Client<HttpConnector, Full<Bytes>>,
}

impl Clients {
    fn new() -> Clients {
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        Clients {
            ours: shimgate::http::client::client(Duration::from_secs(5)),
            hyper: Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(50))
                .build(http),
        }
    }

    /// One request, sent to its answer read whole, in a task of its own;
    /// the time it took inside that task.
    fn one(&self, rt: &tokio::runtime::Runtime, hyper: bool, url: &str) -> Duration {
        let (clients, url) = (self.clone(), url.to_owned());
        rt.block_on(async move {
            tokio::spawn(async move {
                let t0 = Instant::now();
                let req = http::Request::post(url).header("content-type", "application/json");
                let len = if hyper {
                    let req = req.body(Full::new(Bytes::from_static(ASK))).unwrap();
                    let resp = clients.hyper.request(req).await.unwrap();
                    resp.into_body().collect().await.unwrap().to_bytes().len()
                } else {
                    let req = req.body(Bytes::from_static(ASK)).unwrap();
                    let resp = clients.ours.request(req).await.unwrap();
                    resp.into_body().collect().await.unwrap().to_bytes().len()
                };
                assert!(len > 0);
                t0.elapsed()
            })
            .await
            .unwrap()
        })
    }
}

const CASES: [(&str, &str); 2] = [("client_stream", "/stream"), ("client_call", "/call")];

fn bench_clients(c: &mut Criterion) {
    let addr = upstream();
    let rt = runtime();
    let clients = Clients::new();
    for (name, path) in CASES {
        let url = format!("http://{addr}{path}");
        let mut group = c.benchmark_group(name);
        for (label, hyper) in [("ours", false), ("hyper_util", true)] {
            group.bench_function(label, |b| {
                b.iter_custom(|iters| (0..iters).map(|_| clients.one(&rt, hyper, &url)).sum())
            });
        }
        group.finish();
    }
    // Under `cargo test --all-targets` criterion only checks that each
    // bench runs once; the interleaved table is for `cargo bench`.
    if std::env::args().any(|a| a == "--bench") {
        report(&rt, &clients, addr);
    }
}

/// Both clients interleaved, one request each per round, so the machine's
/// drift hits them alike: p50 and p99 per case.
fn report(rt: &tokio::runtime::Runtime, clients: &Clients, addr: SocketAddr) {
    println!(
        "\n{SAMPLES} interleaved requests of each client per case (µs, request to whole answer):"
    );
    println!("| case | ours p50 | ours p99 | hyper-util p50 | hyper-util p99 | p50 ratio ours / hyper-util |");
    println!("|---|---|---|---|---|---|");
    for (name, path) in CASES {
        let url = format!("http://{addr}{path}");
        let (mut ours, mut hyper) = (Vec::new(), Vec::new());
        for _ in 0..SAMPLES {
            ours.push(clients.one(rt, false, &url).as_nanos() as u64);
            hyper.push(clients.one(rt, true, &url).as_nanos() as u64);
        }
        let (o, h) = (Summary::of(&ours), Summary::of(&hyper));
        println!(
            "| {name} | {} | {} | {} | {} | {:.2} |",
            us(o.p50),
            us(o.p99),
            us(h.p50),
            us(h.p99),
            o.p50 as f64 / h.p50.max(1) as f64
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(200)
        .measurement_time(Duration::from_secs(8))
        .warm_up_time(Duration::from_secs(2));
    targets = bench_clients
}

criterion::criterion_main!(benches);

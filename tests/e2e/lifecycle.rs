//! The real binary's life as a user sees it: it names the config it loaded,
//! runs on the threads `[limits] workers` asks for, bounds what a client
//! connection may take (a head within the header-read timeout, idle
//! connections closed, a cap on open connections), stops at once on
//! SIGTERM when nothing is streaming and lets a stream in flight finish
//! when something is, and reloads on `POST /reload`. `.ci/windows` runs
//! these against `shimgate.exe` under Wine, where the stop signal is
//! Ctrl-C (`SHIMGATE_STOP_SIGNAL=INT`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::support::bin::{tempdir, Served};

/// The served binary, its config file, and the folder both live in (kept
/// for as long as the test holds it).
fn serve(extra: &str) -> (Served, std::path::PathBuf, crate::support::bin::TempDir) {
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    std::fs::write(
        &config,
        format!("[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n{extra}"),
    )
    .unwrap();
    (Served::start(&config, &[], &[]), config, dir)
}

fn connect(base: &str) -> TcpStream {
    let s = TcpStream::connect(base.trim_start_matches("http://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until the server closes; what it sent.
fn read_to_close(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn serve_names_the_config_it_loaded_in_status() {
    let (served, config, _dir) = serve("");
    let status = crate::support::client::get(&format!("{}/status", served.trae))
        .await
        .json();
    assert_eq!(
        status["config"]["path"],
        crate::support::bin::shown(&config)
    );
}

/// The threads of process `pid` named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(Result::ok)
                .filter(|t| {
                    std::fs::read_to_string(t.path().join("comm"))
                        .is_ok_and(|comm| comm.trim_end() == name)
                })
                .count()
        })
        .unwrap_or(0)
}

/// A streamed TRAE answer through `served` in direct mode from a scripted
/// SOLO upstream: the text the agent read.
async fn streamed_answer(served: &Served) -> String {
    use crate::support::trae;
    let resp = crate::support::client::send(
        http::Method::POST,
        &format!("{}{}", served.trae, trae::PATH),
        &[("content-type", "application/json")],
        serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
    )
    .await;
    assert_eq!(resp.status, http::StatusCode::OK, "{}", resp.text());
    shimgate_testkit::trae::digest(&resp.body).text
}

#[tokio::test]
async fn one_worker_serves_on_the_main_thread_and_more_workers_on_a_pool() {
    use crate::support::trae;
    use crate::support::upstream::Upstream;
    let up = Upstream::always(trae::reply(&trae::answer("pieces in order", None, 10))).await;
    let route = format!(
        "[[shims.trae.routes]]\nname = \"r\"\nurl = \"{}\"\n",
        up.url()
    );
    // Counted before any request: a blocking task (the route state file's
    // writer) would start a pool thread of the same name later.
    // The default: tokio's current-thread scheduler, no thread of its own.
    let (served, _, _dir) = serve(&route);
    // Thread names are read from Linux's /proc: a Windows binary's threads
    // under Wine carry Wine's names there, so only the answers are checked.
    let count_threads = !crate::support::bin::windows_binary();
    if count_threads {
        assert_eq!(
            threads_named(served.child.id(), shimgate::cmd::serve::WORKER_THREAD_NAME),
            0
        );
    }
    assert_eq!(streamed_answer(&served).await, "pieces in order");
    drop(served);
    // Three workers: the multi-threaded scheduler, answering the same.
    let (served, _, _dir) = serve(&format!("[limits]\nworkers = 3\n{route}"));
    if count_threads {
        assert!(threads_named(served.child.id(), shimgate::cmd::serve::WORKER_THREAD_NAME) >= 3);
    }
    assert_eq!(streamed_answer(&served).await, "pieces in order");
}

#[test]
fn a_head_sent_too_slowly_is_cut_at_the_header_read_timeout() {
    let (served, _, _dir) = serve("[limits]\nheader_read_timeout_ms = 300\n");
    let mut s = connect(&served.trae);
    s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let t0 = Instant::now();
    let answer = read_to_close(&mut s);
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "closed after {:?}",
        t0.elapsed()
    );
    assert!(!answer.contains("200 OK"), "{answer}");
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let (served, _, _dir) = serve("[limits]\nclient_idle_timeout_ms = 300\n");
    let mut s = connect(&served.trae);
    s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let answer = read_to_close(&mut s);
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
}

#[test]
fn connections_beyond_the_cap_are_refused_at_once_and_service_resumes() {
    let (served, _, _dir) = serve("[limits]\nmax_connections = 2\n");
    let held: Vec<TcpStream> = (0..2).map(|_| connect(&served.trae)).collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut third = connect(&served.trae);
    let answer = read_to_close(&mut third);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("TOO_MANY_CONNECTIONS"), "{answer}");
    drop(held);
    std::thread::sleep(Duration::from_millis(100));
    let mut fresh = connect(&served.trae);
    fresh
        .write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert!(read_to_close(&mut fresh).starts_with("HTTP/1.1 200 OK"));
}

#[test]
fn sigterm_with_nothing_streaming_stops_at_once_even_with_an_idle_connection_open() {
    let (mut served, _, _dir) = serve("");
    let mut s = connect(&served.trae);
    s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    let _ = s.read(&mut buf).unwrap();
    let t0 = Instant::now();
    served.signal("TERM");
    let status = served.child.wait().unwrap();
    let took = t0.elapsed();
    assert!(status.success(), "{status:?}");
    eprintln!("stopped in {took:?}");
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

#[tokio::test]
async fn a_stop_lets_a_stream_in_flight_finish_then_exits_0() {
    use crate::support::trae;
    use crate::support::upstream::{Reply, Upstream};
    let solo = trae::answer("drained to the end", None, 6);
    let (head, tail) = solo.split_at(solo.len() / 2);
    let up = Upstream::always(Reply::sse().chunk(head).sleep(1_500).chunk(tail).end()).await;
    let route = format!(
        "[[shims.trae.routes]]\nname = \"r\"\nurl = \"{}\"\n",
        up.url()
    );
    let (mut served, _, _dir) = serve(&route);
    let base = served.trae.clone();
    let call = tokio::spawn(async move {
        crate::support::client::send(
            http::Method::POST,
            &format!("{base}{}", trae::PATH),
            &[("content-type", "application/json")],
            serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
        )
        .await
    });
    // The upstream has the request and is half-way through its answer.
    assert!(crate::support::eventually(Duration::from_secs(20), || async { up.hits() == 1 }).await);
    std::thread::sleep(Duration::from_millis(300));
    served.signal("TERM");
    let resp = call.await.unwrap();
    assert_eq!(resp.status, http::StatusCode::OK, "{}", resp.text());
    assert_eq!(
        shimgate_testkit::trae::digest(&resp.body).text,
        "drained to the end"
    );
    let status = served.child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{}", served.stderr());
}

#[tokio::test]
async fn post_reload_rereads_the_file_on_every_os() {
    let (served, config, _dir) = serve("");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}[retry]\nmax_retries = 4\n")).unwrap();
    let r = crate::support::client::send(
        http::Method::POST,
        &format!("{}/reload", served.trae),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, http::StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["path"], crate::support::bin::shown(&config));
    let status = crate::support::client::get(&format!("{}/status", served.qoder))
        .await
        .json();
    assert_eq!(status["config"]["reloads"], 1);
}

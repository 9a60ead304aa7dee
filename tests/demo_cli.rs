//! `shimgate demo` as a user runs it: the real binary, its exit code, its
//! parseable summary line, and `--keep` serving `/status` afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

fn demo() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_shimgate"));
    c.arg("demo").env_remove("RUST_LOG");
    c
}

/// The number after `key=` in the summary line (`key` may hold a space:
/// `qoder folded`).
fn field(summary: &str, key: &str) -> u64 {
    summary
        .split(&format!("{key}="))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {key}= in {summary:?}"))
        .parse()
        .unwrap()
}

#[test]
fn twenty_turns_exit_0_and_fold_on_both_shims() {
    let out = demo().args(["--turns", "20"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stderr.is_empty(),
        "logs stay quiet during the demo: {stderr}"
    );
    let summary = stdout.lines().last().unwrap();
    assert!(summary.starts_with("summary: "), "{stdout}");
    assert!(summary.ends_with(" ok"), "{summary}");
    assert!(field(summary, "qoder folded") > 0, "{stdout}");
    assert!(field(summary, "trae folded") > 0, "{stdout}");
    assert!(field(summary, "saved") > 0, "{summary}");
    // It ends with the net figure: tokens saved net of the compressor's
    // own calls, as the providers counted them.
    assert!(field(summary, "net") > 0, "{summary}");
    assert!(
        stdout.contains("tokens (the providers' own counts; the agents' estimated from them):"),
        "{stdout}"
    );
    assert!(
        stdout.contains("all 20 turns answered as scripted"),
        "{stdout}"
    );
    for line in stdout.lines() {
        assert!(
            line.chars().count() <= 80,
            "wider than 80 columns: {line:?}"
        );
    }
    // One progress line per turn, counters rising.
    let turns = stdout
        .lines()
        .filter(|l| {
            l.contains(" | ")
                && l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
        })
        .count();
    assert_eq!(turns, 20, "{stdout}");
}

#[test]
fn zero_turns_is_a_clean_empty_run() {
    let out = demo().args(["--turns", "0"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let summary = stdout.lines().last().unwrap();
    assert!(
        summary.starts_with("summary: qoder folded=0 trae folded=0"),
        "{summary}"
    );
}

/// The demo child, killed when the test ends however it ends.
struct Kept(Child);

impl Drop for Kept {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(url: &str) -> (u16, Value) {
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = TcpStream::connect(host).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nhost: {host}\r\n\r\n").unwrap();
    // Read until the head and `content-length` bytes of body are in (the
    // connection stays open: no reliance on EOF).
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "connection closed early: {}",
            String::from_utf8_lossy(&raw)
        );
        raw.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&raw).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .expect("a content-length");
        if body.len() >= len {
            let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
            return (status, serde_json::from_str(&body[..len]).unwrap());
        }
    }
}

#[test]
fn keep_serves_status_until_stopped() {
    let mut child = demo()
        .args(["--turns", "3", "--keep"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let kept = Kept(child);
    let mut url = None;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("keep: ") {
            url = rest
                .split_whitespace()
                .find(|w| w.starts_with("http://") && w.ends_with("/status"))
                .map(str::to_owned);
            break;
        }
    }
    let url = url.expect("a `keep:` line with the /status URL");
    // Keep reading so the demo never writes into a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    let (status, doc) = get(&url);
    assert_eq!(status, 200);
    assert_eq!(doc["qoderShim"]["intercepted"], 3, "{doc}");
    assert!(
        doc["traeShim"]["intercepted"].as_u64().unwrap() >= 3,
        "{doc}"
    );
    assert_eq!(doc["qoderShim"]["fallback"], 0);
    assert!(doc["config"]["compressor"].is_string(), "{doc}");
    // Still serving on a second look.
    assert_eq!(get(&url).0, 200);
    drop(kept);
}

#[test]
fn log_format_json_applies_to_the_demo_logs() {
    let out = demo()
        .args(["--turns", "2", "--log-format", "json"])
        .env("RUST_LOG", "shimgate=info")
        .output()
        .unwrap();
    assert!(out.status.success(), "exit {:?}", out.status);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "RUST_LOG=shimgate=info logged nothing");
    for line in lines {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
}

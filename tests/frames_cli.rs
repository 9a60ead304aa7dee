//! End-to-end checks of `shimgate frames` through the real binary: exact
//! output, streaming before EOF, lossy UTF-8, the incomplete tail, errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Long enough for a loaded 2-core machine; a frames run that buffers until
/// EOF would never answer at all, so this only bounds a failing test.
const LINE_TIMEOUT: Duration = Duration::from_secs(20);

fn shimgate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shimgate"))
}

/// Runs `shimgate frames <args>` with `input` on stdin until it exits.
fn frames(args: &[&str], input: &[u8]) -> Output {
    let mut child = shimgate()
        .arg("frames")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from a thread: a large input would otherwise fill the pipe
    // while nobody reads stdout. A child that stops reading (an error) makes
    // the write fail, which is expected.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn stdout(out: &Output) -> &str {
    std::str::from_utf8(&out.stdout).unwrap()
}

#[test]
fn crlf_event_prints_exactly_one_json_line() {
    let out = frames(&[], b"data: a\r\ndata: b\r\n\r\n");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "{\"data\":\"a\\nb\"}\n");
    assert!(out.stderr.is_empty());
}

#[test]
fn all_fields_print_in_order() {
    let out = frames(
        &[],
        b"event: delta\nid: 7\nretry: 250\ndata: x\n\ndata: y\n\n",
    );
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"event\":\"delta\",\"data\":\"x\",\"id\":\"7\",\"retry\":250}\n{\"data\":\"y\",\"id\":\"7\"}\n"
    );
}

#[test]
fn events_are_printed_before_stdin_is_closed() {
    let mut child = shimgate()
        .arg("frames")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });

    stdin.write_all(b"data: first\n\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(
        rx.recv_timeout(LINE_TIMEOUT).unwrap(),
        "{\"data\":\"first\"}"
    );

    // The second event arrives in two writes; it prints once its blank line
    // does, still with stdin open.
    stdin.write_all(b"event: e\ndata: sec").unwrap();
    stdin.flush().unwrap();
    stdin.write_all(b"ond\n\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(
        rx.recv_timeout(LINE_TIMEOUT).unwrap(),
        "{\"event\":\"e\",\"data\":\"second\"}"
    );

    drop(stdin);
    assert!(child.wait().unwrap().success());
    reader.join().unwrap();
    assert!(rx.try_recv().is_err(), "nothing more after EOF");
}

#[test]
fn invalid_utf8_is_shown_lossily_without_failing() {
    let out = frames(&[], b"event: \xC3\ndata: a\xFFb\xE2\x82\n\n");
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim_end()).unwrap();
    assert_eq!(v["event"], "\u{FFFD}");
    assert_eq!(v["data"], "a\u{FFFD}b\u{FFFD}");
}

#[test]
fn incomplete_tail_is_printed_only_with_the_flag() {
    let input = b"data: kept\n\nevent: e\nid: 1\ndata: tail";
    let out = frames(&[], input);
    assert!(out.status.success());
    assert_eq!(stdout(&out), "{\"data\":\"kept\"}\n");

    let out = frames(&["--include-incomplete"], input);
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        "{\"data\":\"kept\"}\n{\"event\":\"e\",\"data\":\"tail\",\"id\":\"1\",\"incomplete\":true}\n"
    );
}

#[test]
fn garbage_input_never_crashes() {
    let input: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let out = frames(&["--include-incomplete"], &input);
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn over_limit_line_fails_with_a_clear_message() {
    let mut input = b"data: ok\n\ndata: ".to_vec();
    input.resize(input.len() + 16 * 1024 * 1024, b'a');
    let out = frames(&[], &input);
    assert!(!out.status.success());
    assert_eq!(stdout(&out), "{\"data\":\"ok\"}\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shimgate frames: sse line longer than 16777216 bytes"),
        "{err}"
    );
}

//! Proof under load: the real `shimgate serve` binary between scripted
//! agents and scripted upstreams (both wires, with faults), the reference
//! compressor in the middle, and checks that nothing is lost, doubled or
//! sent twice; then added latency against a bare forwarder, 2,000 slow
//! streams for memory and back-pressure, and idle and slowloris sockets
//! (closed within their timeouts while normal requests are served; RSS
//! with 1,000 idle sockets open). Prints `VERDICT ok …` or `VERDICT FAIL
//! …` and exits non-zero on any failure.
//!
//! Run: `cargo bench --bench load` (full, about 11 minutes, 9 of them
//! the latency phase), `-- --quick` (about 3.5 minutes), `-- --ci` (the
//! soak and the idle phase, small, about 35 s). Options: `--streams N` `--seconds S` (soak per leg) `--turns N`
//! `--path compressor|bare|direct|both` `--phases
//! soak,latency,streams,idle` `--big-streams N` `--streams-direct`
//! `--samples N` `--idle-sockets N` `--rss-sockets N` `--seed N`
//! `--question-chars N` `--tls` (`-- --help` describes them).
//! `SHIMGATE_BIN` overrides the binary.
//! Figures and method: `benches/README.md`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "load/agent.rs"]
mod agent;
#[path = "load/args.rs"]
mod args;
#[path = "load/check.rs"]
mod check;
#[path = "load/faults.rs"]
mod faults;
#[path = "load/findings.rs"]
mod findings;
#[path = "load/forwarder.rs"]
mod forwarder;
#[path = "load/gate.rs"]
mod gate;
#[path = "load/host.rs"]
mod host;
#[path = "load/idle.rs"]
mod idle;
#[path = "load/judge.rs"]
mod judge;
#[path = "load/latency.rs"]
mod latency;
#[path = "load/profile.rs"]
mod profile;
#[path = "load/report.rs"]
mod report;
#[path = "load/soak.rs"]
mod soak;
#[path = "load/stats.rs"]
mod stats;
#[path = "load/streams.rs"]
mod streams;
#[path = "load/wire.rs"]
mod wire;

use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    match argv.as_slice() {
        [_, flag, upstream] if flag == "--forwarder" => {
            forwarder::serve_forever(upstream.clone(), None);
        }
        [_, flag, upstream, tls, state] if flag == "--forwarder" && tls == "--tls" => {
            forwarder::serve_forever(upstream.clone(), Some(state.into()));
        }
        _ => {}
    }
    // `cargo test --all-targets` runs bench binaries too, in a debug build
    // and without `--bench`: a soak timed for release builds means nothing
    // there, so only `cargo bench` (which passes `--bench`) measures.
    if !argv.iter().any(|a| a == "--bench") {
        println!("load: skipped (run it with `cargo bench --bench load`)");
        return ExitCode::SUCCESS;
    }
    let args = args::Args::parse(argv);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    shimgate_testkit::upstream::origin();
    let ok = runtime.block_on(report::run(args));
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

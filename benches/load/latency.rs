//! Added latency, in one run and interleaved: agent → upstream directly,
//! agent → bare hyper forwarder (the bench's own, in a process of its own)
//! → upstream, agent → `shimgate
//! compressor` forwarding untouched (a plain hyper proxy in its own process)
//! → upstream, and agent → shimgate (direct mode: no compressor) → upstream,
//! at concurrency 1 and 64, with each process's CPU time per call. Cases: a
//! small pass-through call (time to the whole answer), and a streamed
//! answer on each wire (time to the first content piece, the delay of every
//! piece from the upstream's write to the agent's read, and the gap between
//! pieces). The upstream stamps each piece with its send time on the
//! bench's own clock, so per-piece delays need no subtraction.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::json;

use super::agent::{collect, timed, Conn};
use super::findings::Findings;
use super::gate::{self, Proc};
use super::stats::{us, Summary};
use super::wire::{self, Answer, Wire};
use shimgate_testkit::upstream::{now_ns, Options, Recorded, Reply, Upstream};

/// Stamped pieces per streamed answer.
const PIECES: usize = 16;
/// Pause between pieces: a fast model's token rate.
const PACE: Duration = Duration::from_millis(1);
/// Concurrency levels measured.
const LEVELS: [usize; 2] = [1, 64];
/// Rounds the modes take turns in, so drift on a shared machine hits all
/// three alike.
const ROUNDS: usize = 5;

/// Targets (DESIGN and the load issue), checked at concurrency 1.
const TARGET_CALL_ADDED_P99_US: f64 = 150.0;
const TARGET_TTFT_ADDED_P99_US: f64 = 300.0;
const TARGET_RATIO_TO_BARE: f64 = 1.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Mode {
    Direct,
    Bare,
    /// `shimgate compressor` on paths it forwards untouched: a hyper proxy
    /// in its own process, built from the same client and listener code.
    Proxy,
    Shimgate,
}

const MODES: [Mode; 4] = [Mode::Direct, Mode::Bare, Mode::Proxy, Mode::Shimgate];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Case {
    Call,
    Stream(Wire),
}

const CASES: [Case; 3] = [
    Case::Call,
    Case::Stream(Wire::Qoder),
    Case::Stream(Wire::Trae),
];

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Call => "call",
            Case::Stream(Wire::Qoder) => "qoder stream",
            Case::Stream(Wire::Trae) => "trae stream",
        }
    }
}

/// Samples of one (case, concurrency, mode), in nanoseconds.
#[derive(Debug, Default, Clone)]
struct Samples {
    /// Call: request to whole answer. Stream: request to first piece.
    first: Vec<u64>,
    /// Upstream write to agent read, every piece.
    delay: Vec<u64>,
    /// Between consecutive pieces at the agent.
    gap: Vec<u64>,
    errors: usize,
}

/// The latency phase's figures.
pub struct LatencyReport {
    rows: Vec<Row>,
    pub findings: Findings,
    rss_kib: u64,
}

struct Row {
    case: Case,
    level: usize,
    first: HashMap<Mode, Summary>,
    delay: HashMap<Mode, Summary>,
    gap: HashMap<Mode, Summary>,
    errors: usize,
    /// CPU time (user + system) per call of the two processes under test.
    cpu_per_call: HashMap<Mode, Duration>,
}

impl Row {
    fn added(&self, m: &HashMap<Mode, Summary>, mode: Mode) -> (i64, i64) {
        let d = m[&Mode::Direct];
        let x = m[&mode];
        (x.p50 as i64 - d.p50 as i64, x.p99 as i64 - d.p99 as i64)
    }

    /// shimgate's added p99 over the bare forwarder's.
    fn ratio(&self) -> f64 {
        let (_, s) = self.added(&self.first, Mode::Shimgate);
        let (_, b) = self.added(&self.first, Mode::Bare);
        s as f64 / (b.max(1)) as f64
    }

    /// The ratio as text; none when the bare forwarder's added p99 is not
    /// above zero (its p99 fell below direct's: noise, not a yardstick).
    fn ratio_text(&self) -> String {
        if self.added(&self.first, Mode::Bare).1 > 0 {
            format!("{:.2}", self.ratio())
        } else {
            "—".to_string()
        }
    }
}

fn sus(ns: i64) -> String {
    format!("{:+.1}", ns as f64 / 1000.0)
}

impl LatencyReport {
    pub fn print(&self) {
        println!("latency (µs, p50 / p99; added = mode − direct; ratio = shimgate added p99 / bare forwarder added p99;");
        println!("  plain proxy = `shimgate compressor` forwarding untouched, a separate hyper process like shimgate):");
        println!("| case | c | n | direct | bare forwarder | plain proxy | shimgate | bare added | plain proxy added | shimgate added | ratio | CPU/call bare | CPU/call plain proxy | CPU/call shimgate | errors |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let cell = |m: Mode| format!("{} / {}", us(r.first[&m].p50), us(r.first[&m].p99));
            let add = |m: Mode| {
                let (a50, a99) = r.added(&r.first, m);
                format!("{} / {}", sus(a50), sus(a99))
            };
            println!(
                "| {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} µs | {} µs | {} µs | {} |",
                r.case.name(),
                if r.case == Case::Call {
                    "(whole answer)"
                } else {
                    "TTFT"
                },
                r.level,
                r.first[&Mode::Shimgate].n,
                cell(Mode::Direct),
                cell(Mode::Bare),
                cell(Mode::Proxy),
                cell(Mode::Shimgate),
                add(Mode::Bare),
                add(Mode::Proxy),
                add(Mode::Shimgate),
                r.ratio_text(),
                r.cpu_per_call[&Mode::Bare].as_micros(),
                r.cpu_per_call[&Mode::Proxy].as_micros(),
                r.cpu_per_call[&Mode::Shimgate].as_micros(),
                r.errors
            );
        }
        println!(
            "per piece (streams; µs p50 / p99): delay = upstream write → agent read; gap = between pieces ({} µs pacing)",
            PACE.as_micros()
        );
        println!("| case | c | delay direct | delay bare | delay plain proxy | delay shimgate | gap direct | gap bare | gap plain proxy | gap shimgate |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for r in self.rows.iter().filter(|r| r.case != Case::Call) {
            let d = |m: Mode| format!("{} / {}", us(r.delay[&m].p50), us(r.delay[&m].p99));
            let g = |m: Mode| format!("{} / {}", us(r.gap[&m].p50), us(r.gap[&m].p99));
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.case.name(),
                r.level,
                d(Mode::Direct),
                d(Mode::Bare),
                d(Mode::Proxy),
                d(Mode::Shimgate),
                g(Mode::Direct),
                g(Mode::Bare),
                g(Mode::Proxy),
                g(Mode::Shimgate)
            );
        }
        println!("shimgate RSS after the latency phase: {} KiB", self.rss_kib);
    }

    /// The verdict line's part.
    pub fn headline(&self) -> String {
        let pick = |case: Case| self.rows.iter().find(|r| r.case == case && r.level == 1);
        let mut parts = Vec::new();
        if let Some(r) = pick(Case::Call) {
            parts.push(format!(
                "added p99 c=1 {} µs (bare {} µs, ratio {:.2})",
                sus(r.added(&r.first, Mode::Shimgate).1),
                sus(r.added(&r.first, Mode::Bare).1),
                r.ratio()
            ));
        }
        for w in [Wire::Qoder, Wire::Trae] {
            if let Some(r) = pick(Case::Stream(w)) {
                parts.push(format!(
                    "{} TTFT added p99 {} µs",
                    w.name(),
                    sus(r.added(&r.first, Mode::Shimgate).1)
                ));
            }
        }
        parts.join(", ")
    }
}

/// Runs the latency phase with `samples` calls per mode at concurrency 1
/// (streams: a tenth as many answers, sixteen pieces each).
pub async fn run(samples: usize) -> LatencyReport {
    let up = Upstream::start_with(
        Options {
            record: false,
            ..Options::default()
        },
        script,
    )
    .await;
    let bare_proc = gate::bare_forwarder(&up.url()).await;
    let bare = bare_proc.addr("");
    let toml = format!(
        "[shims.qoder]\nlisten = \"127.0.0.1:{}\"\ncodec = \"plain\"\n[[shims.qoder.routes]]\nname = \"lat\"\nurl = \"{}\"\n\
         [shims.trae]\nlisten = \"127.0.0.1:{}\"\n[[shims.trae.routes]]\nname = \"lat\"\nurl = \"{}\"\n",
        gate::free_port(),
        up.url(),
        gate::free_port(),
        up.url()
    );
    let gate = gate::serve("latency", &toml, "error").await;
    let proxy = gate::compressor(&up.url(), 1_000_000).await;
    let targets = Targets {
        up: up.addr,
        bare,
        proxy: proxy.addr(""),
        qoder: gate.addr("qoder"),
        trae: gate.addr("trae"),
    };
    let mut rows = Vec::new();
    for level in LEVELS {
        for case in CASES {
            rows.push(measure(&targets, (&gate, &proxy, &bare_proc), case, level, samples).await);
        }
    }
    let rss_kib = gate.memory_kib().0;
    let findings = check_targets(&rows);
    stop(gate).await;
    stop(proxy).await;
    stop(bare_proc).await;
    LatencyReport {
        rows,
        findings,
        rss_kib,
    }
}

async fn stop(p: Proc) {
    p.stop().await;
}

fn check_targets(rows: &[Row]) -> Findings {
    let mut f = Findings::default();
    for r in rows.iter().filter(|r| r.level == 1) {
        let added = r.added(&r.first, Mode::Shimgate).1 as f64 / 1000.0;
        let limit = match r.case {
            Case::Call => TARGET_CALL_ADDED_P99_US,
            Case::Stream(_) => TARGET_TTFT_ADDED_P99_US,
        };
        if added > limit {
            f.add(
                "limits",
                format!(
                    "{} at c=1: added p99 {added:.1} µs over the {limit} µs target",
                    r.case.name()
                ),
            );
        }
        if r.case == Case::Call && r.ratio() > TARGET_RATIO_TO_BARE {
            f.add(
                "limits",
                format!(
                    "{} at c=1: added p99 is {:.2}× the bare forwarder's (target {TARGET_RATIO_TO_BARE}×)",
                    r.case.name(),
                    r.ratio()
                ),
            );
        }
    }
    for r in rows.iter().filter(|r| r.errors > 0) {
        f.add(
            "limits",
            format!(
                "{} at c={}: {} calls failed",
                r.case.name(),
                r.level,
                r.errors
            ),
        );
    }
    f
}

/// The latency upstream: a small JSON answer for pass-through calls, a
/// stamped stream on each wire.
fn script(req: &Recorded, _: usize) -> Reply {
    let answer = Answer {
        pieces: PIECES,
        pace: Some(PACE),
        stamped: true,
        // Bare `[DONE]` and a closed body: the connection is reused.
        ending: 1,
        ..Answer::plain(0, PIECES)
    };
    match Wire::of_path(&req.path) {
        Some(Wire::Qoder) => wire::qoder_answer(&answer),
        Some(Wire::Trae) => wire::trae_answer(&answer),
        None => Reply::json_sized(
            200,
            &[],
            "{\"detail\":{\"model\":\"glm-5.3\",\"window\":1000000,\"ok\":true}}",
        ),
    }
}

struct Targets {
    up: SocketAddr,
    bare: SocketAddr,
    proxy: SocketAddr,
    qoder: SocketAddr,
    trae: SocketAddr,
}

impl Targets {
    fn addr(&self, mode: Mode, case: Case) -> SocketAddr {
        match (mode, case) {
            (Mode::Direct, _) => self.up,
            (Mode::Bare, _) => self.bare,
            (Mode::Proxy, _) => self.proxy,
            (Mode::Shimgate, Case::Stream(Wire::Trae)) => self.trae,
            (Mode::Shimgate, _) => self.qoder,
        }
    }
}

async fn measure(
    t: &Targets,
    (gate, proxy, bare): (&Proc, &Proc, &Proc),
    case: Case,
    level: usize,
    samples: usize,
) -> Row {
    let per_mode = match case {
        Case::Call => samples,
        Case::Stream(_) => (samples / 10).max(20),
    };
    // Each worker makes its share; at c=64 at least a few calls each.
    let per_worker = (per_mode / level).max(8);
    let mut all: HashMap<Mode, Samples> = HashMap::new();
    let warm = (per_worker / 10).max(2);
    let mut cpu: HashMap<Mode, Duration> = HashMap::new();
    let mut calls = 0usize;
    for round in 0..=ROUNDS {
        for mode in MODES {
            let addr = t.addr(mode, case);
            let n = if round == 0 {
                warm
            } else {
                per_worker.div_ceil(ROUNDS)
            };
            let mut workers = Vec::new();
            let process = match mode {
                Mode::Shimgate => Some(gate),
                Mode::Proxy => Some(proxy),
                Mode::Bare => Some(bare),
                Mode::Direct => None,
            };
            let cpu_before = process.map(Proc::cpu).unwrap_or_default();
            for _ in 0..level {
                workers.push(tokio::spawn(worker(addr, case, n)));
            }
            for w in workers {
                let s = w.await.unwrap_or_default();
                if round > 0 {
                    let e = all.entry(mode).or_default();
                    e.first.extend(s.first);
                    e.delay.extend(s.delay);
                    e.gap.extend(s.gap);
                    e.errors += s.errors;
                }
            }
            if let (true, Some(p)) = (round > 0, process) {
                *cpu.entry(mode).or_default() += p.cpu().saturating_sub(cpu_before);
                if mode == Mode::Shimgate {
                    calls += n * level;
                }
            }
        }
    }
    let sum = |f: fn(&Samples) -> &Vec<u64>| -> HashMap<Mode, Summary> {
        MODES
            .iter()
            .map(|m| (*m, Summary::of(all.get(m).map(f).map_or(&[][..], |v| v))))
            .collect()
    };
    Row {
        case,
        level,
        first: sum(|s| &s.first),
        delay: sum(|s| &s.delay),
        gap: sum(|s| &s.gap),
        errors: all.values().map(|s| s.errors).sum(),
        cpu_per_call: [Mode::Bare, Mode::Proxy, Mode::Shimgate]
            .iter()
            .map(|m| {
                (
                    *m,
                    cpu.get(m).copied().unwrap_or_default() / calls.max(1) as u32,
                )
            })
            .collect(),
    }
}

/// One virtual agent making `n` calls back to back on one connection.
async fn worker(addr: SocketAddr, case: Case, n: usize) -> Samples {
    let mut conn = Conn::new(addr);
    let mut s = Samples::default();
    let (path, body) = match case {
        Case::Call => (
            wire::PASSTHROUGH_PATH,
            json!({"ask": "detail", "pad": "x".repeat(160)}),
        ),
        Case::Stream(Wire::Qoder) => (
            wire::QODER_PATH,
            wire::qoder_ask("lat-1", &[json!({"role": "user", "content": "hi"})]),
        ),
        Case::Stream(Wire::Trae) => (
            wire::TRAE_PATH,
            wire::trae_body(&[wire::solo_text("user", "hi")]),
        ),
    };
    let body = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
    let headers = [("content-type", "application/json".to_string())];
    for _ in 0..n {
        let t0 = now_ns();
        let resp = match conn.send(Method::POST, path, &headers, body.clone()).await {
            Ok(r) => r,
            Err(_) => {
                s.errors += 1;
                continue;
            }
        };
        if resp.status() != 200 {
            s.errors += 1;
            let _ = collect(resp, Duration::from_secs(5)).await;
            continue;
        }
        match case {
            Case::Call => {
                let whole = collect(resp, Duration::from_secs(5)).await;
                if whole.broken.is_some() {
                    s.errors += 1;
                    continue;
                }
                s.first.push(now_ns() - t0);
            }
            Case::Stream(_) => {
                let got = timed(resp, Duration::from_secs(5)).await;
                if got.broken.is_some() || got.pieces.len() != PIECES {
                    s.errors += 1;
                    continue;
                }
                s.first.push(got.pieces[0].0.saturating_sub(t0));
                for (i, (at, sent)) in got.pieces.iter().enumerate() {
                    s.delay.push(at.saturating_sub(*sent));
                    if i > 0 {
                        s.gap.push(at.saturating_sub(got.pieces[i - 1].0));
                    }
                }
            }
        }
    }
    s
}

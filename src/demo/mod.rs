//! `shimgate demo`: both shims, scripted providers on the qoder and trae
//! wires and the reference compressor, all in one process on loopback, so a
//! user sees compression working (`folded` rising) without any account,
//! network or config file.

/// Prints a line on stdout. A closed stdout (`shimgate demo | head`) is no
/// reason to die (println! would panic), so write errors are ignored.
macro_rules! say {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)+) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)+);
    }};
}

mod agent;
mod providers;
mod report;
mod script;
mod stack;

use std::process::ExitCode;
use std::time::Duration;

use crate::cmd::cli::LogFormat;
use agent::{QoderAgent, TraeAgent};
use report::ShimView;
use stack::Stack;

/// The demo's compression threshold: low enough that `folded` rises for
/// both shims within 20 turns (each turn adds about 500 characters), high
/// enough that the first turns show `compacted` (the preamble) without it.
pub const DEMO_THRESHOLD_CHARS: usize = 3000;

/// Turns the demo's compressor keeps verbatim.
pub const DEMO_KEEP_TURNS: usize = 2;

/// Grace for streams still open when the demo stops (none should be).
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Runs the demo: `turns` turns per shim; `keep` serves on afterwards until
/// Ctrl-C. Exit 0 when every turn got its scripted answer.
pub fn run(turns: u32, keep: bool, log_format: LogFormat) -> ExitCode {
    // One thread is plenty for loopback traffic, and it lets a scoped
    // subscriber keep shimgate's info logs out of the demo's output.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shimgate demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Warnings only, unless `RUST_LOG` asks for more: the demo's own output
    // is its report.
    let logs = crate::cmd::serve::log_subscriber(log_format, "warn");
    tracing::subscriber::with_default(logs, || runtime.block_on(demo(turns, keep)))
}

fn print_intro(s: &Stack, turns: u32) {
    say!("shimgate demo: {turns} turns per agent, all on loopback, no network");
    say!("  qoder provider  {}  (envelope wire)", s.qoder.url());
    say!("  trae provider   {}  (SOLO wire)", s.trae.url());
    say!("  qoder shim      {}", s.qoder_shim);
    say!("  trae shim       {}", s.trae_shim);
    say!(
        "  compressor      {} → {}",
        s.compressor.url(),
        s.qoder_shim
    );
    say!(
        "                  past {DEMO_THRESHOLD_CHARS} chars it summarises all but the last {DEMO_KEEP_TURNS} turns"
    );
    say!();
    say!("i/f/c/F/x = intercepted/forwarded/compacted/folded/fallback (/status);");
    say!("sent → back = message chars sent to the compressor → what it sent on;");
    say!("ms = slowest request of the turn, agent request to last byte");
    say!();
    for line in report::table_header() {
        say!("{line}");
    }
}

/// What the turns produced.
#[derive(Default)]
struct Tally {
    turns_done: u32,
    /// The turn that failed (its reason is printed in the table).
    failed_turn: Option<u32>,
    failure: Option<String>,
    latencies: Vec<Duration>,
    /// Content sent to the compressor / come back, per shim, summed.
    qoder_content: (u64, u64),
    trae_content: (u64, u64),
}

async fn play(s: &Stack, turns: u32) -> Tally {
    let client = agent::client();
    let mut qoder = QoderAgent::new(client.clone(), &s.qoder_shim);
    let mut trae = TraeAgent::new(client, &s.trae_shim);
    let mut tally = Tally::default();
    for turn in 1..=turns {
        let (q, t) = tokio::join!(qoder.turn(turn), trae.turn(turn));
        let (q, t) = match (q, t) {
            (Ok(q), Ok(t)) => (q, t),
            (q, t) => {
                let mut why = Vec::new();
                if let Err(e) = q {
                    why.push(format!("qoder: {e}"));
                }
                if let Err(e) = t {
                    why.push(format!("trae: {e}"));
                }
                let why = why.join("; ");
                say!("{turn:>4} FAILED {why}");
                tally.failed_turn = Some(turn);
                tally.failure = Some(why);
                break;
            }
        };
        let doc = s.running.status();
        for (sum, key, n) in [
            (&mut tally.qoder_content, "qoderShim", q.len()),
            (&mut tally.trae_content, "traeShim", t.len()),
        ] {
            for (before, after) in report::recent(&doc, key, n) {
                sum.0 += before;
                sum.1 += after;
            }
        }
        let slowest = q.iter().chain(&t).max().copied().unwrap_or_default();
        tally.latencies.extend(q.into_iter().chain(t));
        tally.turns_done = turn;
        say!(
            "{}",
            report::turn_line(
                turn,
                &ShimView::read(&doc, "qoderShim"),
                &ShimView::read(&doc, "traeShim"),
                slowest
            )
        );
    }
    tally
}

async fn demo(turns: u32, keep: bool) -> ExitCode {
    let stack = match stack::start().await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("shimgate demo: {e}");
            return ExitCode::FAILURE;
        }
    };
    print_intro(&stack, turns);
    let mut tally = play(&stack, turns).await;
    let doc = stack.running.status();
    let (q, t) = (
        ShimView::read(&doc, "qoderShim"),
        ShimView::read(&doc, "traeShim"),
    );
    let mut problems: Vec<String> = [&stack.qoder, &stack.trae]
        .iter()
        .flat_map(|p| p.log().problems())
        .collect();
    if q.fallback + t.fallback > 0 {
        problems.push(format!(
            "{} requests fell back to direct sending: {} {}",
            q.fallback + t.fallback,
            doc["qoderShim"]["lastError"],
            doc["traeShim"]["lastError"]
        ));
    }
    if tally.failure.is_none() && !problems.is_empty() {
        tally.failure = Some(problems.join("; "));
    }
    let held = stack::holds_released(&stack.qoder).await;
    let status_url = format!("{}/status", stack.qoder_shim);
    let tokens = report::Tokens::read(&doc);
    print_summary(&stack, &tally, (&q, &t, &tokens), held, &status_url);
    if keep {
        say!();
        say!("keep: serving until Ctrl-C; try curl {status_url}");
        say!(
            "  qoder shim {}  trae shim {}  compressor {}",
            stack.qoder_shim,
            stack.trae_shim,
            stack.compressor.url()
        );
        crate::compressor::wait_for_stop().await;
    }
    let Stack {
        running,
        compressor,
        ..
    } = stack;
    drop(compressor);
    running.shutdown(STOP_GRACE).await;
    if tally.failure.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn print_summary(
    s: &Stack,
    tally: &Tally,
    (q, t, tokens): (&ShimView, &ShimView, &report::Tokens),
    (held, released): (u64, u64),
    status_url: &str,
) {
    say!();
    match &tally.failure {
        None => say!(
            "all {} turns answered as scripted on both wires ({} requests)",
            tally.turns_done,
            tally.latencies.len()
        ),
        Some(why) => match tally.failed_turn {
            Some(turn) => say!(
                "FAILED at turn {turn}, after {} good turns (reason above)",
                tally.turns_done
            ),
            None => say!("FAILED: {why}"),
        },
    }
    say!();
    for line in report::counters_table(q, t) {
        say!("{line}");
    }
    say!();
    say!("message content, sent to the compressor → sent upstream:");
    let (qc, tc) = (tally.qoder_content, tally.trae_content);
    say!("{}", report::content_line("qoder", qc.0, qc.1));
    say!("{}", report::content_line("trae", tc.0, tc.1));
    let c = s.compressor.counters();
    say!(
        "compressor:  {} requests, {} summarised, {} refused",
        c.requests,
        c.compressed,
        c.rejected
    );
    say!(
        "providers:   qoder {} answers, trae {} answers, {} requests refused;",
        s.qoder.log().answered(),
        s.trae.log().answered(),
        s.qoder.log().problems().len() + s.trae.log().problems().len()
    );
    say!("             {released} of {held} qoder connections held open after event:finish");
    say!("             were closed by shimgate (it stops reading at the end frame)");
    let p50 = report::ms(report::percentile(&tally.latencies, 50.0));
    let p99 = report::ms(report::percentile(&tally.latencies, 99.0));
    say!("latency:     agent request → last byte, p50 {p50:.1} ms, p99 {p99:.1} ms");
    say!("status:      {status_url} (--keep to curl it)");
    say!();
    for line in tokens.lines() {
        say!("{line}");
    }
    let saved = (qc.0 + tc.0) as i64 - (qc.1 + tc.1) as i64;
    // One parseable line (scripts and tests read it), within 80 columns;
    // it ends with the net figure: the tokens compression saved, net of
    // the compressor's own calls.
    say!(
        "summary: qoder folded={} trae folded={} saved={saved} p50={p50:.1}ms net={} {}",
        q.folded,
        t.folded,
        tokens.net,
        if tally.failure.is_some() {
            "FAILED"
        } else {
            "ok"
        }
    );
}

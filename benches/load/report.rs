//! Runs the phases a command line asks for, prints their figures and the
//! one-line verdict.

use std::time::Instant;

use super::args::Args;
use super::findings::Findings;
use super::latency::LatPath;
use super::soak::{self, Chain, LegReport, Path, Settings};
use super::{gate, idle, latency, profile, streams};

/// Runs everything asked for; true when nothing failed.
pub async fn run(args: Args) -> bool {
    let started = Instant::now();
    println!(
        "load: shimgate {} · {} cores · fd cap {} · seed {:#x}",
        gate::binary().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        gate::fd_cap(),
        args.seed
    );
    let mut findings = Findings::default();
    let mut figures: Vec<String> = Vec::new();
    if args.phases.soak {
        for (i, (path, chain)) in legs(&args).into_iter().enumerate() {
            let leg = soak::run(Settings {
                path,
                chain,
                dead_primary: args.dead_primary,
                streams: args.streams,
                seconds: args.seconds,
                turns: args.turns,
                seed: args.seed.wrapping_add(i as u64),
                question_chars: args.question_chars,
            })
            .await;
            print_leg(&leg);
            figures.push(format!(
                "soak[{}{}] calls={} tries={} ok={} failed={}",
                path.name(),
                leg_suffix(chain),
                leg.calls,
                leg.upstream_tries,
                leg.succeeded,
                leg.failed
            ));
            findings.extend(&leg.findings);
        }
    }
    let lat_paths: Vec<LatPath> = [LatPath::Direct, LatPath::Compressor]
        .into_iter()
        .filter(|p| match p {
            LatPath::Direct => args.paths.iter().any(|a| a == "direct" || a == "bare"),
            LatPath::Compressor => args.paths.iter().any(|a| a == "compressor"),
        })
        .collect();
    if args.phases.latency {
        let r = latency::run(args.samples, &lat_paths, args.tls).await;
        r.print();
        figures.push(r.headline());
        findings.extend(&r.findings);
    }
    if args.phases.streams {
        let r = streams::run(args.big_streams, args.streams_direct).await;
        r.print();
        figures.push(r.headline());
        findings.extend(&r.findings);
    }
    if args.phases.idle {
        let r = idle::run(args.rss_sockets, args.idle_sockets).await;
        r.print();
        figures.push(r.headline());
        findings.extend(&r.findings);
    }
    if args.phases.profile {
        let r = profile::run(args.profile_calls, &lat_paths).await;
        r.print();
        figures.push(r.headline());
        findings.extend(&r.findings);
    }
    let ok = findings.is_empty();
    if !ok {
        println!("findings:");
        findings.print();
    }
    println!(
        "VERDICT {} problems: {} · {} · {:.0} s",
        if ok { "ok" } else { "FAIL" },
        findings.summary(),
        figures.join(" · "),
        started.elapsed().as_secs_f64()
    );
    ok
}

/// The soak legs: every path with the classic chain (when asked for),
/// then each other chain once, on the direct path.
fn legs(args: &Args) -> Vec<(Path, Chain)> {
    let mut legs = Vec::new();
    let chains: Vec<Chain> = args
        .chains
        .iter()
        .map(|c| match c.as_str() {
            "budget" => Chain::Budget,
            "learn" => Chain::Learn,
            _ => Chain::Classic,
        })
        .collect();
    if chains.contains(&Chain::Classic) {
        for p in &args.paths {
            let path = match p.as_str() {
                "direct" => Path::Direct,
                "bare" => Path::Bare,
                _ => Path::Reference,
            };
            legs.push((path, Chain::Classic));
        }
    }
    for chain in chains.into_iter().filter(|c| *c != Chain::Classic) {
        legs.push((Path::Direct, chain));
    }
    legs
}

fn leg_suffix(chain: Chain) -> String {
    if chain == Chain::Classic {
        String::new()
    } else {
        format!("+{}", chain.name())
    }
}

fn print_leg(leg: &LegReport) {
    let s = &leg.settings;
    println!(
        "soak [{}{}{}]: {} conversations, {:.1} s: {} calls ({} inference, {} pass-through), {} upstream tries, {} ok, {} failed as planned or not; peak RSS {} KiB; problems: {}",
        s.path.name(),
        leg_suffix(s.chain),
        if s.dead_primary { ", dead primary" } else { "" },
        s.streams,
        leg.elapsed.as_secs_f64(),
        leg.calls,
        leg.inference,
        leg.passthrough,
        leg.upstream_tries,
        leg.succeeded,
        leg.failed,
        leg.peak_rss_kib,
        leg.findings.summary()
    );
    let calls = leg.calls.max(1) as f64;
    println!(
        "  upstream requests per call {:.2} (primaries {:.2}); retries skipped {} (budget spent {}, breaker openings {})",
        leg.upstream_tries as f64 / calls,
        leg.primary_tries as f64 / calls,
        leg.retries_skipped,
        leg.budget_exhausted,
        leg.breaker_opens
    );
    let faults: Vec<String> = leg.faults.iter().map(|(k, v)| format!("{k}×{v}")).collect();
    println!("  faults played: {}", faults.join(", "));
    for shim in ["qoderShim", "traeShim"] {
        let st = &leg.status[shim];
        println!(
            "  /status {shim}: intercepted {} forwarded {} fallback {} compacted {} folded {} sideRequests {} rids live {}",
            st["intercepted"], st["forwarded"], st["fallback"], st["compacted"], st["folded"], st["sideRequests"], st["rids"]["live"]
        );
    }
}

//! Runs the phases a command line asks for, prints their figures and the
//! one-line verdict.

use std::time::Instant;

use super::args::Args;
use super::findings::Findings;
use super::latency::LatPath;
use super::soak::{self, LegReport, Path, Settings};
use super::{gate, latency, profile, streams};

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
        for (i, p) in args.paths.iter().enumerate() {
            let path = match p.as_str() {
                "direct" => Path::Direct,
                "bare" => Path::Bare,
                _ => Path::Reference,
            };
            let leg = soak::run(Settings {
                path,
                streams: args.streams,
                seconds: args.seconds,
                turns: args.turns,
                seed: args.seed.wrapping_add(i as u64),
                question_chars: args.question_chars,
            })
            .await;
            print_leg(&leg);
            figures.push(format!(
                "soak[{}] calls={} tries={} ok={} failed={}",
                path.name(),
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
        let r = latency::run(args.samples, &lat_paths).await;
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

fn print_leg(leg: &LegReport) {
    let s = &leg.settings;
    println!(
        "soak [{}]: {} conversations, {:.1} s: {} calls ({} inference, {} pass-through), {} upstream tries, {} ok, {} failed as planned or not; peak RSS {} KiB; problems: {}",
        s.path.name(),
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

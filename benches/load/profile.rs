//! Where the time goes, in instructions: shimgate and the bare forwarders
//! of the latency phase run under `valgrind --tool=callgrind`, and each
//! case is played `N` times on one connection at a time with the counters
//! zeroed before and dumped after, so every process's instructions per
//! call come out of one run, whatever else the machine is doing (wall
//! time under a shared load moves by ±30 %; instruction counts by well
//! under 1 %). The ratios are shimgate's over the bare forwarder's (both
//! forwarders together on the compressor path), the same yardstick as the
//! latency phase.
//!
//! Run: `cargo bench --bench load -- --phases profile [--path direct|compressor]
//! [--profile-calls N]` (about 2 minutes). The dumps stay in the scratch
//! directory it prints; `callgrind_annotate FILE` reads them.
//! `LOAD_PROFILE_TOOL=dhat` runs the same calls under DHAT instead (heap
//! blocks by allocation stack, written when the processes stop: every
//! case of a run in one file per process, no per-call figures).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::findings::Findings;
use super::gate::{self, Proc};
use super::latency::{self, Case, CompressorPath, LatPath, PIECES};
use super::wire::Wire;
use shimgate_testkit::upstream::{Options, Upstream};

/// Calls made before the counters are zeroed: pools, lazily built state.
const WARM: usize = 20;

/// Exclusive top symbols printed per shimgate dump.
const TOP: usize = 14;

/// One measured (path, case): instructions per call of each process.
struct Line {
    path: LatPath,
    case: Case,
    calls: usize,
    /// (what, instructions per call, dump file).
    procs: Vec<(String, f64, PathBuf)>,
    shimgate: f64,
    bare: f64,
    top: Vec<String>,
}

/// The phase's figures.
pub struct ProfileReport {
    dir: PathBuf,
    lines: Vec<Line>,
    pub findings: Findings,
}

impl ProfileReport {
    pub fn print(&self) {
        println!(
            "profile (callgrind, instructions per call; dumps in {}):",
            self.dir.display()
        );
        println!("| path | case | calls | shimgate | bare forwarder | ratio | per piece shimgate | per piece bare | processes |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for l in &self.lines {
            let per_piece = |x: f64| match l.case {
                Case::Call => "—".to_string(),
                Case::Stream(_) => format!("{:.0}", x / PIECES as f64),
            };
            let procs: Vec<String> = l
                .procs
                .iter()
                .map(|(w, ir, _)| format!("{w} {ir:.0}"))
                .collect();
            println!(
                "| {} | {} | {} | {:.0} | {:.0} | {:.2} | {} | {} | {} |",
                l.path.name(),
                l.case.name(),
                l.calls,
                l.shimgate,
                l.bare,
                l.shimgate / l.bare.max(1.0),
                per_piece(l.shimgate),
                per_piece(l.bare),
                procs.join(", ")
            );
        }
        for l in &self.lines {
            println!(
                "top symbols, shimgate, {} {} (exclusive Ir over {} calls):",
                l.path.name(),
                l.case.name(),
                l.calls
            );
            for t in &l.top {
                println!("    {t}");
            }
        }
    }

    pub fn headline(&self) -> String {
        let parts: Vec<String> = self
            .lines
            .iter()
            .map(|l| {
                format!(
                    "{} {} {:.0} Ir/call ({:.2}× bare)",
                    l.path.name(),
                    l.case.name(),
                    l.shimgate,
                    l.shimgate / l.bare.max(1.0)
                )
            })
            .collect();
        format!("profile: {}", parts.join(", "))
    }
}

/// Runs the profile on `paths` with `calls` calls per case and mode.
pub async fn run(calls: usize, paths: &[LatPath]) -> ProfileReport {
    let dhat = std::env::var("LOAD_PROFILE_TOOL").is_ok_and(|t| t == "dhat");
    let dir = gate::scratch().join(if dhat { "dhat" } else { "callgrind" });
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("profile dir");
    gate::set_wrapper(if dhat {
        vec![
            "valgrind".into(),
            "--tool=dhat".into(),
            "--quiet".into(),
            format!("--dhat-out-file={}/%p.dhat", dir.display()),
        ]
    } else {
        vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            "--quiet".into(),
            format!("--callgrind-out-file={}/%p.cg", dir.display()),
        ]
    });
    let up = Upstream::start_with(
        Options {
            record: false,
            ..Options::default()
        },
        latency::script,
    )
    .await;
    let mut findings = Findings::default();
    let mut lines = Vec::new();
    if paths.contains(&LatPath::Direct) {
        let bare = gate::bare_forwarder(&up.url()).await;
        let toml = latency::gate_toml(&up.url(), gate::free_port(), None);
        let sg = gate::serve("profile", &toml, "error").await;
        for case in [
            Case::Call,
            Case::Stream(Wire::Qoder),
            Case::Stream(Wire::Trae),
        ] {
            let target = |w: Wire| sg.addr(w.name());
            let sg_addr = match case {
                Case::Stream(w) => target(w),
                Case::Call => target(Wire::Qoder),
            };
            let s = one(
                &dir,
                case,
                calls,
                sg_addr,
                &[("shimgate", &sg)],
                &mut findings,
            )
            .await;
            let b = one(
                &dir,
                case,
                calls,
                bare.addr(""),
                &[("bare", &bare)],
                &mut findings,
            )
            .await;
            lines.push(line(LatPath::Direct, case, calls, s, b));
        }
        finish(sg, dhat).await;
        finish(bare, dhat).await;
    }
    if paths.contains(&LatPath::Compressor) {
        let p = CompressorPath::start(&up.url()).await;
        for w in [Wire::Qoder, Wire::Trae] {
            let case = Case::Stream(w);
            let s = one(
                &dir,
                case,
                calls,
                p.gate.addr(w.name()),
                &[("shimgate", &p.gate), ("proxy", &p.to_gate)],
                &mut findings,
            )
            .await;
            let b = one(
                &dir,
                case,
                calls,
                p.bare_in.addr(""),
                &[
                    ("bare in", &p.bare_in),
                    ("bare out", &p.bare_out),
                    ("proxy", &p.to_bare),
                ],
                &mut findings,
            )
            .await;
            lines.push(line(LatPath::Compressor, case, calls, s, b));
        }
        if dhat {
            for proc in [p.gate, p.to_gate, p.to_up, p.bare_in, p.to_bare, p.bare_out] {
                finish(proc, true).await;
            }
        } else {
            p.stop().await;
        }
    }
    gate::set_wrapper(Vec::new());
    ProfileReport {
        dir,
        lines,
        findings,
    }
}

/// Instructions per call of each process, measured over `calls` calls of
/// `case` sent to `addr`.
type Counted = Vec<(String, f64, PathBuf)>;

fn line(path: LatPath, case: Case, calls: usize, shimgate: Counted, bare: Counted) -> Line {
    let sum = |c: &Counted, skip_proxy: bool| -> f64 {
        c.iter()
            .filter(|(w, _, _)| !(skip_proxy && w == "proxy"))
            .map(|(_, ir, _)| ir)
            .sum()
    };
    let top = shimgate
        .iter()
        .find(|(w, _, _)| w == "shimgate")
        .map(|(_, _, file)| top_symbols(file))
        .unwrap_or_default();
    Line {
        path,
        case,
        calls,
        shimgate: sum(&shimgate, true),
        bare: sum(&bare, true),
        procs: shimgate.into_iter().chain(bare).collect(),
        top,
    }
}

async fn one(
    dir: &Path,
    case: Case,
    calls: usize,
    addr: std::net::SocketAddr,
    procs: &[(&str, &Proc)],
    findings: &mut Findings,
) -> Counted {
    let dhat = std::env::var("LOAD_PROFILE_TOOL").is_ok_and(|t| t == "dhat");
    let warm = latency::worker(addr, case, WARM).await;
    for (_, p) in procs.iter().filter(|_| !dhat) {
        control(&["-z"], p.pid).await;
    }
    let s = latency::worker(addr, case, calls).await;
    if warm.errors + s.errors > 0 {
        findings.add(
            "limits",
            format!(
                "profile {}: {} calls failed under callgrind",
                case.name(),
                warm.errors + s.errors
            ),
        );
    }
    let mut out = Vec::new();
    for (what, p) in procs {
        let file = if dhat { None } else { dump(dir, p.pid).await };
        let ir = file.as_deref().map_or(0, totals);
        out.push((
            what.to_string(),
            ir as f64 / calls.max(1) as f64,
            file.unwrap_or_default(),
        ));
    }
    out
}

/// Stops a profiled child: under DHAT with SIGTERM, so the tool writes its
/// file; callgrind's dumps are written already, so it is killed.
async fn finish(p: Proc, dhat: bool) {
    if dhat {
        p.stop().await;
    } else {
        let mut p = p;
        let _ = p.child.kill().await;
    }
}

async fn control(args: &[&str], pid: u32) {
    let _ = tokio::process::Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await;
}

/// Asks `pid` for a dump and waits for its file (`PID.cg.N`, N counting).
async fn dump(dir: &Path, pid: u32) -> Option<PathBuf> {
    let before = dumps(dir, pid);
    control(&["--dump"], pid).await;
    for _ in 0..100 {
        let now = dumps(dir, pid);
        if now.len() > before.len() {
            // Written once complete enough to name its totals.
            let newest = now.last().cloned()?;
            if totals(&newest) > 0 {
                return Some(newest);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// The dump files of `pid`, in order.
fn dumps(dir: &Path, pid: u32) -> Vec<PathBuf> {
    let prefix = format!("{pid}.cg.");
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix(&prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

/// The `totals:` (or `summary:`) line of a dump.
fn totals(file: &Path) -> u64 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The top exclusive symbols of a dump, as `callgrind_annotate` lists them
/// (less the frames that were still running at the dump, which it shows at
/// 100 %), source paths shortened.
fn top_symbols(file: &Path) -> Vec<String> {
    let out = std::process::Command::new("callgrind_annotate")
        .arg("--threshold=100")
        .arg(file)
        .output();
    let Ok(out) = out else {
        return vec!["(callgrind_annotate did not run)".into()];
    };
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .skip_while(|l| !l.contains("file:function"))
        .skip(1)
        .filter(|l| l.contains("%)") && !l.contains("100.0%"))
        .take(TOP)
        .map(|l| {
            let l = l.trim();
            // `N (p%)  path/file.rs:function [object]`: drop the object and
            // the path before the crate or repository folder.
            let l = l.rsplit_once(" [").map_or(l, |(a, _)| a);
            match l.split_once(")  ") {
                Some((count, rest)) => {
                    // The file ends at its extension; the function may hold `::`.
                    let end = [".rs:", ".c:", ".S:", "???:"]
                        .iter()
                        .filter_map(|sep| rest.find(sep).map(|at| at + sep.len() - 1))
                        .min();
                    let rest = match end {
                        Some(at) => {
                            let (path, f) = rest.split_at(at);
                            let short = path.rsplit('/').next().unwrap_or(path);
                            format!("{short}{f}")
                        }
                        None => rest.to_string(),
                    };
                    format!("{count})  {rest}")
                }
                None => l.to_string(),
            }
        })
        .collect()
}

//! Added latency, in one run and interleaved, on two paths.
//!
//! **Direct** (shimgate in direct mode): agent → upstream directly, agent →
//! bare hyper forwarder (the bench's own, in a process of its own) →
//! upstream, agent → `shimgate compressor` forwarding untouched (a plain
//! proxy in its own process: hyper's server, shimgate's client) → upstream,
//! and agent → shimgate →
//! upstream, at concurrency 1 and 64.
//!
//! **Compressor** (the full path, through a pass-through proxy: `shimgate
//! compressor --pass-through`, which relays chat requests untouched too):
//! agent → proxy → upstream (the reference), agent → bare forwarder →
//! proxy → bare forwarder → upstream, and agent → shimgate ingress → proxy
//! → shimgate return leg → upstream, at concurrency 1. Both shimgate legs
//! together are judged against two bare forwarders around the same proxy.
//!
//! Cases: a small pass-through call (time to the whole answer; direct path
//! only: shimgate never sends it to a proxy), and a streamed answer on each
//! wire (time to the first content piece, the delay of every piece from the
//! upstream's write to the agent's read, and the gap between pieces), with
//! each process's CPU time per call. The upstream stamps each piece with its
//! send time on the bench's own clock, so per-piece delays need no
//! subtraction.
//!
//! **TLS** (`--tls`): the same, with the agents speaking TLS to shimgate
//! (under its local CA, made in the bench's scratch folder) and to the
//! bare forwarder, which then serves TLS with a leaf of the same CA,
//! minted once by the same code and presented by the same rustls config;
//! the reference (straight to the upstream) stays plain, so each added
//! figure holds the TLS hop of its mode. The plain proxy is left out.
//!
//! The verdict: at concurrency 1, each of shimgate's figures over the bare
//! forwarder's of the same run — added p99 of the call, added TTFT p99 and
//! added per-piece delay p50 of each wire, CPU per streamed answer — at
//! most [`TARGET_RATIO_TO_BARE`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::json;

use super::agent::{collect, timed, Conn, TlsClient};
use super::findings::Findings;
use super::gate::{self, Proc};
use super::host;
use super::stats::{us, Summary};
use super::wire::{self, Answer, Wire};
use shimgate_testkit::upstream::{last_request_ns, now_ns, Options, Recorded, Reply, Upstream};

/// Stamped pieces per streamed answer.
pub const PIECES: usize = 16;
/// Pause between pieces: a fast model's token rate.
const PACE: Duration = Duration::from_millis(1);
/// Rounds the modes take turns in, at the least, so drift on a shared
/// machine hits all of them alike.
const ROUNDS: usize = 5;
/// Timed calls a worker makes in one turn, at the most: twenty streamed
/// answers take about 0.4 s, so a noisy spell of the shared host (it
/// lasts seconds) spans turns of every mode instead of landing in one
/// mode's turn, as it did with five rounds of 200 answers
/// (`benches/README.md`, "2026-12-03 (15:00 UTC)").
const TURN: usize = 20;

/// Streamed answers per mode and wire are the samples over this: a p99
/// of 300 (a tenth) was the third-worst figure, and one stall on the
/// shared machine moved a ratio by 1.0 between runs of one binary.
const STREAM_SHARE: usize = 3;

/// The target: shimgate within this factor of the bare forwarder.
pub const TARGET_RATIO_TO_BARE: f64 = 1.5;

/// Which way shimgate's calls go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LatPath {
    /// Direct mode: no compressor configured.
    Direct,
    /// Through a pass-through proxy and back through the return leg.
    Compressor,
}

impl LatPath {
    pub fn name(self) -> &'static str {
        match self {
            LatPath::Direct => "direct",
            LatPath::Compressor => "compressor",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Direct path: straight to the upstream. Compressor path: through
    /// the pass-through proxy alone (the reference both others add to).
    Direct,
    /// Direct path: the bare forwarder. Compressor path: a bare forwarder
    /// on each side of the proxy.
    Bare,
    /// `shimgate compressor` on paths it forwards untouched: a hyper proxy
    /// in its own process, built from the same client and listener code
    /// (direct path only).
    Proxy,
    Shimgate,
}

const DIRECT_MODES: [Mode; 4] = [Mode::Direct, Mode::Bare, Mode::Proxy, Mode::Shimgate];
const COMPRESSOR_MODES: [Mode; 3] = [Mode::Direct, Mode::Bare, Mode::Shimgate];
/// Direct path over TLS: no plain proxy (it serves no TLS).
const DIRECT_TLS_MODES: [Mode; 3] = [Mode::Direct, Mode::Bare, Mode::Shimgate];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Case {
    Call,
    Stream(Wire),
}

const STREAMS: [Case; 2] = [Case::Stream(Wire::Qoder), Case::Stream(Wire::Trae)];

impl Case {
    pub fn name(self) -> &'static str {
        match self {
            Case::Call => "call",
            Case::Stream(Wire::Qoder) => "qoder stream",
            Case::Stream(Wire::Trae) => "trae stream",
        }
    }
}

/// Samples of one (case, concurrency, mode), in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    /// Call: request to whole answer. Stream: request to first piece.
    pub first: Vec<u64>,
    /// Upstream write to agent read, every piece.
    pub delay: Vec<u64>,
    /// Between consecutive pieces at the agent.
    pub gap: Vec<u64>,
    /// Streams, one call at a time: agent send → the upstream has read
    /// the request (the request's way in).
    pub request_leg: Vec<u64>,
    /// Streams, one call at a time: the upstream writes piece 0 → the
    /// agent reads it (the first piece's way out).
    pub answer_leg: Vec<u64>,
    pub errors: usize,
}

/// The latency phase's figures.
pub struct LatencyReport {
    rows: Vec<Row>,
    ratios: Vec<Ratio>,
    pub findings: Findings,
    rss_kib: u64,
    /// The share of the VM's CPU time its host took for others during the
    /// phase (`None` off Linux or without the figure).
    steal: Option<f64>,
    /// How the guest's idle CPUs wait ([`host::idle_wait`]).
    idle_wait: Option<String>,
}

struct Row {
    path: LatPath,
    /// The agents spoke TLS to the forwarder and to shimgate.
    tls: bool,
    case: Case,
    level: usize,
    modes: &'static [Mode],
    first: HashMap<Mode, Summary>,
    delay: HashMap<Mode, Summary>,
    gap: HashMap<Mode, Summary>,
    request_leg: HashMap<Mode, Summary>,
    answer_leg: HashMap<Mode, Summary>,
    errors: usize,
    /// CPU time (user + system) per call of the processes of each mode
    /// (the bare mode of the compressor path: both forwarders).
    cpu_per_call: HashMap<Mode, Duration>,
    /// Read/write system calls and context switches per call, the same
    /// processes.
    kernel_per_call: HashMap<Mode, (f64, f64)>,
}

impl Row {
    /// The path's name, `tls` after it for the TLS variant.
    fn label(&self) -> String {
        if self.tls {
            format!("{} tls", self.path.name())
        } else {
            self.path.name().to_owned()
        }
    }

    fn added(&self, m: &HashMap<Mode, Summary>, mode: Mode) -> (i64, i64) {
        let d = m[&Mode::Direct];
        let x = m[&mode];
        (x.p50 as i64 - d.p50 as i64, x.p99 as i64 - d.p99 as i64)
    }

    fn has(&self, mode: Mode) -> bool {
        self.modes.contains(&mode)
    }
}

/// One of the verdict's ratios: shimgate's figure over the bare
/// forwarder's, µs.
pub struct Ratio {
    pub what: String,
    pub shimgate: f64,
    pub bare: f64,
}

impl Ratio {
    /// `None` when the bare figure is not above zero (its p99 fell below
    /// the reference's: noise, no yardstick).
    pub fn value(&self) -> Option<f64> {
        (self.bare > 0.0).then(|| self.shimgate / self.bare)
    }

    fn met(&self) -> bool {
        self.value().is_some_and(|r| r <= TARGET_RATIO_TO_BARE)
    }

    fn text(&self) -> String {
        self.value().map_or("—".into(), |r| format!("{r:.2}"))
    }
}

fn sus(ns: i64) -> String {
    format!("{:+.1}", ns as f64 / 1000.0)
}

impl LatencyReport {
    pub fn print(&self) {
        println!("latency (µs, p50 / p99; added = mode − direct; path direct: shimgate in direct mode; path compressor: through `shimgate compressor --pass-through`,");
        println!("  its direct = agent → proxy → upstream, bare = a bare forwarder on each side of the proxy, shimgate = ingress → proxy → return leg;");
        println!("  plain proxy = `shimgate compressor` forwarding untouched, a separate hyper process like shimgate):");
        println!("| path | case | c | n | direct | bare forwarder | plain proxy | shimgate | bare added | plain proxy added | shimgate added | ratio p99 | CPU/call bare | CPU/call plain proxy | CPU/call shimgate | errors |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let cell = |m: Mode| {
                if r.has(m) {
                    format!("{} / {}", us(r.first[&m].p50), us(r.first[&m].p99))
                } else {
                    "—".into()
                }
            };
            let add = |m: Mode| {
                if !r.has(m) {
                    return "—".into();
                }
                let (a50, a99) = r.added(&r.first, m);
                format!("{} / {}", sus(a50), sus(a99))
            };
            let cpu = |m: Mode| {
                r.cpu_per_call
                    .get(&m)
                    .map_or("—".into(), |d| format!("{} µs", d.as_micros()))
            };
            let ratio = Ratio {
                what: String::new(),
                shimgate: r.added(&r.first, Mode::Shimgate).1 as f64,
                bare: r.added(&r.first, Mode::Bare).1 as f64,
            };
            println!(
                "| {} | {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
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
                ratio.text(),
                cpu(Mode::Bare),
                cpu(Mode::Proxy),
                cpu(Mode::Shimgate),
                r.errors
            );
        }
        println!(
            "per piece (streams; µs p50 / p99): delay = upstream write → agent read; gap = between pieces ({} µs pacing)",
            PACE.as_micros()
        );
        println!("| path | case | c | delay direct | delay bare | delay plain proxy | delay shimgate | gap direct | gap bare | gap plain proxy | gap shimgate |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        for r in self.rows.iter().filter(|r| r.case != Case::Call) {
            let d = |m: Mode| {
                if r.has(m) {
                    format!("{} / {}", us(r.delay[&m].p50), us(r.delay[&m].p99))
                } else {
                    "—".into()
                }
            };
            let g = |m: Mode| {
                if r.has(m) {
                    format!("{} / {}", us(r.gap[&m].p50), us(r.gap[&m].p99))
                } else {
                    "—".into()
                }
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
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
        println!("TTFT split at c = 1 (µs, p50 / p99): in = agent send → the upstream has read the request; out = the upstream writes piece 0 → the agent reads it");
        println!("| path | case | in direct | in bare | in plain proxy | in shimgate | out direct | out bare | out plain proxy | out shimgate |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for r in self
            .rows
            .iter()
            .filter(|r| r.case != Case::Call && r.level == 1)
        {
            let cell = |m: &HashMap<Mode, Summary>, mode: Mode| {
                if r.has(mode) {
                    format!("{} / {}", us(m[&mode].p50), us(m[&mode].p99))
                } else {
                    "—".into()
                }
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.label(),
                r.case.name(),
                cell(&r.request_leg, Mode::Direct),
                cell(&r.request_leg, Mode::Bare),
                cell(&r.request_leg, Mode::Proxy),
                cell(&r.request_leg, Mode::Shimgate),
                cell(&r.answer_leg, Mode::Direct),
                cell(&r.answer_leg, Mode::Bare),
                cell(&r.answer_leg, Mode::Proxy),
                cell(&r.answer_leg, Mode::Shimgate),
            );
        }
        println!(
            "system calls (read + write) / context switches per call, the processes of each mode:"
        );
        println!("| path | case | c | bare | plain proxy | shimgate |");
        println!("|---|---|---|---|---|---|");
        for r in &self.rows {
            let k = |m: Mode| {
                r.kernel_per_call
                    .get(&m)
                    .map_or("—".into(), |(s, c)| format!("{s:.1} / {c:.1}"))
            };
            println!(
                "| {} | {} | {} | {} | {} | {} |",
                r.label(),
                r.case.name(),
                r.level,
                k(Mode::Bare),
                k(Mode::Proxy),
                k(Mode::Shimgate)
            );
        }
        println!("targets at c = 1 (shimgate / bare forwarder, same run; at most {TARGET_RATIO_TO_BARE}×):");
        println!("| figure | shimgate | bare forwarder | ratio | met |");
        println!("|---|---|---|---|---|");
        for q in &self.ratios {
            println!(
                "| {} | {:.1} µs | {:.1} µs | {} | {} |",
                q.what,
                q.shimgate,
                q.bare,
                q.text(),
                if q.met() { "yes" } else { "no" }
            );
        }
        println!("shimgate RSS after the latency phase: {} KiB", self.rss_kib);
        if let Some(share) = self.steal {
            println!(
                "host steal during the phase: {:.2} % of the VM's CPU time (a run with more is noisier, its p99s most)",
                share * 100.0
            );
        }
        if let Some(idle) = &self.idle_wait {
            println!(
                "idle CPUs: {idle} (on the VMs of benches/README.md, waking a halted CPU took 40–51 µs at p50, a polling one 5)"
            );
        }
    }

    /// The verdict line's part: every ratio.
    pub fn headline(&self) -> String {
        let parts: Vec<String> = self
            .ratios
            .iter()
            .map(|q| format!("{} {}", q.what, q.text()))
            .collect();
        let machine: Vec<String> = [
            self.steal.map(|s| format!("host steal {:.2} %", s * 100.0)),
            self.idle_wait
                .as_ref()
                .map(|idle| format!("idle CPUs: {idle}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let machine = if machine.is_empty() {
            String::new()
        } else {
            format!(" ({})", machine.join("; "))
        };
        format!(
            "latency ratios to bare (target ≤ {TARGET_RATIO_TO_BARE}){machine}: {}",
            parts.join(", ")
        )
    }
}

/// Runs the latency phase on the paths asked for, with `samples` calls
/// per mode at concurrency 1 (streams: a third as many answers, sixteen
/// pieces each: at 3,000, 1,000 answers a mode and wire, so a TTFT p99 is
/// the tenth-worst figure, not the third; `benches/README.md`,
/// "2026-12-03 issue 24").
pub async fn run(samples: usize, paths: &[LatPath], tls: bool) -> LatencyReport {
    let up = Upstream::start_with(
        Options {
            record: false,
            ..Options::default()
        },
        script,
    )
    .await;
    let mut rows = Vec::new();
    let mut rss_kib = 0;
    // TLS: the local CA in a state dir of the scratch folder, made before
    // shimgate and the forwarder start (they both read it), and an agent
    // side that trusts its root alone.
    let tls = tls.then(|| {
        let state = gate::scratch().join("tls-state");
        let config = shimgate::config::Config {
            state_dir: state.clone(),
            ..Default::default()
        };
        let info = shimgate::tls::ensure_ca(&config).expect("the bench's local CA");
        (state, TlsClient::trusting(&info.root_pem))
    });
    let state = tls.as_ref().map(|(s, _)| s.as_path());
    let client = tls.as_ref().map(|(_, c)| c.clone());
    let ticks_before = host::cpu_ticks();
    if paths.contains(&LatPath::Direct) {
        let bare = gate::bare_forwarder_with(&up.url(), state).await;
        let gate = gate::serve(
            "latency",
            &gate_toml_with(&up.url(), gate::free_port(), None, state),
            "error",
        )
        .await;
        let proxy = gate::compressor(&up.url(), 1_000_000).await;
        let lineup = Lineup {
            path: LatPath::Direct,
            modes: if client.is_some() {
                &DIRECT_TLS_MODES
            } else {
                &DIRECT_MODES
            },
            direct: up.addr,
            bare: bare.addr(""),
            proxy: Some(proxy.addr("")),
            qoder: gate.addr("qoder"),
            trae: gate.addr("trae"),
            cpu: HashMap::from([
                (Mode::Bare, vec![&bare]),
                (Mode::Proxy, vec![&proxy]),
                (Mode::Shimgate, vec![&gate]),
            ]),
            tls: client.clone(),
        };
        for level in [1, 64] {
            for case in [Case::Call, STREAMS[0], STREAMS[1]] {
                rows.push(measure(&lineup, case, level, samples).await);
            }
        }
        rss_kib = gate.memory_kib().0;
        drop(lineup);
        gate.stop().await;
        proxy.stop().await;
        bare.stop().await;
    }
    if paths.contains(&LatPath::Compressor) {
        let path = CompressorPath::start_with(&up.url(), state).await;
        let mut lineup = path.lineup(up.addr);
        lineup.tls = client.clone();
        for case in STREAMS {
            rows.push(measure(&lineup, case, 1, samples).await);
        }
        rss_kib = rss_kib.max(path.gate.memory_kib().0);
        drop(lineup);
        path.stop().await;
    }
    let ratios = ratios(&rows);
    let findings = check_targets(&rows, &ratios);
    LatencyReport {
        rows,
        ratios,
        findings,
        rss_kib,
        steal: host::steal_between(ticks_before, host::cpu_ticks()),
        idle_wait: host::idle_wait(),
    }
}

/// shimgate's config for the latency runs: qoder on `qport`, trae on a
/// fresh port, one route each to `upstream`, and the compressor if given.
pub fn gate_toml(upstream: &str, qport: u16, compressor: Option<&str>) -> String {
    gate_toml_with(upstream, qport, compressor, None)
}

/// [`gate_toml`] with `state` as the state dir (where the TLS variant's
/// local CA is) when given.
fn gate_toml_with(
    upstream: &str,
    qport: u16,
    compressor: Option<&str>,
    state: Option<&std::path::Path>,
) -> String {
    let mut compressor = compressor
        .map(|url| format!("[compressor]\nurl = \"{url}\"\n"))
        .unwrap_or_default();
    if let Some(state) = state {
        compressor.push_str(&format!("[state]\ndir = \"{}\"\n", state.display()));
    }
    format!(
        "{compressor}[shims.qoder]\nlisten = \"127.0.0.1:{}\"\ncodec = \"plain\"\n[[shims.qoder.routes]]\nname = \"lat\"\nurl = \"{upstream}\"\n\
         [shims.trae]\nlisten = \"127.0.0.1:{}\"\n[[shims.trae.routes]]\nname = \"lat\"\nurl = \"{upstream}\"\n",
        qport,
        gate::free_port(),
    )
}

/// The processes of the compressor path.
pub struct CompressorPath {
    /// shimgate with the pass-through proxy `to_gate` as its compressor.
    pub gate: Proc,
    pub to_gate: Proc,
    /// The reference: the same proxy in front of the upstream.
    pub to_up: Proc,
    /// agent → `bare_in` → `to_bare` → `bare_out` → upstream.
    pub bare_in: Proc,
    pub to_bare: Proc,
    pub bare_out: Proc,
}

impl CompressorPath {
    /// Starts them in front of `upstream`.
    pub async fn start(upstream: &str) -> CompressorPath {
        CompressorPath::start_with(upstream, None).await
    }

    /// [`CompressorPath::start`]; with `tls_state` (the local CA's state
    /// dir), shimgate uses that CA and the forwarder the agent meets
    /// serves TLS.
    pub async fn start_with(upstream: &str, tls_state: Option<&std::path::Path>) -> CompressorPath {
        // The proxy needs shimgate's address and shimgate the proxy's:
        // the proxy goes to a port picked first, which every shimgate
        // listener serves (each serves both shims' return legs).
        let qport = gate::free_port();
        let to_gate = gate::pass_through(&format!("http://127.0.0.1:{qport}")).await;
        let proxy_url = format!("http://{}", to_gate.addr(""));
        let toml = gate_toml_with(upstream, qport, Some(&proxy_url), tls_state);
        let gate = gate::serve("latency-full", &toml, "error").await;
        let to_up = gate::pass_through(upstream).await;
        let bare_out = gate::bare_forwarder(upstream).await;
        let to_bare = gate::pass_through(&format!("http://{}", bare_out.addr(""))).await;
        let bare_in =
            gate::bare_forwarder_with(&format!("http://{}", to_bare.addr("")), tls_state).await;
        CompressorPath {
            gate,
            to_gate,
            to_up,
            bare_in,
            to_bare,
            bare_out,
        }
    }

    fn lineup(&self, _upstream: SocketAddr) -> Lineup<'_> {
        Lineup {
            path: LatPath::Compressor,
            modes: &COMPRESSOR_MODES,
            direct: self.to_up.addr(""),
            bare: self.bare_in.addr(""),
            proxy: None,
            qoder: self.gate.addr("qoder"),
            trae: self.gate.addr("trae"),
            cpu: HashMap::from([
                (Mode::Bare, vec![&self.bare_in, &self.bare_out]),
                (Mode::Shimgate, vec![&self.gate]),
            ]),
            tls: None,
        }
    }

    pub async fn stop(self) {
        for p in [
            self.gate,
            self.to_gate,
            self.to_up,
            self.bare_in,
            self.to_bare,
            self.bare_out,
        ] {
            p.stop().await;
        }
    }
}

/// The verdict's ratios, from the c = 1 rows.
fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.level == 1) {
        let p = r.label();
        let ns = |x: i64| x as f64 / 1000.0;
        match r.case {
            Case::Call => out.push(Ratio {
                what: format!("{p} call added p99"),
                shimgate: ns(r.added(&r.first, Mode::Shimgate).1),
                bare: ns(r.added(&r.first, Mode::Bare).1),
            }),
            Case::Stream(w) => {
                let w = w.name();
                out.push(Ratio {
                    what: format!("{p} {w} TTFT added p99"),
                    shimgate: ns(r.added(&r.first, Mode::Shimgate).1),
                    bare: ns(r.added(&r.first, Mode::Bare).1),
                });
                out.push(Ratio {
                    what: format!("{p} {w} per-piece added p50"),
                    shimgate: ns(r.added(&r.delay, Mode::Shimgate).0),
                    bare: ns(r.added(&r.delay, Mode::Bare).0),
                });
                let cpu = |m: Mode| {
                    r.cpu_per_call
                        .get(&m)
                        .map_or(0.0, |d| d.as_nanos() as f64 / 1000.0)
                };
                out.push(Ratio {
                    what: format!("{p} {w} CPU per answer"),
                    shimgate: cpu(Mode::Shimgate),
                    bare: cpu(Mode::Bare),
                });
            }
        }
    }
    out
}

fn check_targets(rows: &[Row], ratios: &[Ratio]) -> Findings {
    let mut f = Findings::default();
    for q in ratios.iter().filter(|q| !q.met()) {
        let why = match q.value() {
            Some(r) => format!("{r:.2}× the bare forwarder's (target {TARGET_RATIO_TO_BARE}×)"),
            None => "the bare forwarder's figure is not above zero: no yardstick this run".into(),
        };
        f.add(
            "limits",
            format!(
                "{} at c=1: shimgate {:.1} µs, bare {:.1} µs: {why}",
                q.what, q.shimgate, q.bare
            ),
        );
    }
    for r in rows.iter().filter(|r| r.errors > 0) {
        f.add(
            "limits",
            format!(
                "{} {} at c={}: {} calls failed",
                r.label(),
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
pub fn script(req: &Recorded, _: usize) -> Reply {
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

/// Where each mode of one path sends its calls, and whose CPU it costs.
struct Lineup<'p> {
    path: LatPath,
    modes: &'static [Mode],
    direct: SocketAddr,
    bare: SocketAddr,
    proxy: Option<SocketAddr>,
    qoder: SocketAddr,
    trae: SocketAddr,
    cpu: HashMap<Mode, Vec<&'p Proc>>,
    /// The TLS variant: the agents of the bare and shimgate modes speak TLS.
    tls: Option<std::sync::Arc<TlsClient>>,
}

impl Lineup<'_> {
    fn addr(&self, mode: Mode, case: Case) -> SocketAddr {
        match (mode, case) {
            (Mode::Direct, _) => self.direct,
            (Mode::Bare, _) => self.bare,
            (Mode::Proxy, _) => self.proxy.unwrap_or(self.direct),
            (Mode::Shimgate, Case::Stream(Wire::Trae)) => self.trae,
            (Mode::Shimgate, _) => self.qoder,
        }
    }

    /// A fresh agent connection for `mode` and `case`.
    fn conn(&self, mode: Mode, case: Case) -> Conn {
        let addr = self.addr(mode, case);
        match (&self.tls, mode) {
            (Some(client), Mode::Bare | Mode::Shimgate) => Conn::tls(addr, client.clone()),
            _ => Conn::new(addr),
        }
    }

    fn cpu(&self, mode: Mode) -> Duration {
        self.cpu
            .get(&mode)
            .into_iter()
            .flatten()
            .map(|p| p.cpu())
            .sum()
    }

    fn kernel(&self, mode: Mode) -> (u64, u64) {
        self.cpu
            .get(&mode)
            .into_iter()
            .flatten()
            .map(|p| p.kernel_counts())
            .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
    }
}

async fn measure(t: &Lineup<'_>, case: Case, level: usize, samples: usize) -> Row {
    let per_mode = match case {
        Case::Call => samples,
        Case::Stream(_) => (samples / STREAM_SHARE).max(20),
    };
    // Each worker makes its share; at c=64 at least a few calls each.
    let per_worker = (per_mode / level).max(8);
    let mut all: HashMap<Mode, Samples> = HashMap::new();
    let warm = (per_worker / 10).max(2);
    let mut cpu: HashMap<Mode, Duration> = HashMap::new();
    let mut kernel: HashMap<Mode, (u64, u64)> = HashMap::new();
    let mut calls = 0usize;
    let rounds = per_worker.div_ceil(TURN).max(ROUNDS);
    // Each worker keeps its connection from turn to turn: a fresh one per
    // turn would put a connect in every twentieth sample.
    let mut conns: HashMap<Mode, Vec<Conn>> = t
        .modes
        .iter()
        .map(|&m| (m, (0..level).map(|_| t.conn(m, case)).collect()))
        .collect();
    for round in 0..=rounds {
        for &mode in t.modes {
            // After a turn of the other modes the process waited on its
            // socket; the turn's first call wakes it and is not timed, so
            // every timed call follows one of its own, as in one long turn.
            let (lead, n) = if round == 0 {
                (0, warm)
            } else {
                (1, per_worker.div_ceil(rounds))
            };
            let mut workers = Vec::new();
            let cpu_before = t.cpu(mode);
            let kernel_before = t.kernel(mode);
            let idle = conns.entry(mode).or_default();
            for conn in idle.drain(..) {
                workers.push(tokio::spawn(worker_on(conn, case, lead, n)));
            }
            for w in workers {
                let Ok((conn, s)) = w.await else {
                    // A worker that panicked is an error of its mode, and
                    // its place takes a fresh connection next turn.
                    all.entry(mode).or_default().errors += 1;
                    idle.push(t.conn(mode, case));
                    continue;
                };
                idle.push(conn);
                if round > 0 {
                    let e = all.entry(mode).or_default();
                    e.first.extend(s.first);
                    e.delay.extend(s.delay);
                    e.gap.extend(s.gap);
                    e.request_leg.extend(s.request_leg);
                    e.answer_leg.extend(s.answer_leg);
                    e.errors += s.errors;
                }
            }
            if round > 0 && t.cpu.contains_key(&mode) {
                *cpu.entry(mode).or_default() += t.cpu(mode).saturating_sub(cpu_before);
                let (s, c) = t.kernel(mode);
                let k = kernel.entry(mode).or_default();
                k.0 += s.saturating_sub(kernel_before.0);
                k.1 += c.saturating_sub(kernel_before.1);
            }
            if round > 0 && mode == Mode::Shimgate {
                calls += (lead + n) * level;
            }
        }
    }
    let sum = |f: fn(&Samples) -> &Vec<u64>| -> HashMap<Mode, Summary> {
        DIRECT_MODES
            .iter()
            .map(|m| (*m, Summary::of(all.get(m).map(f).map_or(&[][..], |v| v))))
            .collect()
    };
    Row {
        path: t.path,
        tls: t.tls.is_some(),
        case,
        level,
        modes: t.modes,
        first: sum(|s| &s.first),
        delay: sum(|s| &s.delay),
        gap: sum(|s| &s.gap),
        request_leg: sum(|s| &s.request_leg),
        answer_leg: sum(|s| &s.answer_leg),
        errors: all.values().map(|s| s.errors).sum(),
        cpu_per_call: cpu
            .into_iter()
            .map(|(m, d)| (m, d / calls.max(1) as u32))
            .collect(),
        kernel_per_call: kernel
            .into_iter()
            .map(|(m, (s, c))| {
                let n = calls.max(1) as f64;
                (m, (s as f64 / n, c as f64 / n))
            })
            .collect(),
    }
}

/// One virtual agent making `n` calls back to back on one connection.
pub async fn worker(addr: SocketAddr, case: Case, n: usize) -> Samples {
    worker_on(Conn::new(addr), case, 0, n).await.1
}

/// [`worker`] on a connection the caller keeps for its next turn, after
/// `lead` calls it does not time (errors in them still count).
async fn worker_on(mut conn: Conn, case: Case, lead: usize, n: usize) -> (Conn, Samples) {
    let mut timed_calls = Samples::default();
    let mut lead_calls = Samples::default();
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
    for i in 0..lead + n {
        let s = if i < lead {
            &mut lead_calls
        } else {
            &mut timed_calls
        };
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
                // One call at a time: the last request the upstream read
                // is this call's.
                let arrived = last_request_ns();
                if arrived > t0 {
                    s.request_leg.push(arrived - t0);
                    s.answer_leg
                        .push(got.pieces[0].0.saturating_sub(got.pieces[0].1));
                }
                for (i, (at, sent)) in got.pieces.iter().enumerate() {
                    s.delay.push(at.saturating_sub(*sent));
                    if i > 0 {
                        s.gap.push(at.saturating_sub(got.pieces[i - 1].0));
                    }
                }
            }
        }
    }
    timed_calls.errors += lead_calls.errors;
    (conn, timed_calls)
}

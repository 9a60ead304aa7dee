//! The fault soak: N agent conversations on both wires through shimgate
//! (and the compressor), a scripted upstream that fails according to each
//! call's plan, and a ledger of every upstream try so the run can prove
//! that no frame was lost or doubled, every failure ended with one error
//! frame, and nothing was sent upstream more often than the chain allows.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;
use serde_json::{json, Value};

use super::agent::{collect, Conn};
use super::check::{self, Seen};
use super::faults::{self, Fault, Plan, Rules};
use super::findings::Findings;
use super::forwarder;
use super::gate;
use super::upstream::{Reply, Request, Upstream};
use super::wire::{self, Wire};

/// Chain settings of the soak config: fast backoff so a run sees many
/// retries; first-byte and idle timeouts short enough that stalls resolve
/// in well under a second; a Retry-After of 1 s is honoured, 30 s is not.
pub const RULES: Rules = Rules {
    max_retries: 3,
    max_delay: Duration::from_millis(1500),
};
const TIMEOUT_MS: u64 = 400;
const QUOTA_COOLDOWN_MS: u64 = 150;
/// The longest an agent waits for one answer before calling it a hang.
const CALL_LIMIT: Duration = Duration::from_secs(30);
/// The reference compressor summarises past this many characters, so a
/// conversation of a few dozen turns gets compressed.
const THRESHOLD_CHARS: usize = 3000;

/// Where the agent's call goes between shimgate's ingress and return leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// No compressor: the ingress sends upstream itself (`fallback`).
    Direct,
    /// The reference compressor (`shimgate compressor`).
    Reference,
    /// The bench's bare forwarder standing in for a compressor.
    Bare,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Direct => "direct",
            Path::Reference => "compressor",
            Path::Bare => "bare-proxy",
        }
    }
}

/// One soak leg's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub path: Path,
    /// Concurrent conversations (split between the wires).
    pub streams: usize,
    pub seconds: f64,
    /// Turns per conversation at most.
    pub turns: usize,
    pub seed: u64,
    /// Characters of each user question (the history grows by about this
    /// much a turn).
    pub question_chars: usize,
}

/// One upstream try as the upstream saw it.
#[derive(Debug, Clone)]
struct Hit {
    route: String,
    fault: Fault,
    request_id: Option<String>,
}

/// What the upstream and the agents share.
#[derive(Default)]
struct Ledger {
    plans: Mutex<HashMap<u64, Arc<Plan>>>,
    hits: Mutex<HashMap<u64, Vec<Hit>>>,
    /// Upstream requests that named no known call.
    strays: Mutex<Vec<String>>,
    /// SOLO bodies a real upstream would refuse.
    bad_bodies: Mutex<Vec<String>>,
}

impl Ledger {
    /// The upstream's side: notes the try and picks its answer.
    fn answer(&self, req: &Request) -> Reply {
        let path = req.path.trim_start_matches('/');
        let (route, rest) = path.split_once('/').unwrap_or((path, ""));
        let call: Option<u64> = req.header("x-load-call").and_then(|v| v.parse().ok());
        let plan = call.and_then(|c| lock(&self.plans).get(&c).cloned());
        let (Some(call), Some(plan)) = (call, plan) else {
            lock(&self.strays).push(format!("{} {}", req.method, req.path));
            return Reply::json(404, &[], "{\"message\":\"unknown call\"}");
        };
        let wire = Wire::of_path(rest);
        let request_id = match wire {
            Some(Wire::Qoder) => serde_json::from_slice::<Value>(&req.body)
                .ok()
                .and_then(|v| v["request_id"].as_str().map(str::to_owned)),
            _ => None,
        };
        if wire == Some(Wire::Trae) {
            let problems = wire::solo_problems(&req.body);
            if !problems.is_empty() {
                lock(&self.bad_bodies).push(format!("call {call}: {}", problems.join("; ")));
            }
        }
        let n = {
            let mut hits = lock(&self.hits);
            let list = hits.entry(call).or_default();
            list.push(Hit {
                route: route.to_string(),
                fault: plan.fault(list.len()),
                request_id,
            });
            list.len() - 1
        };
        let fault = plan.fault(n);
        if plan.passthrough {
            fault.passthrough_reply(call)
        } else {
            fault.reply(plan.wire, &plan.answer)
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One call as the agent made it.
struct CallResult {
    call: u64,
    plan: Arc<Plan>,
    seen: Seen,
    body: Bytes,
    broken: Option<String>,
}

/// The outcome of one leg.
pub struct LegReport {
    pub settings: Settings,
    pub calls: usize,
    pub inference: usize,
    pub passthrough: usize,
    pub succeeded: usize,
    pub failed: usize,
    pub upstream_tries: usize,
    pub faults: BTreeMap<String, usize>,
    pub findings: Findings,
    pub status: Value,
    pub elapsed: Duration,
    pub peak_rss_kib: u64,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// Runs one soak leg.
pub async fn run(settings: Settings) -> LegReport {
    let ledger = Arc::new(Ledger::default());
    let l2 = ledger.clone();
    let upstream = Upstream::start(None, move |req| l2.answer(req)).await;
    let qport = gate::free_port();
    let tport = gate::free_port();
    let shim_base = format!("http://127.0.0.1:{qport}");
    let (compressor, compressor_url) = match settings.path {
        Path::Direct => (None, None),
        Path::Reference => {
            let p = gate::compressor(&shim_base, THRESHOLD_CHARS).await;
            let url = format!("http://{}", p.addr(""));
            (Some(p), Some(url))
        }
        Path::Bare => {
            let addr = forwarder::start(shim_base.clone()).await;
            (None, Some(format!("http://{addr}")))
        }
    };
    let toml = config(&upstream.url(), qport, tport, compressor_url.as_deref());
    let gate = gate::serve("soak", &toml, "warn").await;
    let addrs = [
        (Wire::Qoder, gate.addr("qoder")),
        (Wire::Trae, gate.addr("trae")),
    ];
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(settings.seconds);
    let mut tasks = Vec::new();
    for i in 0..settings.streams {
        let (wire, addr) = addrs[i % 2];
        let ledger = ledger.clone();
        let seed = settings.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let turns = settings.turns;
        let chars = settings.question_chars;
        tasks.push(tokio::spawn(conversation(
            ledger, wire, addr, deadline, turns, seed, chars,
        )));
    }
    let mut peak = 0;
    let mut results = Vec::new();
    for t in tasks {
        while !t.is_finished() {
            peak = peak.max(gate.memory_kib().1);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        results.extend(t.await.unwrap_or_default());
    }
    let elapsed = started.elapsed();
    // The chain logs a call when its stream task ends, just after the
    // agent read the last byte: let those records land.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let status = gate::status(gate.addr("qoder")).await;
    peak = peak.max(gate.memory_kib().1);
    let report = judge(&settings, &ledger, &results, status, elapsed, peak);
    gate.stop().await;
    if let Some(c) = compressor {
        c.stop().await;
    }
    report
}

/// The shimgate config of a soak leg: two routes per shim on the scripted
/// upstream, told apart by a path prefix.
fn config(upstream: &str, qport: u16, tport: u16, compressor: Option<&str>) -> String {
    let mut t = String::new();
    if let Some(url) = compressor {
        t.push_str(&format!("[compressor]\nurl = \"{url}\"\n\n"));
    }
    t.push_str(&format!(
        "[retry]\nmax_retries = {}\ninitial_delay_ms = 5\nmax_delay_ms = {}\njitter_ratio = 0\n\n\
         [ordering]\nquota_cooldown_ms = {QUOTA_COOLDOWN_MS}\n\n\
         [upstream]\nconnect_timeout_ms = 2000\nfirst_byte_timeout_ms = {TIMEOUT_MS}\nidle_timeout_ms = {TIMEOUT_MS}\n\n",
        RULES.max_retries,
        RULES.max_delay.as_millis()
    ));
    t.push_str(&format!(
        "[shims.qoder]\nlisten = \"127.0.0.1:{qport}\"\ncodec = \"plain\"\n\n"
    ));
    for r in ["q0", "q1"] {
        t.push_str(&format!(
            "[[shims.qoder.routes]]\nname = \"{r}\"\nurl = \"{upstream}/{r}\"\n\n"
        ));
    }
    t.push_str(&format!("[shims.trae]\nlisten = \"127.0.0.1:{tport}\"\n\n"));
    for r in ["t0", "t1"] {
        t.push_str(&format!(
            "[[shims.trae.routes]]\nname = \"{r}\"\nurl = \"{upstream}/{r}\"\n\n"
        ));
    }
    t
}

/// One agent: turns on one wire, the history growing, every fourth call a
/// pass-through request; stops at the turn limit or the deadline.
async fn conversation(
    ledger: Arc<Ledger>,
    wire: Wire,
    addr: SocketAddr,
    deadline: Instant,
    turns: usize,
    seed: u64,
    question_chars: usize,
) -> Vec<CallResult> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut conn = Conn::new(addr);
    let mut history: Vec<Value> = match wire {
        Wire::Qoder => vec![json!({"role": "system", "content": "You are a coding agent."})],
        Wire::Trae => vec![wire::solo_text("system", "You are a coding agent.")],
    };
    let mut out = Vec::new();
    for turn in 0..turns {
        if Instant::now() >= deadline {
            break;
        }
        let call = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
        let passthrough = turn % 4 == 3;
        let plan = Arc::new(if passthrough {
            Plan::passthrough(&mut rng, wire, call)
        } else {
            Plan::inference(&mut rng, wire, call)
        });
        lock(&ledger.plans).insert(call, plan.clone());
        let (path, body) = if passthrough {
            (
                wire::PASSTHROUGH_PATH,
                json!({"call": call, "ask": "detail"}),
            )
        } else {
            let question = format!(
                "turn {turn} of call {call}: {}",
                "please look at this function and tell me what it does. "
                    .repeat(question_chars.div_ceil(56))
            );
            history.push(match wire {
                Wire::Qoder => json!({"role": "user", "content": question}),
                Wire::Trae => wire::solo_text("user", &question),
            });
            let body = match wire {
                Wire::Qoder => wire::qoder_ask(&format!("load-{seed:x}-{call}"), &history),
                Wire::Trae => wire::trae_body(&history),
            };
            (wire.path(), body)
        };
        let headers = [
            ("content-type", "application/json".to_string()),
            ("authorization", "Bearer load-agent-secret".to_string()),
            ("x-load-call", call.to_string()),
        ];
        let bytes = Bytes::from(serde_json::to_vec(&body).unwrap_or_default());
        let result = match conn.send(Method::POST, path, &headers, bytes).await {
            Ok(resp) => {
                let whole = collect(resp, CALL_LIMIT).await;
                let seen = check::read(wire, whole.status, whole.sse, &whole.body);
                CallResult {
                    call,
                    plan,
                    seen,
                    body: whole.body,
                    broken: whole.broken,
                }
            }
            Err(e) => CallResult {
                call,
                plan,
                seen: Seen::default(),
                body: Bytes::new(),
                broken: Some(e),
            },
        };
        if !passthrough {
            let reply = if result.seen.text.is_empty() {
                "(no answer)".to_string()
            } else {
                result.seen.text.clone()
            };
            history.push(match wire {
                Wire::Qoder => json!({"role": "assistant", "content": reply}),
                Wire::Trae => wire::solo_text("assistant", &reply),
            });
        }
        out.push(result);
    }
    out
}

/// Checks every call against its ledger entry and the chain rules, and
/// `/status` against the totals.
fn judge(
    settings: &Settings,
    ledger: &Ledger,
    results: &[CallResult],
    status: Value,
    elapsed: Duration,
    peak: u64,
) -> LegReport {
    let mut f = Findings::default();
    let hits = lock(&ledger.hits).clone();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut request_ids: HashMap<String, u64> = HashMap::new();
    let (mut succeeded, mut failed) = (0, 0);
    for r in results {
        let tries = hits.get(&r.call).cloned().unwrap_or_default();
        for h in &tries {
            if h.fault != Fault::Ok {
                *faults.entry(format!("{:?}", h.fault)).or_default() += 1;
            }
        }
        judge_tries(&mut f, r, &tries);
        if r.plan.wire == Wire::Qoder && !r.plan.passthrough {
            judge_request_ids(&mut f, r.call, &tries, &mut request_ids);
        }
        let ok = if r.plan.passthrough {
            judge_passthrough(&mut f, r, &tries)
        } else {
            judge_answer(&mut f, r, &tries)
        };
        if ok {
            succeeded += 1;
        } else {
            failed += 1;
        }
    }
    for s in lock(&ledger.strays).iter() {
        f.add(
            "double-send",
            format!("upstream request for no known call: {s}"),
        );
    }
    for b in lock(&ledger.bad_bodies).iter() {
        f.add("malformed", format!("SOLO body refused: {b}"));
    }
    judge_counters(&mut f, settings, results, &status);
    judge_routes(&mut f, &hits, &status);
    let inference = results.iter().filter(|r| !r.plan.passthrough).count();
    LegReport {
        settings: settings.clone(),
        calls: results.len(),
        inference,
        passthrough: results.len() - inference,
        succeeded,
        failed,
        upstream_tries: hits.values().map(Vec::len).sum(),
        faults,
        findings: f,
        status,
        elapsed,
        peak_rss_kib: peak,
    }
}

/// The tries of one call obey the chain rules: nothing after a commit or a
/// never-switch code, retries only for transient codes within the retry
/// budget, a switch to a new route otherwise.
fn judge_tries(f: &mut Findings, r: &CallResult, tries: &[Hit]) {
    let call = r.call;
    if tries.is_empty() && r.broken.is_none() {
        if !(r.seen.errors == 1 && r.seen.status >= 500) {
            f.add(
                "rules",
                format!("call {call}: nothing reached the upstream and the agent got no error"),
            );
        }
        return;
    }
    let mut on_route = 0u32;
    let mut used: Vec<&str> = Vec::new();
    for (i, h) in tries.iter().enumerate() {
        on_route = match used.last() {
            Some(last) if *last == h.route => on_route + 1,
            _ => 1,
        };
        if used.last() != Some(&h.route.as_str()) {
            if used.contains(&h.route.as_str()) {
                f.add(
                    "double-send",
                    format!(
                        "call {call}: route {} tried again after switching away",
                        h.route
                    ),
                );
            }
            used.push(&h.route);
        }
        let next = tries.get(i + 1);
        match (RULES.next(h.fault, on_route), next) {
            (faults::Next::Stop, Some(n)) => f.add(
                "double-send",
                format!(
                    "call {call}: try {} ({:?}) was final, yet try {} went to {}",
                    i + 1,
                    h.fault,
                    i + 2,
                    n.route
                ),
            ),
            (faults::Next::Retry, Some(n)) if n.route != h.route => f.add(
                "rules",
                format!(
                    "call {call}: {:?} on {} should be retried in place, went to {}",
                    h.fault, h.route, n.route
                ),
            ),
            (faults::Next::Retry, None) => f.add(
                "rules",
                format!(
                    "call {call}: {:?} on {} (try {on_route}) should have been retried; the agent got {}",
                    h.fault,
                    h.route,
                    describe(&r.seen, r.broken.as_deref())
                ),
            ),
            (faults::Next::Switch, Some(n)) if n.route == h.route => f.add(
                "double-send",
                format!(
                    "call {call}: {:?} must not be retried on {}, yet it was",
                    h.fault, h.route
                ),
            ),
            _ => {}
        }
    }
}

fn describe(seen: &Seen, broken: Option<&str>) -> String {
    let mut s = format!("status {}", seen.status);
    if !seen.error_codes.is_empty() {
        s.push_str(&format!(" error {}", seen.error_codes.join(",")));
    }
    if let Some(b) = broken {
        s.push_str(&format!(" ({b})"));
    }
    s
}

/// qoder: every try of one return-leg request carries the same
/// `request_id`, and no two calls share one.
fn judge_request_ids(f: &mut Findings, call: u64, tries: &[Hit], seen: &mut HashMap<String, u64>) {
    let mut ids: Vec<&str> = tries
        .iter()
        .filter_map(|h| h.request_id.as_deref())
        .collect();
    ids.dedup();
    if ids.len() > 1 {
        f.add(
            "double-send",
            format!(
                "call {call}: {} different request_ids upstream (one request sent as two)",
                ids.len()
            ),
        );
    }
    for id in ids {
        if let Some(other) = seen.insert(id.to_string(), call) {
            if other != call {
                f.add(
                    "double-send",
                    format!(
                        "calls {other} and {call} reached the upstream with the same request_id"
                    ),
                );
            }
        }
    }
}

/// A pass-through answer is the upstream's, byte for byte.
fn judge_passthrough(f: &mut Findings, r: &CallResult, tries: &[Hit]) -> bool {
    let last = tries.last().map(|h| h.fault);
    match last {
        Some(Fault::Ok) => {
            let want = faults::passthrough_body(r.call);
            if r.seen.status != 200 || r.body.as_ref() != want.as_bytes() {
                f.add(
                    "lost-or-duplicated",
                    format!(
                        "call {}: pass-through answer changed: status {} body {:?}",
                        r.call,
                        r.seen.status,
                        String::from_utf8_lossy(&r.body)
                    ),
                );
            }
            true
        }
        _ => {
            if r.seen.errors != 1 {
                f.add(
                    "final-error",
                    format!(
                        "call {}: failed pass-through without one error body ({})",
                        r.call,
                        describe(&r.seen, r.broken.as_deref())
                    ),
                );
            }
            false
        }
    }
}

/// The agent's answer matches the last try: complete after success, a
/// prefix and one final error after a cut, one error otherwise.
fn judge_answer(f: &mut Findings, r: &CallResult, tries: &[Hit]) -> bool {
    let call = r.call;
    let s = &r.seen;
    let a = &r.plan.answer;
    for p in &s.problems {
        f.add("malformed", format!("call {call}: {p}"));
    }
    if let Some(b) = &r.broken {
        f.add(
            "final-error",
            format!("call {call}: the agent's stream broke without a final frame: {b}"),
        );
        return false;
    }
    let pieces = check::prefix_len(&s.text, call, a.pieces);
    if pieces.is_none() {
        f.add(
            "lost-or-duplicated",
            format!(
                "call {call}: text is not pieces 0..n in order: {:?}",
                s.text
            ),
        );
    }
    if s.after_end > 0 {
        f.add(
            "final-error",
            format!(
                "call {call}: {} frames after the end or error frame",
                s.after_end
            ),
        );
    }
    let last = tries.last().map(|h| h.fault);
    match last {
        Some(Fault::Ok) => {
            if !s.complete() || pieces != Some(a.pieces) {
                f.add(
                    "lost-or-duplicated",
                    format!(
                        "call {call}: complete answer expected ({} pieces), got {:?} pieces, {}, {} ends",
                        a.pieces,
                        pieces,
                        describe(s, None),
                        s.ends
                    ),
                );
            }
            if a.tool_frags > 0
                && (s.args != wire::args_of(call, a.tool_frags) || s.tool_names.len() != 1)
            {
                f.add(
                    "lost-or-duplicated",
                    format!(
                        "call {call}: tool call arguments {:?} names {:?}",
                        s.args, s.tool_names
                    ),
                );
            }
            if r.plan.wire == Wire::Trae && s.reasoning != wire::REASONING {
                f.add(
                    "lost-or-duplicated",
                    format!("call {call}: reasoning {:?}", s.reasoning),
                );
            }
            s.complete()
        }
        Some(fault @ (Fault::ResetAfterContent | Fault::CloseAfterContent)) => {
            let cut = Fault::cut_at(a.pieces);
            let got = pieces.unwrap_or(0);
            // A reset may discard bytes still in the kernel; a clean close may not.
            let whole = if fault == Fault::CloseAfterContent {
                got == cut
            } else {
                (1..=cut).contains(&got)
            };
            if !whole {
                f.add(
                    "lost-or-duplicated",
                    format!("call {call}: {fault:?} after {cut} pieces, the agent read {got}"),
                );
            }
            if !s.one_final_error() {
                f.add(
                    "final-error",
                    format!(
                        "call {call}: cut stream ended with {} error frames",
                        s.errors
                    ),
                );
            }
            false
        }
        _ => {
            if !s.one_final_error() {
                f.add(
                    "final-error",
                    format!(
                        "call {call}: failed call ({:?} last) ended with {} error frames ({})",
                        last,
                        s.errors,
                        describe(s, None)
                    ),
                );
            }
            if last == Some(Fault::Solo4022) && !s.error_codes.iter().any(|c| c == "4022") {
                f.add(
                    "rules",
                    format!(
                        "call {call}: 4022 should reach the agent as itself, got {:?}",
                        s.error_codes
                    ),
                );
            }
            false
        }
    }
}

/// `/status` adds up: every inference call was intercepted, and each was
/// either forwarded by the return leg or sent directly (`fallback`).
fn judge_counters(f: &mut Findings, settings: &Settings, results: &[CallResult], st: &Value) {
    for wire in [Wire::Qoder, Wire::Trae] {
        let key = format!("{}Shim", wire.name());
        let s = &st[key.as_str()];
        let n = |k: &str| s[k].as_u64().unwrap_or(u64::MAX);
        let sent = results
            .iter()
            .filter(|r| r.plan.wire == wire && !r.plan.passthrough)
            .count() as u64;
        let (intercepted, forwarded, fallback) = (n("intercepted"), n("forwarded"), n("fallback"));
        if intercepted != sent {
            f.add(
                "counters",
                format!("{key}: intercepted {intercepted}, the agents sent {sent}"),
            );
        }
        if intercepted != forwarded.saturating_add(fallback) {
            f.add(
                "counters",
                format!("{key}: intercepted {intercepted} != forwarded {forwarded} + fallback {fallback}"),
            );
        }
        let want_fallback = if settings.path == Path::Direct {
            sent
        } else {
            0
        };
        if fallback != want_fallback {
            f.add(
                "counters",
                format!(
                    "{key}: fallback {fallback}, expected {want_fallback} on the {} path",
                    settings.path.name()
                ),
            );
        }
        let (compacted, folded) = (n("compacted"), n("folded"));
        if compacted > forwarded || folded > compacted || n("sideRequests") != 0 {
            f.add(
                "counters",
                format!("{key}: compacted {compacted}, folded {folded}, forwarded {forwarded}, sideRequests {}", n("sideRequests")),
            );
        }
        if settings.path == Path::Reference && compacted != forwarded {
            f.add(
                "counters",
                format!("{key}: the compressor rewrote every request, yet compacted {compacted} != forwarded {forwarded}"),
            );
        }
    }
}

/// The chain's per-route counters match what the upstream saw: one
/// logged attempt per request received, and the same failure codes.
fn judge_routes(f: &mut Findings, hits: &HashMap<u64, Vec<Hit>>, st: &Value) {
    let mut want: BTreeMap<String, (u64, BTreeMap<String, u64>)> = BTreeMap::new();
    for h in hits.values().flatten() {
        let e = want.entry(h.route.clone()).or_default();
        e.0 += 1;
        if let Some(code) = h.fault.code() {
            *e.1.entry(code.to_string()).or_default() += 1;
        }
    }
    for shim in ["qoder", "trae"] {
        for row in st["chain"]["routes"][shim].as_array().into_iter().flatten() {
            let name = row["name"].as_str().unwrap_or("?").to_string();
            let (attempts, codes) = want.remove(&name).unwrap_or_default();
            let logged = row["attempts"].as_u64().unwrap_or(0);
            let skipped = row["failures"]["CAPACITY"].as_u64().unwrap_or(0);
            if logged - skipped.min(logged) != attempts {
                f.add(
                    "double-send",
                    format!("route {name}: the chain logged {logged} attempts, the upstream received {attempts}"),
                );
            }
            let mut got: BTreeMap<String, u64> = BTreeMap::new();
            for (k, v) in row["failures"].as_object().into_iter().flatten() {
                got.insert(k.clone(), v.as_u64().unwrap_or(0));
            }
            if got != codes {
                // The grouped calls say which kind of call it was, when the
                // ring still holds it.
                let odd: Vec<String> = st["chain"]["calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["outcome"] == "aborted")
                    .map(|c| format!("{} call {} {}", c["kind"], c["call"], c["routes"]))
                    .collect();
                f.add(
                    "rules",
                    format!(
                        "route {name}: failures logged {got:?}, the upstream played {codes:?}; aborted calls still in /status: {odd:?}"
                    ),
                );
            }
        }
    }
}

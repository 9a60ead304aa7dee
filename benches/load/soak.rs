//! The fault soak: N agent conversations on both wires through shimgate
//! (and the compressor), a scripted upstream that fails according to each
//! call's plan, and a ledger of every upstream try, from which `judge`
//! proves that no frame was lost or doubled, every failure ended with one
//! error frame, and nothing was sent upstream more often than the chain
//! allows.

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
use super::faults::{Fault, Plan, Rules};
use super::findings::Findings;
use super::forwarder;
use super::gate;
use super::judge;
use super::wire::{self, Wire};
use shimgate_testkit::upstream::{Options, Recorded, Reply, Upstream};

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

/// What the chain may learn in a leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// The failover rules alone: auto ordering, no breaker, no retry
    /// budget (so every retry the rules call for is made and judged).
    Classic,
    /// Classic plus the default retry budget (0.2 and 3 a second).
    Budget,
    /// Measured ordering, the breaker (5 failures, 200 ms open) and the
    /// default retry budget.
    Learn,
}

impl Chain {
    pub fn name(self) -> &'static str {
        match self {
            Chain::Classic => "classic",
            Chain::Budget => "budget",
            Chain::Learn => "learn",
        }
    }

    /// The config keys of this chain.
    fn toml(self) -> &'static str {
        match self {
            Chain::Classic | Chain::Budget => "[breaker]\nfailures = 0\n\n",
            Chain::Learn => "[breaker]\nfailures = 5\nopen_ms = 200\nmax_open_ms = 2000\n\n",
        }
    }
}

/// One soak leg's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    pub path: Path,
    pub chain: Chain,
    /// The first route of each shim answers every try with a 502.
    pub dead_primary: bool,
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
pub struct Hit {
    pub route: String,
    pub fault: Fault,
    pub request_id: Option<String>,
    /// Played by a dead primary, not by the call's plan.
    pub dead: bool,
}

/// The first route of each shim (the dead one of a `dead_primary` leg).
pub const PRIMARIES: [&str; 2] = ["q0", "t0"];

/// What the upstream and the agents share.
#[derive(Default)]
pub struct Ledger {
    plans: Mutex<HashMap<u64, Arc<Plan>>>,
    pub hits: Mutex<HashMap<u64, Vec<Hit>>>,
    /// Upstream requests that named no known call.
    pub strays: Mutex<Vec<String>>,
    /// SOLO bodies a real upstream would refuse.
    pub bad_bodies: Mutex<Vec<String>>,
    /// The primaries answer 502 to everything.
    pub dead_primary: bool,
}

impl Ledger {
    /// The upstream's side: notes the try and picks its answer.
    fn answer(&self, req: &Recorded) -> Reply {
        let path = req.path.trim_start_matches('/');
        let (route, rest) = path.split_once('/').unwrap_or((path, ""));
        let call: Option<u64> = req.header("x-load-call").and_then(|v| v.parse().ok());
        let plan = call.and_then(|c| lock(&self.plans).get(&c).cloned());
        let (Some(call), Some(plan)) = (call, plan) else {
            lock(&self.strays).push(format!("{} {}", req.method, req.path));
            return Reply::json_sized(404, &[], "{\"message\":\"unknown call\"}");
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
        let dead = self.dead_primary && PRIMARIES.contains(&route);
        let fault = {
            let mut hits = lock(&self.hits);
            let list = hits.entry(call).or_default();
            let fault = if dead {
                Fault::Http502
            } else {
                plan.fault(list.iter().filter(|h| !h.dead).count())
            };
            list.push(Hit {
                route: route.to_string(),
                fault,
                request_id,
                dead,
            });
            fault
        };
        if plan.passthrough {
            fault.passthrough_reply(call)
        } else {
            fault.reply(plan.wire, &plan.answer)
        }
    }
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One call as the agent made it.
pub struct CallResult {
    pub call: u64,
    pub plan: Arc<Plan>,
    pub seen: Seen,
    pub body: Bytes,
    pub broken: Option<String>,
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
    /// Of those, tries on the primaries (`q0`, `t0`).
    pub primary_tries: usize,
    /// Retries the rules call for that the chain did not make (the retry
    /// budget was spent, or the route's breaker opened or was probing).
    pub retries_skipped: usize,
    /// Retryable failures that switched on a spent budget, per `/metrics`.
    pub budget_exhausted: u64,
    /// Breaker openings, per `/status`.
    pub breaker_opens: u64,
    pub faults: BTreeMap<String, usize>,
    pub findings: Findings,
    pub status: Value,
    pub elapsed: Duration,
    pub peak_rss_kib: u64,
}

static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// Runs one soak leg.
pub async fn run(settings: Settings) -> LegReport {
    let ledger = Arc::new(Ledger {
        dead_primary: settings.dead_primary,
        ..Ledger::default()
    });
    let l2 = ledger.clone();
    let upstream = Upstream::start_with(
        Options {
            record: false,
            ..Options::default()
        },
        move |req, _| l2.answer(req),
    )
    .await;
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
    let toml = config(
        &upstream.url(),
        (qport, tport),
        compressor_url.as_deref(),
        settings.chain,
    );
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
    let report = judge::judge(&settings, &ledger, &results, status, elapsed, peak);
    gate.stop().await;
    if let Some(c) = compressor {
        c.stop().await;
    }
    report
}

/// The shimgate config of a soak leg: two routes per shim on the scripted
/// upstream, told apart by a path prefix; no route state file (a leg must
/// not learn from the last one).
fn config(
    upstream: &str,
    (qport, tport): (u16, u16),
    compressor: Option<&str>,
    chain: Chain,
) -> String {
    let mut t = String::new();
    if let Some(url) = compressor {
        t.push_str(&format!("[compressor]\nurl = \"{url}\"\n\n"));
    }
    // Classic: a budget so large it never binds.
    let budget = if chain == Chain::Classic {
        "budget_min_per_s = 1000000\n"
    } else {
        ""
    };
    let mode = if chain == Chain::Learn {
        "measured"
    } else {
        "auto"
    };
    t.push_str(&format!(
        "[retry]\nmax_retries = {}\ninitial_delay_ms = 5\nmax_delay_ms = {}\njitter_ratio = 0\n{budget}\n\
         [ordering]\nmode = \"{mode}\"\nquota_cooldown_ms = {QUOTA_COOLDOWN_MS}\nmeasure_window_ms = 5000\n\n\
         [state]\nttl_ms = 0\n\n{}\
         [upstream]\nconnect_timeout_ms = 2000\nfirst_byte_timeout_ms = {TIMEOUT_MS}\nidle_timeout_ms = {TIMEOUT_MS}\n\n",
        RULES.max_retries,
        RULES.max_delay.as_millis(),
        chain.toml(),
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

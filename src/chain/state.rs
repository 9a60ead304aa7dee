//! What the chain remembers between calls: per-route cooldowns, in-flight
//! counts and counters, the ring log of attempts and the per-call summary.
//!
//! Keyed by shim and route *name*, so a reload that keeps a route's name
//! keeps its cooldown; streams in flight hold their own permit and are not
//! touched by a reload.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use shimgate_shim_api::FailureCode;

use crate::chain::decide::Now;
use crate::chain::latency::Latency;
use crate::clock::{epoch_ms, iso8601};
use crate::config::{Ordering, OrderingMode, Route};

/// Attempts kept in the ring log.
pub const RING_CAPACITY: usize = 200;
/// Calls kept in the grouped view.
pub const CALLS_CAPACITY: usize = 50;

/// One attempt, as logged.
#[derive(Debug, Clone)]
pub struct AttemptEntry {
    pub at: SystemTime,
    pub call: u64,
    pub shim: &'static str,
    /// Which route of the call (1-based).
    pub attempt: usize,
    /// Which try on that route (1-based).
    pub try_no: u32,
    pub route: String,
    pub ok: bool,
    pub code: Option<FailureCode>,
    pub reason: Option<String>,
    pub elapsed: Duration,
    pub will_retry: bool,
    pub switched: bool,
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Failed,
    Aborted,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Aborted => "aborted",
        }
    }
}

/// One route's part in a call.
#[derive(Debug, Clone)]
pub struct RouteReport {
    pub attempt: usize,
    pub route: String,
    pub tries: u32,
    pub ok: bool,
    pub code: Option<FailureCode>,
    pub reason: Option<String>,
    pub elapsed: Duration,
    pub switched_to: Option<String>,
    /// The wait the upstream asked for on the last failure, if it named one.
    pub retry_after: Option<Duration>,
}

impl RouteReport {
    /// The per-route line of an `AUTO_ROUTES_EXHAUSTED` error and of `/status` calls.
    pub fn to_json(&self) -> Value {
        json!({
            "attempt": self.attempt,
            "route": self.route,
            "tries": self.tries,
            "ok": self.ok,
            "code": self.code.map(FailureCode::as_str),
            "reason": self.reason,
            "elapsedMs": self.elapsed.as_millis() as u64,
            "switched": self.switched_to.is_some(),
            "switchedTo": self.switched_to,
        })
    }
}

/// One call, grouped.
#[derive(Debug, Clone)]
pub struct CallRecord {
    pub call: u64,
    pub shim: &'static str,
    pub kind: &'static str,
    pub at: SystemTime,
    pub elapsed: Duration,
    pub outcome: Outcome,
    pub code: Option<FailureCode>,
    pub routes: Vec<RouteReport>,
}

/// A route's cooldown after a quota failure.
#[derive(Debug, Clone)]
struct Cooldown {
    until: Instant,
    until_wall: SystemTime,
    reason: String,
}

/// Counters of one route.
#[derive(Debug, Default, Clone)]
struct RouteStats {
    attempts: u64,
    ok: u64,
    retries: u64,
    switches: u64,
    failures: BTreeMap<FailureCode, u64>,
}

#[derive(Debug, Default)]
struct RouteRuntime {
    cooldown: Option<Cooldown>,
    in_flight: Arc<AtomicUsize>,
    stats: RouteStats,
}

#[derive(Debug, Default)]
struct Inner {
    routes: HashMap<(&'static str, String), RouteRuntime>,
    log: VecDeque<AttemptEntry>,
    calls: VecDeque<CallRecord>,
    ignored_cooldown: HashMap<&'static str, bool>,
}

/// The chain's shared memory.
#[derive(Debug, Default)]
pub struct ChainState {
    inner: Mutex<Inner>,
    call_seq: AtomicU64,
    streams: AtomicI64,
    /// Latency histograms for `/metrics`.
    pub latency: Latency,
}

/// Counts a stream in flight until dropped.
#[derive(Debug)]
pub struct StreamGuard<'a>(&'a AtomicI64);

impl Drop for StreamGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, AtomicOrdering::Relaxed);
    }
}

/// A slot against a route's concurrency cap, released on drop.
#[derive(Debug)]
pub struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, AtomicOrdering::AcqRel);
    }
}

/// The order a call tries routes in.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Routes to try, in order.
    pub routes: Vec<Route>,
    /// Routes left out because they are cooling (auto mode).
    pub cooling: Vec<(Route, SystemTime)>,
}

impl Plan {
    /// A housekeeping call's plan: the first route only, cooling or not
    /// (such calls pass straight through, without failover).
    pub fn housekeeping(routes: &[Route]) -> Plan {
        Plan {
            routes: routes.iter().take(1).cloned().collect(),
            cooling: Vec::new(),
        }
    }
}

impl ChainState {
    /// A fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A poisoned lock only means another thread panicked mid-update of
        // counters; the data is still usable, so keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks an answer as streaming until the guard is dropped.
    pub fn stream_started(&self) -> StreamGuard<'_> {
        self.streams.fetch_add(1, AtomicOrdering::Relaxed);
        StreamGuard(&self.streams)
    }

    /// Answers streaming right now.
    pub fn streams_in_flight(&self) -> i64 {
        self.streams.load(AtomicOrdering::Relaxed)
    }

    /// A new call number.
    pub fn next_call(&self) -> u64 {
        self.call_seq.fetch_add(1, AtomicOrdering::Relaxed) + 1
    }

    /// Orders the configured routes for one call at `now` (DESIGN §5):
    /// manual keeps the configured order; auto leaves cooling routes out,
    /// unless every route is cooling, in which case cooldowns are ignored
    /// rather than failing the call.
    pub fn plan(
        &self,
        shim: &'static str,
        routes: &[Route],
        ordering: &Ordering,
        now: Now,
    ) -> Plan {
        let mut inner = self.lock();
        let now = now.mono;
        let mut ready = Vec::new();
        let mut cooling = Vec::new();
        for route in routes {
            let rt = inner.routes.entry((shim, route.name.clone())).or_default();
            match &rt.cooldown {
                Some(c) if c.until > now && ordering.mode == OrderingMode::Auto => {
                    cooling.push((route.clone(), c.until_wall));
                }
                Some(c) if c.until <= now => {
                    rt.cooldown = None;
                    ready.push(route.clone());
                }
                _ => ready.push(route.clone()),
            }
        }
        let all_cooling = ready.is_empty() && !cooling.is_empty();
        inner.ignored_cooldown.insert(shim, all_cooling);
        if all_cooling {
            return Plan {
                routes: routes.to_vec(),
                cooling: Vec::new(),
            };
        }
        Plan {
            routes: ready,
            cooling,
        }
    }

    /// Takes a slot on a route; `None` when it is at its cap (skipped, not queued).
    pub fn try_acquire(&self, shim: &'static str, route: &Route) -> Option<Permit> {
        let counter = {
            let mut inner = self.lock();
            inner
                .routes
                .entry((shim, route.name.clone()))
                .or_default()
                .in_flight
                .clone()
        };
        let mut current = counter.load(AtomicOrdering::Acquire);
        loop {
            if route.max_concurrency > 0 && current >= route.max_concurrency {
                return None;
            }
            match counter.compare_exchange_weak(
                current,
                current + 1,
                AtomicOrdering::AcqRel,
                AtomicOrdering::Acquire,
            ) {
                Ok(_) => return Some(Permit(counter)),
                Err(seen) => current = seen,
            }
        }
    }

    /// Puts a route on a quota cooldown for `rest` from `now`; a shorter
    /// rest never cuts a longer one.
    pub fn cool(&self, shim: &'static str, route: &str, rest: Duration, reason: &str, now: Now) {
        let mut inner = self.lock();
        let rt = inner.routes.entry((shim, route.to_string())).or_default();
        let until = now.mono + rest;
        let longer = rt.cooldown.as_ref().is_none_or(|c| c.until < until);
        if longer {
            rt.cooldown = Some(Cooldown {
                until,
                until_wall: now.wall + rest,
                reason: reason.to_string(),
            });
        }
    }

    /// Records one attempt in the ring log and the route's counters.
    pub fn record(&self, entry: AttemptEntry) {
        let mut inner = self.lock();
        let rt = inner
            .routes
            .entry((entry.shim, entry.route.clone()))
            .or_default();
        rt.stats.attempts += 1;
        if entry.ok {
            rt.stats.ok += 1;
        }
        if let Some(code) = entry.code {
            *rt.stats.failures.entry(code).or_default() += 1;
        }
        if entry.will_retry {
            rt.stats.retries += 1;
        }
        if entry.switched {
            rt.stats.switches += 1;
        }
        if inner.log.len() == RING_CAPACITY {
            inner.log.pop_front();
        }
        inner.log.push_back(entry);
    }

    /// Records how a call ended.
    pub fn finish_call(&self, record: CallRecord) {
        let mut inner = self.lock();
        if inner.calls.len() == CALLS_CAPACITY {
            inner.calls.pop_front();
        }
        inner.calls.push_back(record);
    }

    /// The `/status` `chain` section (routes given per shim from the live config).
    pub fn status(&self, shims: &[(&'static str, &[Route])], ordering: &Ordering) -> Value {
        let inner = self.lock();
        let now = Instant::now();
        let mut routes = serde_json::Map::new();
        let mut effective = serde_json::Map::new();
        let mut cooldown = Vec::new();
        for (shim, list) in shims {
            let mut rows = Vec::new();
            let mut eff = Vec::new();
            for r in list.iter() {
                let rt = inner.routes.get(&(*shim, r.name.clone()));
                let cool = rt
                    .and_then(|rt| rt.cooldown.as_ref())
                    .filter(|c| c.until > now);
                let stats = rt.map(|rt| rt.stats.clone()).unwrap_or_default();
                let in_flight = rt.map_or(0, |rt| rt.in_flight.load(AtomicOrdering::Relaxed));
                rows.push(json!({
                    "name": r.name,
                    "url": r.url,
                    "maxConcurrency": r.max_concurrency,
                    "inFlight": in_flight,
                    "headers": r.headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
                    "attempts": stats.attempts,
                    "ok": stats.ok,
                    "retries": stats.retries,
                    "switches": stats.switches,
                    "failures": stats.failures.iter().map(|(k, v)| (k.as_str().to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
                }));
                let cooling = cool.is_some() && ordering.mode == OrderingMode::Auto;
                eff.push(json!({
                    "route": r.name,
                    "cooling": cooling,
                    "until": cool.map(|c| iso8601(c.until_wall)),
                }));
                if let Some(c) = cool {
                    if ordering.mode == OrderingMode::Auto {
                        cooldown.push(json!({
                            "shim": shim,
                            "route": r.name,
                            "until": epoch_ms(c.until_wall),
                            "reason": c.reason,
                        }));
                    }
                }
            }
            // Cooling routes are shown first, as they are what a reader looks for.
            eff.sort_by_key(|e| !e["cooling"].as_bool().unwrap_or(false));
            routes.insert(shim.to_string(), Value::Array(rows));
            effective.insert(shim.to_string(), Value::Array(eff));
        }
        let ignored: serde_json::Map<_, _> = inner
            .ignored_cooldown
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        json!({
            "ordering": {
                "mode": ordering.mode.as_str(),
                "quotaCooldownMs": ordering.quota_cooldown.as_millis() as u64,
                "effective": effective,
                "cooldown": cooldown,
                "ignoredCooldown": ignored,
            },
            "routes": routes,
            "capacity": RING_CAPACITY,
            "total": inner.log.len(),
            "log": inner.log.iter().map(entry_json).collect::<Vec<_>>(),
            "calls": inner.calls.iter().rev().map(call_json).collect::<Vec<_>>(),
        })
    }
}

/// One route's counters for `/metrics`, read from the chain's memory.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteMetrics {
    pub shim: &'static str,
    pub route: String,
    pub ok: u64,
    /// Failed attempts by code, in code order.
    pub failures: Vec<(FailureCode, u64)>,
    pub retries: u64,
    pub switches: u64,
    pub in_flight: usize,
    /// Resting after a quota failure (auto mode), as `/status` shows it.
    pub cooling: bool,
}

impl ChainState {
    /// The counters of every configured route (routes given per shim from
    /// the live config, as for [`ChainState::status`]), for `/metrics`.
    pub fn route_metrics(
        &self,
        shims: &[(&'static str, &[Route])],
        ordering: &Ordering,
    ) -> Vec<RouteMetrics> {
        let inner = self.lock();
        let now = Instant::now();
        let mut out = Vec::new();
        for &(shim, list) in shims {
            for r in list {
                let rt = inner.routes.get(&(shim, r.name.clone()));
                let stats = rt.map(|rt| rt.stats.clone()).unwrap_or_default();
                let cooling = rt
                    .and_then(|rt| rt.cooldown.as_ref())
                    .is_some_and(|c| c.until > now)
                    && ordering.mode == OrderingMode::Auto;
                out.push(RouteMetrics {
                    shim,
                    route: r.name.clone(),
                    ok: stats.ok,
                    failures: stats.failures.into_iter().collect(),
                    retries: stats.retries,
                    switches: stats.switches,
                    in_flight: rt.map_or(0, |rt| rt.in_flight.load(AtomicOrdering::Relaxed)),
                    cooling,
                });
            }
        }
        out
    }
}

fn entry_json(e: &AttemptEntry) -> Value {
    json!({
        "at": iso8601(e.at),
        "call": e.call,
        "shim": e.shim,
        "attempt": e.attempt,
        "try": e.try_no,
        "route": e.route,
        "ok": e.ok,
        "code": e.code.map(FailureCode::as_str),
        "reason": e.reason,
        "elapsedMs": e.elapsed.as_millis() as u64,
        "willRetry": e.will_retry,
        "switched": e.switched,
    })
}

fn call_json(c: &CallRecord) -> Value {
    json!({
        "call": c.call,
        "shim": c.shim,
        "kind": c.kind,
        "at": iso8601(c.at),
        "elapsedMs": c.elapsed.as_millis() as u64,
        "outcome": c.outcome.as_str(),
        "code": c.code.map(FailureCode::as_str),
        "routes": c.routes.iter().map(RouteReport::to_json).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(name: &str, cap: usize) -> Route {
        Route {
            name: name.into(),
            url: "http://x".into(),
            max_concurrency: cap,
            headers: vec![],
            context_tokens: None,
        }
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.routes.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn cooling_route_is_skipped_in_auto_mode() {
        let s = ChainState::new();
        let now = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", Duration::from_secs(60), "quota", now);
        let plan = s.plan("trae", &routes, &Ordering::default(), now);
        assert_eq!(names(&plan), ["b"]);
        assert_eq!(plan.cooling.len(), 1);
        assert_eq!(plan.cooling[0].1, now.wall + Duration::from_secs(60));
    }

    #[test]
    fn manual_mode_keeps_cooling_routes() {
        let s = ChainState::new();
        let now = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", Duration::from_secs(60), "quota", now);
        let manual = Ordering {
            mode: OrderingMode::Manual,
            ..Ordering::default()
        };
        assert_eq!(s.plan("trae", &routes, &manual, now).routes.len(), 2);
    }

    #[test]
    fn all_cooling_ignores_cooldowns() {
        let s = ChainState::new();
        let now = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", Duration::from_secs(60), "quota", now);
        s.cool("trae", "b", Duration::from_secs(30), "quota", now);
        let plan = s.plan("trae", &routes, &Ordering::default(), now);
        assert_eq!(
            names(&plan),
            ["a", "b"],
            "the configured order, cooling ignored"
        );
        assert!(plan.cooling.is_empty());
        let st = s.status(&[("trae", &routes)], &Ordering::default());
        assert_eq!(st["ordering"]["ignoredCooldown"]["trae"], true);
    }

    #[test]
    fn a_cooled_route_comes_back_when_its_cooldown_ends() {
        let s = ChainState::new();
        let t0 = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        let ordering = Ordering::default();
        s.cool("trae", "a", Duration::from_millis(600), "quota", t0);
        let just_before = t0.after(Duration::from_millis(599));
        assert_eq!(
            names(&s.plan("trae", &routes, &ordering, just_before)),
            ["b"]
        );
        let at_the_end = t0.after(Duration::from_millis(600));
        assert_eq!(
            names(&s.plan("trae", &routes, &ordering, at_the_end)),
            ["a", "b"]
        );
    }

    #[test]
    fn expired_cooldown_is_cleared() {
        let s = ChainState::new();
        let t0 = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", Duration::from_millis(1), "quota", t0);
        let later = t0.after(Duration::from_millis(5));
        assert_eq!(
            s.plan("trae", &routes, &Ordering::default(), later)
                .routes
                .len(),
            2
        );
        // Cleared, not just expired: the plan no longer sees a cooldown at
        // all, even at a time before its old end.
        assert_eq!(
            s.plan("trae", &routes, &Ordering::default(), t0)
                .routes
                .len(),
            2
        );
    }

    #[test]
    fn a_shorter_cooldown_never_cuts_a_longer_one() {
        let s = ChainState::new();
        let t0 = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", Duration::from_secs(60), "quota", t0);
        s.cool("trae", "a", Duration::from_secs(1), "quota", t0);
        let later = t0.after(Duration::from_secs(2));
        assert_eq!(
            names(&s.plan("trae", &routes, &Ordering::default(), later)),
            ["b"]
        );
    }

    #[test]
    fn a_housekeeping_call_plans_the_first_route_only_even_when_cooling() {
        let s = ChainState::new();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", Duration::from_secs(60), "quota", Now::system());
        let plan = Plan::housekeeping(&routes);
        assert_eq!(names(&plan), ["a"]);
        assert!(plan.cooling.is_empty());
        assert!(names(&Plan::housekeeping(&[])).is_empty());
    }

    #[test]
    fn permits_respect_the_cap_and_free_on_drop() {
        let s = ChainState::new();
        let r = route("a", 2);
        let p1 = s.try_acquire("qoder", &r).unwrap();
        let _p2 = s.try_acquire("qoder", &r).unwrap();
        assert!(s.try_acquire("qoder", &r).is_none());
        drop(p1);
        assert!(s.try_acquire("qoder", &r).is_some());
    }

    #[test]
    fn ring_log_keeps_the_last_200() {
        let s = ChainState::new();
        for i in 0..250 {
            s.record(AttemptEntry {
                at: SystemTime::now(),
                call: i,
                shim: "qoder",
                attempt: 1,
                try_no: 1,
                route: "a".into(),
                ok: true,
                code: None,
                reason: None,
                elapsed: Duration::ZERO,
                will_retry: false,
                switched: false,
            });
        }
        let st = s.status(&[("qoder", &[route("a", 0)])], &Ordering::default());
        assert_eq!(st["log"].as_array().unwrap().len(), RING_CAPACITY);
        assert_eq!(st["log"][0]["call"], 50);
        assert_eq!(st["routes"]["qoder"][0]["attempts"], 250);
    }
}

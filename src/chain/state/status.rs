//! The chain's memory as `/status` and `/metrics` read it: per route its
//! counters, score inputs, breaker and cooldown; per shim the order the
//! next call takes (`ordering.effective`) and the retry budget.

use std::sync::atomic::Ordering as AtomicOrdering;

use serde_json::{json, Map, Value};
use shimgate_shim_api::FailureCode;

use super::{
    call_json, entry_json, ChainState, Inner, RouteRuntime, CALLS_CAPACITY, RING_CAPACITY,
};
use crate::chain::breaker::Gate;
use crate::chain::budget::WINDOW_SECS;
use crate::chain::rank::{self, Order};
use crate::clock::Now;
use crate::clock::{epoch_ms, iso8601};
use crate::config::{Ordering, Route};

/// The routes of each shim, as the live config lists them.
pub type ShimRoutes<'a> = [(&'static str, &'a [Route])];

impl ChainState {
    /// The `/status` `chain` section at `now`.
    pub fn status(&self, shims: &ShimRoutes<'_>, ordering: &Ordering, now: Now) -> Value {
        let mut inner = self.lock();
        let mut routes = Map::new();
        let mut effective = Map::new();
        let mut ignored = Map::new();
        let mut pinned = Map::new();
        let mut budget = Map::new();
        let mut cooldown = Vec::new();
        let mut failed_today = Vec::new();
        for &(shim, list) in shims {
            for r in list {
                let rt = inner.route(shim, &r.name);
                let failures = rt.history.failures_today(now.wall, ordering.zone);
                if failures > 0 {
                    failed_today.push(json!({
                        "shim": shim,
                        "route": r.name,
                        "failures": failures,
                        "lastFailure": rt.last_failure.as_ref().map(|f| json!({
                            "code": f.code.as_str(),
                            "reason": f.reason,
                            "at": iso8601(f.at),
                        })),
                        "cooling": rt.cooling(now.mono).is_some(),
                        "disabled": rt.disabled,
                    }));
                }
            }
            let order = inner.order(shim, list, ordering, now);
            let rows = list
                .iter()
                .enumerate()
                .map(|(i, r)| route_json(inner.route(shim, &r.name), r, i, ordering, now))
                .collect();
            if ordering.mode.skips_resting() {
                for r in list {
                    if let Some(c) = inner.route(shim, &r.name).cooling(now.mono) {
                        cooldown.push(json!({
                            "shim": shim,
                            "route": r.name,
                            "until": epoch_ms(c.until_wall),
                            "reason": c.reason,
                        }));
                    }
                }
            }
            effective.insert(shim.into(), effective_json(&order, list));
            ignored.insert(shim.into(), json!(order.ignored_rests));
            let rt = inner.shim(shim);
            pinned.insert(shim.into(), json!(rt.pinned));
            budget.insert(shim.into(), json!({"exhausted": rt.budget_exhausted}));
            routes.insert(shim.into(), Value::Array(rows));
        }
        json!({
            "ordering": {
                "mode": ordering.mode.as_str(),
                "quotaCooldownMs": ordering.quota_cooldown.as_millis() as u64,
                "quotaCooldownHour": ordering.quota_cooldown_hour,
                "zone": ordering.zone.name(),
                "measureWindowMs": ordering.measure_window.as_millis() as u64,
                "effective": effective,
                "pinned": pinned,
                "cooldown": cooldown,
                "ignoredCooldown": ignored,
            },
            "budget": {"windowSeconds": WINDOW_SECS, "shims": budget},
            "routes": routes,
            "failedToday": failed_today,
            "capacity": RING_CAPACITY,
            "callsCapacity": CALLS_CAPACITY,
            "total": inner.log.len(),
            "log": inner.log.iter().map(entry_json).collect::<Vec<_>>(),
            "calls": inner.calls.iter().rev().map(call_json).collect::<Vec<_>>(),
        })
    }

    /// One shim's `ordering.effective` at `now` (the hand controls answer it).
    pub fn effective(
        &self,
        shim: &'static str,
        routes: &[Route],
        ordering: &Ordering,
        now: Now,
    ) -> Value {
        let order = self.lock().order(shim, routes, ordering, now);
        effective_json(&order, routes)
    }
}

/// `{route, reason, until?, score?}` per route, the tried ones first.
fn effective_json(order: &Order, routes: &[Route]) -> Value {
    order
        .entries
        .iter()
        .map(|p| {
            let mut e = Map::new();
            e.insert("route".into(), json!(routes[p.index].name));
            e.insert("reason".into(), json!(p.reason.as_str()));
            if let Some(until) = p.until {
                e.insert("until".into(), json!(iso8601(until)));
            }
            if let Some(score) = p.score {
                e.insert("score".into(), json!(round(score)));
            }
            Value::Object(e)
        })
        .collect()
}

fn round(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// One route's row in `chain.routes[shim]`.
fn route_json(
    rt: &mut RouteRuntime,
    r: &Route,
    index: usize,
    ordering: &Ordering,
    now: Now,
) -> Value {
    let record = rt.record(ordering.measure_window, now.mono);
    let score = rank::score(&record, index == 0);
    let cooldown_until = rt.cooling(now.mono).map(|c| iso8601(c.until_wall));
    let breaker_until = match rt.breaker.gate(now.mono) {
        Gate::Open(Some(until)) => Some(iso8601(super::wall_of(until, now))),
        _ => None,
    };
    let (budget_calls, budget_retries) = rt.budget.as_ref().map_or((0, 0), |b| b.window(now.mono));
    let stats = &rt.stats;
    let mut row = json!({
        "name": r.name,
        "url": r.url,
        "maxConcurrency": r.max_concurrency,
        "inFlight": rt.in_flight.load(AtomicOrdering::Relaxed),
        "headers": r.headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        "attempts": stats.attempts,
        "ok": stats.ok,
        "retries": stats.retries,
        "switches": stats.switches,
        "failures": stats.failures.iter().map(|(k, v)| (k.as_str().to_string(), json!(v))).collect::<Map<_, _>>(),
        "score": round(score.score),
        "successRate": round(score.success_rate),
        "speedFactor": round(score.speed_factor),
        "ttftMedianMs": record.ttft_median.map(|t| t.as_millis() as u64),
        "samples": record.tries,
        "disabled": rt.disabled,
        "cooldownUntil": cooldown_until,
        "breaker": {
            "state": rt.breaker.name(now.mono),
            "until": breaker_until,
            "openMs": rt.breaker.period().as_millis() as u64,
            "opens": rt.opens,
        },
        "budget": {"calls": budget_calls, "retries": budget_retries},
        "lastFailure": rt.last_failure.as_ref().map(|f| json!({
            "code": f.code.as_str(),
            "reason": f.reason,
            "at": iso8601(f.at),
        })),
    });
    if let Some(m) = row.as_object_mut() {
        m.insert("until".into(), json!(r.window.until.map(|d| d.to_string())));
        // The proxy in effect (never its credentials) and where it came from.
        m.insert("proxy".into(), json!(r.via.shown()));
        m.insert(
            "proxySource".into(),
            json!(r.via.source.map(|s| s.as_str())),
        );
        m.insert(
            "activeHours".into(),
            json!(r
                .window
                .hours
                .iter()
                .map(|(a, b)| format!("{a}-{b}"))
                .collect::<Vec<_>>()),
        );
        for (key, value) in rt.history.status(now.wall, ordering.zone) {
            m.insert(key.into(), value);
        }
    }
    row
}

/// One route's figures for `/metrics`, read from the chain's memory.
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
    /// Resting after a quota failure (not manual mode), as `/status` shows it.
    pub cooling: bool,
    /// Seconds left of its cooldown (0 when none).
    pub cooldown_seconds: f64,
    /// 0 closed, 1 half-open, 2 open.
    pub breaker: u8,
    /// Times its breaker opened since start.
    pub breaker_opens: u64,
}

impl ChainState {
    /// The figures of every configured route (routes given per shim from
    /// the live config, as for [`ChainState::status`]), for `/metrics`.
    pub fn route_metrics(
        &self,
        shims: &ShimRoutes<'_>,
        ordering: &Ordering,
        now: Now,
    ) -> Vec<RouteMetrics> {
        let mut inner = self.lock();
        let mut out = Vec::new();
        for &(shim, list) in shims {
            for r in list {
                out.push(metrics_of(&mut inner, shim, r, ordering, now));
            }
        }
        out
    }

    /// Per shim: retryable failures that switched because the retry
    /// budget was spent.
    pub fn budget_exhausted_counts(
        &self,
        shims: impl Iterator<Item = &'static str>,
    ) -> Vec<(&'static str, u64)> {
        let inner = self.lock();
        shims
            .map(|s| (s, inner.shims.get(s).map_or(0, |r| r.budget_exhausted)))
            .collect()
    }
}

fn metrics_of(
    inner: &mut Inner,
    shim: &'static str,
    r: &Route,
    ordering: &Ordering,
    now: Now,
) -> RouteMetrics {
    let rt = inner.route(shim, &r.name);
    let left = rt
        .cooling(now.mono)
        .map(|c| c.until.saturating_duration_since(now.mono).as_secs_f64())
        .unwrap_or(0.0);
    let breaker = match rt.breaker.gate(now.mono) {
        Gate::Closed => 0,
        Gate::Probe | Gate::Open(None) => 1,
        Gate::Open(Some(_)) => 2,
    };
    RouteMetrics {
        shim,
        route: r.name.clone(),
        ok: rt.stats.ok,
        failures: rt.stats.failures.iter().map(|(k, v)| (*k, *v)).collect(),
        retries: rt.stats.retries,
        switches: rt.stats.switches,
        in_flight: rt.in_flight.load(AtomicOrdering::Relaxed),
        cooling: left > 0.0 && ordering.mode.skips_resting(),
        cooldown_seconds: left,
        breaker,
        breaker_opens: rt.opens,
    }
}

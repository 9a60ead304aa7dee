//! What of the chain's memory outlives a restart (the route state file,
//! `docs/failover.md`): per route the counters, the last failure with its class and time,
//! the cooldown and breaker deadlines as absolute wall times, the disable;
//! per shim the pin. Latency and ranking samples stay in memory: a stale
//! window is worse than a short one.
//!
//! Pure conversions at a given [`Now`]; reading and writing the file is
//! the app's (`app::route_file`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use shimgate_shim_api::FailureCode;

use super::{ChainState, Cooldown, LastFailure, RouteRuntime};
use crate::chain::breaker::Breaker;
use crate::clock::Now;
use crate::clock::{epoch_ms, iso8601};
use crate::registry;

/// The version of the file's shape.
pub const VERSION: u32 = 1;

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoutesFile {
    pub version: u32,
    /// When it was written (epoch ms; its age is checked against `ttl_ms`).
    pub saved_at_ms: u64,
    /// The same, for a reader.
    #[serde(default)]
    pub saved_at: String,
    #[serde(default)]
    pub shims: BTreeMap<String, ShimFile>,
}

/// One shim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShimFile {
    #[serde(default)]
    pub pinned: Option<String>,
    #[serde(default)]
    pub routes: BTreeMap<String, RouteFile>,
}

/// One route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteFile {
    #[serde(default)]
    pub attempts: u64,
    #[serde(default)]
    pub ok: u64,
    #[serde(default)]
    pub retries: u64,
    #[serde(default)]
    pub switches: u64,
    #[serde(default)]
    pub failures: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<FailureFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown: Option<CooldownFile>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<BreakerFile>,
    #[serde(default)]
    pub disabled: bool,
}

/// A route's last failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailureFile {
    pub code: String,
    pub reason: String,
    pub at_ms: u64,
}

/// A cooldown's end, absolute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CooldownFile {
    pub until_ms: u64,
    #[serde(default)]
    pub until: String,
    #[serde(default)]
    pub reason: String,
}

/// A breaker not closed (or closed with failures counted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerFile {
    /// `closed`, `open` or `half-open`.
    pub state: String,
    #[serde(default)]
    pub failures: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until_ms: Option<u64>,
    #[serde(default)]
    pub period_ms: u64,
}

fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl ChainState {
    /// What the state file keeps, at `now`.
    pub fn snapshot(&self, now: Now) -> RoutesFile {
        let inner = self.lock();
        let mut file = RoutesFile {
            version: VERSION,
            saved_at_ms: epoch_ms(now.wall),
            saved_at: iso8601(now.wall),
            shims: BTreeMap::new(),
        };
        for (shim, name, rt) in inner.all_routes() {
            let entry = file.shims.entry(shim.to_string()).or_default();
            entry.routes.insert(name.to_owned(), route_file(rt, now));
        }
        for (shim, rt) in &inner.shims {
            if rt.pinned.is_some() {
                file.shims.entry(shim.to_string()).or_default().pinned = rt.pinned.clone();
            }
        }
        file
    }

    /// Takes over what a state file kept, at `now`: deadlines already past
    /// are dropped, an open breaker whose period ended is half-open, shims
    /// the registry does not know and codes shimgate does not know are
    /// left out.
    pub fn restore(&self, file: &RoutesFile, now: Now) {
        let mut inner = self.lock();
        for (shim_name, shim) in &file.shims {
            let Some(facts) = registry::find(shim_name) else {
                continue;
            };
            let name = facts.name;
            inner.shim(name).pinned = shim.pinned.clone();
            for (route, saved) in &shim.routes {
                restore_route(inner.route(name, route), saved, now);
            }
        }
    }
}

fn route_file(rt: &RouteRuntime, now: Now) -> RouteFile {
    let s = &rt.stats;
    RouteFile {
        attempts: s.attempts,
        ok: s.ok,
        retries: s.retries,
        switches: s.switches,
        failures: s
            .failures
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), *v))
            .collect(),
        last_failure: rt.last_failure.as_ref().map(|f| FailureFile {
            code: f.code.as_str().to_string(),
            reason: f.reason.clone(),
            at_ms: epoch_ms(f.at),
        }),
        cooldown: rt
            .cooldown
            .as_ref()
            .filter(|c| c.until > now.mono)
            .map(|c| CooldownFile {
                until_ms: epoch_ms(c.until_wall),
                until: iso8601(c.until_wall),
                reason: c.reason.clone(),
            }),
        breaker: breaker_file(&rt.breaker, now),
        disabled: rt.disabled,
    }
}

fn breaker_file(b: &Breaker, now: Now) -> Option<BreakerFile> {
    match *b {
        Breaker::Closed { failures: 0 } => None,
        Breaker::Closed { failures } => Some(BreakerFile {
            state: "closed".into(),
            failures,
            until_ms: None,
            period_ms: 0,
        }),
        Breaker::Open { until, period } => Some(BreakerFile {
            state: "open".into(),
            failures: 0,
            until_ms: Some(epoch_ms(super::wall_of(until, now))),
            period_ms: period.as_millis() as u64,
        }),
        Breaker::HalfOpen { period, .. } => Some(BreakerFile {
            state: "half-open".into(),
            failures: 0,
            until_ms: None,
            period_ms: period.as_millis() as u64,
        }),
    }
}

fn restore_route(rt: &mut RouteRuntime, saved: &RouteFile, now: Now) {
    let s = &mut rt.stats;
    s.attempts = saved.attempts;
    s.ok = saved.ok;
    s.retries = saved.retries;
    s.switches = saved.switches;
    s.failures = saved
        .failures
        .iter()
        .filter_map(|(k, v)| FailureCode::parse(k).map(|c| (c, *v)))
        .collect();
    rt.disabled = saved.disabled;
    rt.last_failure = saved.last_failure.as_ref().and_then(|f| {
        Some(LastFailure {
            code: FailureCode::parse(&f.code)?,
            reason: f.reason.clone(),
            at: at_ms(f.at_ms),
        })
    });
    rt.cooldown = saved.cooldown.as_ref().and_then(|c| {
        let until_wall = at_ms(c.until_ms);
        let left = until_wall.duration_since(now.wall).ok()?;
        Some(Cooldown {
            until: now.mono + left,
            until_wall,
            reason: c.reason.clone(),
        })
    });
    rt.breaker = saved
        .breaker
        .as_ref()
        .map_or_else(Breaker::default, |b| restore_breaker(b, now));
}

fn restore_breaker(b: &BreakerFile, now: Now) -> Breaker {
    let period = Duration::from_millis(b.period_ms);
    let left = b
        .until_ms
        .and_then(|ms| at_ms(ms).duration_since(now.wall).ok());
    match (b.state.as_str(), left) {
        ("open", Some(left)) => Breaker::Open {
            until: now.mono + left,
            period,
        },
        ("open" | "half-open", _) => Breaker::HalfOpen {
            period,
            probing: false,
        },
        _ => Breaker::Closed {
            failures: b.failures,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::state::Observed;
    use crate::clock::Zone;
    use crate::config::{BreakerPolicy, Ordering, Route};

    fn route(name: &str) -> Route {
        Route {
            name: name.into(),
            url: "http://x".into(),
            max_concurrency: 0,
            headers: vec![],
            context_tokens: None,
            window: Default::default(),
            proxy: None,
            via: Default::default(),
        }
    }

    fn fail(s: &ChainState, route: &str, code: FailureCode, p: &BreakerPolicy, now: Now) -> bool {
        s.observe(
            "trae",
            route,
            Observed {
                code: Some(code),
                reason: Some("boom"),
                ttft: None,
                neutral: false,
            },
            p,
            now,
            Zone::UTC,
        )
    }

    #[test]
    fn a_snapshot_restores_cooldowns_breakers_pins_and_disables_at_the_same_wall_times() {
        let s = ChainState::new();
        let t0 = Now::system();
        let p = BreakerPolicy {
            failures: 2,
            open: Duration::from_secs(30),
            max_open: Duration::from_secs(60),
        };
        s.cool(
            "trae",
            "a",
            (Duration::from_secs(3600), "test"),
            "QUOTA: wall",
            t0,
        );
        fail(&s, "b", FailureCode::Server, &p, t0);
        assert!(fail(&s, "b", FailureCode::Server, &p, t0));
        s.set_disabled("trae", "c", true);
        s.pin("trae", Some("b"));
        let file = s.snapshot(t0);
        let text = serde_json::to_string(&file).unwrap();
        let back: RoutesFile = serde_json::from_str(&text).unwrap();
        assert_eq!(back, file);
        let a = &file.shims["trae"].routes["a"];
        assert_eq!(
            a.cooldown.as_ref().unwrap().until_ms,
            epoch_ms(t0.wall) + 3_600_000
        );

        // A restart ten minutes later, on a new monotonic clock.
        let later = Now::system().after(Duration::from_secs(600));
        let later = Now {
            wall: t0.wall + Duration::from_secs(600),
            ..later
        };
        let fresh = ChainState::new();
        fresh.restore(&back, later);
        let again = fresh.snapshot(later);
        assert_eq!(again.shims["trae"].routes["a"].cooldown, a.cooldown);
        assert_eq!(again.shims["trae"].pinned.as_deref(), Some("b"));
        assert!(again.shims["trae"].routes["c"].disabled);
        let routes = [route("a"), route("b"), route("c")];
        let ordering = Ordering::default();
        let plan = fresh.plan("trae", &routes, &ordering, later);
        let tried: Vec<&str> = plan.routes.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            tried,
            ["b"],
            "a cooling, c disabled, b pinned and half-open"
        );
        // b's breaker (opened at t0 for 30 s) is half-open ten minutes on.
        let b = &again.shims["trae"].routes["b"].breaker;
        assert_eq!(b.as_ref().unwrap().state, "half-open");
        assert_eq!(
            again.shims["trae"].routes["b"]
                .last_failure
                .as_ref()
                .unwrap()
                .code,
            "SERVER"
        );
    }

    #[test]
    fn deadlines_already_past_are_dropped_and_unknown_names_ignored() {
        let t0 = Now::system();
        let file: RoutesFile = serde_json::from_value(serde_json::json!({
            "version": 1,
            "savedAtMs": epoch_ms(t0.wall),
            "shims": {
                "trae": {"routes": {"a": {
                    "cooldown": {"untilMs": epoch_ms(t0.wall) - 1000},
                    "breaker": {"state": "open", "untilMs": epoch_ms(t0.wall) + 5000, "periodMs": 30000},
                    "failures": {"SERVER": 2, "NO_SUCH_CODE": 1},
                    "lastFailure": {"code": "NOPE", "reason": "", "atMs": 1}
                }}},
                "nosuchshim": {"pinned": "x"}
            }
        }))
        .unwrap();
        let s = ChainState::new();
        s.restore(&file, t0);
        let back = s.snapshot(t0);
        let a = &back.shims["trae"].routes["a"];
        assert!(a.cooldown.is_none());
        assert!(a.last_failure.is_none());
        assert_eq!(a.failures.len(), 1);
        let b = a.breaker.as_ref().unwrap();
        assert_eq!(b.state, "open");
        assert_eq!(b.until_ms, Some(epoch_ms(t0.wall) + 5000));
        assert!(!back.shims.contains_key("nosuchshim"));
    }
}

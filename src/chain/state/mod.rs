//! What the chain remembers between calls: per route its cooldown, its
//! breaker, its measured record, in-flight count and counters, the hand
//! controls (disabled, pinned), its retry budget, the ring log of
//! attempts and the per-call summary.
//!
//! Keyed by shim and route *name*, so a reload that keeps a route's name
//! keeps what was learnt of it; streams in flight hold their own permit and
//! are not touched by a reload. The rules are pure ([`rank`], [`Breaker`],
//! [`RetryBudget`]); this keeps their inputs and applies their answers.
//! What outlives a restart is exported and restored by [`snapshot`];
//! [`ChainState::changed`] tells the writer when to save.

mod history;
mod snapshot;
mod status;

pub use history::{Change, ChangeKind};

pub use snapshot::{RouteFile, RoutesFile, ShimFile, VERSION as SNAPSHOT_VERSION};
pub use status::RouteMetrics;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use shimgate_shim_api::FailureCode;
use tokio::sync::Notify;

use crate::chain::breaker::{self, Breaker, Gate, Verdict};
use crate::chain::budget::RetryBudget;
use crate::chain::latency::Latency;
use crate::chain::rank::{self, BreakerView, Order, Reason, Record, View};
use crate::chain::window::{self, Standing};
use crate::clock::iso8601;
use crate::clock::Now;
use crate::clock::Zone;
use crate::config::{BreakerPolicy, Ordering, OrderingMode, RetryPolicy, Route};

/// Attempts kept in the ring log.
pub const RING_CAPACITY: usize = 200;
/// Calls kept in the grouped view.
pub const CALLS_CAPACITY: usize = 50;
/// Switches kept for `GET /switches`.
pub const SWITCHES_CAPACITY: usize = 500;

/// A call answered by another route than the first one it tried.
#[derive(Debug, Clone)]
pub struct Switch {
    pub at: SystemTime,
    pub shim: &'static str,
    /// The agent's conversation id (empty: none known).
    pub conversation: String,
    pub from: String,
    pub to: String,
    /// The failure that made the call leave `from`.
    pub code: Option<FailureCode>,
    pub call: u64,
}

impl Switch {
    /// One entry of `GET /switches`.
    pub fn to_json(&self) -> Value {
        json!({
            "at": iso8601(self.at),
            "shim": self.shim,
            "session": self.conversation,
            "from": self.from,
            "to": self.to,
            "class": self.code.map(FailureCode::as_str),
            "call": self.call,
        })
    }
}

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
    /// A route left out without a try: why, in the effective order's words
    /// (`cooling`, `breaker-open`, …), and until when, so the panel says
    /// it in the reader's language and zone.
    pub skipped: Option<(Reason, Option<SystemTime>)>,
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
            "skipped": self.skipped.map(|(reason, _)| reason.as_str()),
            "until": self.skipped.and_then(|(_, until)| until).map(iso8601),
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

/// Counters of one route (kept across restarts).
#[derive(Debug, Default, Clone)]
struct RouteStats {
    attempts: u64,
    ok: u64,
    retries: u64,
    switches: u64,
    failures: BTreeMap<FailureCode, u64>,
}

/// The last failure of a route, with its class and time.
#[derive(Debug, Clone)]
struct LastFailure {
    code: FailureCode,
    reason: String,
    at: SystemTime,
}

/// One counted try, for measured ordering (memory only).
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    ok: bool,
    ttft: Option<Duration>,
}

/// Samples kept per route: the ranking's window.
pub const SAMPLES: usize = 20;

#[derive(Debug, Default)]
struct RouteRuntime {
    cooldown: Option<Cooldown>,
    breaker: Breaker,
    samples: VecDeque<Sample>,
    last_failure: Option<LastFailure>,
    disabled: bool,
    /// Times its breaker opened (or re-opened) since start.
    opens: u64,
    /// Its retry budget: the calls that reached it and its retries.
    budget: Option<RetryBudget>,
    in_flight: Arc<AtomicUsize>,
    stats: RouteStats,
    /// State changes, today's figures, output speed (the panel's).
    history: history::History,
}

impl RouteRuntime {
    /// Records a breaker move between `before` and the state at `now`.
    fn breaker_moved(&mut self, before: &'static str, cause: Option<&str>, now: Now) {
        let after = self.breaker.name(now.mono);
        if after == before {
            return;
        }
        let (kind, until) = match self.breaker.gate(now.mono) {
            Gate::Open(until) => (ChangeKind::BreakerOpened, until.map(|u| wall_of(u, now))),
            Gate::Probe => (ChangeKind::BreakerHalfOpen, None),
            Gate::Closed => (ChangeKind::BreakerClosed, None),
        };
        self.history.change(Change {
            cause: cause.map(str::to_owned),
            until,
            ..Change::plain(kind, now.wall)
        });
    }

    fn budget(&mut self, now: Instant) -> &mut RetryBudget {
        self.budget.get_or_insert_with(|| RetryBudget::new(now))
    }

    /// The live samples at `now`: the last [`SAMPLES`] within `window`
    /// (no allocation: this runs for every route of every measured call).
    fn record(&self, window: Duration, now: Instant) -> Record {
        let mut ttfts = [Duration::ZERO; SAMPLES];
        let (mut tries, mut ok, mut timed) = (0, 0, 0);
        for s in &self.samples {
            if now.saturating_duration_since(s.at) >= window {
                continue;
            }
            tries += 1;
            ok += usize::from(s.ok);
            if let Some(t) = s.ttft {
                if let Some(slot) = ttfts.get_mut(timed) {
                    *slot = t;
                    timed += 1;
                }
            }
        }
        let ttfts = &mut ttfts[..timed];
        ttfts.sort_unstable();
        let ttft_median = match timed {
            0 => None,
            n if n % 2 == 1 => Some(ttfts[n / 2]),
            n => Some((ttfts[n / 2 - 1] + ttfts[n / 2]) / 2),
        };
        Record {
            tries,
            ok,
            ttft_median,
        }
    }

    /// A live cooldown at `now` (an expired one is dropped).
    fn cooling(&mut self, now: Instant) -> Option<&Cooldown> {
        if self.cooldown.as_ref().is_some_and(|c| c.until <= now) {
            self.cooldown = None;
        }
        self.cooldown.as_ref()
    }

    fn view(&mut self, route: &Route, ordering: &Ordering, now: Now) -> View {
        let cooling = self.cooling(now.mono).map(|c| c.until_wall);
        let breaker = match self.breaker.gate(now.mono) {
            Gate::Closed => BreakerView::Closed,
            Gate::Probe => BreakerView::Probe,
            Gate::Open(until) => BreakerView::Open(until.map(|u| wall_of(u, now))),
        };
        // Only measured ordering reads the record.
        let record = if ordering.mode == OrderingMode::Measured {
            self.record(ordering.measure_window, now.mono)
        } else {
            Record::default()
        };
        let window = if route.window.always() {
            Standing::Open
        } else {
            window::standing(&route.window, now.wall, ordering.zone)
        };
        View {
            disabled: self.disabled,
            cooling,
            breaker,
            record,
            window,
        }
    }
}

/// The wall time of a monotonic deadline.
fn wall_of(at: Instant, now: Now) -> SystemTime {
    now.wall + at.saturating_duration_since(now.mono)
}

#[derive(Debug, Default)]
struct ShimRuntime {
    pinned: Option<String>,
    budget_exhausted: u64,
}

/// What the chain knows of each route, by shim and route name: a few
/// routes a shim, looked up on every step of every call, so a list walked
/// with a name compare (a map keyed by an owned name cost a `String` per
/// lookup).
type RouteTable = Vec<(&'static str, Vec<(String, RouteRuntime)>)>;

#[derive(Debug, Default)]
struct Inner {
    routes: RouteTable,
    shims: HashMap<&'static str, ShimRuntime>,
    log: VecDeque<AttemptEntry>,
    calls: VecDeque<CallRecord>,
    switches: VecDeque<Switch>,
}

impl Inner {
    fn route(&mut self, shim: &'static str, route: &str) -> &mut RouteRuntime {
        let at = match self.routes.iter().position(|(s, _)| *s == shim) {
            Some(at) => at,
            None => {
                self.routes.push((shim, Vec::new()));
                self.routes.len() - 1
            }
        };
        let list = &mut self.routes[at].1;
        let at = match list.iter().position(|(name, _)| name == route) {
            Some(at) => at,
            None => {
                list.push((route.to_owned(), RouteRuntime::default()));
                list.len() - 1
            }
        };
        &mut list[at].1
    }

    /// Every route's runtime, with its shim and name.
    fn all_routes(&self) -> impl Iterator<Item = (&'static str, &str, &RouteRuntime)> {
        self.routes
            .iter()
            .flat_map(|(shim, list)| list.iter().map(|(name, rt)| (*shim, name.as_str(), rt)))
    }

    fn shim(&mut self, shim: &'static str) -> &mut ShimRuntime {
        self.shims.entry(shim).or_default()
    }

    /// The order of `shim`'s routes at `now`.
    fn order(
        &mut self,
        shim: &'static str,
        routes: &[Route],
        ordering: &Ordering,
        now: Now,
    ) -> Order {
        let views: Vec<View> = routes
            .iter()
            .map(|r| self.route(shim, &r.name).view(r, ordering, now))
            .collect();
        let pinned = self
            .shims
            .get(shim)
            .and_then(|s| s.pinned.as_deref())
            .and_then(|p| routes.iter().position(|r| r.name == p));
        rank::order(&views, ordering.mode, pinned)
    }
}

/// The chain's shared memory.
#[derive(Debug, Default)]
pub struct ChainState {
    inner: Mutex<Inner>,
    call_seq: AtomicU64,
    streams: AtomicI64,
    /// Latency histograms for `/metrics`.
    pub latency: Latency,
    /// Woken when something the state file keeps changed.
    pub changed: Notify,
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

/// A route the plan leaves out, and why.
#[derive(Debug, Clone)]
pub struct Skipped<'a> {
    pub route: &'a Route,
    pub reason: Reason,
    pub until: Option<SystemTime>,
}

/// The order a call tries routes in: the call's own routes, borrowed (a
/// plan is made for every call, and copying each route into it cost
/// allocations before every send).
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// Routes to try, in order.
    pub routes: Vec<&'a Route>,
    /// Routes left out (cooling, breaker open, disabled).
    pub skipped: Vec<Skipped<'a>>,
    /// Whether a route's breaker is asked before it is tried (not in
    /// manual mode, nor when every route was resting and rests are
    /// ignored).
    pub gated: bool,
}

impl<'a> Plan<'a> {
    /// A housekeeping call's plan: the first route only, whatever its
    /// state (such calls pass straight through, without failover).
    pub fn housekeeping(routes: impl IntoIterator<Item = &'a Route>) -> Plan<'a> {
        Plan {
            routes: routes.into_iter().take(1).collect(),
            skipped: Vec::new(),
            gated: false,
        }
    }
}

/// How one try on a route ended, for what the chain learns of the route.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// `None`: the try succeeded.
    pub code: Option<FailureCode>,
    pub reason: Option<&'a str>,
    /// Time to first content, when the try committed.
    pub ttft: Option<Duration>,
    /// The try says nothing of the route (shimgate was stopping).
    pub neutral: bool,
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

    /// Orders the configured routes for one call at `now` ([`rank::order`]):
    /// pinned first, then configured or measured order; cooling and
    /// breaker-open routes left out (not in manual mode) unless every route
    /// is out, disabled ones always.
    pub fn plan<'a>(
        &self,
        shim: &'static str,
        routes: &'a [Route],
        ordering: &Ordering,
        now: Now,
    ) -> Plan<'a> {
        let order = self.lock().order(shim, routes, ordering, now);
        let mut plan = Plan {
            routes: Vec::new(),
            skipped: Vec::new(),
            gated: ordering.mode.skips_resting() && !order.ignored_rests,
        };
        for p in &order.entries {
            let route = &routes[p.index];
            if p.reason.skipped() {
                plan.skipped.push(Skipped {
                    route,
                    reason: p.reason,
                    until: p.until,
                });
            } else {
                plan.routes.push(route);
            }
        }
        plan
    }

    /// A housekeeping call's plan ([`Plan::housekeeping`]) over the routes
    /// not disabled by hand: a disable holds in every mode.
    pub fn housekeeping_plan<'a>(&self, shim: &'static str, routes: &'a [Route]) -> Plan<'a> {
        let mut inner = self.lock();
        Plan::housekeeping(
            routes
                .iter()
                .filter(|r| !inner.route(shim, &r.name).disabled),
        )
    }

    /// A call reaches `route` (of a gated plan): `Some(probe)` when it may
    /// try it (`probe`: the one half-open call), `None` when its breaker
    /// is open or another call is probing it.
    pub fn admit(&self, shim: &'static str, route: &str, now: Instant) -> Option<bool> {
        let mut inner = self.lock();
        let rt = inner.route(shim, route);
        let admitted = rt.breaker.admit(now);
        if admitted == Some(true) {
            rt.history.change(Change {
                cause: Some("its open period ended: one call is let through".into()),
                ..Change::plain(ChangeKind::BreakerHalfOpen, SystemTime::now())
            });
        }
        admitted
    }

    /// Takes a slot on a route; `None` when it is at its cap (skipped, not queued).
    pub fn try_acquire(&self, shim: &'static str, route: &Route) -> Option<Permit> {
        let counter = self.lock().route(shim, &route.name).in_flight.clone();
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

    /// Puts a route on a quota cooldown for `rest` from `now` (`source`:
    /// where its length came from); a shorter rest never cuts a longer one.
    pub fn cool(
        &self,
        shim: &'static str,
        route: &str,
        (rest, source): (Duration, &'static str),
        reason: &str,
        now: Now,
    ) {
        let mut inner = self.lock();
        let rt = inner.route(shim, route);
        let until = now.mono + rest;
        let longer = rt.cooldown.as_ref().is_none_or(|c| c.until < until);
        if longer {
            rt.cooldown = Some(Cooldown {
                until,
                until_wall: now.wall + rest,
                reason: reason.to_string(),
            });
            rt.history.change(Change {
                cause: Some(reason.to_string()),
                source: Some(source),
                until: Some(now.wall + rest),
                ..Change::plain(ChangeKind::Cooled, now.wall)
            });
        }
        drop(inner);
        self.changed.notify_one();
    }

    /// What one try on a route teaches: its sample for measured ordering,
    /// its breaker's move, its last failure; a success clears the route's
    /// cooldown. Returns true when this try opened the route's breaker.
    pub fn observe(
        &self,
        shim: &'static str,
        route: &str,
        seen: Observed<'_>,
        policy: &BreakerPolicy,
        now: Now,
        zone: Zone,
    ) -> bool {
        let mut inner = self.lock();
        let rt = inner.route(shim, route);
        let verdict = if seen.neutral {
            Verdict::Neutral
        } else {
            Verdict::of(seen.code)
        };
        let counted = !seen.neutral && seen.code.is_none_or(breaker::counts_against_route);
        if counted {
            if rt.samples.len() == SAMPLES {
                rt.samples.pop_front();
            }
            rt.samples.push_back(Sample {
                at: now.mono,
                ok: seen.code.is_none(),
                ttft: seen.ttft,
            });
        }
        match seen.code {
            None if !seen.neutral => rt.cooldown = None,
            Some(code) if counted => {
                rt.last_failure = Some(LastFailure {
                    code,
                    reason: seen.reason.unwrap_or_default().to_string(),
                    at: now.wall,
                });
                rt.history.failed(now.wall, zone);
            }
            _ => {}
        }
        let before = rt.breaker.name(now.mono);
        let opened = rt.breaker.observe(verdict, policy, now.mono);
        rt.opens += u64::from(opened);
        let cause = seen.code.map(|c| match seen.reason {
            Some(r) => format!("{c}: {r}"),
            None => c.to_string(),
        });
        rt.breaker_moved(before, cause.as_deref(), now);
        drop(inner);
        self.changed.notify_one();
        opened
    }

    /// The route's answer committed (its first content): its breaker
    /// closes now, not when the stream ends, so a half-open route's probe
    /// does not keep other calls off it for the length of a long answer.
    /// The try's sample is [`ChainState::observe`]d at the end.
    pub fn answered(&self, shim: &'static str, route: &str, policy: &BreakerPolicy, now: Now) {
        let mut inner = self.lock();
        let rt = inner.route(shim, route);
        let before = rt.breaker.name(now.mono);
        rt.breaker.observe(Verdict::Success, policy, now.mono);
        rt.breaker_moved(before, Some("a call answered"), now);
    }

    /// A committed stream ended: its tokens (today in `zone`) and speed
    /// (over `streamed`, first content to end) for the route's figures.
    pub fn metered(
        &self,
        shim: &'static str,
        route: &str,
        meter: shimgate_shim_api::translate::Meter,
        streamed: Duration,
        now: Now,
        zone: Zone,
    ) {
        self.lock()
            .route(shim, route)
            .history
            .metered(meter, streamed, now.wall, zone);
    }

    /// A probe that ended before its try (the call left): the next call
    /// may probe.
    pub fn release_probe(&self, shim: &'static str, route: &str) {
        self.lock().route(shim, route).breaker.release();
    }

    /// A call reached `route` (its budget's deposit).
    pub fn route_called(&self, shim: &'static str, route: &str, now: Instant) {
        self.lock().route(shim, route).budget(now).deposit(now);
    }

    /// Whether `route`'s retry budget allows one more in-place retry.
    pub fn budget_allows(
        &self,
        shim: &'static str,
        route: &str,
        policy: &RetryPolicy,
        now: Instant,
    ) -> bool {
        self.lock().route(shim, route).budget(now).allows(
            policy.budget_ratio,
            policy.budget_min_per_s,
            now,
        )
    }

    /// An in-place retry is made on `route`.
    pub fn spend_retry(&self, shim: &'static str, route: &str, now: Instant) {
        self.lock().route(shim, route).budget(now).spend(now);
    }

    /// A retryable failure switched because the budget was spent.
    pub fn budget_exhausted(&self, shim: &'static str) {
        self.lock().shim(shim).budget_exhausted += 1;
    }

    /// Disables or enables a route by hand.
    pub fn set_disabled(&self, shim: &'static str, route: &str, disabled: bool) {
        let mut inner = self.lock();
        let rt = inner.route(shim, route);
        if rt.disabled != disabled {
            let kind = if disabled {
                ChangeKind::Disabled
            } else {
                ChangeKind::Enabled
            };
            rt.history.change(Change::plain(kind, SystemTime::now()));
        }
        rt.disabled = disabled;
        drop(inner);
        self.changed.notify_one();
    }

    /// Pins a route to the head of the order (`None`: unpins).
    pub fn pin(&self, shim: &'static str, route: Option<&str>) {
        let mut inner = self.lock();
        let before = inner.shim(shim).pinned.clone();
        if before.as_deref() != route {
            let at = SystemTime::now();
            if let Some(old) = before {
                inner
                    .route(shim, &old)
                    .history
                    .change(Change::plain(ChangeKind::Unpinned, at));
            }
            if let Some(new) = route {
                inner
                    .route(shim, new)
                    .history
                    .change(Change::plain(ChangeKind::Pinned, at));
            }
        }
        inner.shim(shim).pinned = route.map(str::to_owned);
        drop(inner);
        self.changed.notify_one();
    }

    /// `POST /routes/{shim}/{route}/restore`: the route's cooldown and
    /// breaker cleared; a hand disable stays (the user's choice).
    pub fn restore_route(&self, shim: &'static str, route: &str) {
        let mut inner = self.lock();
        let rt = inner.route(shim, route);
        rt.cooldown = None;
        rt.breaker = Breaker::default();
        rt.history.change(Change {
            cause: Some("its cooldown and breaker cleared".into()),
            ..Change::plain(ChangeKind::Restored, SystemTime::now())
        });
        drop(inner);
        self.changed.notify_one();
    }

    /// `POST /routes/reset`: every cooldown and breaker cleared; pins and
    /// disables (the user's choice) stay.
    pub fn reset(&self) {
        let mut inner = self.lock();
        let now = Now::system();
        for rt in inner
            .routes
            .iter_mut()
            .flat_map(|(_, list)| list.iter_mut())
            .map(|(_, rt)| rt)
        {
            let resting = rt.cooling(now.mono).is_some() || rt.breaker.name(now.mono) != "closed";
            if resting {
                rt.history.change(Change {
                    cause: Some("every cooldown and breaker cleared (reset)".into()),
                    ..Change::plain(ChangeKind::Reset, now.wall)
                });
            }
            rt.cooldown = None;
            rt.breaker = Breaker::default();
        }
        drop(inner);
        self.changed.notify_one();
    }

    /// Records one attempt in the ring log and the route's counters.
    pub fn record(&self, entry: AttemptEntry) {
        let mut inner = self.lock();
        let rt = inner.route(entry.shim, &entry.route);
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
        drop(inner);
        self.changed.notify_one();
    }

    /// Records a switch.
    pub fn switched(&self, switch: Switch) {
        let mut inner = self.lock();
        if inner.switches.len() == SWITCHES_CAPACITY {
            inner.switches.pop_front();
        }
        inner.switches.push_back(switch);
    }

    /// The switches, newest first; only one conversation's with `session`.
    pub fn switches(&self, session: Option<&str>) -> Vec<Value> {
        self.lock()
            .switches
            .iter()
            .rev()
            .filter(|s| session.is_none_or(|id| s.conversation == id))
            .map(Switch::to_json)
            .collect()
    }

    /// Records how a call ended.
    pub fn finish_call(&self, record: CallRecord) {
        let mut inner = self.lock();
        if inner.calls.len() == CALLS_CAPACITY {
            inner.calls.pop_front();
        }
        inner.calls.push_back(record);
    }
}

pub(crate) fn entry_json(e: &AttemptEntry) -> Value {
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

pub(crate) fn call_json(c: &CallRecord) -> Value {
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
            window: Default::default(),
            proxy: None,
            via: Default::default(),
        }
    }

    fn names<'a>(plan: &Plan<'a>) -> Vec<&'a str> {
        plan.routes.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn cooling_route_is_skipped_in_auto_mode() {
        let s = ChainState::new();
        let now = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", (Duration::from_secs(60), "test"), "quota", now);
        let plan = s.plan("trae", &routes, &Ordering::default(), now);
        assert_eq!(names(&plan), ["b"]);
        assert_eq!(plan.skipped.len(), 1);
        assert_eq!(plan.skipped[0].reason, Reason::Cooling);
        assert_eq!(
            plan.skipped[0].until,
            Some(now.wall + Duration::from_secs(60))
        );
    }

    #[test]
    fn manual_mode_keeps_cooling_routes() {
        let s = ChainState::new();
        let now = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        s.cool("trae", "a", (Duration::from_secs(60), "test"), "quota", now);
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
        s.cool("trae", "a", (Duration::from_secs(60), "test"), "quota", now);
        s.cool("trae", "b", (Duration::from_secs(30), "test"), "quota", now);
        let plan = s.plan("trae", &routes, &Ordering::default(), now);
        assert_eq!(
            names(&plan),
            ["a", "b"],
            "the configured order, cooling ignored"
        );
        assert!(plan.skipped.is_empty());
        assert!(!plan.gated, "rests ignored: breakers are not asked either");
        let st = s.status(&[("trae", &routes)], &Ordering::default(), now);
        assert_eq!(st["ordering"]["ignoredCooldown"]["trae"], true);
    }

    #[test]
    fn a_cooled_route_comes_back_when_its_cooldown_ends() {
        let s = ChainState::new();
        let t0 = Now::system();
        let routes = [route("a", 0), route("b", 0)];
        let ordering = Ordering::default();
        s.cool(
            "trae",
            "a",
            (Duration::from_millis(600), "test"),
            "quota",
            t0,
        );
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
        s.cool("trae", "a", (Duration::from_millis(1), "test"), "quota", t0);
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
        s.cool("trae", "a", (Duration::from_secs(60), "test"), "quota", t0);
        s.cool("trae", "a", (Duration::from_secs(1), "test"), "quota", t0);
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
        s.cool(
            "trae",
            "a",
            (Duration::from_secs(60), "test"),
            "quota",
            Now::system(),
        );
        let plan = Plan::housekeeping(&routes);
        assert_eq!(names(&plan), ["a"]);
        assert!(plan.skipped.is_empty());
        assert_eq!(names(&s.housekeeping_plan("trae", &routes)), ["a"]);
        s.set_disabled("trae", "a", true);
        assert_eq!(
            names(&s.housekeeping_plan("trae", &routes)),
            ["b"],
            "but not a disabled one"
        );
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
        let st = s.status(
            &[("qoder", &[route("a", 0)])],
            &Ordering::default(),
            Now::system(),
        );
        assert_eq!(st["log"].as_array().unwrap().len(), RING_CAPACITY);
        assert_eq!(st["log"][0]["call"], 50);
        assert_eq!(st["routes"]["qoder"][0]["attempts"], 250);
    }
}

#[cfg(test)]
mod learning {
    use super::*;

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

    fn names<'a>(plan: &Plan<'a>) -> Vec<&'a str> {
        plan.routes.iter().map(|r| r.name.as_str()).collect()
    }

    fn seen(code: Option<FailureCode>, ttft_ms: Option<u64>) -> Observed<'static> {
        Observed {
            code,
            reason: Some("test"),
            ttft: ttft_ms.map(Duration::from_millis),
            neutral: false,
        }
    }

    fn breaker(failures: u32) -> BreakerPolicy {
        BreakerPolicy {
            failures,
            open: Duration::from_millis(100),
            max_open: Duration::from_millis(400),
        }
    }

    #[test]
    fn a_success_on_a_route_clears_its_cooldown() {
        let s = ChainState::new();
        let t = Now::system();
        s.cool("trae", "a", (Duration::from_secs(600), "test"), "quota", t);
        s.observe("trae", "a", seen(None, Some(5)), &breaker(5), t, Zone::UTC);
        let routes = [route("a"), route("b")];
        assert_eq!(
            names(&s.plan("trae", &routes, &Ordering::default(), t)),
            ["a", "b"]
        );
    }

    #[test]
    fn an_open_breaker_skips_the_route_and_after_the_period_admits_one_call() {
        let s = ChainState::new();
        let t = Now::system();
        let p = breaker(2);
        let routes = [route("a"), route("b")];
        let o = Ordering::default();
        assert!(!s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::Server), None),
            &p,
            t,
            Zone::UTC
        ));
        assert!(s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::Timeout), None),
            &p,
            t,
            Zone::UTC
        ));
        let plan = s.plan("trae", &routes, &o, t);
        assert_eq!(names(&plan), ["b"]);
        assert_eq!(plan.skipped[0].reason, Reason::BreakerOpen);
        assert!(plan.gated);
        let later = t.after(Duration::from_millis(100));
        let plan = s.plan("trae", &routes, &o, later);
        assert_eq!(names(&plan), ["a", "b"]);
        assert_eq!(s.admit("trae", "a", later.mono), Some(true));
        assert_eq!(s.admit("trae", "a", later.mono), None, "one call only");
        assert_eq!(names(&s.plan("trae", &routes, &o, later)), ["b"]);
        // The probe fails: open for twice as long.
        assert!(s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::Server), None),
            &p,
            later,
            Zone::UTC
        ));
        assert_eq!(
            names(&s.plan("trae", &routes, &o, later.after(Duration::from_millis(199)))),
            ["b"]
        );
        let again = later.after(Duration::from_millis(200));
        assert_eq!(s.admit("trae", "a", again.mono), Some(true));
        s.observe("trae", "a", seen(None, Some(3)), &p, again, Zone::UTC);
        assert_eq!(s.admit("trae", "a", again.mono), Some(false), "closed");
    }

    #[test]
    fn a_committed_probe_closes_the_breaker_before_its_stream_ends() {
        let s = ChainState::new();
        let t = Now::system();
        let p = breaker(1);
        s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::Server), None),
            &p,
            t,
            Zone::UTC,
        );
        let later = t.after(Duration::from_millis(100));
        assert_eq!(s.admit("trae", "a", later.mono), Some(true));
        s.answered("trae", "a", &p, later);
        assert_eq!(
            s.admit("trae", "a", later.mono),
            Some(false),
            "closed at commit"
        );
        // A failure later in the stream counts as one failure.
        assert!(s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::Transport), Some(4)),
            &p,
            later,
            Zone::UTC
        ));
    }

    #[test]
    fn quota_failures_do_not_open_the_breaker() {
        let s = ChainState::new();
        let t = Now::system();
        for _ in 0..10 {
            assert!(!s.observe(
                "trae",
                "a",
                seen(Some(FailureCode::Quota), None),
                &breaker(2),
                t,
                Zone::UTC
            ));
        }
        assert_eq!(s.admit("trae", "a", t.mono), Some(false));
    }

    #[test]
    fn reset_clears_cooldowns_and_breakers_but_keeps_pins_and_disables() {
        let s = ChainState::new();
        let t = Now::system();
        let routes = [route("a"), route("b"), route("c")];
        s.cool("trae", "a", (Duration::from_secs(600), "test"), "quota", t);
        s.observe(
            "trae",
            "b",
            seen(Some(FailureCode::Server), None),
            &breaker(1),
            t,
            Zone::UTC,
        );
        s.set_disabled("trae", "c", true);
        s.pin("trae", Some("b"));
        assert_eq!(
            s.plan("trae", &routes, &Ordering::default(), t)
                .routes
                .len(),
            2,
            "all out: rests ignored"
        );
        s.reset();
        let plan = s.plan("trae", &routes, &Ordering::default(), t);
        assert_eq!(names(&plan), ["b", "a"]);
        assert_eq!(plan.skipped[0].reason, Reason::Disabled);
    }

    #[test]
    fn measured_mode_ranks_from_the_recorded_samples_and_forgets_old_ones() {
        let s = ChainState::new();
        let t = Now::system();
        let routes = [route("slow"), route("fast")];
        let o = Ordering {
            mode: OrderingMode::Measured,
            measure_window: Duration::from_secs(1),
            ..Ordering::default()
        };
        let p = breaker(0);
        for ok in [false, true, false, false] {
            let code = (!ok).then_some(FailureCode::Server);
            s.observe(
                "trae",
                "slow",
                seen(code, ok.then_some(800)),
                &p,
                t,
                Zone::UTC,
            );
            s.observe("trae", "fast", seen(None, Some(10)), &p, t, Zone::UTC);
        }
        assert_eq!(names(&s.plan("trae", &routes, &o, t)), ["fast", "slow"]);
        let st = s.status(&[("trae", &routes)], &o, t);
        let fast = &st["routes"]["trae"][1];
        assert_eq!(fast["samples"], 4);
        assert_eq!(fast["ttftMedianMs"], 10);
        assert_eq!(fast["successRate"], 0.8333);
        assert_eq!(st["ordering"]["effective"]["trae"][0]["route"], "fast");
        assert_eq!(st["ordering"]["effective"]["trae"][0]["reason"], "ranked");
        // A second later the record is gone: configured order again.
        let later = t.after(Duration::from_secs(1));
        assert_eq!(names(&s.plan("trae", &routes, &o, later)), ["slow", "fast"]);
    }

    #[test]
    fn the_window_keeps_the_last_twenty_samples_and_the_median_ttft() {
        let s = ChainState::new();
        let t = Now::system();
        for ms in 1..=25 {
            s.observe("trae", "a", seen(None, Some(ms)), &breaker(0), t, Zone::UTC);
        }
        let st = s.status(&[("trae", &[route("a")])], &Ordering::default(), t);
        let a = &st["routes"]["trae"][0];
        assert_eq!(a["samples"], SAMPLES);
        // Samples 6..=25: the median of twenty is between 15 and 16.
        assert_eq!(a["ttftMedianMs"], 15);
    }

    #[test]
    fn neutral_tries_teach_nothing() {
        let s = ChainState::new();
        let t = Now::system();
        s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::Aborted), None),
            &breaker(1),
            t,
            Zone::UTC,
        );
        s.observe(
            "trae",
            "a",
            seen(Some(FailureCode::ContextWindowExceeded), None),
            &breaker(1),
            t,
            Zone::UTC,
        );
        let mut stopping = seen(Some(FailureCode::Server), None);
        stopping.neutral = true;
        assert!(!s.observe("trae", "a", stopping, &breaker(1), t, Zone::UTC));
        let st = s.status(&[("trae", &[route("a")])], &Ordering::default(), t);
        assert_eq!(st["routes"]["trae"][0]["samples"], 0);
        assert_eq!(st["routes"]["trae"][0]["breaker"]["state"], "closed");
        assert!(st["routes"]["trae"][0]["lastFailure"].is_null());
    }

    #[test]
    fn the_budget_counts_the_calls_and_retries_of_each_route() {
        let s = ChainState::new();
        let t = Instant::now();
        let p = RetryPolicy {
            budget_ratio: 0.5,
            budget_min_per_s: 0,
            ..RetryPolicy::default()
        };
        assert!(!s.budget_allows("trae", "a", &p, t));
        s.route_called("trae", "a", t);
        s.route_called("trae", "a", t);
        assert!(s.budget_allows("trae", "a", &p, t));
        s.spend_retry("trae", "a", t);
        assert!(!s.budget_allows("trae", "a", &p, t));
        // A dead route spending its budget leaves the others theirs.
        s.route_called("trae", "b", t);
        s.route_called("trae", "b", t);
        assert!(s.budget_allows("trae", "b", &p, t), "per route");
        assert!(!s.budget_allows("qoder", "a", &p, t), "per shim too");
        s.budget_exhausted("trae");
        assert_eq!(
            s.budget_exhausted_counts(["trae", "qoder"].into_iter()),
            [("trae", 1), ("qoder", 0)]
        );
    }
}

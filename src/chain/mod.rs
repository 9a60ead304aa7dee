//! The chain-failover core: every upstream send of every shim, pass-through
//! requests included, goes through [`call`].
//!
//! Rules (`docs/failover.md`): retry in place only for the configured transient codes,
//! with capped exponential backoff and the upstream's Retry-After when it is
//! within the cap; switch route otherwise; never switch on ABORTED or
//! CONTEXT_WINDOW_EXCEEDED; hold every frame back until the first content
//! frame, after which failures are passed on and the stream ends with an
//! error frame; quota failures cool the route; a route at its concurrency cap
//! is skipped; housekeeping calls get one try on the first route. The rules
//! are [`decide::decide`], a pure function; the driver here carries out its
//! answers (waits, sends, cools, logs). What it learns across calls (the
//! measured order of [`rank`], the route breakers of [`breaker`], the retry
//! budget of [`budget`]) lives in [`state::ChainState`], fed after every
//! try.
//!
//! The work runs in the caller's task until the head is known (see
//! [`Inline`]), then a committed stream goes on in the task that reads its
//! body (the body polls the rest of the call); either way the client going
//! away (the response future or body being dropped) is seen at once and
//! cancels backoff and the upstream call.

mod attempt;
mod outbound;
mod response;

pub use attempt::{relay, sse_headers, ROUTE_HEADER, SWITCHED_FROM_HEADER};
pub use outbound::{FixedOutbound, Outbound, OutboundFuture};
pub use response::{ChainError, ChainResponse, LastAnswer};
pub mod breaker;
pub mod budget;
pub mod decide;
pub mod latency;
pub mod policy;
pub mod rank;
pub mod rest;
pub mod state;
pub mod window;

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use shimgate_shim_api::{Failure, FailureCode, StreamTranslator};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::clock::Now;
use crate::config::{BreakerPolicy, Config, Ordering, RetryPolicy, Route, Timeouts};
use crate::http::body::{BoxError, ChannelBody};
use crate::http::client::HttpClient;
use crate::http::headers::Secrets;
use decide::{Decision, Event, Next, Progress, Rules, Stop};
use state::{AttemptEntry, CallRecord, ChainState, Observed, Outcome, RouteReport, Skipped};

/// Makes a fresh translator for each attempt, once its answer head is here.
/// `None`: the caller could not read its request after all (direct mode
/// reads it while the request is upstream), so the answer passes as it
/// came, whatever its status: a pass-through from then on.
pub type TranslatorFactory = Arc<dyn Fn() -> Option<Box<dyn StreamTranslator>> + Send + Sync>;

/// The shim's own reading of an upstream error answer (its business codes,
/// [`shimgate_shim_api::Shim::http_error`]): status and body in, the
/// failure when the body names a code the shim knows.
pub type HttpErrorCodes = Arc<dyn Fn(u16, &[u8]) -> Option<Failure> + Send + Sync>;

/// One call through the chain.
pub struct CallSpec {
    /// Which shim's routes (also the ring-log label).
    pub shim: &'static str,
    /// What kind of call: `passthrough`, `return`, `fallback`.
    pub kind: &'static str,
    /// The configuration as it was when the call started: its routes and
    /// policies are read from it (shared, not copied for every call; a
    /// reload mid-call leaves this call on the one it started with).
    config: Arc<Config>,
    pub outbound: Arc<dyn Outbound>,
    /// `None`: bytes pass unchanged and the attempt commits on a 2xx head.
    /// `Some`: an SSE answer is read frame by frame and held until content
    /// (unless the factory gives no translator: [`TranslatorFactory`]).
    pub translator: Option<TranslatorFactory>,
    /// How the shim reads an error answer's business code; asked before
    /// the status and the words (`None`: status and words only).
    pub error_codes: Option<HttpErrorCodes>,
    /// Housekeeping calls (compaction, session titles): first route, one try.
    pub housekeeping: bool,
    /// When the client's request arrived (for the overhead histogram).
    pub received: Instant,
    /// The request's own credentials: masked in every reason the call
    /// logs or shows, whatever an upstream echoes back.
    pub secrets: Secrets,
    /// A request the shims do not take over (a pass-through):
    /// whatever the upstream answers, any status, reaches the client as
    /// it is; it is retried or switched only when nothing came back.
    pub passthrough: bool,
    /// The method is idempotent (not POST or PATCH): a pass-through
    /// request may then be sent again after a failure mid-answer.
    pub idempotent: bool,
    /// The agent's conversation id (its conversation header or the wire's
    /// own field; empty when it has none): what a switch is logged under.
    pub conversation: String,
    /// When every route failed and the last try ended in the provider's
    /// own HTTP error, the agent gets that answer as it came rather than
    /// the `502 AUTO_ROUTES_EXHAUSTED` list (a wire whose client acts on
    /// the provider's errors: `Shim::AGENT_READS_HTTP_ERRORS`).
    pub last_http_error: bool,
}

impl CallSpec {
    /// A call on `shim`'s routes with the policies of `config`: no
    /// translator (bytes pass unchanged), not housekeeping.
    pub fn new(
        config: &Arc<Config>,
        shim: &'static str,
        kind: &'static str,
        outbound: Arc<dyn Outbound>,
        received: Instant,
    ) -> CallSpec {
        CallSpec {
            shim,
            kind,
            config: config.clone(),
            outbound,
            translator: None,
            error_codes: None,
            housekeeping: false,
            received,
            secrets: Secrets::default(),
            passthrough: false,
            idempotent: false,
            conversation: String::new(),
            last_http_error: false,
        }
    }

    /// The shim's routes as configured when the call started.
    pub fn routes(&self) -> &[Route] {
        self.config.shim(self.shim).map_or(&[], |s| &s.routes)
    }

    /// When to retry in place (`[retry]`).
    pub fn retry(&self) -> &RetryPolicy {
        &self.config.retry
    }

    /// How routes are ordered and rested (`[ordering]`).
    pub fn ordering(&self) -> &Ordering {
        &self.config.ordering
    }

    /// When a route's breaker opens (`[breaker]`).
    pub fn breaker(&self) -> &BreakerPolicy {
        &self.config.breaker
    }

    /// The upstream's time limits (`[upstream]`).
    pub fn timeouts(&self) -> &Timeouts {
        &self.config.timeouts
    }
}

/// The pieces of the runtime a call needs.
#[derive(Clone)]
pub struct ChainCtx {
    pub client: HttpClient,
    pub state: Arc<ChainState>,
    /// Cancelled when the shutdown grace period is over: streams still
    /// running end with a final error frame.
    pub hard_stop: CancellationToken,
}

/// Runs one call. Returns once the answer is committed (or the call failed);
/// a committed answer keeps streaming from a task.
pub async fn call(ctx: &ChainCtx, spec: CallSpec) -> ChainResponse {
    let (head_tx, head_rx) = oneshot::channel();
    // The drive keeps the caller's span (shim, rid), so its log lines do too.
    // Boxed before it is instrumented: the drive's state (the spec and
    // every attempt's) is moved once, into its box, not twice.
    let drive = Box::pin(drive(ctx.clone(), spec, head_tx)).instrument(tracing::Span::current());
    let mut call = Inline {
        drive: Some(Box::pin(drive)),
        head_rx: Some(head_rx),
    };
    call.head().await
}

type Drive = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A call until its head is known. The chain runs in the caller's task up
/// to then: handing it to another task and back would cost two cross-thread
/// wake-ups on every call. A committed stream's body then runs the rest of
/// the drive from its own polls ([`ChannelBody::fed_by`]), in the client's
/// connection task: a task of its own would cost a cross-thread hand-off
/// per upstream chunk. Dropped early (the client went away), it hands the
/// drive to a task with the head receiver gone, so the drive sees that at
/// once, records ABORTED and cancels backoff and the upstream call.
struct Inline {
    drive: Option<Drive>,
    head_rx: Option<oneshot::Receiver<ChainResponse>>,
}

impl Inline {
    async fn head(&mut self) -> ChainResponse {
        let head = std::future::poll_fn(|cx| self.poll_head(cx)).await;
        self.head_rx = None;
        let mut head = head.unwrap_or(ChainResponse::Failed(ChainError::Aborted));
        // A drive still running sent the head and streams on: from the
        // body's polls when it is a stream, else (it only has its books
        // to close) in a task.
        if let Some(drive) = self.drive.take() {
            match head {
                ChainResponse::Stream { ref mut body, .. } => body.fed_by(drive),
                _ => {
                    tokio::spawn(drive);
                }
            }
        }
        head
    }

    /// The head, looked for right after each poll of the drive, which is
    /// the only place it is sent from. The receiver itself is never polled,
    /// so it registers no waker and the send wakes nobody: a wake-up of
    /// this very task would send it through the scheduler's queue (and
    /// rouse the other worker) before the head could go out.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Option<ChainResponse>> {
        let (Some(drive), Some(head_rx)) = (self.drive.as_mut(), self.head_rx.as_mut()) else {
            return Poll::Ready(None);
        };
        let finished = drive.as_mut().poll(cx).is_ready();
        if finished {
            // No stream follows; the head (if any) is waiting.
            self.drive = None;
        }
        match head_rx.try_recv() {
            Ok(head) => Poll::Ready(Some(head)),
            Err(oneshot::error::TryRecvError::Empty) if !finished => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}

impl Drop for Inline {
    fn drop(&mut self) {
        // Only when the caller went away before the head: close the head
        // channel first so the drive's next poll sees it.
        drop(self.head_rx.take());
        if let (Some(drive), Ok(rt)) = (self.drive.take(), tokio::runtime::Handle::try_current()) {
            rt.spawn(drive);
        }
    }
}

/// The sending half of a streaming response body.
pub type BodyTx = tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>;

/// One route of the plan, as the driver walks it.
struct Leg<'a> {
    /// Which route of the call (1-based).
    attempt: usize,
    route: &'a Route,
    /// The route after this one, if any.
    next: Option<&'a str>,
    /// Its breaker is asked before it is tried.
    gated: bool,
}

/// What the route's breaker says of the try being decided on.
#[derive(Debug, Clone, Copy, Default)]
struct Gate {
    /// The try is a half-open probe.
    probe: bool,
    /// The breaker is open now.
    open: bool,
}

/// What the log needs of one try (or skip) on a route.
struct Tried<'a> {
    leg: &'a Leg<'a>,
    tries: u32,
    failure: Option<&'a Failure>,
    /// This try's time (its ring-log entry).
    took: Duration,
    /// The route's time so far (its report).
    on_route: Duration,
}

/// One call on its way through the chain: it asks [`decide`] what to do
/// after each try, does it, and logs what happened.
struct Driver<'a> {
    ctx: &'a ChainCtx,
    spec: &'a CallSpec,
    call: u64,
    at: SystemTime,
    started: Instant,
    reports: Vec<RouteReport>,
    /// The provider's own answer of the call's last failed try, when the
    /// agent is to read it if every route fails ([`LastAnswer`]).
    last_answer: Option<Box<LastAnswer>>,
    /// Where the head goes; taken when it is sent.
    head_tx: Option<oneshot::Sender<ChainResponse>>,
}

async fn drive(ctx: ChainCtx, spec: CallSpec, head_tx: oneshot::Sender<ChainResponse>) {
    let mut call = Driver {
        ctx: &ctx,
        spec: &spec,
        call: ctx.state.next_call(),
        at: SystemTime::now(),
        started: Instant::now(),
        reports: Vec::new(),
        last_answer: None,
        head_tx: Some(head_tx),
    };
    let now = Now::system();
    let plan = if spec.housekeeping {
        ctx.state.housekeeping_plan(spec.shim, spec.routes())
    } else {
        ctx.state
            .plan(spec.shim, spec.routes(), spec.ordering(), now)
    };
    call.report_skipped(&plan.skipped);
    if plan.routes.is_empty() {
        if plan.skipped.is_empty() {
            call.answer(ChainResponse::Failed(ChainError::NoRoutes {
                shim: spec.shim,
            }));
            call.finish(Outcome::Failed, None);
        } else {
            // Disabled by hand or out of their windows: the user's rules.
            call.no_active_route(&plan.skipped);
        }
        return;
    }
    for (index, route) in plan.routes.iter().enumerate() {
        let leg = Leg {
            attempt: index + 1,
            route,
            next: plan.routes.get(index + 1).map(|r| r.name.as_str()),
            gated: plan.gated,
        };
        if call.route(&leg).await.is_break() {
            return;
        }
    }
    // Past the last route: the core said `Exhausted` there.
    call.exhausted();
}

impl Driver<'_> {
    /// Tries one route until the core says to leave it (`Continue`: on to
    /// the next route, or past the last) or the call is over (`Break`,
    /// answered and logged).
    async fn route(&mut self, leg: &Leg<'_>) -> ControlFlow<()> {
        let Some((_permit, probe)) = self.enter(leg) else {
            return ControlFlow::Continue(());
        };
        let started = Instant::now();
        self.ctx
            .state
            .route_called(self.spec.shim, &leg.route.name, started);
        let mut tries = 0u32;
        loop {
            tries += 1;
            let t0 = Instant::now();
            let may_resend;
            let (failure, verbatim, held) = match self.try_once(leg.route).await {
                attempt::PreCommit::Aborted => {
                    let gone = Failure::new(FailureCode::Aborted, "the client went away");
                    let now = Now::system();
                    self.observe(leg, Some(&gone), None, now);
                    let decision =
                        self.decide(Event::ClientGone, leg, tries, Gate::default(), now, true);
                    let tried = Tried::new(leg, tries, Some(&gone), t0, started);
                    self.record(&tried, &decision);
                    self.finish(Outcome::Aborted, Some(FailureCode::Aborted));
                    return ControlFlow::Break(());
                }
                attempt::PreCommit::Committed(committed) => {
                    return self
                        .commit(leg, tries, (t0, started), committed, probe)
                        .await;
                }
                attempt::PreCommit::Failed {
                    failure,
                    verbatim,
                    held,
                    unsent,
                } => {
                    // Only a pass-through POST/PATCH that may have reached
                    // the upstream is never sent again.
                    may_resend = unsent || !self.spec.passthrough || self.spec.idempotent;
                    (self.spec.secrets.scrub_failure(failure), verbatim, held)
                }
            };
            let now = Now::system();
            let open = self.observe(leg, Some(&failure), None, now);
            let gate = Gate { probe, open };
            let decision = self.decide(Event::Failed(&failure), leg, tries, gate, now, may_resend);
            self.cool(leg, &failure, &decision, now);
            self.spend(leg, &decision, now);
            self.record(
                &Tried::new(leg, tries, Some(&failure), t0, started),
                &decision,
            );
            match decision.next {
                Next::Retry { wait } => {
                    self.remember(leg, &failure, held, verbatim);
                    warn!(shim = self.spec.shim, route = %leg.route.name, try_no = tries, code = %failure.code, reason = %failure.message, wait_ms = wait.as_millis() as u64, "attempt failed; retrying on the same route");
                    self.backoff(wait, leg, tries, started).await?;
                }
                Next::Switch | Next::Stop(Stop::Exhausted) => {
                    self.remember(leg, &failure, held, verbatim);
                    match leg.next {
                        Some(next) => {
                            warn!(shim = self.spec.shim, route = %leg.route.name, next = %next, code = %failure.code, reason = %failure.message, tries, "route failed; switching")
                        }
                        None => {
                            warn!(shim = self.spec.shim, route = %leg.route.name, code = %failure.code, reason = %failure.message, tries, "last route failed")
                        }
                    }
                    return ControlFlow::Continue(());
                }
                Next::Stop(stop) => return self.stop(stop, leg, failure, verbatim, held),
            }
        }
    }

    /// Takes a slot on `leg`'s route and asks its breaker (a gated plan):
    /// the slot and whether the call is the half-open probe, or `None`
    /// when the route is skipped (at its cap, logged; breaker open, in the
    /// call's route list).
    fn enter(&mut self, leg: &Leg<'_>) -> Option<(state::Permit, bool)> {
        let Some(permit) = self.ctx.state.try_acquire(self.spec.shim, leg.route) else {
            let failure = Failure::new(
                FailureCode::Capacity,
                format!("at its concurrency cap of {}", leg.route.max_concurrency),
            );
            let now = Now::system();
            let decision = self.decide(Event::AtCapacity, leg, 0, Gate::default(), now, true);
            self.record(&Tried::skipped(leg, &failure), &decision);
            return None;
        };
        if !leg.gated {
            return Some((permit, false));
        }
        let shim = self.spec.shim;
        match self.ctx.state.admit(shim, &leg.route.name, Instant::now()) {
            Some(probe) => Some((permit, probe)),
            None => {
                // Another call is probing it (or it opened since the plan).
                self.report_breaker_open(leg);
                None
            }
        }
    }

    /// One try, unless the client leaves or shimgate stops first.
    async fn try_once(&mut self, route: &Route) -> attempt::PreCommit {
        tokio::select! {
            biased;
            _ = gone(&mut self.head_tx) => attempt::PreCommit::Aborted,
            _ = self.ctx.hard_stop.cancelled() => attempt::PreCommit::Failed {
                failure: Failure::new(FailureCode::Server, "shimgate is shutting down"),
                verbatim: None,
                held: None,
                unsent: false,
            },
            pre = attempt::pre_commit(self.ctx, self.spec, route) => pre,
        }
    }

    /// Asks the core about `event` on `leg`'s `tries`-th try.
    fn decide(
        &self,
        event: Event<'_>,
        leg: &Leg<'_>,
        tries: u32,
        gate: Gate,
        now: Now,
        may_resend: bool,
    ) -> Decision {
        let rules = Rules {
            retry: self.spec.retry(),
            ordering: self.spec.ordering(),
            housekeeping: self.spec.housekeeping,
            zone: self.spec.ordering().zone,
        };
        let budget_left = matches!(event, Event::Failed(_))
            && self.ctx.state.budget_allows(
                self.spec.shim,
                &leg.route.name,
                self.spec.retry(),
                now.mono,
            );
        let at = Progress {
            tries,
            has_next: leg.next.is_some(),
            shutting_down: self.ctx.hard_stop.is_cancelled(),
            draw: fastrand::f64(),
            may_resend,
            budget_left,
            probe: gate.probe,
            route_open: gate.open && leg.gated,
        };
        decide::decide(event, &at, &rules, now)
    }

    /// Tells the chain how a try on `leg` ended (`None`: it succeeded);
    /// true when that opened the route's breaker.
    fn observe(
        &self,
        leg: &Leg<'_>,
        failure: Option<&Failure>,
        ttft: Option<Duration>,
        now: Now,
    ) -> bool {
        let seen = Observed {
            code: failure.map(|f| f.code),
            reason: failure.map(|f| f.message.as_str()),
            ttft,
            // A failure made by shimgate stopping says nothing of the route.
            neutral: self.ctx.hard_stop.is_cancelled(),
        };
        self.ctx.state.observe(
            self.spec.shim,
            &leg.route.name,
            seen,
            self.spec.breaker(),
            now,
            self.spec.ordering().zone,
        )
    }

    /// Spends the retry budget on a retry, or counts that it was spent.
    fn spend(&self, leg: &Leg<'_>, decision: &Decision, now: Now) {
        if decision.will_retry() {
            self.ctx
                .state
                .spend_retry(self.spec.shim, &leg.route.name, now.mono);
        }
        if decision.budget_exhausted {
            self.ctx.state.budget_exhausted(self.spec.shim);
            warn!(
                shim = self.spec.shim,
                "retry budget spent; switching instead of retrying"
            );
        }
    }

    /// Puts the route on the cooldown the core asked for.
    fn cool(&self, leg: &Leg<'_>, failure: &Failure, decision: &Decision, now: Now) {
        if let Some(rest) = decision.cool {
            let (shim, route) = (self.spec.shim, &leg.route.name);
            let source = match (
                failure.retry_after,
                self.spec.ordering().quota_cooldown_hour,
            ) {
                (Some(_), _) => failure.stated_by.unwrap_or("the upstream's stated reset"),
                (None, _)
                    if rest::stated_wall_reset(
                        &failure.message,
                        self.spec.ordering().zone,
                        now.wall,
                    )
                    .is_some() =>
                {
                    "a wall time the upstream stated, in [ordering] zone"
                }
                (None, Some(_)) => "the configured rest (to quota_cooldown_hour)",
                (None, None) => "the configured rest (quota_cooldown_ms)",
            };
            self.ctx
                .state
                .cool(shim, route, (rest, source), &failure.to_string(), now);
            warn!(shim, route = %route, rest_ms = rest.as_millis() as u64, "quota exhausted; route cools down");
        }
    }

    /// Waits out a backoff. `Break` when the client left or shimgate
    /// stopped meanwhile (answered and logged).
    async fn backoff(
        &mut self,
        wait: Duration,
        leg: &Leg<'_>,
        tries: u32,
        started: Instant,
    ) -> ControlFlow<()> {
        tokio::select! {
            biased;
            _ = gone(&mut self.head_tx) => {
                // No try was made: the route's report only.
                let f = Failure::new(FailureCode::Aborted, "the client went away during backoff");
                let tried = Tried::new(leg, tries, Some(&f), started, started);
                self.reports.push(tried.report(None));
                self.finish(Outcome::Aborted, Some(FailureCode::Aborted));
                ControlFlow::Break(())
            }
            _ = self.ctx.hard_stop.cancelled() => {
                self.answer(ChainResponse::Failed(ChainError::ShuttingDown));
                self.finish(Outcome::Failed, None);
                ControlFlow::Break(())
            }
            _ = tokio::time::sleep(wait) => ControlFlow::Continue(()),
        }
    }

    /// Sends a committed answer's head and streams the rest; the call ends
    /// with the stream.
    async fn commit(
        &mut self,
        leg: &Leg<'_>,
        tries: u32,
        (t0, started): (Instant, Instant),
        mut committed: attempt::Committed,
        probe: bool,
    ) -> ControlFlow<()> {
        let shim = self.spec.shim;
        // Only what the head needs comes before it: the head and the first
        // content leave in this turn of the client's task, the books are
        // kept right after (see `yield_to_head`).
        let overhead = (leg.attempt == 1 && tries == 1).then(|| {
            self.spec
                .received
                .elapsed()
                .saturating_sub(committed.upstream_time)
        });
        let switched_from = self.first_route_if_switched(leg);
        let (status, headers) = committed.head(&leg.route.name, switched_from.as_deref());
        let (body_tx, body) = ChannelBody::channel();
        committed.release_held(&body_tx);
        let route = leg.route.name.clone();
        let answered = self.answer(ChainResponse::Stream {
            status,
            headers,
            body,
            route,
            switched_from: switched_from.clone(),
        });
        if answered {
            yield_to_head().await;
        }
        if let Some(from) = switched_from {
            self.log_switch(leg, from);
        }
        if let Some(overhead) = overhead {
            self.ctx.state.latency.overhead(shim).observe(overhead);
        }
        if !answered {
            // Gone at the moment of commit: a ring-log entry but no route
            // report, as the driver has always logged it (the route list of
            // this call is left without the route that committed).
            let f = Failure::new(FailureCode::Aborted, "the client went away");
            self.observe(leg, Some(&f), None, Now::system());
            self.entry(&Tried::new(leg, tries, Some(&f), t0, started), false, false);
            self.finish(Outcome::Aborted, Some(FailureCode::Aborted));
            return ControlFlow::Break(());
        }
        let gate = Gate { probe, open: false };
        let decision = self.decide(Event::Committed, leg, tries, gate, Now::system(), true);
        let _streaming = self.ctx.state.stream_started();
        let ttft = committed.upstream_time;
        self.ctx
            .state
            .answered(shim, &leg.route.name, self.spec.breaker(), Now::system());
        let committed_at = Instant::now();
        let (end, meter) =
            attempt::stream(self.ctx, self.spec.timeouts().idle, committed, &body_tx).await;
        self.ctx.state.metered(
            shim,
            &leg.route.name,
            meter,
            committed_at.elapsed(),
            Now::system(),
            self.spec.ordering().zone,
        );
        if meter.unreadable_frames > 0 {
            warn!(shim, route = %leg.route.name, frames = meter.unreadable_frames, "dropped answer frames the shim could not read");
        }
        let failure = end.err().map(|f| self.spec.secrets.scrub_failure(f));
        self.observe(leg, failure.as_ref(), Some(ttft), Now::system());
        if let Some(f) = failure.as_ref().filter(|f| f.code != FailureCode::Aborted) {
            warn!(shim, route = %leg.route.name, code = %f.code, reason = %f.message, "stream failed after content; passed on to the client");
        }
        self.record(
            &Tried::new(leg, tries, failure.as_ref(), t0, started),
            &decision,
        );
        let outcome = match &failure {
            None => Outcome::Ok,
            Some(f) if f.code == FailureCode::Aborted => Outcome::Aborted,
            Some(_) => Outcome::Failed,
        };
        self.finish(outcome, failure.map(|f| f.code));
        ControlFlow::Break(())
    }

    /// Ends the call on a failure the core does not switch on: the
    /// upstream's own answer when there is one.
    fn stop(
        &mut self,
        stop: Stop,
        leg: &Leg<'_>,
        failure: Failure,
        verbatim: Option<attempt::Verbatim>,
        held: Option<attempt::InBand>,
    ) -> ControlFlow<()> {
        info!(shim = self.spec.shim, route = %leg.route.name, code = %failure.code, "failure ends the call without switching");
        let code = failure.code;
        let head = match stop {
            Stop::ShuttingDown => ChainResponse::Failed(ChainError::ShuttingDown),
            // `Committed` and `Aborted` never follow a failure, and
            // `Exhausted` does not come here: all three answer as `Final`.
            Stop::Final | Stop::Exhausted | Stop::Committed | Stop::Aborted => {
                let route = leg.route.name.clone();
                failure_answer(failure, route, verbatim, held, &self.reports)
            }
        };
        self.answer(head);
        self.finish(Outcome::Failed, Some(code));
        ControlFlow::Break(())
    }

    /// Keeps what a failed try that the call goes on from ended in: the
    /// provider's in-band error, its HTTP error when the agent reads
    /// those ([`CallSpec::last_http_error`]), or nothing (a later failure
    /// of another kind replaces an earlier answer).
    fn remember(
        &mut self,
        leg: &Leg<'_>,
        failure: &Failure,
        held: Option<attempt::InBand>,
        verbatim: Option<attempt::Verbatim>,
    ) {
        let answer = |http, translated, native| {
            Box::new(LastAnswer {
                failure: failure.clone(),
                route: leg.route.name.clone(),
                http,
                translated,
                native,
            })
        };
        self.last_answer = match (held, verbatim) {
            (Some(h), _) => Some(answer(None, h.translated.freeze(), h.native)),
            (None, Some(v)) if self.spec.last_http_error => {
                Some(answer(Some((v.status, v.headers)), v.body.clone(), v.body))
            }
            _ => None,
        };
    }

    /// Every route failed: one error listing each (with the provider's
    /// own answer of the last try, when the agent is to read it).
    fn exhausted(&mut self) {
        let error = ChainError::Exhausted {
            reports: self.reports.clone(),
            last: self.last_answer.take(),
        };
        self.fail(error);
    }

    /// Ends the call with `error`: logged once, answered, recorded.
    fn fail(&mut self, error: ChainError) {
        warn!(
            shim = self.spec.shim,
            kind = self.spec.kind,
            "{}",
            error.message()
        );
        let code = error.failure().code;
        self.answer(ChainResponse::Failed(error));
        self.finish(Outcome::Failed, Some(code));
    }

    /// The first route this call tried, when it is not `leg`'s: the call
    /// switched, and the switch is logged (`GET /switches`, with
    /// the agent's conversation) with the failure that made it leave that route.
    fn first_route_if_switched(&self, leg: &Leg<'_>) -> Option<String> {
        let first = self.reports.iter().find(|r| r.tries > 0)?;
        (first.route != leg.route.name).then(|| first.route.clone())
    }

    /// Logs the switch from `from`, the first route the call tried, to
    /// `leg`'s, with the failure that made it leave `from`.
    fn log_switch(&self, leg: &Leg<'_>, from: String) {
        let code = self
            .reports
            .iter()
            .find(|r| r.tries > 0)
            .and_then(|r| r.code);
        self.ctx.state.switched(state::Switch {
            at: SystemTime::now(),
            shim: self.spec.shim,
            conversation: self.spec.conversation.clone(),
            from,
            to: leg.route.name.clone(),
            code,
            call: self.call,
        });
    }

    /// The user's rules leave no route: `503 NO_ACTIVE_ROUTE`, each route
    /// with why, and when the first window opens.
    fn no_active_route(&mut self, skipped: &[Skipped]) {
        let next_opening = skipped
            .iter()
            .filter(|s| s.reason == rank::Reason::OffHours)
            .filter_map(|s| s.until)
            .min();
        self.fail(ChainError::NoActiveRoute {
            reports: self.reports.clone(),
            next_opening,
        });
    }

    /// Hands the head to the caller; `false` when the caller is gone.
    fn answer(&mut self, head: ChainResponse) -> bool {
        self.head_tx.take().is_some_and(|tx| tx.send(head).is_ok())
    }

    /// Logs one try (or skip) as the core decided it: its ring-log entry,
    /// and the route's report when the call leaves the route (a retry
    /// stays on it).
    fn record(&mut self, tried: &Tried<'_>, decision: &Decision) {
        self.entry(tried, decision.will_retry(), decision.switched());
        if decision.leaves_route() {
            let to = tried.leg.next.filter(|_| decision.switched());
            self.reports.push(tried.report(to));
        }
    }

    /// The ring-log entry of one try (and the route's counters).
    fn entry(&self, tried: &Tried<'_>, will_retry: bool, switched: bool) {
        let failure = tried.failure;
        self.ctx.state.record(AttemptEntry {
            at: SystemTime::now(),
            call: self.call,
            shim: self.spec.shim,
            attempt: tried.leg.attempt,
            try_no: tried.tries,
            route: tried.leg.route.name.clone(),
            ok: failure.is_none(),
            code: failure.map(|f| f.code),
            reason: failure.map(|f| f.to_string()),
            elapsed: tried.took,
            will_retry,
            switched,
        });
    }

    /// The routes the plan left out (cooling, breaker open, disabled), in
    /// the call's route list.
    fn report_skipped(&mut self, skipped: &[Skipped]) {
        for s in skipped {
            let until = s.until.map(crate::clock::iso8601).unwrap_or_default();
            let (code, reason) = match s.reason {
                rank::Reason::Cooling => (
                    Some(FailureCode::Quota),
                    format!("cooling after a quota failure until {until}"),
                ),
                rank::Reason::BreakerOpen if until.is_empty() => (
                    None,
                    "breaker half-open: another call is probing it".to_string(),
                ),
                rank::Reason::BreakerOpen => (None, format!("breaker open until {until}")),
                rank::Reason::OffHours => (
                    None,
                    format!("off-hours: outside its active_hours until {until}"),
                ),
                rank::Reason::Expired => (None, format!("expired: its until day ended at {until}")),
                _ => (None, "disabled by hand (POST /routes/…/enable)".to_string()),
            };
            let skipped = (s.reason, s.until);
            self.reports
                .push(skip_report(&s.route.name, code, reason, skipped));
        }
    }

    /// A route whose breaker refused the call when it reached it.
    fn report_breaker_open(&mut self, leg: &Leg<'_>) {
        let reason = "breaker open: another call is probing it".to_string();
        self.reports.push(skip_report(
            &leg.route.name,
            None,
            reason,
            (rank::Reason::BreakerOpen, None),
        ));
    }

    /// Records how the call ended.
    fn finish(&mut self, outcome: Outcome, code: Option<FailureCode>) {
        self.ctx.state.finish_call(CallRecord {
            call: self.call,
            shim: self.spec.shim,
            kind: self.spec.kind,
            at: self.at,
            elapsed: self.started.elapsed(),
            outcome,
            code,
            routes: std::mem::take(&mut self.reports),
        });
    }
}

impl<'a> Tried<'a> {
    fn new(
        leg: &'a Leg<'a>,
        tries: u32,
        failure: Option<&'a Failure>,
        t0: Instant,
        route_started: Instant,
    ) -> Tried<'a> {
        Tried {
            leg,
            tries,
            failure,
            took: t0.elapsed(),
            on_route: route_started.elapsed(),
        }
    }

    /// A route skipped without a try.
    fn skipped(leg: &'a Leg<'a>, failure: &'a Failure) -> Tried<'a> {
        Tried {
            leg,
            tries: 0,
            failure: Some(failure),
            took: Duration::ZERO,
            on_route: Duration::ZERO,
        }
    }

    /// The route's part in the call.
    fn report(&self, switched_to: Option<&str>) -> RouteReport {
        let failure = self.failure;
        RouteReport {
            attempt: self.leg.attempt,
            route: self.leg.route.name.clone(),
            tries: self.tries,
            ok: failure.is_none(),
            code: failure.map(|f| f.code),
            reason: failure.map(|f| f.to_string()),
            elapsed: self.on_route,
            switched_to: switched_to.map(str::to_owned),
            retry_after: failure.and_then(|f| f.retry_after),
            skipped: None,
        }
    }
}

/// The report of a route left out without a try.
fn skip_report(
    route: &str,
    code: Option<FailureCode>,
    reason: String,
    skipped: (rank::Reason, Option<SystemTime>),
) -> RouteReport {
    RouteReport {
        attempt: 0,
        route: route.to_string(),
        tries: 0,
        ok: false,
        code,
        reason: Some(reason),
        elapsed: Duration::ZERO,
        switched_to: None,
        retry_after: None,
        skipped: Some(skipped),
    }
}

/// Suspends the drive once, right after it sent a stream's head, without
/// asking to be woken: the caller takes the head at this return
/// ([`Inline::poll_head`]) and hyper writes it with the held frames, and
/// the body that the drive now feeds polls it again next
/// ([`ChannelBody::fed_by`]: after that first write), as does the task the
/// drive is handed to when the client has gone. The call's books are kept
/// after the first content left, not before.
async fn yield_to_head() {
    let mut first = true;
    std::future::poll_fn(|_| {
        if std::mem::take(&mut first) {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
}

/// Resolves when the caller stopped waiting for the head (at once when
/// the head is already sent).
async fn gone(head_tx: &mut Option<oneshot::Sender<ChainResponse>>) {
    if let Some(tx) = head_tx {
        tx.closed().await;
    }
}

/// The answer to a failure that ends the call: the upstream's HTTP error
/// as it sent it, an in-band error as the upstream sent it, or (neither:
/// the try never got an answer) the per-route error.
fn failure_answer(
    failure: Failure,
    route: String,
    verbatim: Option<attempt::Verbatim>,
    held: Option<attempt::InBand>,
    reports: &[RouteReport],
) -> ChainResponse {
    if let Some(v) = verbatim {
        ChainResponse::Verbatim {
            status: v.status,
            headers: v.headers,
            body: v.body,
            failure: Some((failure, route)),
            native: None,
        }
    } else if let Some(held) = held {
        // An in-band error the client must see as the upstream sent it.
        ChainResponse::Verbatim {
            status: StatusCode::OK,
            headers: attempt::sse_headers(&route),
            body: held.translated.freeze(),
            failure: Some((failure, route)),
            native: Some(held.native),
        }
    } else {
        ChainResponse::Failed(ChainError::Exhausted {
            reports: reports.to_vec(),
            last: None,
        })
    }
}

/// Whether a JSON body marks a housekeeping call (`purpose` compaction or
/// session-title): those pass straight through without failover.
pub fn is_housekeeping(body: &[u8]) -> bool {
    names_purpose(body)
        && serde_json::from_slice::<serde_json::Value>(body)
            .is_ok_and(|v| purpose_is_housekeeping(&v))
}

/// [`is_housekeeping`] of a body held as checked text: its `purpose` read
/// alone, and only when the text names one.
pub fn is_housekeeping_text(body: &shimgate_shim_api::OpenAiBody) -> bool {
    names_purpose(body.as_bytes())
        && body
            .get("purpose")
            .and_then(|p| {
                p.as_str()
                    .map(|p| p == "compaction" || p == "session-title")
            })
            .unwrap_or(false)
}

/// Whether the body names a `purpose` at all (a searcher built once: it is
/// asked before every direct send, and building one each time cost more,
/// run cold, than the search).
fn names_purpose(body: &[u8]) -> bool {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"purpose\""));
    FINDER.find(body).is_some()
}

fn purpose_is_housekeeping(body: &serde_json::Value) -> bool {
    body.get("purpose")
        .and_then(|p| p.as_str())
        .is_some_and(|p| p == "compaction" || p == "session-title")
}

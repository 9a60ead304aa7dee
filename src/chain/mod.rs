//! The chain-failover core: every upstream send of every shim, pass-through
//! requests included, goes through [`call`].
//!
//! Rules (DESIGN §5): retry in place only for the configured transient codes,
//! with capped exponential backoff and the upstream's Retry-After when it is
//! within the cap; switch route otherwise; never switch on ABORTED or
//! CONTEXT_WINDOW_EXCEEDED; hold every frame back until the first content
//! frame, after which failures are passed on and the stream ends with an
//! error frame; quota failures cool the route; a route at its concurrency cap
//! is skipped; housekeeping calls get one try on the first route.
//!
//! The work runs in the caller's task until the head is known (see
//! [`Inline`]), then a committed stream goes on in its own task; either way
//! the client going away (the response future or body being dropped) is
//! seen at once and cancels backoff and the upstream call.

mod attempt;
mod outbound;
mod response;

pub use attempt::{error_chain, relay, sse_headers};
pub use outbound::{FixedOutbound, Outbound, OutboundFuture};
pub use response::{ChainError, ChainResponse};
pub mod latency;
pub mod policy;
pub mod state;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::StatusCode;
use shimgate_shim_api::{Failure, FailureCode, StreamTranslator};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::config::{Config, Ordering, RetryPolicy, Route, Timeouts};
use crate::http::body::{BoxError, ChannelBody};
use crate::http::client::HttpClient;
use policy::RetryDecision;
use state::{AttemptEntry, CallRecord, ChainState, Outcome, RouteReport};

/// Makes a fresh translator for each attempt.
pub type TranslatorFactory = Arc<dyn Fn() -> Box<dyn StreamTranslator> + Send + Sync>;

/// One call through the chain.
pub struct CallSpec {
    /// Which shim's routes (also the ring-log label).
    pub shim: &'static str,
    /// What kind of call: `passthrough`, `return`, `fallback`.
    pub kind: &'static str,
    /// The routes as configured when the call started.
    pub routes: Vec<Route>,
    pub retry: RetryPolicy,
    pub ordering: Ordering,
    pub timeouts: Timeouts,
    pub outbound: Arc<dyn Outbound>,
    /// `None`: bytes pass unchanged and the attempt commits on a 2xx head.
    /// `Some`: an SSE answer is read frame by frame and held until content.
    pub translator: Option<TranslatorFactory>,
    /// Housekeeping calls (compaction, session titles): first route, one try.
    pub housekeeping: bool,
    /// When the client's request arrived (for the overhead histogram).
    pub received: Instant,
}

impl CallSpec {
    /// A call on `shim`'s routes with the policies of `config`: no
    /// translator (bytes pass unchanged), not housekeeping.
    pub fn new(
        config: &Config,
        shim: &'static str,
        kind: &'static str,
        outbound: Arc<dyn Outbound>,
        received: Instant,
    ) -> CallSpec {
        CallSpec {
            shim,
            kind,
            routes: config
                .shim(shim)
                .map(|s| s.routes.clone())
                .unwrap_or_default(),
            retry: config.retry.clone(),
            ordering: config.ordering.clone(),
            timeouts: config.timeouts.clone(),
            outbound,
            translator: None,
            housekeeping: false,
            received,
        }
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
    let drive = drive(ctx.clone(), spec, head_tx).instrument(tracing::Span::current());
    let mut call = Inline {
        drive: Some(Box::pin(drive)),
        head_rx: Some(head_rx),
    };
    call.head().await
}

type Drive = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A call until its head is known. The chain runs in the caller's task up
/// to then: handing it to another task and back would cost two cross-thread
/// wake-ups on every call. A committed stream then moves to a task of its
/// own. Dropped early (the client went away), it hands the drive to a task
/// with the head receiver gone, so the drive sees that at once, records
/// ABORTED and cancels backoff and the upstream call.
struct Inline {
    drive: Option<Drive>,
    head_rx: Option<oneshot::Receiver<ChainResponse>>,
}

impl Inline {
    async fn head(&mut self) -> ChainResponse {
        let (Some(drive), Some(head_rx)) = (self.drive.as_mut(), self.head_rx.as_mut()) else {
            return ChainResponse::Failed(ChainError::Aborted);
        };
        let head = tokio::select! {
            biased;
            head = &mut *head_rx => head.ok(),
            () = drive => {
                // Finished: no stream follows; the head (if any) is waiting.
                self.drive = None;
                head_rx.try_recv().ok()
            }
        };
        self.head_rx = None;
        // A drive still running sent the head and streams on, from here in
        // its own task.
        if let Some(drive) = self.drive.take() {
            tokio::spawn(drive);
        }
        head.unwrap_or(ChainResponse::Failed(ChainError::Aborted))
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

struct CallLog<'a> {
    ctx: &'a ChainCtx,
    spec: &'a CallSpec,
    call: u64,
    at: SystemTime,
    started: Instant,
    reports: Vec<RouteReport>,
}

impl CallLog<'_> {
    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        attempt: usize,
        try_no: u32,
        route: &str,
        failure: Option<&Failure>,
        elapsed: std::time::Duration,
        will_retry: bool,
        switched: bool,
    ) {
        self.ctx.state.record(AttemptEntry {
            at: SystemTime::now(),
            call: self.call,
            shim: self.spec.shim,
            attempt,
            try_no,
            route: route.to_string(),
            ok: failure.is_none(),
            code: failure.map(|f| f.code),
            reason: failure.map(|f| f.to_string()),
            elapsed,
            will_retry,
            switched,
        });
    }

    fn finish(self, outcome: Outcome, code: Option<FailureCode>) {
        self.ctx.state.finish_call(CallRecord {
            call: self.call,
            shim: self.spec.shim,
            kind: self.spec.kind,
            at: self.at,
            elapsed: self.started.elapsed(),
            outcome,
            code,
            routes: self.reports,
        });
    }
}

async fn drive(ctx: ChainCtx, spec: CallSpec, mut head_tx: oneshot::Sender<ChainResponse>) {
    let mut log = CallLog {
        ctx: &ctx,
        spec: &spec,
        call: ctx.state.next_call(),
        at: SystemTime::now(),
        started: Instant::now(),
        reports: Vec::new(),
    };
    let plan = if spec.housekeeping {
        state::Plan {
            routes: spec.routes.iter().take(1).cloned().collect(),
            cooling: Vec::new(),
        }
    } else {
        ctx.state.plan(spec.shim, &spec.routes, &spec.ordering)
    };
    if plan.routes.is_empty() {
        let _ = head_tx.send(ChainResponse::Failed(ChainError::NoRoutes {
            shim: spec.shim,
        }));
        log.finish(Outcome::Failed, None);
        return;
    }
    for (route, until) in &plan.cooling {
        log.reports.push(RouteReport {
            attempt: 0,
            route: route.name.clone(),
            tries: 0,
            ok: false,
            code: Some(FailureCode::Quota),
            reason: Some(format!(
                "cooling after a quota failure until {}",
                crate::clock::iso8601(*until)
            )),
            elapsed: std::time::Duration::ZERO,
            switched_to: None,
            retry_after: None,
        });
    }
    for (index, route) in plan.routes.iter().enumerate() {
        let attempt_no = index + 1;
        let next_route = plan.routes.get(index + 1).map(|r| r.name.clone());
        let Some(_permit) = ctx.state.try_acquire(spec.shim, route) else {
            let failure = Failure::new(
                FailureCode::Capacity,
                format!("at its concurrency cap of {}", route.max_concurrency),
            );
            log.attempt(
                attempt_no,
                0,
                &route.name,
                Some(&failure),
                Default::default(),
                false,
                next_route.is_some(),
            );
            log.reports.push(report(
                attempt_no,
                route,
                0,
                Some(&failure),
                Default::default(),
                next_route.clone(),
            ));
            continue;
        };
        let route_started = Instant::now();
        let mut tries = 0u32;
        loop {
            tries += 1;
            let t0 = Instant::now();
            let pre = tokio::select! {
                biased;
                _ = head_tx.closed() => attempt::PreCommit::Aborted,
                _ = ctx.hard_stop.cancelled() => attempt::PreCommit::Failed {
                    failure: Failure::new(FailureCode::Server, "shimgate is shutting down"),
                    verbatim: None,
                    held: None,
                },
                pre = attempt::pre_commit(&ctx, &spec, route) => pre,
            };
            match pre {
                attempt::PreCommit::Aborted => {
                    let f = Failure::new(FailureCode::Aborted, "the client went away");
                    log.attempt(
                        attempt_no,
                        tries,
                        &route.name,
                        Some(&f),
                        t0.elapsed(),
                        false,
                        false,
                    );
                    log.reports.push(report(
                        attempt_no,
                        route,
                        tries,
                        Some(&f),
                        route_started.elapsed(),
                        None,
                    ));
                    log.finish(Outcome::Aborted, Some(FailureCode::Aborted));
                    return;
                }
                attempt::PreCommit::Committed(mut committed) => {
                    if index == 0 && tries == 1 {
                        let overhead = spec
                            .received
                            .elapsed()
                            .saturating_sub(committed.upstream_time);
                        ctx.state.latency.overhead(spec.shim).observe(overhead);
                    }
                    let _streaming = ctx.state.stream_started();
                    let (status, headers) = committed.head(&route.name);
                    let (body_tx, body) = ChannelBody::channel();
                    committed.release_held(&body_tx);
                    if head_tx
                        .send(ChainResponse::Stream {
                            status,
                            headers,
                            body,
                            route: route.name.clone(),
                        })
                        .is_err()
                    {
                        let f = Failure::new(FailureCode::Aborted, "the client went away");
                        log.attempt(
                            attempt_no,
                            tries,
                            &route.name,
                            Some(&f),
                            t0.elapsed(),
                            false,
                            false,
                        );
                        log.finish(Outcome::Aborted, Some(FailureCode::Aborted));
                        return;
                    }
                    let end = attempt::stream(&ctx, spec.timeouts.idle, committed, &body_tx).await;
                    let failure = end.err();
                    if let Some(f) = &failure {
                        if f.code != FailureCode::Aborted {
                            warn!(shim = spec.shim, route = %route.name, code = %f.code, reason = %f.message, "stream failed after content; passed on to the client");
                        }
                    }
                    log.attempt(
                        attempt_no,
                        tries,
                        &route.name,
                        failure.as_ref(),
                        t0.elapsed(),
                        false,
                        false,
                    );
                    log.reports.push(report(
                        attempt_no,
                        route,
                        tries,
                        failure.as_ref(),
                        route_started.elapsed(),
                        None,
                    ));
                    let outcome = match &failure {
                        None => Outcome::Ok,
                        Some(f) if f.code == FailureCode::Aborted => Outcome::Aborted,
                        Some(_) => Outcome::Failed,
                    };
                    log.finish(outcome, failure.map(|f| f.code));
                    return;
                }
                attempt::PreCommit::Failed {
                    failure,
                    verbatim,
                    held,
                } => {
                    let elapsed = t0.elapsed();
                    if failure.code == FailureCode::Quota {
                        let rest = failure.retry_after.unwrap_or(spec.ordering.quota_cooldown);
                        ctx.state
                            .cool(spec.shim, &route.name, rest, &failure.to_string());
                        warn!(shim = spec.shim, route = %route.name, rest_ms = rest.as_millis() as u64, "quota exhausted; route cools down");
                    }
                    let shutting_down = ctx.hard_stop.is_cancelled();
                    if failure.code.never_switches() || spec.housekeeping || shutting_down {
                        log.attempt(
                            attempt_no,
                            tries,
                            &route.name,
                            Some(&failure),
                            elapsed,
                            false,
                            false,
                        );
                        log.reports.push(report(
                            attempt_no,
                            route,
                            tries,
                            Some(&failure),
                            route_started.elapsed(),
                            None,
                        ));
                        info!(shim = spec.shim, route = %route.name, code = %failure.code, "failure ends the call without switching");
                        let what = Some((failure.clone(), route.name.clone()));
                        let head = if shutting_down {
                            ChainResponse::Failed(ChainError::ShuttingDown)
                        } else if let Some(v) = verbatim {
                            ChainResponse::Verbatim {
                                status: v.status,
                                headers: v.headers,
                                body: v.body,
                                failure: what,
                                native: None,
                            }
                        } else if let Some(held) = held {
                            // An in-band error the client must see as the upstream sent it.
                            ChainResponse::Verbatim {
                                status: StatusCode::OK,
                                headers: attempt::sse_headers(&route.name),
                                body: held.translated.freeze(),
                                failure: what,
                                native: Some(held.native),
                            }
                        } else {
                            ChainResponse::Failed(ChainError::Exhausted {
                                reports: log.reports.clone(),
                            })
                        };
                        let _ = head_tx.send(head);
                        log.finish(Outcome::Failed, Some(failure.code));
                        return;
                    }
                    let retryable = spec.retry.retryable.contains(&failure.code)
                        && tries <= spec.retry.max_retries;
                    let decision = if retryable {
                        policy::retry_decision(&spec.retry, tries, failure.retry_after)
                    } else {
                        RetryDecision::SwitchNow
                    };
                    match decision {
                        RetryDecision::Wait(wait) => {
                            log.attempt(
                                attempt_no,
                                tries,
                                &route.name,
                                Some(&failure),
                                elapsed,
                                true,
                                false,
                            );
                            warn!(shim = spec.shim, route = %route.name, try_no = tries, code = %failure.code, reason = %failure.message, wait_ms = wait.as_millis() as u64, "attempt failed; retrying on the same route");
                            tokio::select! {
                                biased;
                                _ = head_tx.closed() => {
                                    log.reports.push(report(attempt_no, route, tries, Some(&Failure::new(FailureCode::Aborted, "the client went away during backoff")), route_started.elapsed(), None));
                                    log.finish(Outcome::Aborted, Some(FailureCode::Aborted));
                                    return;
                                }
                                _ = ctx.hard_stop.cancelled() => {
                                    let _ = head_tx.send(ChainResponse::Failed(ChainError::ShuttingDown));
                                    log.finish(Outcome::Failed, None);
                                    return;
                                }
                                _ = tokio::time::sleep(wait) => {}
                            }
                        }
                        RetryDecision::SwitchNow => {
                            log.attempt(
                                attempt_no,
                                tries,
                                &route.name,
                                Some(&failure),
                                elapsed,
                                false,
                                next_route.is_some(),
                            );
                            log.reports.push(report(
                                attempt_no,
                                route,
                                tries,
                                Some(&failure),
                                route_started.elapsed(),
                                next_route.clone(),
                            ));
                            match &next_route {
                                Some(next) => {
                                    warn!(shim = spec.shim, route = %route.name, next = %next, code = %failure.code, reason = %failure.message, tries, "route failed; switching")
                                }
                                None => {
                                    warn!(shim = spec.shim, route = %route.name, code = %failure.code, reason = %failure.message, tries, "last route failed")
                                }
                            }
                            break;
                        }
                    }
                }
            }
        }
    }
    let error = ChainError::Exhausted {
        reports: log.reports.clone(),
    };
    warn!(shim = spec.shim, kind = spec.kind, "{}", error.message());
    let _ = head_tx.send(ChainResponse::Failed(error));
    log.finish(Outcome::Failed, Some(FailureCode::AutoRoutesExhausted));
}

/// Whether a JSON body marks a housekeeping call (`purpose` compaction or
/// session-title): those pass straight through without failover.
pub fn is_housekeeping(body: &[u8]) -> bool {
    if memchr::memmem::find(body, b"\"purpose\"").is_none() {
        return false;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("purpose").and_then(|p| p.as_str()).map(str::to_owned))
        .is_some_and(|p| p == "compaction" || p == "session-title")
}

fn report(
    attempt: usize,
    route: &Route,
    tries: u32,
    failure: Option<&Failure>,
    elapsed: std::time::Duration,
    switched_to: Option<String>,
) -> RouteReport {
    RouteReport {
        attempt,
        route: route.name.clone(),
        tries,
        ok: failure.is_none(),
        code: failure.map(|f| f.code),
        reason: failure.map(|f| f.to_string()),
        elapsed,
        switched_to,
        retry_after: failure.and_then(|f| f.retry_after),
    }
}

//! The circuit breaker of one route: after `failures`
//! consecutive non-quota failures the route is open for `open_ms`; then one
//! real call is let through (half-open): its success closes the breaker,
//! its failure re-opens it for twice as long, up to `max_open_ms`.
//!
//! A plain value with pure transitions on the monotonic clock the caller
//! passes in, so a table test walks every state in microseconds; the chain
//! keeps one per route and carries the answers out. A half-open route
//! admits its one call when the call actually reaches it (not when a plan
//! lists it), so a call that succeeds on an earlier route spends no probe.

use std::time::{Duration, Instant};

use shimgate_shim_api::FailureCode;

use crate::config::BreakerPolicy;

/// One route's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Breaker {
    /// Calls pass; `failures` in a row so far.
    Closed { failures: u32 },
    /// Skipped until `until`; `period` is how long it was opened for.
    Open { until: Instant, period: Duration },
    /// The open period is over: one call may probe. `probing` while it runs.
    HalfOpen { period: Duration, probing: bool },
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker::Closed { failures: 0 }
    }
}

/// What the breaker says of a route at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Calls pass.
    Closed,
    /// Skipped until then (`None`: half-open with its one call running).
    Open(Option<Instant>),
    /// One call may go through, as a probe.
    Probe,
}

/// How a try on the route counts for its breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The route answered.
    Success,
    /// A failure that says the route is unwell.
    Failure,
    /// Says nothing about the route's health (the client left, the request
    /// was too big, a quota wall: that one has its own cooldown).
    Neutral,
}

impl Verdict {
    /// How a try that ended with `code` (`None`: success) counts.
    pub fn of(code: Option<FailureCode>) -> Verdict {
        match code {
            None => Verdict::Success,
            Some(c) if counts_against_route(c) && c != FailureCode::Quota => Verdict::Failure,
            Some(_) => Verdict::Neutral,
        }
    }
}

/// Whether a failure says something about the route (and so counts in its
/// measured success rate): not when the client left, the route was at its
/// cap, the request was too big or malformed for shimgate itself, or the
/// request id was reused.
pub fn counts_against_route(code: FailureCode) -> bool {
    !matches!(
        code,
        FailureCode::Aborted
            | FailureCode::Capacity
            | FailureCode::ContextWindowExceeded
            | FailureCode::Codec
            | FailureCode::Duplicate
            | FailureCode::AutoRoutesExhausted
            | FailureCode::NoActiveRoute
    )
}

impl Breaker {
    /// The gate at `now` (an open period that is over reads as a probe).
    pub fn gate(&self, now: Instant) -> Gate {
        match *self {
            Breaker::Closed { .. } => Gate::Closed,
            Breaker::Open { until, .. } if now < until => Gate::Open(Some(until)),
            Breaker::Open { .. } | Breaker::HalfOpen { probing: false, .. } => Gate::Probe,
            Breaker::HalfOpen { probing: true, .. } => Gate::Open(None),
        }
    }

    /// A call reaches the route at `now`: `Some(probe)` when it may go
    /// (probe: it is the half-open call, and the breaker now waits for
    /// it), `None` when the route is open or another call is probing.
    pub fn admit(&mut self, now: Instant) -> Option<bool> {
        match self.gate(now) {
            Gate::Closed => Some(false),
            Gate::Open(_) => None,
            Gate::Probe => {
                *self = Breaker::HalfOpen {
                    period: self.period(),
                    probing: true,
                };
                Some(true)
            }
        }
    }

    /// A try on the route ended at `now`. Returns true when this opened
    /// (or re-opened) the breaker.
    pub fn observe(&mut self, verdict: Verdict, policy: &BreakerPolicy, now: Instant) -> bool {
        if policy.failures == 0 {
            *self = Breaker::default();
            return false;
        }
        match (*self, verdict) {
            (_, Verdict::Success) => {
                *self = Breaker::default();
                false
            }
            (Breaker::Closed { failures }, Verdict::Failure) => {
                let failures = failures + 1;
                if failures >= policy.failures {
                    *self = Breaker::Open {
                        until: now + policy.open,
                        period: policy.open,
                    };
                    true
                } else {
                    *self = Breaker::Closed { failures };
                    false
                }
            }
            (Breaker::HalfOpen { period, .. }, Verdict::Failure) => {
                let period = (period * 2).min(policy.max_open).max(policy.open);
                *self = Breaker::Open {
                    until: now + period,
                    period,
                };
                true
            }
            // Open and tried anyway (every route was out): stays open.
            (Breaker::Open { .. }, Verdict::Failure) => false,
            (Breaker::HalfOpen { period, .. }, Verdict::Neutral) => {
                // The probe told nothing: the next call probes.
                *self = Breaker::HalfOpen {
                    period,
                    probing: false,
                };
                false
            }
            (_, Verdict::Neutral) => false,
        }
    }

    /// A probe that ended without a verdict (its call went away before it
    /// was tried): the next call probes.
    pub fn release(&mut self) {
        if let Breaker::HalfOpen { period, .. } = *self {
            *self = Breaker::HalfOpen {
                period,
                probing: false,
            };
        }
    }

    /// The open period this breaker was (or is) at; zero when closed.
    pub fn period(&self) -> Duration {
        match *self {
            Breaker::Closed { .. } => Duration::ZERO,
            Breaker::Open { period, .. } | Breaker::HalfOpen { period, .. } => period,
        }
    }

    /// The `/status` and state-file name of the state.
    pub fn name(&self, now: Instant) -> &'static str {
        match self.gate(now) {
            Gate::Closed => "closed",
            Gate::Open(Some(_)) => "open",
            Gate::Open(None) | Gate::Probe => "half-open",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BreakerPolicy {
        BreakerPolicy {
            failures: 3,
            open: Duration::from_millis(100),
            max_open: Duration::from_millis(350),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn consecutive_failures_open_the_breaker_and_a_success_in_between_resets_them() {
        let p = policy();
        let t = Instant::now();
        let mut b = Breaker::default();
        assert!(!b.observe(Verdict::Failure, &p, t));
        assert!(!b.observe(Verdict::Failure, &p, t));
        assert!(!b.observe(Verdict::Success, &p, t));
        assert_eq!(b, Breaker::Closed { failures: 0 });
        for _ in 0..2 {
            assert!(!b.observe(Verdict::Failure, &p, t));
        }
        assert!(
            b.observe(Verdict::Failure, &p, t),
            "the third in a row opens"
        );
        assert_eq!(b.gate(t), Gate::Open(Some(t + ms(100))));
        assert_eq!(b.name(t), "open");
    }

    #[test]
    fn neutral_outcomes_neither_count_nor_reset() {
        let p = policy();
        let t = Instant::now();
        let mut b = Breaker::Closed { failures: 2 };
        b.observe(Verdict::Neutral, &p, t);
        assert_eq!(b, Breaker::Closed { failures: 2 });
        assert!(b.observe(Verdict::Failure, &p, t));
    }

    #[test]
    fn which_codes_count_against_the_route() {
        assert_eq!(Verdict::of(None), Verdict::Success);
        for code in [
            FailureCode::Server,
            FailureCode::Timeout,
            FailureCode::Transport,
            FailureCode::EmptyResponse,
            FailureCode::RateLimit,
            FailureCode::Auth,
            FailureCode::Unsupported,
        ] {
            assert_eq!(Verdict::of(Some(code)), Verdict::Failure, "{code}");
        }
        for code in [
            FailureCode::Quota,
            FailureCode::Aborted,
            FailureCode::Capacity,
            FailureCode::ContextWindowExceeded,
            FailureCode::Codec,
            FailureCode::Duplicate,
        ] {
            assert_eq!(Verdict::of(Some(code)), Verdict::Neutral, "{code}");
        }
        assert!(counts_against_route(FailureCode::Quota));
        assert!(!counts_against_route(FailureCode::Aborted));
    }

    #[test]
    fn after_the_open_period_exactly_one_call_is_let_through() {
        let p = policy();
        let t = Instant::now();
        let mut b = Breaker::Closed { failures: 2 };
        b.observe(Verdict::Failure, &p, t);
        assert_eq!(b.admit(t + ms(99)), None, "still open");
        let later = t + ms(100);
        assert_eq!(b.gate(later), Gate::Probe);
        assert_eq!(b.admit(later), Some(true), "the probe");
        assert_eq!(b.admit(later), None, "a second call while it probes");
        assert_eq!(b.gate(later), Gate::Open(None));
        assert_eq!(b.name(later), "half-open");
    }

    #[test]
    fn a_probe_that_succeeds_closes_the_breaker() {
        let p = policy();
        let t = Instant::now();
        let mut b = Breaker::Open {
            until: t,
            period: ms(100),
        };
        assert_eq!(b.admit(t), Some(true));
        assert!(!b.observe(Verdict::Success, &p, t));
        assert_eq!(b.admit(t), Some(false));
        assert_eq!(b, Breaker::default());
    }

    #[test]
    fn a_probe_that_fails_reopens_for_twice_as_long_up_to_the_cap() {
        let p = policy();
        let mut t = Instant::now();
        let mut b = Breaker::Open {
            until: t,
            period: ms(100),
        };
        let mut periods = Vec::new();
        for _ in 0..4 {
            assert_eq!(b.admit(t), Some(true));
            assert!(b.observe(Verdict::Failure, &p, t));
            periods.push(b.period().as_millis());
            let Gate::Open(Some(until)) = b.gate(t) else {
                panic!("not open: {b:?}")
            };
            assert_eq!(until, t + b.period());
            t = until;
        }
        assert_eq!(periods, [200, 350, 350, 350]);
    }

    #[test]
    fn a_probe_without_a_verdict_lets_the_next_call_probe() {
        let p = policy();
        let t = Instant::now();
        let mut b = Breaker::HalfOpen {
            period: ms(100),
            probing: false,
        };
        assert_eq!(b.admit(t), Some(true));
        b.observe(Verdict::Neutral, &p, t);
        assert_eq!(b.admit(t), Some(true));
        b.release();
        assert_eq!(b.gate(t), Gate::Probe);
    }

    #[test]
    fn a_failure_while_open_keeps_the_deadline() {
        let p = policy();
        let t = Instant::now();
        let mut b = Breaker::Open {
            until: t + ms(50),
            period: ms(100),
        };
        assert!(!b.observe(Verdict::Failure, &p, t));
        assert_eq!(b.gate(t), Gate::Open(Some(t + ms(50))));
    }

    #[test]
    fn zero_failures_means_no_breaker() {
        let p = BreakerPolicy {
            failures: 0,
            ..policy()
        };
        let t = Instant::now();
        let mut b = Breaker::default();
        for _ in 0..50 {
            assert!(!b.observe(Verdict::Failure, &p, t));
        }
        assert_eq!(b.gate(t), Gate::Closed);
    }
}

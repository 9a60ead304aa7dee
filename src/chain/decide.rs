//! The failover decision (`docs/failover.md`): after each try, skip or commit, a
//! pure function of what happened, where the call stands, the call's rules
//! and the clock says retry, switch or stop; the driver in `mod.rs` only
//! carries the answer out.
//!
//! Nothing here reads a clock, a random source or shared state: the driver
//! passes the time ([`Now`]) and the jitter draw ([`Progress::draw`]) in, so
//! a table test can walk every rule in microseconds. Rules that learn across
//! calls plug in the same way: the driver passes what the chain knows in
//! ([`Progress::budget_left`] from the retry budget, [`Progress::probe`]
//! and [`Progress::route_open`] from the route's breaker, the zone for a
//! quota rest) and the [`Decision`] names what to change there (the
//! cooldown of [`Decision::cool`], the budget's count of
//! [`Decision::budget_exhausted`]); the driver applies it to `ChainState`.
//! The ranking ([`super::rank`]) and the breaker's moves
//! ([`super::breaker`]) are pure functions of their own.

use std::time::Duration;

use shimgate_shim_api::{Failure, FailureCode};

use super::policy::{self, RetryDecision};
use super::rest;
use crate::clock::{Now, Zone};
use crate::config::{Ordering, RetryPolicy};

/// What just happened on the current route.
#[derive(Debug, Clone, Copy)]
pub enum Event<'a> {
    /// The route is at its concurrency cap: skipped, not queued, no try made.
    AtCapacity,
    /// The client went away before the answer committed.
    ClientGone,
    /// The try failed before anything reached the client.
    Failed(&'a Failure),
    /// The first content frame arrived: the answer is the client's now, and
    /// whatever happens to the stream later is passed on as it is.
    Committed,
}

/// Where the call stands when the event happened.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Tries made on the current route, the one the event is about
    /// included (1-based; 0 for [`Event::AtCapacity`]).
    pub tries: u32,
    /// Whether the plan has another route after this one.
    pub has_next: bool,
    /// Whether shimgate is shutting down (its hard stop has fired).
    pub shutting_down: bool,
    /// A uniform draw from `[0, 1)` for the backoff jitter (0.5 is no
    /// jitter): an input, so tests choose it.
    pub draw: f64,
    /// Whether the request may be sent again after this failure: false
    /// for a pass-through request that is not idempotent (POST, PATCH) and
    /// may have reached the upstream (a pass-through's rule).
    pub may_resend: bool,
    /// The retry budget allows one more in-place retry.
    pub budget_left: bool,
    /// This try is the one call a half-open breaker let through: it gets
    /// no retry in place, its failure re-opens the route.
    pub probe: bool,
    /// The route's breaker is open (this failure opened it): leave it.
    pub route_open: bool,
}

/// The rules one call runs under (fixed for the call).
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    pub retry: &'a RetryPolicy,
    pub ordering: &'a Ordering,
    /// Housekeeping calls (compaction, session titles) get one try on the
    /// first route: no retry, no switch.
    pub housekeeping: bool,
    /// The local zone, for a quota rest that ends at a local hour.
    pub zone: Zone,
}

/// What the driver does next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// Wait this long, then try the same route again.
    Retry { wait: Duration },
    /// Leave this route for the next one in the plan.
    Switch,
    /// The call ends here.
    Stop(Stop),
}

/// Why the call ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The answer committed: stream it to its end.
    Committed,
    /// The client went away: nobody reads an answer.
    Aborted,
    /// This failure is the answer: its code never switches (`ABORTED`,
    /// `CONTEXT_WINDOW_EXCEEDED`) or the call is housekeeping.
    Final,
    /// shimgate is shutting down.
    ShuttingDown,
    /// The last route of the plan failed: `AUTO_ROUTES_EXHAUSTED`.
    Exhausted,
}

/// The answer to one event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub next: Next,
    /// Rest the route this long (a quota failure): the driver puts it on
    /// its cooldown, whatever `next` is.
    pub cool: Option<Duration>,
    /// A retry was due but the retry budget is spent: the call leaves the
    /// route instead (the driver counts it for `/metrics`).
    pub budget_exhausted: bool,
}

impl Decision {
    fn to(next: Next) -> Decision {
        Decision {
            next,
            cool: None,
            budget_exhausted: false,
        }
    }

    /// The ring log's `willRetry`: the same route is tried again.
    pub fn will_retry(&self) -> bool {
        matches!(self.next, Next::Retry { .. })
    }

    /// The ring log's `switched`: the call goes on on the next route.
    pub fn switched(&self) -> bool {
        self.next == Next::Switch
    }

    /// Whether the call leaves the current route (its report is written).
    pub fn leaves_route(&self) -> bool {
        !self.will_retry()
    }
}

/// The failover rule, at `now` (the wall face dates a quota rest).
pub fn decide(event: Event<'_>, at: &Progress, rules: &Rules<'_>, now: Now) -> Decision {
    let failure = match event {
        Event::Committed => return Decision::to(Next::Stop(Stop::Committed)),
        Event::ClientGone => return Decision::to(Next::Stop(Stop::Aborted)),
        Event::AtCapacity => return Decision::to(leave(at)),
        Event::Failed(failure) => failure,
    };
    let cool = (failure.code == FailureCode::Quota).then(|| {
        // A reset stated as a wall time in the text, read in the zone.
        let stated = failure
            .retry_after
            .or_else(|| rest::stated_wall_reset(&failure.message, rules.zone, now.wall));
        rest::quota_rest(stated, rules.ordering, rules.zone, now.wall)
    });
    let mut budget_exhausted = false;
    let next = if at.shutting_down {
        Next::Stop(Stop::ShuttingDown)
    } else if failure.code.never_switches() || rules.housekeeping || !at.may_resend {
        Next::Stop(Stop::Final)
    } else if rules.retry.retryable.contains(&failure.code)
        && at.tries <= rules.retry.max_retries
        && !at.probe
        && !at.route_open
    {
        match policy::retry_decision(rules.retry, at.tries, failure.retry_after, at.draw) {
            RetryDecision::Wait(wait) if at.budget_left => Next::Retry { wait },
            RetryDecision::Wait(_) => {
                budget_exhausted = true;
                leave(at)
            }
            RetryDecision::SwitchNow => leave(at),
        }
    } else {
        leave(at)
    };
    Decision {
        next,
        cool,
        budget_exhausted,
    }
}

/// Off this route: to the next, or, on the last, the call is exhausted.
fn leave(at: &Progress) -> Next {
    if at.has_next {
        Next::Switch
    } else {
        Next::Stop(Stop::Exhausted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_RETRYABLE;
    use shimgate_shim_api::failure::ALL_CODES;

    const NO_JITTER: f64 = 0.5;

    fn policy() -> RetryPolicy {
        RetryPolicy::default()
    }

    fn on(policy: &RetryPolicy, tries: u32, has_next: bool, failure: &Failure) -> Decision {
        on_with(policy, false, tries, has_next, failure)
    }

    fn on_with(
        policy: &RetryPolicy,
        housekeeping: bool,
        tries: u32,
        has_next: bool,
        failure: &Failure,
    ) -> Decision {
        let ordering = Ordering::default();
        let rules = Rules {
            retry: policy,
            ordering: &ordering,
            housekeeping,
            zone: Zone::UTC,
        };
        decide(
            Event::Failed(failure),
            &progress(tries, has_next),
            &rules,
            Now::system(),
        )
    }

    fn progress(tries: u32, has_next: bool) -> Progress {
        Progress {
            tries,
            has_next,
            shutting_down: false,
            draw: NO_JITTER,
            may_resend: true,
            budget_left: true,
            probe: false,
            route_open: false,
        }
    }

    fn fail(code: FailureCode) -> Failure {
        Failure::new(code, "test")
    }

    fn asking(code: FailureCode, wait: Duration) -> Failure {
        let mut f = fail(code);
        f.retry_after = Some(wait);
        f
    }

    fn wait_of(d: Decision) -> Duration {
        match d.next {
            Next::Retry { wait } => wait,
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn a_retryable_failure_retries_up_to_max_retries_then_switches() {
        let p = policy();
        for code in DEFAULT_RETRYABLE {
            let f = fail(code);
            for tries in 1..=p.max_retries {
                let d = on(&p, tries, true, &f);
                assert!(d.will_retry(), "{code} try {tries}: {d:?}");
                assert!(!d.switched());
            }
            let d = on(&p, p.max_retries + 1, true, &f);
            assert_eq!(d.next, Next::Switch, "{code}");
            assert!(d.switched() && !d.will_retry());
        }
    }

    #[test]
    fn retries_spent_on_the_last_route_exhaust_the_call() {
        let p = policy();
        let d = on(&p, p.max_retries + 1, false, &fail(FailureCode::Server));
        assert_eq!(d.next, Next::Stop(Stop::Exhausted));
        assert!(!d.switched() && !d.will_retry() && d.leaves_route());
    }

    #[test]
    fn zero_max_retries_means_one_try_per_route() {
        let p = RetryPolicy {
            max_retries: 0,
            ..policy()
        };
        let d = on(&p, 1, true, &fail(FailureCode::Server));
        assert_eq!(d.next, Next::Switch);
    }

    #[test]
    fn a_non_retryable_failure_switches_at_once() {
        let p = policy();
        for code in ALL_CODES {
            if DEFAULT_RETRYABLE.contains(&code) || code.never_switches() {
                continue;
            }
            assert_eq!(on(&p, 1, true, &fail(code)).next, Next::Switch, "{code}");
            assert_eq!(
                on(&p, 1, false, &fail(code)).next,
                Next::Stop(Stop::Exhausted),
                "{code}"
            );
        }
    }

    #[test]
    fn only_the_codes_the_policy_lists_are_retried() {
        let p = RetryPolicy {
            retryable: vec![FailureCode::Server],
            ..policy()
        };
        assert!(on(&p, 1, true, &fail(FailureCode::Server)).will_retry());
        assert_eq!(
            on(&p, 1, true, &fail(FailureCode::RateLimit)).next,
            Next::Switch
        );
    }

    #[test]
    fn a_retry_after_within_the_cap_waits_exactly_that_long() {
        let p = policy();
        let f = asking(FailureCode::RateLimit, Duration::from_secs(1));
        for draw in [0.0, NO_JITTER, 0.999_999] {
            let ordering = Ordering::default();
            let rules = Rules {
                retry: &p,
                ordering: &ordering,
                housekeeping: false,
                zone: Zone::UTC,
            };
            let at = Progress {
                draw,
                ..progress(1, true)
            };
            let d = decide(Event::Failed(&f), &at, &rules, Now::system());
            assert_eq!(
                wait_of(d),
                Duration::from_secs(1),
                "no jitter on an asked wait"
            );
        }
        let at_cap = asking(FailureCode::RateLimit, p.max_delay);
        assert_eq!(wait_of(on(&p, 1, true, &at_cap)), p.max_delay);
    }

    #[test]
    fn a_retry_after_beyond_the_cap_switches_at_once() {
        let p = policy();
        let f = asking(
            FailureCode::RateLimit,
            p.max_delay + Duration::from_millis(1),
        );
        assert_eq!(on(&p, 1, true, &f).next, Next::Switch);
        assert_eq!(on(&p, 1, false, &f).next, Next::Stop(Stop::Exhausted));
        let minute = asking(FailureCode::RateLimit, Duration::from_secs(60));
        assert_eq!(on(&p, 1, true, &minute).next, Next::Switch);
    }

    #[test]
    fn backoff_doubles_from_the_initial_delay_up_to_the_cap() {
        let p = RetryPolicy {
            max_retries: 8,
            ..policy()
        };
        let f = fail(FailureCode::Server);
        let ms: Vec<u128> = (1..=8)
            .map(|tries| wait_of(on(&p, tries, true, &f)).as_millis())
            .collect();
        assert_eq!(ms, [500, 1000, 2000, 4000, 8000, 10000, 10000, 10000]);
    }

    #[test]
    fn jitter_stays_within_its_ratio_of_the_backoff() {
        let p = RetryPolicy {
            max_retries: 8,
            ..policy()
        };
        let ordering = Ordering::default();
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::UTC,
        };
        let f = fail(FailureCode::Server);
        let wait = |tries, draw| {
            let at = Progress {
                draw,
                ..progress(tries, true)
            };
            wait_of(decide(Event::Failed(&f), &at, &rules, Now::system()))
        };
        // The second retry's backoff is 1 s, ±10 %.
        assert_eq!(wait(2, 0.0), Duration::from_millis(900));
        assert_eq!(wait(2, NO_JITTER), Duration::from_millis(1000));
        assert!(wait(2, 0.999_999) <= Duration::from_millis(1100));
        assert!(wait(2, 0.999_999) > Duration::from_millis(1099));
        for i in 0..100 {
            let d = wait(2, f64::from(i) / 100.0);
            assert!(d >= Duration::from_millis(900) && d <= Duration::from_millis(1100));
        }
        // At the cap the jitter still applies, around the cap.
        assert_eq!(wait(6, 0.0), Duration::from_millis(9000));
    }

    #[test]
    fn aborted_and_context_window_exceeded_never_switch() {
        // Not even when the policy lists them as retryable.
        let p = RetryPolicy {
            retryable: ALL_CODES.to_vec(),
            ..policy()
        };
        for code in [FailureCode::Aborted, FailureCode::ContextWindowExceeded] {
            let d = on(&p, 1, true, &fail(code));
            assert_eq!(d.next, Next::Stop(Stop::Final), "{code}");
            assert!(!d.switched() && !d.will_retry());
        }
    }

    #[test]
    fn a_housekeeping_call_stops_after_one_try_with_routes_left() {
        let p = policy();
        for code in [FailureCode::Server, FailureCode::Auth, FailureCode::Quota] {
            let d = on_with(&p, true, 1, true, &fail(code));
            assert_eq!(d.next, Next::Stop(Stop::Final), "{code}");
        }
    }

    #[test]
    fn a_quota_failure_cools_the_route_and_switches() {
        let p = policy();
        let d = on(&p, 1, true, &fail(FailureCode::Quota));
        assert_eq!(d.next, Next::Switch);
        assert_eq!(d.cool, Some(Ordering::default().quota_cooldown));
    }

    #[test]
    fn a_quota_failure_rests_the_route_until_the_reset_the_upstream_states() {
        let p = policy();
        let hours = asking(FailureCode::Quota, Duration::from_secs(5 * 3600));
        let d = on(&p, 1, true, &hours);
        assert_eq!(d.cool, Some(Duration::from_secs(5 * 3600)));
        assert_eq!(d.next, Next::Switch, "a long reset is not waited for");
    }

    #[test]
    fn a_quota_failure_cools_the_route_even_when_the_call_stops() {
        let p = policy();
        let d = on_with(&p, true, 1, true, &fail(FailureCode::Quota));
        assert_eq!(d.next, Next::Stop(Stop::Final));
        assert!(d.cool.is_some());
        let d = on(&p, 1, false, &fail(FailureCode::Quota));
        assert_eq!(d.next, Next::Stop(Stop::Exhausted));
        assert!(d.cool.is_some());
    }

    #[test]
    fn only_a_quota_failure_cools_the_route() {
        let p = policy();
        for code in ALL_CODES {
            let d = on(&p, 1, true, &fail(code));
            assert_eq!(d.cool.is_some(), code == FailureCode::Quota, "{code}");
        }
    }

    #[test]
    fn a_failure_while_shutting_down_stops_without_retry_or_switch() {
        let p = policy();
        let ordering = Ordering::default();
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::UTC,
        };
        let at = Progress {
            shutting_down: true,
            ..progress(1, true)
        };
        let f = fail(FailureCode::Server);
        let d = decide(Event::Failed(&f), &at, &rules, Now::system());
        assert_eq!(d.next, Next::Stop(Stop::ShuttingDown));
    }

    #[test]
    fn a_route_at_its_concurrency_cap_is_skipped_for_the_next() {
        let p = policy();
        let ordering = Ordering::default();
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::UTC,
        };
        let now = Now::system();
        let d = decide(Event::AtCapacity, &progress(0, true), &rules, now);
        assert_eq!(d.next, Next::Switch);
        assert!(d.switched() && d.cool.is_none());
        let last = decide(Event::AtCapacity, &progress(0, false), &rules, now);
        assert_eq!(last.next, Next::Stop(Stop::Exhausted));
    }

    #[test]
    fn a_committed_answer_or_a_client_gone_ends_the_call() {
        let p = policy();
        let ordering = Ordering::default();
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::UTC,
        };
        let now = Now::system();
        let at = progress(1, true);
        let committed = decide(Event::Committed, &at, &rules, now);
        assert_eq!(committed.next, Next::Stop(Stop::Committed));
        assert!(committed.leaves_route() && !committed.switched());
        let gone = decide(Event::ClientGone, &at, &rules, now);
        assert_eq!(gone.next, Next::Stop(Stop::Aborted));
    }

    fn with(at: Progress, failure: &Failure) -> Decision {
        let p = policy();
        let ordering = Ordering::default();
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::UTC,
        };
        decide(Event::Failed(failure), &at, &rules, Now::system())
    }

    #[test]
    fn past_the_retry_budget_a_retryable_failure_switches_and_says_so() {
        for code in DEFAULT_RETRYABLE {
            let f = fail(code);
            let spent = Progress {
                budget_left: false,
                ..progress(1, true)
            };
            let d = with(spent, &f);
            assert_eq!(d.next, Next::Switch, "{code}");
            assert!(d.budget_exhausted, "{code}");
            let last = Progress {
                budget_left: false,
                ..progress(1, false)
            };
            let d = with(last, &f);
            assert_eq!(d.next, Next::Stop(Stop::Exhausted), "{code}");
            assert!(d.budget_exhausted);
            // Within the budget it retries, and nothing is counted.
            let d = with(progress(1, true), &f);
            assert!(d.will_retry() && !d.budget_exhausted);
        }
    }

    #[test]
    fn the_budget_is_not_counted_when_no_retry_was_due_anyway() {
        let spent = |tries| Progress {
            budget_left: false,
            ..progress(tries, true)
        };
        let p = policy();
        for (f, tries) in [
            (fail(FailureCode::Auth), 1),
            (fail(FailureCode::Server), p.max_retries + 1),
            (asking(FailureCode::RateLimit, Duration::from_secs(60)), 1),
        ] {
            let d = with(spent(tries), &f);
            assert_eq!(d.next, Next::Switch, "{f}");
            assert!(!d.budget_exhausted, "{f}");
        }
    }

    #[test]
    fn a_half_open_probe_gets_no_retry_in_place() {
        let probe = Progress {
            probe: true,
            ..progress(1, true)
        };
        let d = with(probe, &fail(FailureCode::Server));
        assert_eq!(d.next, Next::Switch);
        assert!(!d.budget_exhausted);
    }

    #[test]
    fn a_failure_that_opened_the_breaker_leaves_the_route() {
        let open = Progress {
            route_open: true,
            ..progress(2, true)
        };
        assert_eq!(with(open, &fail(FailureCode::Timeout)).next, Next::Switch);
        let open_last = Progress {
            route_open: true,
            ..progress(2, false)
        };
        assert_eq!(
            with(open_last, &fail(FailureCode::Timeout)).next,
            Next::Stop(Stop::Exhausted)
        );
    }

    #[test]
    fn a_reset_stated_as_a_beijing_wall_time_sets_the_rest() {
        let p = policy();
        let ordering = Ordering::default();
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::Named(chrono_tz::Tz::Asia__Shanghai),
        };
        // 2026-12-01T09:00Z is 17:00 in Beijing.
        let wall = std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 9 * 3600);
        let now = Now {
            wall,
            ..Now::system()
        };
        let f = Failure::new(FailureCode::Quota, "您的限额将在 2026-12-01 18:08:11 重置");
        let d = decide(Event::Failed(&f), &progress(1, true), &rules, now);
        assert_eq!(d.cool, Some(Duration::from_secs(3600 + 8 * 60 + 11)));
        // Already past: the configured rest.
        let later = now.after(Duration::from_secs(2 * 3600));
        let d = decide(Event::Failed(&f), &progress(1, true), &rules, later);
        assert_eq!(d.cool, Some(ordering.quota_cooldown));
    }

    #[test]
    fn a_quota_rest_ends_at_the_configured_local_hour() {
        let p = policy();
        let ordering = Ordering {
            quota_cooldown: Duration::from_secs(12 * 3600),
            quota_cooldown_hour: Some(0),
            ..Ordering::default()
        };
        let rules = Rules {
            retry: &p,
            ordering: &ordering,
            housekeeping: false,
            zone: Zone::Named(chrono_tz::Tz::Asia__Shanghai),
        };
        // 2026-12-01T15:50Z is 23:50 at +08:00.
        let wall = std::time::UNIX_EPOCH + Duration::from_secs(1_796_083_200 + 15 * 3600 + 50 * 60);
        let now = Now {
            wall,
            ..Now::system()
        };
        let f = fail(FailureCode::Quota);
        let d = decide(Event::Failed(&f), &progress(1, true), &rules, now);
        assert_eq!(d.cool, Some(Duration::from_secs(12 * 3600)));
        // At 10:00 local the rest runs to midnight: 14 h.
        let ten_am = now.after(Duration::from_secs(10 * 3600 + 10 * 60));
        let d = decide(Event::Failed(&f), &progress(1, true), &rules, ten_am);
        assert_eq!(d.cool, Some(Duration::from_secs(14 * 3600)));
        // At 13:00 midnight is 11 h away, but the rest is never below 12 h.
        let one_pm = now.after(Duration::from_secs(13 * 3600 + 10 * 60));
        let d = decide(Event::Failed(&f), &progress(1, true), &rules, one_pm);
        assert_eq!(d.cool, Some(Duration::from_secs(12 * 3600)));
        // A reset the upstream states wins, capped at 26 h.
        let stated = asking(FailureCode::Quota, Duration::from_secs(7 * 24 * 3600));
        let d = decide(Event::Failed(&stated), &progress(1, true), &rules, now);
        assert_eq!(d.cool, Some(rest::MAX_STATED_RESET));
    }

    #[test]
    fn a_pass_through_post_that_may_have_reached_the_upstream_is_never_sent_again() {
        let rules = Rules {
            retry: &RetryPolicy::default(),
            ordering: &Ordering::default(),
            housekeeping: false,
            zone: Zone::UTC,
        };
        let at = Progress {
            may_resend: false,
            ..progress(1, true)
        };
        let d = decide(
            Event::Failed(&fail(FailureCode::Transport)),
            &at,
            &rules,
            Now::system(),
        );
        assert_eq!(d.next, Next::Stop(Stop::Final));
    }
}

//! The retry budget, the shape of tower's and linkerd's: over
//! the last [`WINDOW_SECS`] seconds, in-place retries may be at most
//! `budget_ratio` of the calls plus `budget_min_per_s` a second. Past it a
//! retryable failure switches route instead of retrying, so a failing
//! upstream sees about `1 + ratio` times its normal load, not
//! `1 + max_retries` times.
//!
//! One budget per route: the calls that reached it and its retries, so a
//! dead route spends its own budget, not the one that lets a healthy
//! route retry a transient failure. A plain value counted
//! in one-second buckets on the monotonic clock the caller passes in, so a
//! test sets the time. Check and spend are two steps (the core decides,
//! the driver spends): two calls racing on the last token may both retry,
//! one retry over the budget at most per racing call.

use std::time::Instant;

/// Seconds of history the budget looks at (tower's and linkerd's 10 s).
pub const WINDOW_SECS: u64 = 10;

/// Calls and retries of one shim, in one-second buckets.
#[derive(Debug, Clone)]
pub struct RetryBudget {
    /// Bucket times are whole seconds since this instant.
    origin: Instant,
    /// `(second, calls, retries)`, one slot per second of the window.
    buckets: [(u64, u64, u64); WINDOW_SECS as usize],
}

impl RetryBudget {
    /// An empty budget whose clock starts at `origin`.
    pub fn new(origin: Instant) -> RetryBudget {
        RetryBudget {
            origin,
            buckets: [(u64::MAX, 0, 0); WINDOW_SECS as usize],
        }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    fn slot(&mut self, now: Instant) -> &mut (u64, u64, u64) {
        let second = self.second(now);
        let slot = &mut self.buckets[(second % WINDOW_SECS) as usize];
        if slot.0 != second {
            *slot = (second, 0, 0);
        }
        slot
    }

    /// A call started.
    pub fn deposit(&mut self, now: Instant) {
        self.slot(now).1 += 1;
    }

    /// An in-place retry is made.
    pub fn spend(&mut self, now: Instant) {
        self.slot(now).2 += 1;
    }

    /// `(calls, retries)` of the window ending at `now`.
    pub fn window(&self, now: Instant) -> (u64, u64) {
        let second = self.second(now);
        self.buckets
            .iter()
            .filter(|(s, _, _)| *s <= second && second - *s < WINDOW_SECS)
            .fold((0, 0), |(c, r), (_, calls, retries)| {
                (c + calls, r + retries)
            })
    }

    /// Whether one more in-place retry is within the budget at `now`.
    pub fn allows(&self, ratio: f64, min_per_s: u32, now: Instant) -> bool {
        let (calls, retries) = self.window(now);
        let allowed = ratio * calls as f64 + f64::from(min_per_s) * WINDOW_SECS as f64;
        (retries as f64) < allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn secs(n: f64) -> Duration {
        Duration::from_secs_f64(n)
    }

    #[test]
    fn retries_are_a_share_of_the_calls_of_the_window() {
        let t = Instant::now();
        let mut b = RetryBudget::new(t);
        assert!(!b.allows(0.2, 0, t), "no calls, no floor: no retry");
        for _ in 0..10 {
            b.deposit(t);
        }
        assert!(b.allows(0.2, 0, t));
        b.spend(t);
        assert!(b.allows(0.2, 0, t));
        b.spend(t);
        assert!(!b.allows(0.2, 0, t), "2 retries are 20 % of 10 calls");
        assert_eq!(b.window(t), (10, 2));
    }

    #[test]
    fn the_floor_allows_min_per_s_retries_a_second_over_the_window() {
        let t = Instant::now();
        let mut b = RetryBudget::new(t);
        for _ in 0..30 {
            assert!(b.allows(0.2, 3, t));
            b.spend(t);
        }
        assert!(!b.allows(0.2, 3, t), "3 a second over 10 s is 30");
        b.deposit(t);
        for _ in 0..4 {
            b.deposit(t);
        }
        assert!(b.allows(0.2, 3, t), "five calls buy one more");
    }

    #[test]
    fn calls_and_retries_older_than_the_window_are_forgotten() {
        let t = Instant::now();
        let mut b = RetryBudget::new(t);
        for _ in 0..10 {
            b.deposit(t);
        }
        b.spend(t);
        b.spend(t);
        assert!(!b.allows(0.2, 0, t + secs(9.9)));
        assert_eq!(b.window(t + secs(10.0)), (0, 0));
        b.deposit(t + secs(10.5));
        assert_eq!(b.window(t + secs(10.5)), (1, 0));
        assert_eq!(b.window(t + secs(19.9)), (1, 0));
        assert_eq!(b.window(t + secs(20.6)), (0, 0));
    }

    #[test]
    fn a_retry_that_arrives_out_of_order_never_panics_or_counts_twice() {
        let t = Instant::now() + secs(5.0);
        let mut b = RetryBudget::new(t);
        // A time before the origin reads as second 0.
        b.deposit(t - secs(1.0));
        b.deposit(t);
        assert_eq!(b.window(t), (2, 0));
    }
}

//! The order the next call tries a shim's routes in, and why:
//! a pure function of what the chain knows of each route (disabled, its
//! cooldown, its breaker, its measured record), the mode and the pin.
//!
//! The score of `measured` mode, as `docs/failover.md` states it:
//!
//! ```text
//! successRate = (ok + 1) / (tries + 2)            over the live samples
//! speedFactor = 1 / (1 + ttftMedianMs / 2000)     1 when no TTFT is known
//! score       = successRate × speedFactor + (0.2 if the configured first route)
//! ```
//!
//! Live samples are the route's last 20 counted tries no older than
//! `ordering.measure_window_ms`. A route with fewer than 3 is on probation:
//! it keeps its configured place (too little evidence to move it, and the
//! way a demoted route whose record aged out gets tried again); the others
//! fill the remaining places by score, the configured order breaking ties.

use std::time::{Duration, SystemTime};

use crate::chain::window::Standing;
use crate::config::OrderingMode;

/// Tries a route needs in its window before its score moves it.
pub const MIN_SAMPLES: usize = 3;
/// Added to the configured first route's score: the user chose it, and
/// most failures are the channel's, not the choice's.
pub const FIRST_ROUTE_BONUS: f64 = 0.2;
/// The TTFT at which the speed factor is one half (2 s).
pub const SPEED_HALF_MS: f64 = 2000.0;

/// What the chain knows of one route when ordering.
#[derive(Debug, Clone, Copy, Default)]
pub struct View {
    pub disabled: bool,
    /// A live cooldown's end.
    pub cooling: Option<SystemTime>,
    pub breaker: BreakerView,
    /// Its record over the measure window.
    pub record: Record,
    /// Its standing against its `active_hours` / `until` (the user's rule:
    /// never ignored).
    pub window: Standing,
}

/// A breaker as the order sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BreakerView {
    #[default]
    Closed,
    /// Skipped until then (`None`: its one half-open call is running).
    Open(Option<SystemTime>),
    /// Half-open: the next call that reaches it probes.
    Probe,
}

/// A route's live samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    pub tries: usize,
    pub ok: usize,
    pub ttft_median: Option<Duration>,
}

/// A route's score and its inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub success_rate: f64,
    pub speed_factor: f64,
    pub score: f64,
}

/// The score of a route with `record`; `first` for the configured first.
pub fn score(record: &Record, first: bool) -> Score {
    let success_rate = (record.ok as f64 + 1.0) / (record.tries as f64 + 2.0);
    let speed_factor = record.ttft_median.map_or(1.0, |t| {
        1.0 / (1.0 + t.as_secs_f64() * 1000.0 / SPEED_HALF_MS)
    });
    let bonus = if first { FIRST_ROUTE_BONUS } else { 0.0 };
    Score {
        success_rate,
        speed_factor,
        score: success_rate * speed_factor + bonus,
    }
}

/// Why a route is where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Pinned,
    Ranked,
    Configured,
    Cooling,
    BreakerOpen,
    Disabled,
    /// Outside its `active_hours`; `until` = when its next window opens.
    OffHours,
    /// Past its `until` day.
    Expired,
}

impl Reason {
    /// The `/status` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Pinned => "pinned",
            Reason::Ranked => "ranked",
            Reason::Configured => "configured",
            Reason::Cooling => "cooling",
            Reason::BreakerOpen => "breaker-open",
            Reason::Disabled => "disabled",
            Reason::OffHours => "off-hours",
            Reason::Expired => "expired",
        }
    }

    /// Whether the route is left out of the call.
    pub fn skipped(self) -> bool {
        matches!(
            self,
            Reason::Cooling
                | Reason::BreakerOpen
                | Reason::Disabled
                | Reason::OffHours
                | Reason::Expired
        )
    }

    /// Whether the user's own rule leaves the route out (a hand disable, a
    /// window): never ignored, unlike a rest.
    pub fn by_the_user(self) -> bool {
        matches!(self, Reason::Disabled | Reason::OffHours | Reason::Expired)
    }
}

/// One route's place.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Placed {
    /// Its index in the configured list.
    pub index: usize,
    pub reason: Reason,
    /// When a skip ends (cooling, breaker open).
    pub until: Option<SystemTime>,
    /// Its score (measured mode).
    pub score: Option<f64>,
}

/// The order of one call: the routes to try first, then the skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Order {
    pub entries: Vec<Placed>,
    /// Every route not disabled was resting, so rests were ignored.
    pub ignored_rests: bool,
}

impl Order {
    /// The configured indices to try, in order.
    pub fn tried(&self) -> impl Iterator<Item = usize> + '_ {
        self.entries
            .iter()
            .filter(|p| !p.reason.skipped())
            .map(|p| p.index)
    }
}

/// Orders routes (`views` in configured order).
pub fn order(views: &[View], mode: OrderingMode, pinned: Option<usize>) -> Order {
    let skips = mode.skips_resting();
    let rest = |v: &View| -> Option<(Reason, Option<SystemTime>)> {
        if !skips {
            return None;
        }
        if let Some(until) = v.cooling {
            return Some((Reason::Cooling, Some(until)));
        }
        match v.breaker {
            BreakerView::Open(until) => Some((Reason::BreakerOpen, until)),
            BreakerView::Closed | BreakerView::Probe => None,
        }
    };
    let out = |v: &View| -> Option<(Reason, Option<SystemTime>)> {
        match v.window {
            _ if v.disabled => Some((Reason::Disabled, None)),
            Standing::Open => None,
            Standing::OffHours(next) => Some((Reason::OffHours, Some(next))),
            Standing::Expired(ended) => Some((Reason::Expired, Some(ended))),
        }
    };
    let live: Vec<usize> = (0..views.len())
        .filter(|&i| out(&views[i]).is_none())
        .collect();
    let mut tried: Vec<usize> = live
        .iter()
        .copied()
        .filter(|&i| rest(&views[i]).is_none())
        .collect();
    let ignored_rests = tried.is_empty() && !live.is_empty();
    if ignored_rests {
        tried = live.clone();
    }
    let scored =
        |i: usize| (mode == OrderingMode::Measured).then(|| score(&views[i].record, i == 0));
    let mut entries = place(views, &tried, mode);
    if let Some(pos) = pinned.and_then(|p| entries.iter().position(|e| e.index == p)) {
        let mut pin = entries.remove(pos);
        pin.reason = Reason::Pinned;
        entries.insert(0, pin);
    }
    for (i, v) in views.iter().enumerate() {
        if tried.contains(&i) {
            continue;
        }
        let (reason, until) = out(v)
            .or_else(|| rest(v))
            .unwrap_or((Reason::Configured, None));
        entries.push(Placed {
            index: i,
            reason,
            until,
            score: scored(i).map(|s| s.score),
        });
    }
    Order {
        entries,
        ignored_rests,
    }
}

/// The routes to try, in order: configured, or (measured) by score with
/// routes on probation kept in their configured place.
fn place(views: &[View], tried: &[usize], mode: OrderingMode) -> Vec<Placed> {
    if mode != OrderingMode::Measured {
        return tried
            .iter()
            .map(|&index| Placed {
                index,
                reason: Reason::Configured,
                until: None,
                score: None,
            })
            .collect();
    }
    let scores: Vec<f64> = tried
        .iter()
        .map(|&i| score(&views[i].record, i == 0).score)
        .collect();
    let on_probation = |k: usize| views[tried[k]].record.tries < MIN_SAMPLES;
    let mut ranked: Vec<usize> = (0..tried.len()).filter(|&k| !on_probation(k)).collect();
    // Stable: equal scores keep the configured order.
    ranked.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let mut ranked = ranked.into_iter();
    (0..tried.len())
        .filter_map(|slot| {
            let (k, reason) = if on_probation(slot) {
                (slot, Reason::Configured)
            } else {
                (ranked.next()?, Reason::Ranked)
            };
            Some(Placed {
                index: tried[k],
                reason,
                until: None,
                score: Some(scores[k]),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn rec(tries: usize, ok: usize, ttft_ms: Option<u64>) -> Record {
        Record {
            tries,
            ok,
            ttft_median: ttft_ms.map(Duration::from_millis),
        }
    }

    fn measured(records: &[Record]) -> Vec<View> {
        records
            .iter()
            .map(|r| View {
                record: *r,
                ..View::default()
            })
            .collect()
    }

    fn shape(o: &Order) -> Vec<(usize, &'static str)> {
        o.entries
            .iter()
            .map(|p| (p.index, p.reason.as_str()))
            .collect()
    }

    fn until(s: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn the_score_is_the_documented_formula() {
        let s = score(&rec(0, 0, None), false);
        assert_eq!((s.success_rate, s.speed_factor, s.score), (0.5, 1.0, 0.5));
        let s = score(&rec(8, 6, Some(2000)), true);
        assert!((s.success_rate - 0.7).abs() < 1e-12);
        assert!((s.speed_factor - 0.5).abs() < 1e-12);
        assert!((s.score - (0.35 + FIRST_ROUTE_BONUS)).abs() < 1e-12);
        let fast = score(&rec(20, 20, Some(200)), false);
        assert!((fast.success_rate - 21.0 / 22.0).abs() < 1e-12);
        assert!((fast.speed_factor - 1.0 / 1.1).abs() < 1e-12);
    }

    #[test]
    fn auto_and_manual_keep_the_configured_order() {
        let views = measured(&[rec(10, 0, None), rec(10, 10, Some(1))]);
        for mode in [OrderingMode::Auto, OrderingMode::Manual] {
            let o = order(&views, mode, None);
            assert_eq!(shape(&o), [(0, "configured"), (1, "configured")]);
            assert!(o.entries.iter().all(|p| p.score.is_none()));
        }
    }

    #[test]
    fn measured_puts_a_flaky_first_route_behind_a_reliable_one() {
        let views = measured(&[rec(6, 2, Some(60)), rec(6, 6, Some(5))]);
        let o = order(&views, OrderingMode::Measured, None);
        assert_eq!(shape(&o), [(1, "ranked"), (0, "ranked")]);
        assert!(o.entries[0].score > o.entries[1].score);
    }

    #[test]
    fn the_first_route_bonus_keeps_the_users_choice_on_a_small_difference() {
        // 0.8 + bonus against 0.875: the first route stays first.
        let views = measured(&[rec(8, 7, None), rec(6, 6, None)]);
        let o = order(&views, OrderingMode::Measured, None);
        assert_eq!(shape(&o), [(0, "ranked"), (1, "ranked")]);
        // A large difference outweighs it: 0.4 + 0.2 against 0.875.
        let views = measured(&[rec(8, 3, None), rec(6, 6, None)]);
        assert_eq!(
            shape(&order(&views, OrderingMode::Measured, None)),
            [(1, "ranked"), (0, "ranked")]
        );
    }

    #[test]
    fn speed_ranks_equally_reliable_routes() {
        let views = measured(&[
            rec(10, 10, Some(100)),
            rec(10, 10, Some(9000)),
            rec(10, 10, Some(3000)),
        ]);
        let o = order(&views, OrderingMode::Measured, None);
        assert_eq!(shape(&o), [(0, "ranked"), (2, "ranked"), (1, "ranked")]);
    }

    #[test]
    fn equal_scores_keep_the_configured_order() {
        let views = measured(&[rec(0, 0, None), rec(4, 4, None), rec(4, 4, None)]);
        let o = order(&views, OrderingMode::Measured, None);
        assert_eq!(shape(&o), [(0, "configured"), (1, "ranked"), (2, "ranked")]);
    }

    #[test]
    fn a_route_on_probation_keeps_its_configured_place() {
        // The first route's record aged out: it is tried first again, and
        // a never-tried backup stays behind the others.
        let views = measured(&[rec(2, 0, None), rec(10, 10, None), rec(0, 0, None)]);
        let o = order(&views, OrderingMode::Measured, None);
        assert_eq!(
            shape(&o),
            [(0, "configured"), (1, "ranked"), (2, "configured")]
        );
        // With three tries it is judged.
        let views = measured(&[rec(3, 0, None), rec(10, 10, None), rec(0, 0, None)]);
        let o = order(&views, OrderingMode::Measured, None);
        assert_eq!(shape(&o), [(1, "ranked"), (0, "ranked"), (2, "configured")]);
    }

    #[test]
    fn resting_and_disabled_routes_go_after_the_others_with_their_reason() {
        let views = vec![
            View {
                cooling: Some(until(100)),
                ..View::default()
            },
            View {
                disabled: true,
                ..View::default()
            },
            View {
                breaker: BreakerView::Open(Some(until(50))),
                ..View::default()
            },
            View::default(),
            View {
                breaker: BreakerView::Open(None),
                ..View::default()
            },
        ];
        for mode in [OrderingMode::Auto, OrderingMode::Measured] {
            let o = order(&views, mode, None);
            // Route 3 has no record: on probation, in its place.
            assert_eq!(
                shape(&o),
                [
                    (3, "configured"),
                    (0, "cooling"),
                    (1, "disabled"),
                    (2, "breaker-open"),
                    (4, "breaker-open")
                ]
            );
            assert_eq!(o.entries[1].until, Some(until(100)));
            assert_eq!(o.entries[3].until, Some(until(50)));
            assert_eq!(o.tried().collect::<Vec<_>>(), [3]);
            assert!(!o.ignored_rests);
        }
    }

    #[test]
    fn a_half_open_route_is_tried() {
        let views = vec![
            View {
                breaker: BreakerView::Probe,
                ..View::default()
            },
            View::default(),
        ];
        let o = order(&views, OrderingMode::Auto, None);
        assert_eq!(o.tried().collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn routes_out_of_their_window_are_never_tried_even_when_the_rest_rest() {
        let views = vec![
            View {
                window: Standing::OffHours(until(300)),
                ..View::default()
            },
            View {
                cooling: Some(until(100)),
                ..View::default()
            },
            View {
                window: Standing::Expired(until(10)),
                ..View::default()
            },
        ];
        for mode in [
            OrderingMode::Auto,
            OrderingMode::Manual,
            OrderingMode::Measured,
        ] {
            let o = order(&views, mode, Some(0));
            assert_eq!(
                o.tried().collect::<Vec<_>>(),
                [1],
                "{mode:?}: the cooling one, rests ignored"
            );
            let out: Vec<_> = o
                .entries
                .iter()
                .filter(|p| p.index != 1)
                .map(|p| (p.index, p.reason.as_str(), p.until))
                .collect();
            assert_eq!(
                out,
                [
                    (0, "off-hours", Some(until(300))),
                    (2, "expired", Some(until(10)))
                ]
            );
        }
        let all_out = vec![views[0], views[2]];
        let o = order(&all_out, OrderingMode::Auto, None);
        assert_eq!(
            o.tried().count(),
            0,
            "windows are not ignored when every route is out"
        );
        assert!(!o.ignored_rests);
    }

    #[test]
    fn manual_skips_only_disabled_routes() {
        let views = vec![
            View {
                cooling: Some(until(100)),
                ..View::default()
            },
            View {
                disabled: true,
                ..View::default()
            },
            View {
                breaker: BreakerView::Open(Some(until(50))),
                ..View::default()
            },
        ];
        let o = order(&views, OrderingMode::Manual, None);
        assert_eq!(
            shape(&o),
            [(0, "configured"), (2, "configured"), (1, "disabled")]
        );
    }

    #[test]
    fn when_every_route_rests_the_rests_are_ignored_but_not_a_disable() {
        let views = vec![
            View {
                cooling: Some(until(100)),
                ..View::default()
            },
            View {
                breaker: BreakerView::Open(Some(until(50))),
                ..View::default()
            },
            View {
                disabled: true,
                ..View::default()
            },
        ];
        let o = order(&views, OrderingMode::Auto, None);
        assert!(o.ignored_rests);
        assert_eq!(
            shape(&o),
            [(0, "configured"), (1, "configured"), (2, "disabled")]
        );
        let all_disabled = vec![
            View {
                disabled: true,
                ..View::default()
            };
            2
        ];
        let o = order(&all_disabled, OrderingMode::Auto, None);
        assert!(!o.ignored_rests);
        assert_eq!(o.tried().count(), 0);
    }

    #[test]
    fn a_pin_forces_the_head_unless_the_route_is_out() {
        let views = measured(&[rec(10, 10, None), rec(10, 0, None), rec(10, 5, None)]);
        let o = order(&views, OrderingMode::Measured, Some(1));
        assert_eq!(shape(&o), [(1, "pinned"), (0, "ranked"), (2, "ranked")]);
        let o = order(&views, OrderingMode::Auto, Some(2));
        assert_eq!(
            shape(&o),
            [(2, "pinned"), (0, "configured"), (1, "configured")]
        );
        let mut views = views;
        views[1].disabled = true;
        let o = order(&views, OrderingMode::Measured, Some(1));
        assert_eq!(shape(&o), [(0, "ranked"), (2, "ranked"), (1, "disabled")]);
    }

    #[test]
    fn measured_entries_carry_their_score_and_skipped_ones_too() {
        let mut views = measured(&[rec(4, 4, None), rec(4, 2, None)]);
        views[1].cooling = Some(until(9));
        let o = order(&views, OrderingMode::Measured, None);
        assert!(o.entries.iter().all(|p| p.score.is_some()));
    }
}

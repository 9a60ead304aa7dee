//! What the panel shows of a route beyond its counters (DESIGN §9): its
//! last state changes with cause and source (cooled, breaker opened /
//! half-open / closed, disabled / enabled / pinned / restored by hand),
//! what it did today (failures and tokens since midnight in the
//! `[ordering] zone`: the provider's day, as its quotas count), and its
//! output speed (tokens a second from the usage the upstream reports,
//! else content characters a second).
//!
//! Memory only: a restart starts a fresh history (the route state file
//! keeps what the chain acts on).

use std::collections::VecDeque;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use shimgate_shim_api::translate::Meter;

use crate::chain::rest::Zone;
use crate::chain::window;
use crate::clock::iso8601;

/// State changes kept per route.
pub const CHANGES_PER_ROUTE: usize = 12;
/// Output-speed samples kept per route (the median is shown).
pub const SPEED_SAMPLES: usize = 20;
/// A stream shorter than this says little of a route's speed (an answer
/// the upstream sent in one piece).
const MIN_SPEED_WINDOW: Duration = Duration::from_millis(20);

/// What changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Cooled,
    BreakerOpened,
    BreakerHalfOpen,
    BreakerClosed,
    Disabled,
    Enabled,
    Pinned,
    Unpinned,
    Restored,
    Reset,
}

impl ChangeKind {
    /// The `/status` spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Cooled => "cooled",
            ChangeKind::BreakerOpened => "breaker-opened",
            ChangeKind::BreakerHalfOpen => "breaker-half-open",
            ChangeKind::BreakerClosed => "breaker-closed",
            ChangeKind::Disabled => "disabled",
            ChangeKind::Enabled => "enabled",
            ChangeKind::Pinned => "pinned",
            ChangeKind::Unpinned => "unpinned",
            ChangeKind::Restored => "restored",
            ChangeKind::Reset => "reset",
        }
    }

    /// Whether a person did it (a hand control), not the chain.
    fn by_hand(self) -> bool {
        !matches!(
            self,
            ChangeKind::Cooled
                | ChangeKind::BreakerOpened
                | ChangeKind::BreakerHalfOpen
                | ChangeKind::BreakerClosed
        )
    }
}

/// One state change of a route.
#[derive(Debug, Clone)]
pub struct Change {
    pub at: SystemTime,
    pub kind: ChangeKind,
    /// What caused it (the failure, for a cooldown or a breaker).
    pub cause: Option<String>,
    /// Where a rest's length came from (`Retry-After`, a reset in the
    /// body, the configured rest).
    pub source: Option<&'static str>,
    /// When it ends (a cooldown) or the next probe is let through (an
    /// open breaker).
    pub until: Option<SystemTime>,
}

impl Change {
    /// A change with no cause, source or end.
    pub fn plain(kind: ChangeKind, at: SystemTime) -> Change {
        Change {
            at,
            kind,
            cause: None,
            source: None,
            until: None,
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "at": iso8601(self.at),
            "change": self.kind.as_str(),
            "byHand": self.kind.by_hand(),
            "cause": self.cause,
            "source": self.source,
            "until": self.until.map(iso8601),
        })
    }
}

/// One stream's speed.
#[derive(Debug, Clone, Copy)]
struct Speed {
    per_second: f64,
    /// From reported tokens (else content characters).
    tokens: bool,
}

/// A route's history.
#[derive(Debug, Default)]
pub struct History {
    changes: VecDeque<Change>,
    speeds: VecDeque<Speed>,
    today: Today,
}

/// What a route did since midnight in the `[ordering] zone`.
#[derive(Debug, Default, Clone, Copy)]
struct Today {
    /// The midnight the figures count from (`None`: nothing yet).
    since: Option<SystemTime>,
    /// The next midnight (kept, so the zone is read once a day, not at
    /// every answer).
    ends: Option<SystemTime>,
    failures: u64,
    /// Frames of this route's answers the shim could not read (dropped).
    unreadable_frames: u64,
    prompt_tokens: u64,
    completion_tokens: u64,
}

impl History {
    /// Records a change, newest last (at most [`CHANGES_PER_ROUTE`]).
    pub fn change(&mut self, change: Change) {
        if self.changes.len() == CHANGES_PER_ROUTE {
            self.changes.pop_front();
        }
        self.changes.push_back(change);
    }

    /// Today's figures at `now`, started afresh after midnight in `zone`
    /// (a zone changed by a reload takes effect at the next midnight).
    fn today(&mut self, now: SystemTime, zone: Zone) -> &mut Today {
        let current = match (self.today.since, self.today.ends) {
            (Some(since), Some(ends)) => since <= now && now < ends,
            _ => false,
        };
        if !current {
            let since = window::day_start(now, zone);
            // 26 h on is inside the next day, whatever daylight saving
            // does to this one (23 to 25 h).
            let ends = window::day_start(since + Duration::from_secs(26 * 3600), zone);
            self.today = Today {
                since: Some(since),
                ends: Some(ends),
                ..Today::default()
            };
        }
        &mut self.today
    }

    /// A failure that counts against the route.
    pub fn failed(&mut self, now: SystemTime, zone: Zone) {
        self.today(now, zone).failures += 1;
    }

    /// A stream ended: its tokens count for today, and its speed (over
    /// `streamed`, first content to end) is a sample.
    pub fn metered(&mut self, meter: Meter, streamed: Duration, now: SystemTime, zone: Zone) {
        let today = self.today(now, zone);
        today.unreadable_frames += meter.unreadable_frames;
        today.prompt_tokens += meter.prompt_tokens.unwrap_or(0);
        today.completion_tokens += meter.completion_tokens.unwrap_or(0);
        let (amount, tokens) = match meter.completion_tokens {
            Some(t) if t > 0 => (t, true),
            _ => (meter.content_chars, false),
        };
        if amount == 0 || streamed < MIN_SPEED_WINDOW {
            return;
        }
        if self.speeds.len() == SPEED_SAMPLES {
            self.speeds.pop_front();
        }
        self.speeds.push_back(Speed {
            per_second: amount as f64 / streamed.as_secs_f64(),
            tokens,
        });
    }

    /// Failures since midnight in `zone` (0 when the last was before it).
    pub fn failures_today(&mut self, now: SystemTime, zone: Zone) -> u64 {
        self.today(now, zone).failures
    }

    /// The `/status` members: `changes` (newest first), `today`,
    /// `outputSpeed` (the median of the samples in the unit most have).
    pub fn status(&mut self, now: SystemTime, zone: Zone) -> [(&'static str, Value); 3] {
        let today = *self.today(now, zone);
        let by_tokens = self.speeds.iter().filter(|s| s.tokens).count() * 2 >= self.speeds.len();
        let mut rates: Vec<f64> = self
            .speeds
            .iter()
            .filter(|s| s.tokens == by_tokens)
            .map(|s| s.per_second)
            .collect();
        rates.sort_by(f64::total_cmp);
        let median = match rates.len() {
            0 => None,
            n if n % 2 == 1 => Some(rates[n / 2]),
            n => Some((rates[n / 2 - 1] + rates[n / 2]) / 2.0),
        };
        [
            (
                "changes",
                self.changes.iter().rev().map(Change::to_json).collect(),
            ),
            (
                "today",
                json!({
                    "since": today.since.map(iso8601),
                    "failures": today.failures,
                    "unreadableFrames": today.unreadable_frames,
                    "promptTokens": today.prompt_tokens,
                    "completionTokens": today.completion_tokens,
                }),
            ),
            (
                "outputSpeed",
                json!({
                    "perSecond": median.map(|m| (m * 10.0).round() / 10.0),
                    "unit": if by_tokens { "tokens/s" } else { "chars/s" },
                    "samples": rates.len(),
                }),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(prompt: Option<u64>, completion: Option<u64>, bytes: u64) -> Meter {
        Meter {
            prompt_tokens: prompt,
            completion_tokens: completion,
            content_chars: bytes,
            ..Meter::default()
        }
    }

    #[test]
    fn the_speed_is_reported_tokens_a_second_else_content_chars() {
        let now = SystemTime::now();
        let mut h = History::default();
        h.metered(
            meter(Some(100), Some(50), 400),
            Duration::from_secs(2),
            now,
            Zone::UTC,
        );
        h.metered(
            meter(Some(100), Some(90), 400),
            Duration::from_secs(3),
            now,
            Zone::UTC,
        );
        let [_, today, speed] = h.status(now, Zone::UTC);
        assert_eq!(speed.1["unit"], "tokens/s");
        assert_eq!(speed.1["perSecond"], 27.5, "median of 25 and 30");
        assert_eq!(today.1["promptTokens"], 200);
        assert_eq!(today.1["completionTokens"], 140);
        let mut bytes = History::default();
        bytes.metered(
            meter(None, None, 1000),
            Duration::from_millis(500),
            now,
            Zone::UTC,
        );
        let [_, _, speed] = bytes.status(now, Zone::UTC);
        assert_eq!(
            (speed.1["unit"].clone(), speed.1["perSecond"].clone()),
            (json!("chars/s"), json!(2000.0))
        );
        let mut instant = History::default();
        instant.metered(
            meter(None, Some(10), 0),
            Duration::from_millis(1),
            now,
            Zone::UTC,
        );
        assert_eq!(
            instant.status(now, Zone::UTC)[2].1["samples"],
            0,
            "a one-piece answer is no sample"
        );
    }

    #[test]
    fn today_starts_afresh_after_local_midnight() {
        let now = SystemTime::now();
        let mut h = History::default();
        h.failed(now, Zone::LOCAL);
        h.failed(now, Zone::LOCAL);
        assert_eq!(h.failures_today(now, Zone::LOCAL), 2);
        let tomorrow = now + Duration::from_secs(86_400);
        assert_eq!(h.failures_today(tomorrow, Zone::LOCAL), 0);
    }

    /// Seed 003: the provider's day is Beijing's, whatever the host's zone.
    /// 2026-12-05 15:30 UTC is 23:30 in Shanghai: 45 minutes later is the
    /// next Shanghai day (16:00 UTC), though still the same UTC day.
    #[test]
    fn today_is_the_zones_day_not_the_hosts() {
        let shanghai = Zone::Named(chrono_tz::Tz::Asia__Shanghai);
        let at = |h: u64, m: u64| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_428_800 + h * 3600 + m * 60)
        };
        let mut h = History::default();
        h.failed(at(15, 30), shanghai);
        h.metered(
            meter(Some(7), Some(3), 10),
            Duration::from_secs(1),
            at(15, 59),
            shanghai,
        );
        let [_, today, _] = h.status(at(15, 59), shanghai);
        assert_eq!(today.1["since"], "2026-12-04T16:00:00.000Z");
        assert_eq!(
            (today.1["failures"].clone(), today.1["promptTokens"].clone()),
            (json!(1), json!(7))
        );
        assert_eq!(
            h.failures_today(at(16, 15), shanghai),
            0,
            "a new day in Shanghai"
        );
        let mut utc = History::default();
        utc.failed(at(15, 30), Zone::UTC);
        assert_eq!(
            utc.failures_today(at(16, 15), Zone::UTC),
            1,
            "the same day in UTC"
        );
    }

    #[test]
    fn changes_are_newest_first_and_bounded() {
        let now = SystemTime::now();
        let mut h = History::default();
        for i in 0..CHANGES_PER_ROUTE + 3 {
            let kind = if i % 2 == 0 {
                ChangeKind::Disabled
            } else {
                ChangeKind::Enabled
            };
            h.change(Change::plain(kind, now + Duration::from_secs(i as u64)));
        }
        let [changes, ..] = h.status(now, Zone::UTC);
        let list = changes.1.as_array().unwrap().clone();
        assert_eq!(list.len(), CHANGES_PER_ROUTE);
        assert_eq!(list[0]["change"], "disabled", "the 15th, newest");
        assert_eq!(list[0]["byHand"], true);
    }
}

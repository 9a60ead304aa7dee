//! Route windows (`docs/failover.md`): whether a route may be tried now,
//! by the local hours (`active_hours`) and the last local day (`until`)
//! the user gave it, and when its next window opens.
//!
//! Unlike a cooldown this is the user's rule: a route out of its window is
//! never tried, not even when every other route is out too (the call is
//! then answered `503 NO_ACTIVE_ROUTE`).
//!
//! Pure: the wall clock and the zone are inputs ([`Zone`]).

use std::time::SystemTime;

use chrono::{NaiveDate, NaiveDateTime, TimeDelta, Timelike as _};

use crate::clock::Zone;
use crate::config::Window;

/// Where a route stands against its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Standing {
    /// It may be tried.
    #[default]
    Open,
    /// Outside its hours; its next window opens then.
    OffHours(SystemTime),
    /// Past its last day; that day ended then.
    Expired(SystemTime),
}

/// Whether local hour `hour` is in `(from, to)` (both ends included,
/// `from > to` crossing midnight).
pub fn hour_in(hour: u8, (from, to): (u8, u8)) -> bool {
    if from <= to {
        (from..=to).contains(&hour)
    } else {
        hour >= from || hour <= to
    }
}

/// The route's standing at `now`.
pub fn standing(window: &Window, now: SystemTime, zone: Zone) -> Standing {
    let local = zone.wall(now);
    if let Some(last) = window.until {
        if local.date() > last {
            return Standing::Expired(day_end(last, zone));
        }
    }
    let open = |hour: u32| {
        window.hours.is_empty()
            || window
                .hours
                .iter()
                .any(|r| u8::try_from(hour).is_ok_and(|h| hour_in(h, *r)))
    };
    if open(local.hour()) {
        return Standing::Open;
    }
    // The next whole local hour that is open (one always is within a day:
    // every range names at least one hour).
    let hour_start = local
        .with_minute(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(local);
    let next = (1..=24)
        .map(|k| hour_start + TimeDelta::hours(k))
        .find(|t| open(t.hour()))
        .unwrap_or(hour_start + TimeDelta::days(1));
    let at = zone.instant(next);
    match window.until {
        Some(last) if zone.wall(at).date() > last => Standing::Expired(day_end(last, zone)),
        _ => Standing::OffHours(at),
    }
}

/// The local midnight that begins `day`.
fn midnight(day: NaiveDate) -> NaiveDateTime {
    day.and_time(chrono::NaiveTime::MIN)
}

/// The local midnight that ends `day`.
fn day_end(day: NaiveDate, zone: Zone) -> SystemTime {
    zone.instant(midnight(day) + TimeDelta::days(1))
}

/// The local midnight that began the day `now` is in (tokens and
/// failures "today" count from it).
pub fn day_start(now: SystemTime, zone: Zone) -> SystemTime {
    zone.instant(midnight(zone.wall(now).date()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::iso8601;
    use std::time::Duration;

    /// 2026-12-01T00:00:00Z.
    const DEC_1: u64 = 1_796_083_200;

    fn at(hh: u64, mm: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(DEC_1 + hh * 3600 + mm * 60)
    }

    fn window(hours: &[(u8, u8)], until: Option<&str>) -> Window {
        Window {
            hours: hours.to_vec(),
            until: until.map(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").unwrap()),
        }
    }

    /// Beijing time (UTC+8, no daylight saving), as the seeds' users live.
    const SHANGHAI: Zone = Zone::Named(chrono_tz::Tz::Asia__Shanghai);

    #[test]
    fn both_ends_of_a_range_are_included() {
        let r = (9, 12);
        assert!(!hour_in(8, r));
        assert!(hour_in(9, r) && hour_in(12, r));
        assert!(!hour_in(13, r));
        assert!(hour_in(7, (7, 7)) && !hour_in(8, (7, 7)));
    }

    #[test]
    fn a_range_from_a_later_hour_crosses_midnight() {
        let r = (22, 6);
        for h in [22, 23, 0, 3, 6] {
            assert!(hour_in(h, r), "{h}");
        }
        for h in [7, 12, 21] {
            assert!(!hour_in(h, r), "{h}");
        }
    }

    #[test]
    fn no_hours_means_all_day() {
        for h in [0, 11, 23] {
            assert_eq!(
                standing(&window(&[], None), at(h, 30), Zone::UTC),
                Standing::Open
            );
        }
    }

    #[test]
    fn off_hours_say_when_the_next_window_opens_in_local_time() {
        let w = window(&[(22, 6), (9, 12)], None);
        // 12:59 is in, 13:00 is out until 22:00.
        assert_eq!(standing(&w, at(12, 59), Zone::UTC), Standing::Open);
        let Standing::OffHours(next) = standing(&w, at(13, 0), Zone::UTC) else {
            panic!("out at 13:00");
        };
        assert_eq!(iso8601(next), "2026-12-01T22:00:00.000Z");
        // 07:10 is out until 09:00.
        let Standing::OffHours(next) = standing(&w, at(7, 10), Zone::UTC) else {
            panic!("out at 07:10");
        };
        assert_eq!(iso8601(next), "2026-12-01T09:00:00.000Z");
        // In Shanghai 05:00Z is 13:00 local: out until 22:00 local = 14:00Z.
        let Standing::OffHours(next) = standing(&w, at(5, 0), SHANGHAI) else {
            panic!("out at 13:00 local");
        };
        assert_eq!(iso8601(next), "2026-12-01T14:00:00.000Z");
    }

    #[test]
    fn until_is_the_last_local_day_it_may_be_tried() {
        let w = window(&[], Some("2026-12-01"));
        assert_eq!(standing(&w, at(23, 59), Zone::UTC), Standing::Open);
        let Standing::Expired(end) = standing(&w, at(24, 0), Zone::UTC) else {
            panic!("expired on the 2nd");
        };
        assert_eq!(iso8601(end), "2026-12-02T00:00:00.000Z");
        // 17:00Z on the 1st is already the 2nd in Shanghai.
        assert!(matches!(
            standing(&w, at(17, 0), SHANGHAI),
            Standing::Expired(_)
        ));
        assert_eq!(standing(&w, at(15, 0), SHANGHAI), Standing::Open);
    }

    #[test]
    fn a_window_that_would_open_after_the_last_day_is_expired() {
        let w = window(&[(9, 12)], Some("2026-12-01"));
        assert!(matches!(
            standing(&w, at(13, 0), Zone::UTC),
            Standing::Expired(_)
        ));
        assert!(matches!(
            standing(&w, at(8, 0), Zone::UTC),
            Standing::OffHours(_)
        ));
    }

    #[test]
    fn the_day_starts_at_local_midnight() {
        assert_eq!(
            iso8601(day_start(at(13, 5), Zone::UTC)),
            "2026-12-01T00:00:00.000Z"
        );
        assert_eq!(
            iso8601(day_start(at(13, 5), SHANGHAI)),
            "2026-11-30T16:00:00.000Z"
        );
        assert_eq!(
            iso8601(day_start(at(17, 0), SHANGHAI)),
            "2026-12-01T16:00:00.000Z"
        );
    }
}

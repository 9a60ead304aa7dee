//! How long a route rests after a quota failure (DESIGN §5): until the
//! reset the upstream states, capped at 26 h (a provider hint of "days"
//! would keep a recovered route out for days); else
//! `ordering.quota_cooldown_ms`, and with `ordering.quota_cooldown_hour`
//! until the next time the local clock shows that hour, never less than
//! the configured rest (a wall hit at 23:50 with a 12 h rest and hour 0
//! comes back at 11:50 the next day, not at midnight).
//!
//! Pure: the wall clock and the zone are inputs ([`Zone`] maps an instant
//! to its UTC offset, so tests pin it and daylight saving is honoured at
//! the hour the rest ends, not only at the hour it starts).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::config::Ordering;

/// The longest reset an upstream may state (26 h: a day plus slack for
/// a daily quota that resets at a zone boundary).
pub const MAX_STATED_RESET: Duration = Duration::from_secs(26 * 3600);

const DAY_MS: i64 = 86_400_000;

/// The local zone as a function from an instant to its offset from UTC in
/// seconds.
#[derive(Clone, Copy)]
pub struct Zone(pub fn(SystemTime) -> i32);

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Zone")
    }
}

impl Zone {
    /// The system's zone as `TZ` (else `/etc/localtime`) says.
    pub const LOCAL: Zone = Zone(local_offset);

    /// UTC.
    pub const UTC: Zone = Zone(|_| 0);
}

fn local_offset(t: SystemTime) -> i32 {
    use chrono::Offset as _;
    let local: chrono::DateTime<chrono::Local> = t.into();
    local.offset().fix().local_minus_utc()
}

/// The rest after a quota failure at `now`, `stated` being the reset the
/// upstream named, if any.
pub fn quota_rest(
    stated: Option<Duration>,
    ordering: &Ordering,
    zone: Zone,
    now: SystemTime,
) -> Duration {
    if let Some(reset) = stated {
        return reset.min(MAX_STATED_RESET);
    }
    let rest = ordering.quota_cooldown;
    match ordering.quota_cooldown_hour {
        Some(hour) => {
            let to_hour = next_local_hour(now, hour, zone)
                .duration_since(now)
                .unwrap_or_default();
            rest.max(to_hour)
        }
        None => rest,
    }
}

/// The first instant after `now` at which the local clock reads `hour`:00.
pub fn next_local_hour(now: SystemTime, hour: u8, zone: Zone) -> SystemTime {
    let now_ms = epoch_ms(now);
    let local = now_ms + i64::from(zone.0(now)) * 1000;
    let mut candidate = local.div_euclid(DAY_MS) * DAY_MS + i64::from(hour) * 3_600_000;
    if candidate <= local {
        candidate += DAY_MS;
    }
    // The offset at the target may differ from now's (daylight saving).
    let guess = candidate - i64::from(zone.0(now)) * 1000;
    let offset_then = i64::from(zone.0(from_epoch_ms(guess))) * 1000;
    let at = (candidate - offset_then).max(now_ms + 1);
    from_epoch_ms(at)
}

fn epoch_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i64,
        Err(e) => -(e.duration().as_millis() as i64),
    }
}

fn from_epoch_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::iso8601;

    /// 2026-12-01T00:00:00Z.
    const DEC_1: u64 = 1_796_083_200;

    fn at(hh: u64, mm: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(DEC_1 + hh * 3600 + mm * 60)
    }

    fn hours(h: u64) -> Duration {
        Duration::from_secs(h * 3600)
    }

    fn ordering(rest: Duration, hour: Option<u8>) -> Ordering {
        Ordering {
            quota_cooldown: rest,
            quota_cooldown_hour: hour,
            ..Ordering::default()
        }
    }

    const PLUS_8: Zone = Zone(|_| 8 * 3600);

    #[test]
    fn a_wall_at_23_50_with_a_12_h_rest_comes_back_at_11_50_not_midnight() {
        let o = ordering(hours(12), Some(0));
        let rest = quota_rest(None, &o, Zone::UTC, at(23, 50));
        assert_eq!(rest, hours(12));
        assert_eq!(iso8601(at(23, 50) + rest), "2026-12-02T11:50:00.000Z");
    }

    #[test]
    fn a_short_rest_waits_for_the_next_occurrence_of_the_hour() {
        let o = ordering(Duration::from_secs(600), Some(4));
        let rest = quota_rest(None, &o, Zone::UTC, at(1, 0));
        assert_eq!(rest, hours(3));
        // Past today's 04:00: tomorrow's.
        let rest = quota_rest(None, &o, Zone::UTC, at(4, 0));
        assert_eq!(rest, hours(24));
        let rest = quota_rest(None, &o, Zone::UTC, at(0, 5));
        assert_eq!(iso8601(at(0, 5) + rest), "2026-12-01T04:00:00.000Z");
    }

    #[test]
    fn the_hour_is_local_time() {
        let o = ordering(Duration::from_secs(60), Some(0));
        // 10:00Z is 18:00 at +08:00; local midnight is 16:00Z.
        let rest = quota_rest(None, &o, PLUS_8, at(10, 0));
        assert_eq!(iso8601(at(10, 0) + rest), "2026-12-01T16:00:00.000Z");
        // 17:00Z is already 01:00 the next day locally: the next local
        // midnight is 16:00Z the day after.
        let rest = quota_rest(None, &o, PLUS_8, at(17, 0));
        assert_eq!(iso8601(at(17, 0) + rest), "2026-12-02T16:00:00.000Z");
        let minus_5 = Zone(|_| -5 * 3600);
        let rest = quota_rest(None, &o, minus_5, at(3, 0));
        assert_eq!(iso8601(at(3, 0) + rest), "2026-12-01T05:00:00.000Z");
    }

    #[test]
    fn the_offset_at_the_end_of_the_rest_counts() {
        // A zone at +01:00 that moves to +02:00 at 12:00Z on Dec 1.
        let shifting = Zone(|t| {
            if t < UNIX_EPOCH + Duration::from_secs(DEC_1 + 12 * 3600) {
                3600
            } else {
                7200
            }
        });
        let next = next_local_hour(at(1, 0), 0, shifting);
        // Local midnight at +02:00 is 22:00Z.
        assert_eq!(iso8601(next), "2026-12-01T22:00:00.000Z");
    }

    #[test]
    fn without_an_hour_the_configured_rest_applies() {
        let o = ordering(hours(12), None);
        assert_eq!(quota_rest(None, &o, PLUS_8, at(23, 50)), hours(12));
    }

    #[test]
    fn a_stated_reset_wins_and_is_capped_at_26_hours() {
        let o = ordering(hours(12), Some(0));
        let stated = Some(Duration::from_secs(90));
        assert_eq!(
            quota_rest(stated, &o, Zone::UTC, at(1, 0)),
            Duration::from_secs(90)
        );
        let days = Some(hours(24 * 6));
        assert_eq!(quota_rest(days, &o, Zone::UTC, at(1, 0)), hours(26));
        assert_eq!(MAX_STATED_RESET, hours(26));
    }

    #[test]
    fn the_local_zone_reads_tz() {
        // Whatever the machine's zone, the offset is within a day.
        let off = local_offset(SystemTime::now());
        assert!(off.abs() < 86_400);
    }
}

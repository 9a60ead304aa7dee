//! How long a route rests after a quota failure: until the
//! reset the upstream states, capped at 26 h (a provider hint of "days"
//! would keep a recovered route out for days); else
//! `ordering.quota_cooldown_ms`, and with `ordering.quota_cooldown_hour`
//! until the next time the local clock shows that hour, never less than
//! the configured rest (a wall hit at 23:50 with a 12 h rest and hour 0
//! comes back at 11:50 the next day, not at midnight).
//!
//! Pure: the wall clock and the zone are inputs ([`Zone`] reads an instant
//! as the local clock does and back, so tests pin it and daylight saving
//! is honoured at the hour the rest ends, not only at the hour it starts).

use std::time::{Duration, SystemTime};

use chrono::{NaiveDateTime, NaiveTime, TimeDelta};

use crate::clock::Zone;
use crate::config::Ordering;

/// The longest reset an upstream may state (26 h: a day plus slack for
/// a daily quota that resets at a zone boundary).
pub const MAX_STATED_RESET: Duration = Duration::from_secs(26 * 3600);

/// A reset an upstream states as a wall time without an offset ("将在
/// 2025-12-09 18:08:11 重置", "resets at 2026-12-06 00:00:00"), read in
/// `zone`: how long from `now` until then. A time in the past or more
/// than [`MAX_STATED_RESET`] ahead is ignored (`None`), as is one written
/// with an offset or `Z` (those are read where they are parsed).
pub fn stated_wall_reset(text: &str, zone: Zone, now: SystemTime) -> Option<Duration> {
    let b = text.as_bytes();
    let mut latest: Option<Duration> = None;
    let mut i = 0;
    while i + 19 <= b.len() {
        if let Some((wall, end)) = wall_time_at(b, i) {
            let followed = b.get(end).copied();
            let has_offset = matches!(followed, Some(b'Z' | b'z' | b'+' | b'.'))
                || (followed == Some(b'-') && b.get(end + 1).is_some_and(u8::is_ascii_digit));
            if !has_offset {
                let at = zone.instant(wall);
                let ahead = at
                    .duration_since(now)
                    .ok()
                    .filter(|d| !d.is_zero() && *d <= MAX_STATED_RESET);
                if let Some(d) = ahead {
                    latest = Some(latest.map_or(d, |l| l.max(d)));
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    latest
}

/// `YYYY-MM-DD HH:MM:SS` (or with `T`) at `i`: the wall time, and where
/// it ends.
fn wall_time_at(b: &[u8], i: usize) -> Option<(NaiveDateTime, usize)> {
    let s = std::str::from_utf8(b.get(i..i + 19)?).ok()?;
    // chrono skips leading spaces and takes one-digit fields: insist on
    // the exact shape.
    let shape = s.bytes().enumerate().all(|(k, c)| match k {
        4 | 7 => c == b'-',
        10 => c == b' ' || c == b'T',
        13 | 16 => c == b':',
        _ => c.is_ascii_digit(),
    });
    if !shape || (i > 0 && b[i - 1].is_ascii_digit()) {
        return None;
    }
    let naive = chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S"))
        .ok()?;
    Some((naive, i + 19))
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
    let local = zone.wall(now);
    let time = NaiveTime::from_hms_opt(u32::from(hour), 0, 0).unwrap_or(NaiveTime::MIN);
    let mut candidate = local.date().and_time(time);
    if candidate <= local {
        candidate += TimeDelta::days(1);
    }
    // Mapped back with the offset in force then (daylight saving), and
    // never now itself.
    zone.instant(candidate).max(now + Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::iso8601;
    use std::time::UNIX_EPOCH;

    /// 2026-12-01T00:00:00Z.
    const DEC_1: u64 = 1_796_083_200;

    fn at(hh: u64, mm: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(DEC_1 + hh * 3600 + mm * 60)
    }

    fn zone(name: &str) -> Zone {
        Zone::named(name).unwrap()
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
        let plus_8 = zone("Asia/Shanghai");
        let rest = quota_rest(None, &o, plus_8, at(10, 0));
        assert_eq!(iso8601(at(10, 0) + rest), "2026-12-01T16:00:00.000Z");
        // 17:00Z is already 01:00 the next day locally: the next local
        // midnight is 16:00Z the day after.
        let rest = quota_rest(None, &o, plus_8, at(17, 0));
        assert_eq!(iso8601(at(17, 0) + rest), "2026-12-02T16:00:00.000Z");
        // Etc/GMT+5 is five hours behind UTC (POSIX sign).
        let minus_5 = zone("Etc/GMT+5");
        let rest = quota_rest(None, &o, minus_5, at(3, 0));
        assert_eq!(iso8601(at(3, 0) + rest), "2026-12-01T05:00:00.000Z");
    }

    #[test]
    fn the_offset_at_the_end_of_the_rest_counts() {
        // Berlin moves from +01:00 to +02:00 at 01:00Z on 2026-03-29:
        // from 00:30Z (01:30 local), local noon is 10:00Z, not 11:00Z.
        let now = humantime::parse_rfc3339("2026-03-29T00:30:00Z").unwrap();
        let next = next_local_hour(now, 12, zone("Europe/Berlin"));
        assert_eq!(iso8601(next), "2026-03-29T10:00:00.000Z");
        // The hour the clock skips comes when it jumps past it.
        let next = next_local_hour(now, 2, zone("Europe/Berlin"));
        assert_eq!(iso8601(next), "2026-03-29T01:00:00.000Z");
    }

    #[test]
    fn without_an_hour_the_configured_rest_applies() {
        let o = ordering(hours(12), None);
        let plus_8 = zone("Asia/Shanghai");
        assert_eq!(quota_rest(None, &o, plus_8, at(23, 50)), hours(12));
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

    /// Beijing time whatever the host's zone: the tests run with the
    /// process in any zone (CI's is UTC) and name the zone in the config.
    fn shanghai() -> Zone {
        let c = crate::config::Config::from_toml("[ordering]\nzone = \"Asia/Shanghai\"\n").unwrap();
        assert_eq!(c.ordering.zone.name(), "Asia/Shanghai");
        c.ordering.zone
    }

    #[test]
    fn the_quota_hour_is_beijing_midnight_with_zone_asia_shanghai() {
        let o = ordering(Duration::from_secs(60), Some(0));
        // 10:00Z is 18:00 in Beijing; its midnight is 16:00Z.
        let rest = quota_rest(None, &o, shanghai(), at(10, 0));
        assert_eq!(iso8601(at(10, 0) + rest), "2026-12-01T16:00:00.000Z");
        assert_eq!(shanghai().offset(at(10, 0)), 8 * 3600);
    }

    #[test]
    fn a_stated_wall_time_is_read_in_the_zone() {
        let zone = shanghai();
        // 09:00Z is 17:00 in Beijing: the reset at 18:08:11 is 1 h 8 min 11 s on.
        let glm = "{\"error\":{\"code\":\"1308\",\"message\":\"已达到每日使用上限，您的限额将在 2026-12-01 18:08:11 重置\"}}";
        assert_eq!(
            stated_wall_reset(glm, zone, at(9, 0)),
            Some(Duration::from_secs(3600 + 8 * 60 + 11))
        );
        let en = "quota exceeded; resets at 2026-12-02 00:00:00";
        assert_eq!(stated_wall_reset(en, zone, at(9, 0)), Some(hours(7)));
        // Read in UTC it would be 15 h: the zone is what counts.
        assert_eq!(stated_wall_reset(en, Zone::UTC, at(9, 0)), Some(hours(15)));
        // Past, more than 26 h ahead, or with an offset: ignored.
        assert_eq!(stated_wall_reset(glm, zone, at(11, 0)), None);
        let far = "resets at 2026-12-03 12:00:00";
        assert_eq!(stated_wall_reset(far, zone, at(9, 0)), None);
        let utc = "resets at 2026-12-01T18:00:00Z";
        assert_eq!(stated_wall_reset(utc, zone, at(9, 0)), None);
        assert_eq!(
            stated_wall_reset("no time here 2026-13-01", zone, at(9, 0)),
            None
        );
    }

    #[test]
    fn a_bad_zone_name_is_refused_with_its_key() {
        let e = crate::config::Config::from_toml("[ordering]\nzone = \"Mars/Olympus\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("ordering.zone: \"Mars/Olympus\" is not an IANA zone"),
            "{e}"
        );
    }
}

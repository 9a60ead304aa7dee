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

/// The zone of the quota hour and route windows (`[ordering] zone`): maps
/// an instant to its offset from UTC in seconds.
#[derive(Clone, Copy)]
pub enum Zone {
    /// The system's zone as `TZ` (else `/etc/localtime`) says.
    Local,
    /// An IANA zone (`Asia/Shanghai`), whatever the host's.
    Named(chrono_tz::Tz),
    /// Offsets as a function says (tests).
    Offsets(fn(SystemTime) -> i32),
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        match (self, other) {
            (Zone::Local, Zone::Local) => true,
            (Zone::Named(a), Zone::Named(b)) => a == b,
            (Zone::Offsets(a), Zone::Offsets(b)) => std::ptr::fn_addr_eq(*a, *b),
            _ => false,
        }
    }
}

impl Zone {
    /// The system's zone.
    pub const LOCAL: Zone = Zone::Local;

    /// UTC.
    pub const UTC: Zone = Zone::Named(chrono_tz::Tz::UTC);

    /// An IANA name (`Asia/Shanghai`).
    pub fn named(name: &str) -> Option<Zone> {
        name.trim().parse::<chrono_tz::Tz>().ok().map(Zone::Named)
    }

    /// `"local"`, the IANA name, or `"fixed"`.
    pub fn name(&self) -> &'static str {
        match self {
            Zone::Local => "local",
            Zone::Named(tz) => tz.name(),
            Zone::Offsets(_) => "fixed",
        }
    }

    /// The offset from UTC at `t`, in seconds.
    pub fn offset(&self, t: SystemTime) -> i32 {
        match self {
            Zone::Local => local_offset(t),
            Zone::Named(tz) => {
                use chrono::{Offset as _, TimeZone as _};
                let utc: chrono::DateTime<chrono::Utc> = t.into();
                tz.offset_from_utc_datetime(&utc.naive_utc())
                    .fix()
                    .local_minus_utc()
            }
            Zone::Offsets(f) => f(t),
        }
    }
}

fn local_offset(t: SystemTime) -> i32 {
    use chrono::Offset as _;
    let local: chrono::DateTime<chrono::Local> = t.into();
    local.offset().fix().local_minus_utc()
}

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
        if let Some((local_ms, end)) = wall_time_at(b, i) {
            let followed = b.get(end).copied();
            let has_offset = matches!(followed, Some(b'Z' | b'z' | b'+' | b'.'))
                || (followed == Some(b'-') && b.get(end + 1).is_some_and(u8::is_ascii_digit));
            if !has_offset {
                let guess = from_epoch_ms(local_ms);
                let at = from_epoch_ms(local_ms - i64::from(zone.offset(guess)) * 1000);
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

/// `YYYY-MM-DD HH:MM:SS` (or with `T`) at `i`: the wall time as
/// milliseconds since the epoch read as UTC, and where it ends.
fn wall_time_at(b: &[u8], i: usize) -> Option<(i64, usize)> {
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
    Some((naive.and_utc().timestamp_millis(), i + 19))
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
    let local = now_ms + i64::from(zone.offset(now)) * 1000;
    let mut candidate = local.div_euclid(DAY_MS) * DAY_MS + i64::from(hour) * 3_600_000;
    if candidate <= local {
        candidate += DAY_MS;
    }
    // The offset at the target may differ from now's (daylight saving).
    let guess = candidate - i64::from(zone.offset(now)) * 1000;
    let offset_then = i64::from(zone.offset(from_epoch_ms(guess))) * 1000;
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

    const PLUS_8: Zone = Zone::Offsets(|_| 8 * 3600);

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
        let minus_5 = Zone::Offsets(|_| -5 * 3600);
        let rest = quota_rest(None, &o, minus_5, at(3, 0));
        assert_eq!(iso8601(at(3, 0) + rest), "2026-12-01T05:00:00.000Z");
    }

    #[test]
    fn the_offset_at_the_end_of_the_rest_counts() {
        // A zone at +01:00 that moves to +02:00 at 12:00Z on Dec 1.
        let shifting = Zone::Offsets(|t| {
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

    #[test]
    fn the_local_zone_reads_tz() {
        // Whatever the machine's zone, the offset is within a day.
        let off = local_offset(SystemTime::now());
        assert!(off.abs() < 86_400);
    }
}

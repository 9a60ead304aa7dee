//! Time as shimgate reads it, in one place: the two clocks a decision is
//! made at ([`Now`]), the zone that local hours and days are read in
//! ([`Zone`], `[ordering] zone`), and the stamps `/status` shows (RFC 3339
//! UTC with milliseconds, epoch milliseconds), named once so every field
//! (`until`, `lastErrorAt`, `at`, …) has the same shape. The calendar is
//! chrono's and chrono-tz's (the IANA database compiled in, so a named
//! zone works on Windows, which has none); nothing here counts days by
//! hand.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, LocalResult, NaiveDateTime, Offset as _, TimeZone, Utc};

/// The last instant `humantime` formats (`9999-12-31T23:59:59.999Z`): it
/// panics before the epoch and errs from year 10000 on, so stamps are
/// clamped into its range (a cooldown's `until` can be far away).
const LATEST: Duration = Duration::from_millis(253_402_300_799_999);

/// Milliseconds since the epoch (0 before it).
pub fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `2026-11-29T15:05:32.123Z`, clamped to years 1970–9999.
pub fn iso8601(t: SystemTime) -> String {
    let t = t.clamp(UNIX_EPOCH, UNIX_EPOCH + LATEST);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The clock a decision is made at, both faces: durations and deadlines
/// run on the monotonic one, what the user reads (a cooldown's end, a
/// quota reset at a local hour) on the wall one. Passed in, so a test can
/// pin both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub mono: Instant,
    pub wall: SystemTime,
}

impl Now {
    /// The system clocks, read once.
    pub fn system() -> Now {
        Now {
            mono: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    /// This clock moved on by `by` (both faces).
    pub fn after(self, by: Duration) -> Now {
        Now {
            mono: self.mono + by,
            wall: self.wall + by,
        }
    }
}

/// The zone of the quota hour, route windows and "today" (`[ordering]
/// zone`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Zone {
    /// The system's zone as `TZ` (else `/etc/localtime`, or Windows' own
    /// setting) says.
    Local,
    /// An IANA zone (`Asia/Shanghai`), whatever the host's.
    Named(chrono_tz::Tz),
}

impl std::fmt::Debug for Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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

    /// `"local"` or the IANA name.
    pub fn name(&self) -> &'static str {
        match self {
            Zone::Local => "local",
            Zone::Named(tz) => tz.name(),
        }
    }

    /// The offset from UTC at `t`, in seconds.
    pub fn offset(&self, t: SystemTime) -> i32 {
        let utc: DateTime<Utc> = t.into();
        match self {
            Zone::Local => utc.with_timezone(&chrono::Local).offset().fix(),
            Zone::Named(tz) => utc.with_timezone(tz).offset().fix(),
        }
        .local_minus_utc()
    }

    /// What the local clock reads at `t`.
    pub fn wall(&self, t: SystemTime) -> NaiveDateTime {
        let utc: DateTime<Utc> = t.into();
        match self {
            Zone::Local => utc.with_timezone(&chrono::Local).naive_local(),
            Zone::Named(tz) => utc.with_timezone(tz).naive_local(),
        }
    }

    /// The first instant the local clock reads `wall`. A time the clock
    /// skips (02:30 on the night daylight saving starts) is the instant it
    /// jumps past it; one it reads twice (the night it ends), the first.
    pub fn instant(&self, wall: NaiveDateTime) -> SystemTime {
        let utc = match self {
            Zone::Local => first(&chrono::Local, wall),
            Zone::Named(tz) => first(tz, wall),
        };
        utc.into()
    }
}

fn first<T: TimeZone>(tz: &T, wall: NaiveDateTime) -> DateTime<Utc> {
    match tz.from_local_datetime(&wall) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => t.with_timezone(&Utc),
        // In a gap: read with the offset in force before it, which lands
        // as far past the jump as `wall` is past the gap's start.
        LocalResult::None => {
            let before = wall - chrono::TimeDelta::days(1);
            let offset = tz
                .offset_from_local_datetime(&before)
                .earliest()
                .map_or(0, |o| i64::from(o.fix().local_minus_utc()));
            (wall - chrono::TimeDelta::seconds(offset)).and_utc()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_795_961_353_876);
        assert_eq!(iso8601(t), "2026-11-29T14:09:13.876Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(&iso8601(leap)[..10], "2000-02-29");
    }

    #[test]
    fn instants_outside_the_formatters_range_are_clamped_not_panics() {
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(iso8601(before), "1970-01-01T00:00:00.000Z");
        assert_eq!(epoch_ms(before), 0);
        let far = UNIX_EPOCH + Duration::from_secs(400_000_000_000);
        assert_eq!(iso8601(far), "9999-12-31T23:59:59.999Z");
    }

    fn wall(text: &str) -> NaiveDateTime {
        NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M").unwrap()
    }

    fn at(text: &str) -> SystemTime {
        humantime::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn a_named_zone_reads_and_maps_back_its_wall_time() {
        let shanghai = Zone::named("Asia/Shanghai").unwrap();
        let t = at("2026-12-01T10:00:00Z");
        assert_eq!(shanghai.wall(t), wall("2026-12-01 18:00"));
        assert_eq!(shanghai.instant(wall("2026-12-01 18:00")), t);
        assert_eq!(shanghai.offset(t), 8 * 3600);
        assert_eq!(Zone::named("Mars/Olympus"), None);
        assert_eq!(format!("{shanghai:?}"), "Asia/Shanghai");
    }

    /// Berlin moves from +01:00 to +02:00 at 01:00Z on 2026-03-29 (02:00
    /// local becomes 03:00) and back at 01:00Z on 2026-10-25.
    #[test]
    fn daylight_saving_gaps_and_repeats_have_one_instant() {
        let berlin = Zone::named("Europe/Berlin").unwrap();
        assert_eq!(
            iso8601(berlin.instant(wall("2026-03-29 02:00"))),
            "2026-03-29T01:00:00.000Z"
        );
        assert_eq!(
            iso8601(berlin.instant(wall("2026-03-29 12:00"))),
            "2026-03-29T10:00:00.000Z"
        );
        // 02:30 is read twice on 2026-10-25: the first is at +02:00.
        assert_eq!(
            iso8601(berlin.instant(wall("2026-10-25 02:30"))),
            "2026-10-25T00:30:00.000Z"
        );
    }

    #[test]
    fn the_local_zone_reads_tz() {
        // Whatever the machine's zone, the offset is within a day and the
        // wall time maps back to the instant (mid-January: no zone changes
        // its clocks then).
        assert!(Zone::LOCAL.offset(SystemTime::now()).abs() < 86_400);
        let t = at("2026-01-15T12:00:00Z");
        assert_eq!(Zone::LOCAL.instant(Zone::LOCAL.wall(t)), t);
    }
}

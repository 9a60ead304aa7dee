//! Wall-clock stamps for `/status`: RFC 3339 UTC with milliseconds
//! (`humantime`) and epoch milliseconds (std), named once so every field
//! (`until`, `lastErrorAt`, `at`, …) has the same shape.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
}

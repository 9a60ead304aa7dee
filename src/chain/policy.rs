//! Backoff delays and the waits an upstream asks for (Retry-After, the
//! `x-ratelimit-reset*` family, and a reset time in an error body).

use std::time::{Duration, SystemTime};

use http::HeaderMap;

use crate::config::RetryPolicy;

/// The backoff before retry number `retry` (1-based): exponential from the
/// initial delay, capped, with symmetric jitter. `draw` is a uniform draw
/// from `[0, 1)` (the caller's, so tests can choose it): 0 is the low end of
/// the jitter, 0.5 none, towards 1 the high end.
pub fn backoff(policy: &RetryPolicy, retry: u32, draw: f64) -> Duration {
    let base =
        policy.initial_delay.as_secs_f64() * 2f64.powi(retry.saturating_sub(1).min(30) as i32);
    let capped = base.min(policy.max_delay.as_secs_f64());
    let jitter = policy.jitter_ratio * (2.0 * draw - 1.0);
    Duration::from_secs_f64((capped * (1.0 + jitter)).max(0.0))
}

/// What to do after a retryable failure, given the wait the upstream asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Wait this long, then retry on the same route.
    Wait(Duration),
    /// The upstream asked for more than the cap: switch at once.
    SwitchNow,
}

/// Chooses the wait before retry number `retry`: the upstream's own
/// Retry-After when it is within the cap, else backoff; beyond the cap the
/// route is left at once (waiting two minutes for a rate limit rarely beats
/// a healthy route). `draw` is the jitter draw of [`backoff`].
pub fn retry_decision(
    policy: &RetryPolicy,
    retry: u32,
    asked: Option<Duration>,
    draw: f64,
) -> RetryDecision {
    match asked {
        Some(wait) if wait > policy.max_delay => RetryDecision::SwitchNow,
        Some(wait) => RetryDecision::Wait(wait),
        None => RetryDecision::Wait(backoff(policy, retry, draw)),
    }
}

/// `Retry-After` (seconds or HTTP date) or `retry-after-ms`.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    if let Some(ms) =
        header_str(headers, "retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok())
    {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header_str(headers, "retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The latest reset an upstream states for its limits: `Retry-After`,
/// `x-ratelimit-reset` (epoch seconds or seconds from now) and
/// `x-ratelimit-reset-requests`/`-tokens` (`1m30s`, `20ms`, `6s`).
pub fn stated_reset(headers: &HeaderMap) -> Option<Duration> {
    let mut latest = retry_after(headers);
    for (name, value) in headers {
        let name = name.as_str();
        if !name.starts_with("x-ratelimit-reset") {
            continue;
        }
        let Ok(text) = value.to_str() else { continue };
        if let Some(d) = parse_reset(text.trim()) {
            latest = Some(latest.map_or(d, |l| l.max(d)));
        }
    }
    latest
}

/// Error-body keys that name when a limit resets (an absolute time, RFC
/// 3339 or epoch seconds/milliseconds) ...
const RESET_AT_KEYS: [&str; 6] = [
    "resetat",
    "reset_at",
    "resetsat",
    "resets_at",
    "resettime",
    "reset_time",
];
/// ... or how long until it does (seconds).
const RESET_IN_KEYS: [&str; 4] = [
    "retryafterseconds",
    "retry_after_seconds",
    "retry_after",
    "retryafter",
];
/// How deep an error body is searched for those keys.
const BODY_DEPTH: usize = 4;

/// A reset an error body states (`{"error":{"reset_at":"2026-12-02T00:00:00Z"}}`,
/// `"resetsAt": 1796169600`, `"retry_after_seconds": 3600`), from `now`:
/// the latest one it names. Bodies that are not JSON state none.
pub fn body_reset(body: &str, now: SystemTime) -> Option<Duration> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    let mut latest = None;
    find_resets(&v, now, BODY_DEPTH, &mut latest);
    latest
}

fn find_resets(
    v: &serde_json::Value,
    now: SystemTime,
    depth: usize,
    latest: &mut Option<Duration>,
) {
    let serde_json::Value::Object(map) = v else {
        if let serde_json::Value::Array(items) = v {
            for item in items.iter().take(16).filter(|_| depth > 0) {
                find_resets(item, now, depth - 1, latest);
            }
        }
        return;
    };
    for (key, value) in map {
        let key = key.to_ascii_lowercase();
        let found = if RESET_AT_KEYS.contains(&key.as_str()) {
            reset_at(value, now)
        } else if RESET_IN_KEYS.contains(&key.as_str()) {
            value
                .as_f64()
                .or_else(|| value.as_str().and_then(|s| s.trim().parse().ok()))
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
        } else {
            None
        };
        if let Some(d) = found {
            *latest = Some(latest.map_or(d, |l: Duration| l.max(d)));
        } else if depth > 0 {
            find_resets(value, now, depth - 1, latest);
        }
    }
}

/// An absolute reset time: RFC 3339, or epoch seconds (or milliseconds).
fn reset_at(value: &serde_json::Value, now: SystemTime) -> Option<Duration> {
    let at = match value {
        // A wall time without `Z` is the provider's zone's, not UTC: read
        // from the failure's text in `[ordering] zone` (`rest::stated_wall_reset`).
        serde_json::Value::String(s) if s.trim().ends_with(['Z', 'z']) => {
            humantime::parse_rfc3339_weak(s.trim()).ok()?
        }
        serde_json::Value::Number(n) => {
            let n = n.as_f64().filter(|n| n.is_finite() && *n > 0.0)?;
            // Past ~2286 in seconds: milliseconds.
            let secs = if n > 1e10 { n / 1000.0 } else { n };
            SystemTime::UNIX_EPOCH + Duration::from_secs_f64(secs)
        }
        _ => return None,
    };
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

fn parse_reset(text: &str) -> Option<Duration> {
    if let Ok(n) = text.parse::<f64>() {
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        // Above ~2001-09-09 in epoch seconds: an absolute time, not a delta.
        if n > 1_000_000_000.0 {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            return Some(Duration::from_secs_f64((n - now).max(0.0)));
        }
        return Some(Duration::from_secs_f64(n));
    }
    parse_go_duration(text)
}

/// `1h2m3.5s`, `20ms`: the form OpenAI-style gateways use.
fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            _ => return None,
        };
        total += value * factor;
        rest = &rest[unit_len..];
    }
    Some(Duration::from_secs_f64(total))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn policy() -> RetryPolicy {
        RetryPolicy {
            jitter_ratio: 0.0,
            ..RetryPolicy::default()
        }
    }

    #[test]
    fn backoff_doubles_from_500ms_and_caps_at_10s() {
        let p = policy();
        let ms: Vec<u128> = (1..=6).map(|n| backoff(&p, n, 0.5).as_millis()).collect();
        assert_eq!(ms, vec![500, 1000, 2000, 4000, 8000, 10000]);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let p = RetryPolicy::default();
        for i in 0..200 {
            let d = backoff(&p, 2, f64::from(i) / 200.0).as_millis();
            assert!((900..=1100).contains(&d), "{d}");
        }
    }

    #[test]
    fn retry_after_within_cap_is_honoured_and_beyond_it_switches() {
        let p = policy();
        assert_eq!(
            retry_decision(&p, 1, Some(Duration::from_secs(3)), 0.5),
            RetryDecision::Wait(Duration::from_secs(3))
        );
        assert_eq!(
            retry_decision(&p, 1, Some(Duration::from_secs(120)), 0.5),
            RetryDecision::SwitchNow
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_ms() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
    }

    #[test]
    fn an_error_body_states_its_reset() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_083_200);
        let cases = [
            (
                r#"{"error":{"message":"quota","reset_at":"2026-12-01T06:00:00Z"}}"#,
                Some(6 * 3600),
            ),
            (r#"{"error":{"resetsAt":1796090400}}"#, Some(2 * 3600)),
            (r#"{"resetTime":1796090400000}"#, Some(2 * 3600)),
            (r#"{"detail":[{"retry_after_seconds":"90"}]}"#, Some(90)),
            (
                r#"{"a":{"retryAfter":5},"b":{"reset_at":"2026-12-01T00:10:00Z"}}"#,
                Some(600),
            ),
            (r#"{"reset_at":"2026-11-30T00:00:00Z"}"#, Some(0)),
            (r#"{"error":{"message":"insufficient balance"}}"#, None),
            ("insufficient balance", None),
            (r#"{"retry_after":-3}"#, None),
        ];
        for (body, want) in cases {
            assert_eq!(
                body_reset(body, now),
                want.map(Duration::from_secs),
                "{body}"
            );
        }
    }

    #[test]
    fn ratelimit_reset_forms_are_understood() {
        assert_eq!(parse_reset("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(parse_reset("20ms"), Some(Duration::from_millis(20)));
        assert_eq!(parse_reset("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_reset("soon"), None);
        let mut h = HeaderMap::new();
        h.insert("x-ratelimit-reset-tokens", HeaderValue::from_static("1m"));
        h.insert("retry-after", HeaderValue::from_static("5"));
        assert_eq!(stated_reset(&h), Some(Duration::from_secs(60)));
    }
}

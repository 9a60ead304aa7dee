//! Backoff delays and the waits an upstream asks for (Retry-After and the
//! `x-ratelimit-reset*` family).

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

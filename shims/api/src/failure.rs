//! Stable failure codes and the classification of upstream failures from an
//! HTTP status and body text.
//!
//! The code decides what the chain does (retry in place, switch route, stop)
//! and doubles as the `/status` and metric label, so its spelling is a
//! contract: `RATE_LIMIT`, `QUOTA`, ...

use std::time::Duration;

/// Why one upstream attempt (or a whole call) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureCode {
    /// The stream ended with no content frame.
    EmptyResponse,
    /// 429 or an in-band throttle; transient.
    RateLimit,
    /// 5xx or an upstream-side error; transient.
    Server,
    /// Connect, first-byte or idle timeout; transient.
    Timeout,
    /// Connection refused, reset or broken mid-stream; transient.
    Transport,
    /// Balance, credits or a daily/monthly allowance used up; cools the route.
    Quota,
    /// Credentials or signature refused.
    Auth,
    /// The upstream refused this request's shape (bad parameter, unknown model).
    Unsupported,
    /// The request is larger than the model's context window; never switches.
    ContextWindowExceeded,
    /// The client went away; never switches.
    Aborted,
    /// The route is at its concurrency cap; skipped, not queued.
    Capacity,
    /// The upstream saw this request id before (qoder 103).
    Duplicate,
    /// The codec could not turn the request into an upstream request.
    Codec,
    /// Every route failed.
    AutoRoutesExhausted,
    /// The user's rules (disables, route windows) leave no route to try.
    NoActiveRoute,
}

/// Every code, for parsing and listing.
pub const ALL_CODES: [FailureCode; 15] = [
    FailureCode::EmptyResponse,
    FailureCode::RateLimit,
    FailureCode::Server,
    FailureCode::Timeout,
    FailureCode::Transport,
    FailureCode::Quota,
    FailureCode::Auth,
    FailureCode::Unsupported,
    FailureCode::ContextWindowExceeded,
    FailureCode::Aborted,
    FailureCode::Capacity,
    FailureCode::Duplicate,
    FailureCode::Codec,
    FailureCode::AutoRoutesExhausted,
    FailureCode::NoActiveRoute,
];

impl FailureCode {
    /// The stable upper-snake name.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::EmptyResponse => "EMPTY_RESPONSE",
            FailureCode::RateLimit => "RATE_LIMIT",
            FailureCode::Server => "SERVER",
            FailureCode::Timeout => "TIMEOUT",
            FailureCode::Transport => "TRANSPORT",
            FailureCode::Quota => "QUOTA",
            FailureCode::Auth => "AUTH",
            FailureCode::Unsupported => "UNSUPPORTED",
            FailureCode::ContextWindowExceeded => "CONTEXT_WINDOW_EXCEEDED",
            FailureCode::Aborted => "ABORTED",
            FailureCode::Capacity => "CAPACITY",
            FailureCode::Duplicate => "DUPLICATE_REQUEST",
            FailureCode::Codec => "CODEC",
            FailureCode::AutoRoutesExhausted => "AUTO_ROUTES_EXHAUSTED",
            FailureCode::NoActiveRoute => "NO_ACTIVE_ROUTE",
        }
    }

    /// Parses a stable name (as written in config).
    pub fn parse(name: &str) -> Option<FailureCode> {
        ALL_CODES.into_iter().find(|c| c.as_str() == name)
    }

    /// Codes after which the chain never tries another route.
    pub fn never_switches(self) -> bool {
        matches!(
            self,
            FailureCode::Aborted | FailureCode::ContextWindowExceeded
        )
    }
}

impl std::fmt::Display for FailureCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One failure with what the chain needs to act on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The class.
    pub code: FailureCode,
    /// A short human-readable reason (never contains credentials).
    pub message: String,
    /// The HTTP status, when the failure came from one.
    pub status: Option<u16>,
    /// The provider's own business code (`"4008"`, `"10605"`), when in-band.
    pub upstream_code: Option<String>,
    /// How long the upstream asked us to wait (Retry-After and friends).
    pub retry_after: Option<Duration>,
    /// Where `retry_after` was read (`"Retry-After"`, `"a reset in the
    /// body"`, …): a quota rest shows its source.
    pub stated_by: Option<&'static str>,
}

impl Failure {
    /// A failure with a code and message only.
    pub fn new(code: FailureCode, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            status: None,
            upstream_code: None,
            retry_after: None,
            stated_by: None,
        }
    }

    /// Sets the provider's business code.
    pub fn with_upstream_code(mut self, code: impl Into<String>) -> Self {
        self.upstream_code = Some(code.into());
        self
    }

    /// Sets the wait the upstream asked for.
    pub fn with_retry_after(mut self, wait: Duration) -> Self {
        self.retry_after = Some(wait);
        self
    }

    /// Says where the wait was read.
    pub fn stated_by(mut self, source: &'static str) -> Self {
        self.stated_by = Some(source);
        self
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code)?;
        match (self.status, &self.upstream_code) {
            (Some(s), _) => write!(f, "({s})")?,
            (None, Some(c)) => write!(f, "({c})")?,
            _ => {}
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

const QUOTA_WORDS: &[&str] = &[
    "insufficient balance",
    "insufficient_balance",
    "insufficient quota",
    "insufficient_quota",
    "insufficient credits",
    "insufficient_credits",
    // Gemini's 429 INSUFFICIENT_G1_CREDITS_BALANCE.
    "credits_balance",
    "quota exceeded",
    "quota_exceeded",
    "quota has been exceeded",
    "quota exhausted",
    "quota_exhausted",
    // TRAE 4008 ("Your requests have exceeded the quota."), OpenAI's 429 insufficient_quota ("You exceeded your current
    // quota").
    "exceeded the quota",
    "exceeded your quota",
    "exceeded your current quota",
    "exhausted your quota",
    "out of credits",
    "credit balance is too low",
    "daily count exceeded",
    "billing",
    "payment required",
    "余额不足",
    "额度已用尽",
    "额度不足",
];

const RATE_WORDS: &[&str] = &[
    "rate limit",
    "rate_limit",
    "ratelimit",
    "too many requests",
    "throttl",
];

const CONTEXT_WORDS: &[&str] = &[
    "context_length_exceeded",
    "context length",
    "maximum context",
    "context window",
    "prompt is too long",
    // TRAE 4022's words ("prompt tokens exceed the limit of 1000000.").
    "prompt tokens exceed",
    "request_too_large",
    "too many tokens",
    "input is too long",
];

/// A reused request id (qoder: `403 {"code":"103","message":"Duplicate request"}`).
const DUPLICATE_WORDS: &[&str] = &["duplicate request"];

const UNSUPPORTED_WORDS: &[&str] = &["unsupported", "not supported", "does not support"];

fn mentions(body: &str, words: &[&str]) -> bool {
    let lower = body.to_ascii_lowercase();
    words.iter().any(|w| lower.contains(w))
}

/// Classifies a non-success HTTP answer from its status and body text.
pub fn classify_http(status: u16, body: &str) -> FailureCode {
    let quota = mentions(body, QUOTA_WORDS);
    let rate = mentions(body, RATE_WORDS);
    match status {
        402 => FailureCode::Quota,
        401 | 403 if quota => FailureCode::Quota,
        401 | 403 if rate => FailureCode::RateLimit,
        401 | 403 if mentions(body, DUPLICATE_WORDS) => FailureCode::Duplicate,
        401 | 403 => FailureCode::Auth,
        429 if quota => FailureCode::Quota,
        429 => FailureCode::RateLimit,
        400..=499 if mentions(body, DUPLICATE_WORDS) => FailureCode::Duplicate,
        408 => FailureCode::Timeout,
        400 | 413 if mentions(body, CONTEXT_WORDS) => FailureCode::ContextWindowExceeded,
        400..=499 if quota => FailureCode::Quota,
        400..=499 => FailureCode::Unsupported,
        _ if quota => FailureCode::Quota,
        _ => FailureCode::Server,
    }
}

/// Classifies an in-band error message that came without a usable status.
pub fn classify_text(text: &str) -> FailureCode {
    if mentions(text, QUOTA_WORDS) {
        FailureCode::Quota
    } else if mentions(text, CONTEXT_WORDS) {
        FailureCode::ContextWindowExceeded
    } else if mentions(text, RATE_WORDS) {
        FailureCode::RateLimit
    } else if mentions(text, UNSUPPORTED_WORDS) {
        FailureCode::Unsupported
    } else {
        FailureCode::Server
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_through_their_names() {
        for code in ALL_CODES {
            assert_eq!(FailureCode::parse(code.as_str()), Some(code));
        }
    }

    #[test]
    fn payment_required_is_quota() {
        assert_eq!(classify_http(402, ""), FailureCode::Quota);
    }

    #[test]
    fn forbidden_is_auth_unless_body_says_quota_or_rate() {
        assert_eq!(classify_http(403, "bad key"), FailureCode::Auth);
        assert_eq!(classify_http(403, "Quota exceeded"), FailureCode::Quota);
        assert_eq!(classify_http(401, "rate limit hit"), FailureCode::RateLimit);
    }

    #[test]
    fn too_many_requests_is_rate_limit_unless_balance_is_gone() {
        assert_eq!(classify_http(429, "slow down"), FailureCode::RateLimit);
        assert_eq!(
            classify_http(429, "insufficient balance"),
            FailureCode::Quota
        );
    }

    #[test]
    fn the_quota_phrasings_of_the_providers_are_quota() {
        for body in [
            "Your requests have exceeded the quota. Please try again later.",
            "You exceeded your current quota, please check your plan",
            "Your quota has been exceeded",
            "quota exhausted for today",
            "RESOURCE_EXHAUSTED: INSUFFICIENT_G1_CREDITS_BALANCE",
        ] {
            assert_eq!(classify_http(429, body), FailureCode::Quota, "{body}");
            assert_eq!(classify_text(body), FailureCode::Quota, "{body}");
        }
    }

    #[test]
    fn context_overflow_is_recognised_on_400_and_413() {
        let body = r#"{"error":{"code":"context_length_exceeded"}}"#;
        assert_eq!(classify_http(400, body), FailureCode::ContextWindowExceeded);
        assert_eq!(
            classify_http(413, "prompt is too long"),
            FailureCode::ContextWindowExceeded
        );
        assert_eq!(
            classify_http(400, "prompt tokens exceed the limit of 200000."),
            FailureCode::ContextWindowExceeded
        );
        assert_eq!(classify_http(400, "bad field"), FailureCode::Unsupported);
    }

    #[test]
    fn a_reused_request_id_is_a_duplicate_not_auth() {
        assert_eq!(
            classify_http(403, r#"{"code":"103","message":"Duplicate request"}"#),
            FailureCode::Duplicate
        );
    }

    #[test]
    fn server_errors_are_server() {
        assert_eq!(classify_http(502, "bad gateway"), FailureCode::Server);
    }
}

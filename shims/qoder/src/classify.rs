//! Turns a qoder error (an envelope with `statusCodeValue != 200`, or an
//! inner `{code, message}`) into the innermost code and message and the
//! [`Failure`] the chain acts on.
//!
//! qoder nests errors as JSON strings inside `message` (the 10605 queue
//! throttle is three levels deep), and the outer levels only say "403", so
//! the innermost business code decides. Errors are rare: this path may parse.
//!
//! The rules follow the Qoder CLI's own reading (one parser for its legacy
//! and model-server transports): `105` is an expired login and so is a
//! body with no code that says "login expired" or "login timeout"; `10605`
//! or any level with `isQueued: true` is the model queue, whose wait is
//! `retryAfterSeconds` (else `waitTime`, seconds too).

use std::time::Duration;

use serde_json::{Map, Value};
use shimgate_shim_api::failure::{classify_http, classify_text};
use shimgate_shim_api::{Failure, FailureCode};

/// How deep nested error strings are followed; real ones go three deep.
const MAX_NESTING: usize = 8;

/// Business code of a reused `request_id`.
pub const CODE_DUPLICATE: &str = "103";
/// Business code of a used-up daily allowance.
pub const CODE_DAILY_LIMIT: &str = "110";
/// Business code of the queue throttle (carries `retryAfterSeconds`).
pub const CODE_QUEUE_THROTTLE: &str = "10605";
/// Business code of a refused signature.
pub const CODE_BAD_SIGNATURE: &str = "101";
/// Business code of an expired login (the CLI reads it as HTTP 401).
pub const CODE_LOGIN_EXPIRED: &str = "105";

/// Words of an expired login in a body with no business code, as the CLI
/// matches them (lowercase).
const LOGIN_EXPIRED_WORDS: [&str; 2] = ["login expired", "login timeout"];

/// An upstream error reduced to what the agent and the chain need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamError {
    /// The innermost code (business code, else the status), for the frame.
    pub code: String,
    /// The innermost message, for the frame.
    pub message: String,
    /// The classification for the chain.
    pub failure: Failure,
}

/// Reads an error body. `status` is the envelope's `statusCodeValue` when it
/// was not 200; `body` is the (decoded) body text, JSON or not.
pub fn upstream_error(status: Option<u16>, body: &[u8]) -> UpstreamError {
    let mut found = Found::default();
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => found.walk(&value),
        // Plain text: its words classify it too.
        Err(_) => found.set_message(String::from_utf8_lossy(body).trim()),
    }
    found.finish(status)
}

/// Reads an `event: error` frame, which may hold an envelope or a bare error.
pub fn event_error(data: &[u8]) -> UpstreamError {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(data) else {
        return upstream_error(None, data);
    };
    let status = map
        .get("statusCodeValue")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .filter(|&s| s != 200);
    match map.get("body") {
        Some(Value::String(body)) => upstream_error(status, body.as_bytes()),
        _ => {
            let mut found = Found::default();
            found.walk(&Value::Object(map));
            found.finish(status)
        }
    }
}

/// What the walk down the nested errors found.
#[derive(Debug, Default)]
struct Found {
    code: Option<String>,
    message: String,
    /// Every message on the way, for the keyword classifiers.
    all_text: String,
    retry_after: Option<Duration>,
    /// A level said `isQueued: true` (the model queue, whatever the code).
    queued: bool,
}

impl Found {
    fn walk(&mut self, value: &Value) {
        let mut current = value.clone();
        for _ in 0..MAX_NESTING {
            let map = match current {
                Value::Object(map) => map,
                Value::String(text) => {
                    self.set_message(&text);
                    return;
                }
                _ => return,
            };
            // The OpenAI shape nests the error one level down.
            if let Some(inner @ Value::Object(_)) = map.get("error") {
                current = inner.clone();
                continue;
            }
            self.note_retry_after(&map);
            if let Some(code) = map.get("code").and_then(code_text) {
                // Codes such as `context_length_exceeded` are words too.
                self.all_text.push_str(&code);
                self.all_text.push('\n');
                self.code = Some(code);
            }
            let message = map.get("message").or_else(|| map.get("msg"));
            match message {
                Some(Value::String(text)) => {
                    self.set_message(text);
                    match serde_json::from_str::<Value>(text) {
                        Ok(nested @ Value::Object(_)) => current = nested,
                        _ => return,
                    }
                }
                Some(nested @ Value::Object(_)) => current = nested.clone(),
                _ => return,
            }
        }
    }

    fn set_message(&mut self, text: &str) {
        self.message = text.to_owned();
        self.all_text.push_str(text);
        self.all_text.push('\n');
    }

    fn note_retry_after(&mut self, map: &Map<String, Value>) {
        self.queued |= map.get("isQueued") == Some(&Value::Bool(true));
        let seconds = map.get("retryAfterSeconds").and_then(number);
        let millis = map.get("retryAfterMs").and_then(number);
        // The queue's estimate, in seconds, when it states no wait.
        let queue_wait = map.get("waitTime").and_then(number);
        let wait = match (seconds, millis, queue_wait) {
            (Some(s), _, _) => Duration::try_from_secs_f64(s).ok(),
            (None, Some(ms), _) => Duration::try_from_secs_f64(ms / 1000.0).ok(),
            (None, None, Some(s)) if self.retry_after.is_none() => {
                Duration::try_from_secs_f64(s).ok()
            }
            _ => None,
        };
        if wait.is_some() {
            self.retry_after = wait;
        }
    }

    fn finish(self, status: Option<u16>) -> UpstreamError {
        let code = self
            .code
            .clone()
            .or_else(|| status.map(|s| s.to_string()))
            .unwrap_or_else(|| "upstream_error".to_owned());
        let message = if self.message.is_empty() {
            "upstream error with no message".to_owned()
        } else {
            self.message.clone()
        };
        let class = if self.queued {
            FailureCode::RateLimit
        } else {
            classify(status, self.code.as_deref(), &self.all_text)
        };
        let mut failure = Failure::new(class, format!("qoder {code}: {message}"));
        failure.status = status;
        failure.upstream_code = self.code;
        failure.retry_after = self.retry_after;
        failure.stated_by = self.retry_after.map(|_| "a reset in the body");
        UpstreamError {
            code,
            message,
            failure,
        }
    }
}

/// The class of a qoder business code, `None` when the code is not known.
pub fn code_class(code: &str) -> Option<FailureCode> {
    Some(match code {
        CODE_DUPLICATE => FailureCode::Duplicate,
        CODE_DAILY_LIMIT => FailureCode::Quota,
        CODE_QUEUE_THROTTLE => FailureCode::RateLimit,
        CODE_BAD_SIGNATURE | CODE_LOGIN_EXPIRED => FailureCode::Auth,
        _ => return None,
    })
}

/// The failure of an HTTP error body whose innermost business code the
/// table knows (a `403` carrying the nested `10605` queue throttle is
/// `RATE_LIMIT` with its `retryAfterSeconds`, not `AUTH`); `None` for any
/// other body.
pub fn http_error(status: u16, body: &[u8]) -> Option<Failure> {
    let e = upstream_error(Some(status), body);
    e.failure.upstream_code.as_deref().and_then(code_class)?;
    Some(e.failure)
}

/// Known business codes first; then the envelope status; then an inner
/// code that looks like an HTTP status (`{"code":"400","message":"[FAIL]…"}`
/// inside a 200 envelope is the request's shape failing: unsupported); then
/// the words.
fn classify(status: Option<u16>, code: Option<&str>, text: &str) -> FailureCode {
    if let Some(class) = code.and_then(code_class) {
        return class;
    }
    if code.is_none() {
        let lower = text.to_ascii_lowercase();
        if LOGIN_EXPIRED_WORDS.iter().any(|w| lower.contains(w)) {
            return FailureCode::Auth;
        }
    }
    let code_status = code
        .and_then(|c| c.parse::<u16>().ok())
        .filter(|c| (400..=599).contains(c));
    match status.or(code_status) {
        Some(s) => classify_http(s, text),
        None => classify_text(text),
    }
}

fn code_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
    .filter(|n| n.is_finite() && *n >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The triple-nested queue throttle.
    pub(crate) const QUEUE_BODY: &str = r#"{"code":"403","message":"{\"code\":\"10605\",\"message\":\"{\\\"isQueued\\\":false,\\\"modelKey\\\":\\\"qmodel_38max\\\",\\\"queueCount\\\":0,\\\"queueType\\\":\\\"slow\\\",\\\"retryAfterSeconds\\\":30}\"}"}"#;

    #[test]
    fn queue_throttle_takes_the_innermost_code_and_wait() {
        let e = upstream_error(Some(403), QUEUE_BODY.as_bytes());
        assert_eq!(e.code, "10605");
        assert!(e.message.contains("retryAfterSeconds"), "{}", e.message);
        assert_eq!(e.failure.code, FailureCode::RateLimit);
        assert_eq!(e.failure.retry_after, Some(Duration::from_secs(30)));
        assert_eq!(e.failure.upstream_code.as_deref(), Some("10605"));
        assert_eq!(e.failure.status, Some(403));
    }

    #[test]
    fn duplicate_daily_limit_and_signature_codes() {
        let dup = upstream_error(
            Some(403),
            br#"{"code":"103","message":"Duplicate request"}"#,
        );
        assert_eq!(dup.failure.code, FailureCode::Duplicate);
        assert_eq!(dup.message, "Duplicate request");
        let daily = upstream_error(
            Some(429),
            br#"{"code":110,"message":"Billing daily count exceeded"}"#,
        );
        assert_eq!(daily.failure.code, FailureCode::Quota);
        assert_eq!(daily.code, "110");
        let sig = upstream_error(
            Some(401),
            br#"{"code":"101","message":"Signature invalid"}"#,
        );
        assert_eq!(sig.failure.code, FailureCode::Auth);
    }

    #[test]
    fn an_http_error_body_is_classified_by_its_innermost_business_code() {
        let f = http_error(403, QUEUE_BODY.as_bytes()).unwrap();
        assert_eq!(f.code, FailureCode::RateLimit);
        assert_eq!(f.retry_after, Some(Duration::from_secs(30)));
        let f = http_error(
            429,
            br#"{"code":110,"message":"Billing daily count exceeded"}"#,
        );
        assert_eq!(f.map(|f| f.code), Some(FailureCode::Quota));
        assert_eq!(http_error(400, br#"{"code":"400","message":"bad"}"#), None);
        assert_eq!(http_error(502, b"Bad Gateway"), None);
    }

    #[test]
    fn inner_failure_in_a_200_envelope_is_unsupported() {
        let e = upstream_error(
            None,
            br#"{"code":"400","message":"[FAIL]node:oa_qwen-plus-2025-04-28 msg:Execution failed: null"}"#,
        );
        assert_eq!(e.code, "400");
        assert_eq!(e.failure.code, FailureCode::Unsupported);
        assert_eq!(e.failure.status, None);
    }

    #[test]
    fn unknown_codes_fall_back_to_status_then_words() {
        let e = upstream_error(Some(503), b"Service Unavailable");
        assert_eq!(e.code, "503");
        assert_eq!(e.message, "Service Unavailable");
        assert_eq!(e.failure.code, FailureCode::Server);
        let e = upstream_error(None, br#"{"code":"E1","message":"rate limit hit"}"#);
        assert_eq!(e.failure.code, FailureCode::RateLimit);
    }

    #[test]
    fn openai_shaped_error_is_read_one_level_down() {
        let e = upstream_error(
            None,
            br#"{"error":{"code":"context_length_exceeded","message":"too long"}}"#,
        );
        assert_eq!(e.code, "context_length_exceeded");
        assert_eq!(e.failure.code, FailureCode::ContextWindowExceeded);
    }

    #[test]
    fn an_expired_login_is_auth_by_code_or_by_the_cli_s_words() {
        let e = upstream_error(Some(401), br#"{"code":"105","message":"token invalid"}"#);
        assert_eq!(e.failure.code, FailureCode::Auth);
        let e = upstream_error(Some(500), b"Login expired, please sign in again");
        assert_eq!(e.failure.code, FailureCode::Auth);
        let e = upstream_error(None, br#"{"message":"login timeout"}"#);
        assert_eq!(e.failure.code, FailureCode::Auth);
        let coded = upstream_error(Some(500), br#"{"code":"E9","message":"login expired"}"#);
        assert_eq!(
            coded.failure.code,
            FailureCode::Server,
            "a code wins over words"
        );
        assert_eq!(
            http_error(403, br#"{"code":"105","message":"x"}"#).map(|f| f.code),
            Some(FailureCode::Auth)
        );
    }

    #[test]
    fn a_queued_answer_is_a_rate_limit_with_the_queue_s_wait() {
        let e = upstream_error(
            Some(200),
            br#"{"code":"4290","message":"{\"isQueued\":true,\"waitTime\":12}"}"#,
        );
        assert_eq!(e.failure.code, FailureCode::RateLimit);
        assert_eq!(e.failure.retry_after, Some(Duration::from_secs(12)));
        let e = upstream_error(
            None,
            br#"{"queue":{"isQueued":true,"retryAfterSeconds":5,"waitTime":40}}"#,
        );
        assert_eq!(
            e.failure.code,
            FailureCode::Server,
            "only the levels walked count"
        );
    }

    #[test]
    fn error_event_may_carry_an_envelope() {
        let data = br#"{"body":"{\"code\":\"103\",\"message\":\"Duplicate request\"}","statusCodeValue":403}"#;
        let e = event_error(data);
        assert_eq!(e.failure.code, FailureCode::Duplicate);
        assert_eq!(e.failure.status, Some(403));
    }
}

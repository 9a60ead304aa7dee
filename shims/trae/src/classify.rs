//! Turns a SOLO in-band `error` (a business code inside an HTTP 200 stream)
//! into the [`Failure`] the chain acts on.
//!
//! Code table from notes taken on a real machine against TRAE's service.
//! Risk-control codes (4011/4013/4015) count as `AUTH`: the account is
//! flagged, retrying it in place does not help, another route (account) may.
//! Plan limit 1005 counts as `QUOTA` (the plan's allowance, so the route cools).

use serde_json::Value;
use shimgate_shim_api::failure::classify_text;
use shimgate_shim_api::{Failure, FailureCode};

/// The class of a SOLO business code, `None` when the code is not known.
pub fn code_class(code: i64) -> Option<FailureCode> {
    Some(match code {
        4008 | 4200..=4203 | 4021 | 5003 | 977 | 1005 => FailureCode::Quota,
        4006 | 4022 => FailureCode::ContextWindowExceeded,
        4001 | 4023 | 4027 => FailureCode::Unsupported,
        1001 | 1002 | 4010 | 4014 | 4011 | 4013 | 4015 => FailureCode::Auth,
        4007 | 3004 | 9074 | 3003 => FailureCode::Server,
        4_000_005 | 4050..=4052 => FailureCode::RateLimit,
        _ => return None,
    })
}

/// The business code and message of a SOLO error payload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SoloError {
    /// The code as SOLO sent it, as text (`"4008"`); `None` when absent.
    pub code: Option<String>,
    /// The message (may be empty).
    pub message: String,
}

impl SoloError {
    /// Reads `{code, message, extra}`, also the nested `{"error":{...}}` form
    /// and string codes; a payload that is not JSON becomes the message.
    pub fn parse(data: &[u8]) -> SoloError {
        match serde_json::from_slice::<Value>(data) {
            Ok(v) => SoloError::from_value(&v),
            Err(_) => SoloError {
                code: None,
                message: String::from_utf8_lossy(data).trim().to_owned(),
            },
        }
    }

    /// Reads an already parsed payload.
    pub fn from_value(v: &Value) -> SoloError {
        let inner = match v.get("error") {
            Some(e) if e.is_object() => e,
            _ => v,
        };
        let code = match inner.get("code") {
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            _ => None,
        };
        let message = match inner.get("message").or_else(|| v.get("message")) {
            Some(Value::String(s)) => s.clone(),
            Some(other) if !other.is_null() => other.to_string(),
            _ => match v.get("error") {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            },
        };
        SoloError { code, message }
    }

    /// The failure the chain acts on: the class from the code table, else
    /// from the message text; `upstream_code` is the code as text.
    pub fn failure(&self) -> Failure {
        let class = self
            .code
            .as_deref()
            .and_then(|c| c.trim().parse::<i64>().ok())
            .and_then(code_class)
            .unwrap_or_else(|| classify_text(&self.message));
        let message = if self.message.is_empty() {
            match &self.code {
                Some(c) => format!("trae error {c}"),
                None => "trae error".to_owned(),
            }
        } else {
            self.message.clone()
        };
        let failure = Failure::new(class, message);
        match &self.code {
            Some(c) => failure.with_upstream_code(c.clone()),
            None => failure,
        }
    }
}

/// The failure of an HTTP error body that names a SOLO business code the
/// table knows (`{"code":4008,"message":"Your requests have exceeded the
/// quota."}` on a 429): the same class the code has in-band. `None` for any
/// other body (not JSON, no code, or one the table does not know).
pub fn http_error(body: &[u8]) -> Option<Failure> {
    let e = SoloError::parse(body);
    let code = e.code.as_deref()?.trim().parse::<i64>().ok()?;
    code_class(code)?;
    Some(e.failure())
}

/// The `type` of the OpenAI error frame written for a failure class.
pub fn openai_error_type(code: FailureCode) -> &'static str {
    match code {
        FailureCode::Quota => "insufficient_quota",
        FailureCode::RateLimit | FailureCode::Capacity => "rate_limit_error",
        FailureCode::Auth => "authentication_error",
        FailureCode::ContextWindowExceeded | FailureCode::Unsupported => "invalid_request_error",
        _ => "server_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class_of(data: &str) -> FailureCode {
        SoloError::parse(data.as_bytes()).failure().code
    }

    #[test]
    fn business_codes_map_to_failure_classes() {
        for (code, class) in [
            (4008, FailureCode::Quota),
            (4200, FailureCode::Quota),
            (4203, FailureCode::Quota),
            (4021, FailureCode::Quota),
            (5003, FailureCode::Quota),
            (977, FailureCode::Quota),
            (4006, FailureCode::ContextWindowExceeded),
            (4022, FailureCode::ContextWindowExceeded),
            (4001, FailureCode::Unsupported),
            (4023, FailureCode::Unsupported),
            (1001, FailureCode::Auth),
            (1002, FailureCode::Auth),
            (4010, FailureCode::Auth),
            (4014, FailureCode::Auth),
            (4011, FailureCode::Auth),
            (4013, FailureCode::Auth),
            (4015, FailureCode::Auth),
            (4007, FailureCode::Server),
            (3004, FailureCode::Server),
            (9074, FailureCode::Server),
            (3003, FailureCode::Server),
            (4_000_005, FailureCode::RateLimit),
            (4050, FailureCode::RateLimit),
            (4052, FailureCode::RateLimit),
        ] {
            let data = format!(r#"{{"code":{code},"message":"x","extra":null}}"#);
            assert_eq!(class_of(&data), class, "{code}");
        }
    }

    #[test]
    fn unknown_codes_fall_back_to_the_message_text() {
        assert_eq!(
            class_of(r#"{"code":7777,"message":"Quota exceeded"}"#),
            FailureCode::Quota
        );
        assert_eq!(
            class_of(r#"{"code":7777,"message":"boom"}"#),
            FailureCode::Server
        );
    }

    #[test]
    fn string_and_nested_codes_are_read() {
        let e = SoloError::parse(br#"{"error":{"code":"4022","message":"prompt too long"}}"#);
        assert_eq!(e.code.as_deref(), Some("4022"));
        let f = e.failure();
        assert_eq!(f.code, FailureCode::ContextWindowExceeded);
        assert_eq!(f.upstream_code.as_deref(), Some("4022"));
        assert_eq!(f.message, "prompt too long");
    }

    #[test]
    fn an_http_error_body_is_classified_by_its_business_code() {
        let f = http_error(br#"{"code":4008,"message":"Your requests have exceeded the quota."}"#)
            .unwrap();
        assert_eq!(f.code, FailureCode::Quota);
        assert_eq!(f.upstream_code.as_deref(), Some("4008"));
        let f = http_error(br#"{"error":{"code":"1002","message":"token expired"}}"#).unwrap();
        assert_eq!(f.code, FailureCode::Auth);
        assert_eq!(http_error(br#"{"code":7777,"message":"quota"}"#), None);
        assert_eq!(
            http_error(br#"{"error":{"code":"context_length_exceeded"}}"#),
            None
        );
        assert_eq!(http_error(b"<html>502</html>"), None);
    }

    #[test]
    fn non_json_error_data_becomes_the_message() {
        let f = SoloError::parse(b"rate limit hit").failure();
        assert_eq!(f.code, FailureCode::RateLimit);
        assert_eq!(f.upstream_code, None);
    }
}

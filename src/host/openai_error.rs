//! Errors on the return leg, as an OpenAI client expects them, so the
//! compression proxy can act on them (`docs/compression-proxies.md`).
//!
//! billion-context learns a session's real window, and shrinks the next turn
//! hard, only from an HTTP 400/413 whose body says "context length exceeded"
//! in words it knows; a 200 stream with an in-band error teaches it nothing.
//! So a failure before the first content becomes an HTTP status with an
//! OpenAI error body: a context overflow `400 context_length_exceeded` (with
//! `maximum context length is N tokens` when N is known), a rate limit `429`
//! with `Retry-After`, every route failed `502 AUTO_ROUTES_EXHAUSTED`. The
//! body also carries, in `error.native`, exactly what the agent would have
//! got had the ingress sent the request itself, so the ingress can give the
//! agent its own wire back ([`agent_answer`]).

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use serde_json::{json, Map, Value};
use shimgate_shim_api::{Failure, FailureCode, StreamTranslator};

use crate::chain::{ChainError, ChainResponse};
use crate::config::Route;
use crate::http::body::{self, Body};
use crate::http::headers::Secrets;

/// An error body the ingress reads back is at most this large (the native
/// answer inside is bounded by the chain's 1 MiB hold and error limits).
pub const MAX_ERROR_BODY: usize = 4 * 1024 * 1024;

/// The answer an agent would have got directly.
struct Native {
    status: StatusCode,
    content_type: String,
    retry_after: Option<String>,
    body: Bytes,
}

impl Native {
    fn to_json(&self, secrets: &Secrets) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), json!(self.status.as_u16()));
        m.insert("contentType".into(), json!(self.content_type));
        if let Some(r) = &self.retry_after {
            m.insert("retryAfter".into(), json!(r));
        }
        m.insert(
            "body".into(),
            json!(secrets.scrub(&String::from_utf8_lossy(&self.body))),
        );
        Value::Object(m)
    }

    fn of_response(resp: &ChainResponse) -> Option<Native> {
        let ChainResponse::Verbatim {
            status,
            headers,
            body,
            ..
        } = resp
        else {
            return None;
        };
        Some(Native {
            status: *status,
            content_type: text_header(headers, header::CONTENT_TYPE)
                .unwrap_or_else(|| "application/json".into()),
            retry_after: text_header(headers, header::RETRY_AFTER),
            body: body.clone(),
        })
    }
}

fn text_header(h: &HeaderMap, name: header::HeaderName) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// What the return leg knows when a call ended before content.
pub struct ErrorContext<'a> {
    /// The routes of the call (for `context_tokens`).
    pub routes: &'a [Route],
    /// The request's own credentials, masked in everything the proxy gets.
    pub secrets: &'a Secrets,
    /// Turns the upstream's own bytes of an in-band error into what the
    /// agent reads (its direct-mode translator).
    pub agent_translator: &'a (dyn Fn() -> Box<dyn StreamTranslator> + Sync),
}

/// The OpenAI-shaped error for a call that produced no content (a
/// committed stream is passed on as it is: after content nothing changes).
pub fn for_proxy(resp: ChainResponse, cx: &ErrorContext<'_>) -> Response<Body> {
    match &resp {
        ChainResponse::Stream { .. } => resp.into_response(),
        ChainResponse::Verbatim {
            failure: Some((failure, route)),
            native,
            ..
        } => {
            let agent = match native {
                // An in-band error: the agent reads it translated by its
                // own direct-mode translator, in a 200 stream.
                Some(raw) => Native {
                    status: StatusCode::OK,
                    content_type: "text/event-stream".into(),
                    retry_after: None,
                    body: replay((cx.agent_translator)(), raw),
                },
                None => Native::of_response(&resp).unwrap_or_else(empty_native),
            };
            let context_tokens = cx
                .routes
                .iter()
                .find(|r| &r.name == route)
                .and_then(|r| r.context_tokens);
            let provider = provider_message(failure, native.is_none().then_some(&agent.body));
            failure_response(failure, &provider, context_tokens, &agent, cx.secrets)
        }
        ChainResponse::Verbatim { .. } => resp.into_response(),
        ChainResponse::Failed(e) => chain_error_response(e.clone(), cx),
    }
}

fn empty_native() -> Native {
    Native {
        status: StatusCode::BAD_GATEWAY,
        content_type: "application/json".into(),
        retry_after: None,
        body: Bytes::new(),
    }
}

/// The response for one upstream failure that ended the call.
fn failure_response(
    failure: &Failure,
    provider: &str,
    context_tokens: Option<u64>,
    agent: &Native,
    secrets: &Secrets,
) -> Response<Body> {
    let provider = secrets.scrub(provider);
    let (status, error) = match failure.code {
        FailureCode::ContextWindowExceeded => {
            let limit = context_limit_in(&provider).or(context_tokens);
            let message = with_window(&provider, limit);
            (
                StatusCode::BAD_REQUEST,
                json!({"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}),
            )
        }
        FailureCode::RateLimit => (
            StatusCode::TOO_MANY_REQUESTS,
            json!({"message": provider, "type": "rate_limit_error", "param": null, "code": "rate_limit_exceeded"}),
        ),
        code => (
            failure
                .status
                .and_then(|s| StatusCode::from_u16(s).ok())
                .filter(|s| s.is_client_error() || s.is_server_error())
                .unwrap_or(StatusCode::BAD_GATEWAY),
            json!({"message": provider, "type": "upstream_error", "param": null, "code": code.as_str()}),
        ),
    };
    let mut error = error;
    if let Some(c) = &failure.upstream_code {
        error["upstreamCode"] = json!(c);
    }
    error["native"] = agent.to_json(secrets);
    let mut resp = body::json_response(status, &json!({ "error": error }));
    if status == StatusCode::TOO_MANY_REQUESTS {
        set_retry_after(&mut resp, failure.retry_after);
    }
    resp
}

/// Every route failed (or none could be tried): `502
/// AUTO_ROUTES_EXHAUSTED` with the per-route list, or `429` when every
/// route that was tried was rate limited. `error.native` is what the agent
/// reads: the provider's own answer that ended the last try when the agent
/// reads it (an in-band error in the agent's wire, whatever its class: an
/// expired token, a quota wall, a server error; an HTTP error as it came,
/// on a wire whose client acts on those), else the same JSON.
fn chain_error_response(e: ChainError, cx: &ErrorContext<'_>) -> Response<Body> {
    let secrets = cx.secrets;
    let direct = e.clone().into_json();
    let mut document = direct.1.clone();
    let native = match &e {
        ChainError::Exhausted {
            last: Some(last), ..
        } => match &last.http {
            // The provider's HTTP error, as it came.
            Some((status, headers)) => Native {
                status: *status,
                content_type: text_header(headers, header::CONTENT_TYPE)
                    .unwrap_or_else(|| "application/json".into()),
                retry_after: text_header(headers, header::RETRY_AFTER),
                body: last.native.clone(),
            },
            None => Native {
                status: StatusCode::OK,
                content_type: "text/event-stream".into(),
                retry_after: None,
                body: replay((cx.agent_translator)(), &last.native),
            },
        },
        _ => Native {
            status: direct.0,
            content_type: "application/json".into(),
            retry_after: None,
            body: Bytes::from(direct.1.to_string()),
        },
    };
    let limited = match &e {
        ChainError::Exhausted { reports, .. } => {
            let tried: Vec<_> = reports.iter().filter(|r| r.tries > 0).collect();
            (!tried.is_empty() && tried.iter().all(|r| r.code == Some(FailureCode::RateLimit)))
                .then(|| tried.iter().filter_map(|r| r.retry_after).min())
        }
        _ => None,
    };
    document["error"]["message"] = json!(secrets.scrub(&e.message()));
    document["error"]["native"] = native.to_json(secrets);
    match limited {
        Some(wait) => {
            document["error"]["type"] = json!("rate_limit_error");
            document["error"]["code"] = json!("rate_limit_exceeded");
            let mut resp = body::json_response(StatusCode::TOO_MANY_REQUESTS, &document);
            set_retry_after(&mut resp, wait);
            resp
        }
        None => body::json_response(direct.0, &document),
    }
}

/// `Retry-After` in whole seconds (at least 1: `0` invites a hot loop).
fn set_retry_after(resp: &mut Response<Body>, wait: Option<Duration>) {
    let secs = wait.map_or(1, |w| w.as_secs_f64().ceil().max(1.0) as u64);
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
}

/// The provider's own words: the `message` of a JSON error body when there
/// is one, else the failure's reason.
fn provider_message(failure: &Failure, http_body: Option<&Bytes>) -> String {
    let from_body = http_body
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .and_then(|v| {
            let e = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
            e.get("message").and_then(Value::as_str).map(str::to_owned)
        });
    from_body
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| failure.message.clone())
}

/// The provider's message with the window stated in billion-context's own
/// words, `; maximum context length is N tokens`, whenever N is known
/// (unless the message already says exactly that). bili reads the window
/// only from the phrases it knows: "limit of 1000000." (TRAE's 4022) is
/// not one of them (its pattern wants "token" right after the number), so
/// a window read here by any reading is always restated.
fn with_window(provider: &str, limit: Option<u64>) -> String {
    match limit {
        Some(n) => {
            let phrase = format!("maximum context length is {n} tokens");
            if provider.to_ascii_lowercase().contains(&phrase) {
                provider.to_owned()
            } else {
                format!("{provider}; {phrase}")
            }
        }
        None => provider.to_owned(),
    }
}

/// The context window a provider's message names ("maximum context length
/// is 128000", "limit of 128,000 tokens", …), read the way billion-context
/// reads it; numbers under 1,000 are not windows.
pub fn context_limit_in(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    const AFTER: [&str; 6] = [
        "maximum context length is ",
        "maximum context length of ",
        "maximum context size is ",
        "maximum context size of ",
        "context window of ",
        "limit of ",
    ];
    AFTER.iter().find_map(|p| {
        let at = lower.find(p)? + p.len();
        let digits: String = lower[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == ',')
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse::<u64>().ok().filter(|n| *n >= 1000)
    })
}

/// Runs a whole native answer through a translator, up to its end or error
/// frame, as the chain would have before content.
pub fn replay(translator: Box<dyn StreamTranslator>, native: &Bytes) -> Bytes {
    shimgate_shim_api::translate_all(translator, [native.clone()])
}

/// The agent's answer inside a return-leg error the proxy passed on: the
/// `error.native` the return leg wrote, or `None` when the body is not one
/// of ours (the proxy's own error is then passed on as it is).
pub fn agent_answer(body: &[u8]) -> Option<Response<Body>> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let native = v.get("error")?.get("native")?;
    let status = StatusCode::from_u16(u16::try_from(native.get("status")?.as_u64()?).ok()?).ok()?;
    let text = native.get("body")?.as_str()?;
    let mut resp = Response::new(body::full(Bytes::from(text.to_owned())));
    *resp.status_mut() = status;
    let content_type = native
        .get("contentType")
        .and_then(Value::as_str)
        .unwrap_or("application/json");
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    if let Some(r) = native.get("retryAfter").and_then(Value::as_str) {
        if let Ok(v) = HeaderValue::from_str(r) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_read_from_the_provider_s_words() {
        assert_eq!(
            context_limit_in("This model's maximum context length is 128000 tokens"),
            Some(128_000)
        );
        assert_eq!(
            context_limit_in("prompt exceeds the limit of 1,000,000 tokens"),
            Some(1_000_000)
        );
        assert_eq!(context_limit_in("The prompt is too long"), None);
        assert_eq!(context_limit_in("limit of 200 tokens"), None, "under 1,000");
    }

    #[test]
    fn the_window_is_stated_in_bili_s_words_whenever_it_is_known() {
        let trae = "prompt tokens exceed the limit of 1000000.";
        assert_eq!(
            with_window(trae, context_limit_in(trae)),
            "prompt tokens exceed the limit of 1000000.; maximum context length is 1000000 tokens"
        );
        let openai = "This model's maximum context length is 128000 tokens.";
        assert_eq!(with_window(openai, context_limit_in(openai)), openai);
        assert_eq!(
            with_window("The prompt is too long", Some(64_000)),
            "The prompt is too long; maximum context length is 64000 tokens"
        );
        assert_eq!(
            with_window("The prompt is too long", None),
            "The prompt is too long"
        );
    }

    #[test]
    fn a_native_answer_round_trips_through_the_error_body() {
        let native = Native {
            status: StatusCode::OK,
            content_type: "text/event-stream".into(),
            retry_after: None,
            body: Bytes::from_static(b"event: error\ndata: {\"code\":4022}\n\n"),
        };
        let body = json!({"error": {"native": native.to_json(&Secrets::default())}});
        let resp = agent_answer(body.to_string().as_bytes()).unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert!(agent_answer(br#"{"error":{"message":"proxy says no"}}"#).is_none());
        assert!(agent_answer(b"not json").is_none());
    }
}

//! qoder's model-server wire for shimgate: what the Qoder CLI and IDE send
//! with `QODER_MODEL_TRANSPORT=http`, `POST /model/v1/chat/completions`,
//! `Authorization: Bearer <token>`, `X-Request-ID`, `X-Session-ID`, an
//! OpenAI chat body with qoder's `metadata`, answered with SSE that may hold
//! plain OpenAI chunks, qoder envelopes and sentinels.
//!
//! A second shim of the same provider: it rides on the `qoder` listener
//! and its settings live in `[shims.qoder]` (its routes are
//! `[[shims.qoder.model_routes]]`), while its return legs, chain, counters
//! and `/status` section (`qoderModelShim`) are its own.
//!
//! No sockets: [`body`] folds and restores the request and stamps a fresh
//! request id for every attempt; [`wire`] reads an answer event as the CLI
//! does; [`legs`] are the stream translations, with [`ext`] carrying what
//! a compression proxy would drop.

pub mod body;
pub mod ext;
pub mod legs;
pub mod wire;

use serde_json::Value;
use shimgate_shim_api::{Failure, Folded, OpenAiBody, Shim, ShimError};

pub use body::OriginalBody;
pub use legs::{ModelIngress, ModelReturnLeg};

/// The inference path the ingress takes over (any query).
pub const INFERENCE_PATH: &str = "/model/v1/chat/completions";

/// The shim's name: its return-leg path segment, chain key, metric label
/// and `/status` section (`qoderModelShim`).
pub const NAME: &str = "qoderModel";

/// The model server the Qoder CLI calls when `QODER_MODEL_SERVER_HOST` is
/// unset (its production host).
pub const INTL_URL: &str = "https://api2-v2.qoder.sh";

/// The CN build's gateway (its hosts for `api1`–`api3` and `center`).
pub const CN_URL: &str = "https://gateway.qoder.com.cn";

/// The model-server wire.
#[derive(Debug, Clone, Copy, Default)]
pub struct QoderModelShim;

impl Shim for QoderModelShim {
    type Original = OriginalBody;
    type ReturnLeg = ModelReturnLeg;
    type Ingress = ModelIngress;

    const NAME: &'static str = NAME;
    /// Never bound: it rides on the qoder listener.
    const DEFAULT_LISTEN: &'static str = "127.0.0.1:47001";
    const RIDES_ON: Option<&'static str> = Some(shimgate_shim_qoder::NAME);
    const ROUTES_KEY: &'static str = "model_routes";
    const DEFAULT_ROUTES: &'static [(&'static str, &'static str)] =
        &[("qoder-model-intl", INTL_URL), ("qoder-model-cn", CN_URL)];
    const ATTEMPT_ID_HEADER: Option<&'static str> = Some("x-request-id");
    // The CLI refreshes its token on a 401 and reads the queue's wait.
    const AGENT_READS_HTTP_ERRORS: bool = true;

    /// `POST` on [`INFERENCE_PATH`]; `path` may carry a query string.
    fn is_inference(&self, method: &str, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        method.eq_ignore_ascii_case("POST") && path == INFERENCE_PATH
    }

    fn fold(&self, native: &[u8]) -> Result<Folded<OriginalBody, OpenAiBody>, ShimError> {
        body::fold(native)
    }

    fn restore(&self, original: &OriginalBody, openai: &OpenAiBody) -> Result<Vec<u8>, ShimError> {
        body::restore(original, openai)
    }

    /// `metadata.context.request_id`, kept equal to `X-Request-ID`: the
    /// CLI sends them equal, and whichever of the two the model server
    /// checks for reuse, neither repeats.
    fn stamp_attempt(&self, body: &[u8], id: &str) -> Option<Vec<u8>> {
        body::stamp_request_id(body, id)
    }

    fn return_leg(&self, request: &Value) -> ModelReturnLeg {
        ModelReturnLeg::for_request(request)
    }

    fn ingress(&self, _original: &OriginalBody) -> ModelIngress {
        ModelIngress::new()
    }

    /// qoder's business codes in an HTTP error body (the model queue's
    /// `10605` or `isQueued`, `103`, `105`, `110`), as in-band.
    fn http_error(&self, status: u16, body: &[u8]) -> Option<Failure> {
        let e = shimgate_shim_qoder::classify::upstream_error(Some(status), body);
        let known = e
            .failure
            .upstream_code
            .as_deref()
            .and_then(shimgate_shim_qoder::classify::code_class)
            .is_some();
        let queued = e.failure.code == shimgate_shim_api::FailureCode::RateLimit
            && e.failure.retry_after.is_some();
        (known || queued).then_some(e.failure)
    }

    /// `metadata.context.session_id` (the CLI also sends it as
    /// `X-Session-ID`, which comes first).
    fn conversation(&self, native: &[u8]) -> Option<String> {
        body::session_id(native)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inference_path_matches_with_or_without_query() {
        let s = QoderModelShim;
        assert!(s.is_inference("POST", INFERENCE_PATH));
        assert!(s.is_inference("post", "/model/v1/chat/completions?x=1"));
        assert!(!s.is_inference("GET", INFERENCE_PATH));
        assert!(!s.is_inference("POST", "/v1/chat/completions"));
        assert!(!s.is_inference("POST", "/model/v1/chat/completions/x"));
    }

    #[test]
    fn an_http_error_body_is_read_by_qoder_s_codes() {
        let s = QoderModelShim;
        let queued = br#"{"code":"10605","message":"{\"isQueued\":true,\"retryAfterSeconds\":7}"}"#;
        let f = s.http_error(429, queued).unwrap();
        assert_eq!(f.code, shimgate_shim_api::FailureCode::RateLimit);
        assert_eq!(f.retry_after, Some(std::time::Duration::from_secs(7)));
        let f = s.http_error(403, br#"{"code":"103","message":"Duplicate request"}"#);
        assert_eq!(
            f.map(|f| f.code),
            Some(shimgate_shim_api::FailureCode::Duplicate)
        );
        let f = s.http_error(401, br#"{"code":"105","message":"login expired"}"#);
        assert_eq!(
            f.map(|f| f.code),
            Some(shimgate_shim_api::FailureCode::Auth)
        );
        assert_eq!(
            s.http_error(502, b"Bad Gateway"),
            None,
            "status and words decide"
        );
    }
}

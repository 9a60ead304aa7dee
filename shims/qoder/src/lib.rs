//! The qoder protocol for shimgate: the plaintext ask folded into an OpenAI
//! chat body and rebuilt from the compressed one, and qoder's envelope SSE
//! unwrapped into the bare OpenAI frames the compression proxy reads.
//!
//! No sockets, and nothing is ever decrypted: the runtime hands the ask in
//! (from the real client's `Encode=1` body, [`codec::decode_body`]) and
//! sends the rebuilt ask through its codec (`plain`, an `exec` co-process,
//! or [`cosy`], which re-encodes it and re-signs it by the published COSY
//! rule with no secret; `info` and `Cosy-Key` travel opaque). [`codec`]
//! holds the public body encoding and the test signature.

pub mod ask;
mod chunk;
pub mod classify;
pub mod codec;
pub mod cosy;
mod envelope;
mod fields;
pub mod frames;
mod memo;
mod oneline;
mod scan;
pub mod unwrap;
mod written;

use serde_json::Value;
use shimgate_shim_api::{Failure, Folded, OpenAiBody, Shim, ShimError};

pub use ask::OriginalAsk;
pub use oneline::put_one_line;
pub use unwrap::{QoderIngress, QoderReturnLeg, UsagePolicy};

/// The inference path the ingress takes over (any query).
pub const INFERENCE_PATH: &str = "/algo/api/v2/service/pro/sse/agent_chat_generation";

/// The shim's name: the return-leg path segment and the `/status` key.
pub const NAME: &str = "qoder";

/// The qoder shim. Stateless: per-request state lives in [`OriginalAsk`]
/// and in each translator.
#[derive(Debug, Clone, Copy, Default)]
pub struct QoderShim;

impl QoderShim {
    /// The shim.
    pub fn new() -> Self {
        QoderShim
    }
}

impl Shim for QoderShim {
    type Original = OriginalAsk;
    type ReturnLeg = QoderReturnLeg;
    type Ingress = QoderIngress;

    const NAME: &'static str = NAME;
    const DEFAULT_LISTEN: &'static str = "127.0.0.1:47001";
    const CODEC: bool = true;

    /// `POST` on [`INFERENCE_PATH`]; `path` may carry a query string.
    fn is_inference(&self, method: &str, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        method.eq_ignore_ascii_case("POST") && path == INFERENCE_PATH
    }

    /// An `Encode=1` request whose body is not already the plaintext ask
    /// (a JSON object, which clients that hand it over before encoding
    /// send, whatever the query says) is decoded to the ask.
    fn decode(&self, path_and_query: &str, body: &[u8]) -> Result<Option<Vec<u8>>, ShimError> {
        let plaintext = body
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        if plaintext || !cosy::is_encoded(path_and_query) {
            return Ok(None);
        }
        codec::decode_body(body)
            .map(Some)
            .map_err(|e| ShimError::new(format!("an Encode=1 body that does not decode: {e}")))
    }

    /// Written from the bytes when the one strict pass is sure
    /// ([`ask::fold_body`]); else through the `Value` fold.
    fn fold(&self, native: &[u8]) -> Result<Folded<OriginalAsk, OpenAiBody>, ShimError> {
        ask::fold_body(native)
    }

    /// Read without folding when the scan is sure; the original is empty:
    /// the qoder agent reads the return leg's output, no ingress
    /// translator runs.
    fn shape(&self, native: &[u8]) -> Result<(Value, OriginalAsk), ShimError> {
        if let Some(shape) = ask::shape(native) {
            return Ok((shape, OriginalAsk::default()));
        }
        let folded = ask::fold_body(native)?;
        Ok((folded.openai.answer_shape(), folded.original))
    }

    fn restore(&self, original: &OriginalAsk, openai: &OpenAiBody) -> Result<Vec<u8>, ShimError> {
        ask::restore_body(original, openai)
    }

    /// The written restore reads the proxy's body member by member.
    fn restore_reads_whole(&self, original: &OriginalAsk) -> bool {
        !original.is_written()
    }

    fn return_leg(&self, request: &Value) -> QoderReturnLeg {
        QoderReturnLeg::for_request(request)
    }

    fn ingress(&self, _original: &OriginalAsk) -> QoderIngress {
        QoderIngress::new()
    }

    /// A qoder business code in an HTTP error body (also nested, as the
    /// queue throttle is) has the class it has in-band.
    fn http_error(&self, status: u16, body: &[u8]) -> Option<Failure> {
        classify::http_error(status, body)
    }

    /// The qoder agent reads bare OpenAI frames, the return leg's output.
    fn agent_reads_return_leg(&self) -> bool {
        true
    }

    /// The ask's own `session_id` (the qoder client keeps one per chat).
    fn conversation(&self, native: &[u8]) -> Option<String> {
        shimgate_shim_api::json_scan::top_level_string(native, "session_id")
            .filter(|s| !s.is_empty())
    }

    /// A COSY `Authorization` is signed per request (fresh `requestId`,
    /// date and signature), so the user (`Cosy-User`) names the agent;
    /// a plain credential stands in when there is none.
    fn identity_headers(&self) -> &'static [&'static str] {
        &["cosy-user", "authorization", "x-api-key", "cookie"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inference_path_matches_with_or_without_query() {
        let shim = QoderShim::new();
        assert!(shim.is_inference("POST", INFERENCE_PATH));
        assert!(shim.is_inference(
            "post",
            "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&Encode=1"
        ));
        assert!(!shim.is_inference("GET", INFERENCE_PATH));
        assert!(!shim.is_inference(
            "POST",
            "/algo/api/v2/service/pro/sse/agent_chat_generation/x"
        ));
        assert!(!shim.is_inference("POST", "/v1/chat/completions"));
    }

    #[test]
    fn name_is_qoder() {
        assert_eq!(QoderShim::new().name(), "qoder");
    }
}

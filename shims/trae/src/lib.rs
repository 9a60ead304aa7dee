//! The trae protocol for shimgate: the SOLO request folded into OpenAI form
//! and restored, and the answer translated SOLO → OpenAI (return leg) and
//! OpenAI → SOLO (ingress). Bytes and JSON in, bytes and JSON out; no
//! sockets.
//!
//! Module map: [`fold`] and [`restore`] for the request (`written` and
//! `restore_members` for a body read from its bytes); [`to_openai`] (the
//! return leg) and [`to_solo`] (the ingress) for the answer, which share
//! [`solo`] (reading SOLO frames), [`ext`] (the `x_solo` extension) and
//! [`classify`] (business codes → failure classes). The digest, the
//! pipeline and the billion-context simulation that the tests, fuzz targets
//! and benches use live in `shimgate-testkit` (`shims/testkit`).

use serde_json::Value;
use shimgate_shim_api::{Failure, Folded, OpenAiBody, Shim, ShimError};

pub mod classify;
pub mod ext;
pub mod fold;
mod json_scan;
mod json_write;
pub mod restore;
mod restore_members;
pub mod solo;
pub mod to_openai;
pub mod to_solo;
mod written;

pub use written::Written;

pub use ext::EXT_KEY;
pub use to_openai::ToOpenAi;
pub use to_solo::ToSolo;

/// The path of SOLO's chat call, the only request the ingress takes over.
pub const INFERENCE_PATH: &str = "/api/agent/v3/llm_utils_chat";

/// The SOLO body as the agent sent it, kept under a rid for restore.
#[derive(Debug, Clone)]
pub enum TraeOriginal {
    /// Its bytes and where its parts sit (the written fold's: what restore
    /// does not take from the proxy is copied as the agent wrote it).
    Written { text: Vec<u8>, kept: Written },
    /// Parsed, key order kept (a body the written fold left to the
    /// `Value` fold: a repeated key, an out-of-range number).
    Parsed(Value),
}

impl Default for TraeOriginal {
    fn default() -> Self {
        TraeOriginal::Parsed(Value::Null)
    }
}

impl TraeOriginal {
    /// The body parsed (for tests and tools; restore reads the bytes).
    pub fn value(&self) -> Value {
        match self {
            TraeOriginal::Written { text, .. } => {
                serde_json::from_slice(text).unwrap_or(Value::Null)
            }
            TraeOriginal::Parsed(v) => v.clone(),
        }
    }
}

/// The fold through `serde_json::Value`, the reference the written fold
/// makes the same OpenAI body as (and what it leaves the bodies it is
/// unsure of to): a number outside f64's range travels as a tag, which
/// restore puts back.
pub fn fold_parsed(native: &[u8]) -> Result<Folded<TraeOriginal>, ShimError> {
    let original = shimgate_shim_api::json::parse_keeping_numbers(native)
        .map_err(|e| ShimError::new(format!("trae body is not JSON: {e}")))?;
    let openai = fold::fold_body(&original)?;
    Ok(Folded {
        openai,
        original: TraeOriginal::Parsed(original),
    })
}

/// The trae shim. It holds no state: everything per request lives in the
/// `Original` (the SOLO body) and the translators.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraeShim;

impl TraeShim {
    /// The shim.
    pub fn new() -> TraeShim {
        TraeShim
    }
}

impl Shim for TraeShim {
    /// The SOLO body as the agent sent it.
    type Original = TraeOriginal;
    type ReturnLeg = ToOpenAi;
    type Ingress = ToSolo;

    const NAME: &'static str = "trae";
    const DEFAULT_LISTEN: &'static str = "127.0.0.1:47011";
    const AGENT_FRAMES_KEY: &'static str = "soloFrames";

    /// `POST /api/agent/v3/llm_utils_chat`, with or without a query.
    fn is_inference(&self, method: &str, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        method.eq_ignore_ascii_case("POST") && path == INFERENCE_PATH
    }

    /// Written from the bytes in one pass ([`written`]); a body that pass
    /// is unsure of goes through [`fold_parsed`].
    fn fold(&self, native: &[u8]) -> Result<Folded<TraeOriginal, OpenAiBody>, ShimError> {
        if std::str::from_utf8(native).is_ok() {
            match written::fold(native) {
                Some(Ok((openai, kept))) => {
                    return Ok(Folded {
                        openai: OpenAiBody::written(openai),
                        original: TraeOriginal::Written {
                            text: native.to_vec(),
                            kept,
                        },
                    })
                }
                Some(Err(why)) => return Err(ShimError::new(why)),
                None => {}
            }
        }
        let folded = fold_parsed(native)?;
        Ok(Folded {
            openai: OpenAiBody::from_value(folded.openai),
            original: folded.original,
        })
    }

    /// Read without folding when the scan is sure; the original is
    /// `null`: the ingress translator ([`ToSolo`]) needs none.
    fn shape(&self, native: &[u8]) -> Result<(Value, TraeOriginal), ShimError> {
        if let Some(shape) = fold::shape(native) {
            return Ok((shape, TraeOriginal::default()));
        }
        let folded = self.fold(native)?;
        Ok((folded.openai.answer_shape(), folded.original))
    }

    /// A written original is restored from the proxy's body member by
    /// member ([`restore_members`]); a parsed one from the parsed body.
    fn restore(&self, original: &TraeOriginal, openai: &OpenAiBody) -> Result<Vec<u8>, ShimError> {
        match original {
            TraeOriginal::Written { text, kept } => restore_members::restore(text, kept, openai),
            TraeOriginal::Parsed(value) => restore::restore_body(value, openai.value()),
        }
    }

    /// Only the `Value` restore of a parsed original reads the whole body.
    fn restore_reads_whole(&self, original: &TraeOriginal) -> bool {
        matches!(original, TraeOriginal::Parsed(_))
    }

    fn return_leg(&self, request: &Value) -> ToOpenAi {
        ToOpenAi::new(request)
    }

    fn ingress(&self, _original: &TraeOriginal) -> ToSolo {
        ToSolo::new()
    }

    /// A SOLO business code in an HTTP error body has the class it has
    /// in-band (`4008` on a 429 is `QUOTA`, not a rate limit).
    fn http_error(&self, _status: u16, body: &[u8]) -> Option<Failure> {
        classify::http_error(body)
    }

    /// The account (`X-Uid`) outlives the access token, which the IDE
    /// refreshes; the token headers stand in when no uid is sent.
    fn identity_headers(&self) -> &'static [&'static str] {
        &[
            "x-uid",
            "x-ide-token",
            "x-cloudide-token",
            "authorization",
            "x-api-key",
            "cookie",
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_post_to_the_chat_path_is_inference() {
        let s = TraeShim;
        assert!(s.is_inference("POST", INFERENCE_PATH));
        assert!(s.is_inference("POST", "/api/agent/v3/llm_utils_chat?x=1"));
        assert!(!s.is_inference("GET", INFERENCE_PATH));
        assert!(!s.is_inference("POST", "/api/ide/v1/get_detail_param"));
        assert!(!s.is_inference("POST", "/api/agent/v3/llm_utils_chat/x"));
        assert!(!s.is_inference("POST", "/x/api/agent/v3/llm_utils_chat"));
        assert_eq!(s.name(), "trae");
    }
}

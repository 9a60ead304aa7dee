//! A third shim, used only by tests: an agent that already speaks OpenAI
//! (`POST /v1/chat/completions`), passed through the whole shimgate path
//! (ingress, proxy, return leg, chain) with nothing to translate. It exists
//! to prove that adding a shim is a crate plus one line in the runtime's
//! registry: everything it needs comes from the [`Shim`] trait.

use bytes::BytesMut;
use serde_json::Value;
use shimgate_shim_api::sse::{write_data, SseEvent};
use shimgate_shim_api::{
    Failure, FailureCode, Folded, FrameClass, OpenAiBody, Shim, ShimError, StreamTranslator,
};

/// The inference path.
pub const INFERENCE_PATH: &str = "/v1/chat/completions";

/// The OpenAI pass-through shim.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiShim;

impl Shim for OpenAiShim {
    /// The agent's body, parsed.
    type Original = Value;
    type ReturnLeg = Relay;
    type Ingress = Relay;

    const NAME: &'static str = "openai";
    const DEFAULT_LISTEN: &'static str = "127.0.0.1:47021";
    /// Test-only: it listens only where a config enables it.
    const ENABLED_BY_DEFAULT: bool = false;

    fn is_inference(&self, method: &str, path: &str) -> bool {
        let path = path.split(['?', '#']).next().unwrap_or_default();
        method.eq_ignore_ascii_case("POST") && path == INFERENCE_PATH
    }

    fn fold(&self, native: &[u8]) -> Result<Folded<Value, OpenAiBody>, ShimError> {
        let original: Value = serde_json::from_slice(native)
            .map_err(|e| ShimError::new(format!("the body is not JSON: {e}")))?;
        if !original.is_object() {
            return Err(ShimError::new("the body is not a JSON object"));
        }
        Ok(Folded {
            openai: OpenAiBody::of_value(&original),
            original,
        })
    }

    /// The original with the proxy's `messages`, `tools` and sampling fields.
    fn restore(&self, original: &Value, openai: &OpenAiBody) -> Result<Vec<u8>, ShimError> {
        let mut body = original.clone();
        if let (Some(out), Some(from)) = (body.as_object_mut(), openai.value().as_object()) {
            for (k, v) in from {
                out.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_vec(&body).map_err(|e| ShimError::new(e.to_string()))
    }

    fn return_leg(&self, _request: &Value) -> Relay {
        Relay
    }

    fn ingress(&self, _original: &Value) -> Relay {
        Relay
    }

    fn agent_reads_return_leg(&self) -> bool {
        true
    }
}

/// OpenAI SSE in, the same frames out (one `data:` line each), classified
/// for the chain.
#[derive(Debug, Default)]
pub struct Relay;

impl StreamTranslator for Relay {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        let data = event.data.as_ref();
        if data == b"[DONE]" {
            write_data(out, data);
            return FrameClass::End;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            let f = Failure::new(FailureCode::Server, "a frame that is not JSON");
            self.fail(&f, out);
            return FrameClass::Error(f);
        };
        if let Some(e) = chunk.get("error") {
            let message = e["message"].as_str().unwrap_or("upstream error").to_owned();
            write_data(out, data);
            write_data(out, b"[DONE]");
            return FrameClass::Error(Failure::new(
                shimgate_shim_api::failure::classify_text(&message),
                message,
            ));
        }
        write_data(out, data);
        let delta = &chunk["choices"][0]["delta"];
        let text = |k: &str| delta[k].as_str().is_some_and(|s| !s.is_empty());
        if text("content") || text("reasoning_content") || delta["tool_calls"].is_array() {
            FrameClass::Content
        } else {
            FrameClass::NotContent
        }
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        let frame = serde_json::json!({"error": {"code": failure.code.as_str(), "message": failure.message, "type": "upstream_error"}});
        write_data(out, frame.to_string().as_bytes());
        write_data(out, b"[DONE]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_commits_and_done_ends() {
        let mut r = Relay;
        let mut out = BytesMut::new();
        let role = SseEvent::data(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#);
        assert_eq!(r.event(&role, &mut out), FrameClass::NotContent);
        let text = SseEvent::data(r#"{"choices":[{"delta":{"content":"hi"}}]}"#);
        assert_eq!(r.event(&text, &mut out), FrameClass::Content);
        assert_eq!(
            r.event(&SseEvent::data("[DONE]"), &mut out),
            FrameClass::End
        );
        assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 6);
    }
}

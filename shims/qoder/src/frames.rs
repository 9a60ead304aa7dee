//! The few frames the translators write themselves: the OpenAI error frame
//! and the end sentinel, always one `data:` line and a blank line.

use bytes::BytesMut;
use serde_json::json;
use shimgate_shim_api::sse::DONE_FRAME;
use shimgate_shim_api::Failure;

use crate::classify::UpstreamError;

/// `type` of an error the upstream reported.
pub const MODEL_ERROR_TYPE: &str = "model_error";
/// `type` of a failure shimgate saw itself (reset, timeout, shutdown).
pub const SHIMGATE_ERROR_TYPE: &str = "shimgate_error";

/// Appends `data: {"error":{"code","message","type"},"choices":[…]}` and a
/// blank line.
///
/// The empty role delta in `choices` is there for proxies: billion-context
/// drops every frame without `choices` (so an error after content would
/// vanish and the agent would see a clean, truncated answer) but passes a
/// role-shaped frame byte for byte. OpenAI clients read `error` first.
pub fn put_error_frame(out: &mut BytesMut, code: &str, message: &str, kind: &str) {
    let frame = json!({
        "error": {"code": code, "message": message, "type": kind},
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}],
    });
    out.extend_from_slice(b"data: ");
    // Compact serde_json output escapes every control byte: one line.
    out.extend_from_slice(&serde_json::to_vec(&frame).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
}

/// Appends the error frame for an upstream error, then `[DONE]`.
pub fn put_upstream_error(out: &mut BytesMut, error: &UpstreamError) {
    put_error_frame(out, &error.code, &error.message, MODEL_ERROR_TYPE);
    out.extend_from_slice(DONE_FRAME);
}

/// Appends the error frame for a failure shimgate saw, then `[DONE]`.
pub fn put_failure(out: &mut BytesMut, failure: &Failure) {
    put_error_frame(
        out,
        failure.code.as_str(),
        &failure.message,
        SHIMGATE_ERROR_TYPE,
    );
    out.extend_from_slice(DONE_FRAME);
}

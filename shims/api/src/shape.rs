//! The few members of an OpenAI request an answer's translators read: a
//! stream keeps these, not the conversation. Below both the [`Shim`]
//! contract and [`OpenAiBody`], which each read them.
//!
//! [`Shim`]: crate::Shim
//! [`OpenAiBody`]: crate::OpenAiBody

use serde_json::Value;

/// The members of an OpenAI request an answer's translators read.
pub const SHAPE_KEYS: [&str; 3] = ["model", "stream", "stream_options"];

/// The part of an OpenAI request a return-leg translator reads (`model`,
/// `stream`, `stream_options`): a stream keeps this, not the conversation.
pub fn answer_shape(request: &Value) -> Value {
    let mut shape = serde_json::Map::new();
    for key in SHAPE_KEYS {
        if let Some(v) = request.get(key) {
            shape.insert(key.to_string(), v.clone());
        }
    }
    Value::Object(shape)
}

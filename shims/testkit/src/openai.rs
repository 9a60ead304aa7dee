//! `chat.completion.chunk` frames, as an OpenAI-compatible stream (and the
//! `body` of a qoder envelope) carries them.

use serde_json::{json, Value};

/// The fields every chunk of one answer repeats.
#[derive(Debug, Clone, Copy)]
pub struct Chunks<'a> {
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
}

impl Chunks<'_> {
    /// A chunk with one choice: `delta` and its `finish_reason` (`null`
    /// while the answer streams).
    pub fn delta(&self, delta: Value, finish: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    /// The usage-only chunk (`choices: []`) that ends a stream asked for
    /// with `stream_options.include_usage`.
    pub fn usage(&self, prompt_tokens: u64, completion_tokens: u64) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}})
    }
}

/// One bare OpenAI SSE frame: `data: <chunk>` and a blank line.
pub fn frame(chunk: &Value) -> String {
    format!("data: {chunk}\n\n")
}

/// The frame that ends a bare OpenAI stream.
pub const DONE: &str = "data: [DONE]\n\n";

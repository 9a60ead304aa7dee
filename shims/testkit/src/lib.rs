//! What shimgate's tests, benches, fuzz targets and demo share: the two
//! provider wires as agents and upstreams speak them, one scripted upstream,
//! and one check of the bare OpenAI SSE a compression proxy reads.
//!
//! Module map:
//! - [`check`]: [`check_openai`], the one check of bare OpenAI SSE (one
//!   `data:` line per frame, `\n\n` after it, a JSON object, no envelope
//!   keys, exactly one `[DONE]`, last), returning every problem found.
//! - [`openai`]: `chat.completion.chunk` frames.
//! - [`qoder`]: the plaintext ask an agent sends, the envelope, error
//!   envelope and heartbeat frames and whole answers an upstream streams,
//!   and what an agent reads from the bare frames it gets back.
//! - [`qoder_model`]: qoder's model-server wire: the CLI's request and
//!   headers, plain, enveloped and sentinel answers, error envelopes, and
//!   the CLI's reading of an answer.
//! - [`trae`]: the SOLO body, text and tool turns, SOLO events and whole
//!   answers, what a real upstream refuses in a body; with `dev`, the
//!   digest of a SOLO stream and its comparison, both legs over whole
//!   streams, the billion-context simulation and the stream generator.
//! - [`upstream`] (`dev`): a scripted upstream on raw TCP that plays each
//!   answer step by step and records every request.
//!
//! Features: `wire` is the builders, the reading of an answer and the
//! check, plain functions over serde_json that `shimgate demo` and
//! `shimgate translate --check` use; `dev` (the default) adds everything
//! only tests need (sockets, the trae translators).

#[cfg(feature = "wire")]
pub mod check;
#[cfg(feature = "wire")]
pub mod openai;
#[cfg(feature = "wire")]
pub mod qoder;
#[cfg(feature = "wire")]
pub mod qoder_model;
#[cfg(feature = "wire")]
pub mod trae;
#[cfg(feature = "dev")]
pub mod upstream;

#[cfg(feature = "wire")]
pub use check::{check_openai, Problem, Problems};

/// `v` with every object's keys in reverse order, at every level: a body
/// as a proxy that re-serialises it in another key order sends it.
#[cfg(feature = "dev")]
pub fn keys_reversed(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .rev()
                .map(|(k, v)| (k.clone(), keys_reversed(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(keys_reversed).collect()),
        other => other.clone(),
    }
}

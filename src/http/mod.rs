//! HTTP plumbing every other part shares: response bodies, request bodies
//! read within the limit, header hygiene and credential scrubbing, the
//! upstream client, and how its errors are told.

pub mod body;
pub mod client;
pub mod headers;
pub mod read;

/// An error with its sources, `a: b: c`: what a transport failure is
/// reported as (the chain's `lastError`, the compressor's 502, the demo's
/// report), since the outermost error alone rarely says why.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

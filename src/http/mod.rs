//! HTTP plumbing every other part shares: response bodies, request bodies
//! read within the limit, header hygiene and credential scrubbing, and the
//! upstream client.

pub mod body;
pub mod client;
pub mod headers;
pub mod read;

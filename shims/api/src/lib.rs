//! The contract between the shimgate runtime and a shim: the [`Shim`] trait,
//! the zero-copy SSE parser and writer, the per-frame classification the
//! chain-failover core reads, and the stable failure codes.
//!
//! This crate opens no sockets and knows nothing of retries; a shim built on
//! it turns bytes and JSON into bytes and JSON, which keeps it easy to fuzz.

pub mod body;
mod error;
pub mod failure;
pub mod json;
pub mod json_scan;
pub mod openai;
pub mod repeat;
mod shape;
pub mod shim;
pub mod sse;
pub mod translate;

pub use body::OpenAiBody;
pub use failure::{Failure, FailureCode};
pub use shim::{answer_shape, Folded, Shim, ShimError};
pub use translate::{translate_all, Drive, FrameClass, StreamTranslator};

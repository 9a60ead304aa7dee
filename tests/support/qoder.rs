//! The qoder wire for tests: the agent's plaintext ask, envelope answers
//! byte for byte as the provider sends them, and what the agent reads back
//! (`shimgate_testkit::qoder`).

pub use shimgate_testkit::qoder::*;

//! The TRAE SOLO wire for tests: the agent's SOLO body, a checker for what
//! the upstream receives, and scripted SOLO answers byte for byte
//! (`shimgate_testkit::trae`).

use std::sync::{Arc, Mutex};

pub use shimgate_testkit::trae::*;

/// Collects problems across requests.
pub type Problems = Arc<Mutex<Vec<String>>>;

//! `shimgate translate`: offline translation of a captured stream
//! (placeholder until it lands).

use std::process::ExitCode;

use crate::cli::{Leg, ShimName};

/// Runs the command on stdin/stdout.
pub fn run(shim: ShimName, leg: Leg, check: bool) -> ExitCode {
    let _ = (shim, leg, check);
    eprintln!("shimgate translate: not built yet");
    ExitCode::FAILURE
}

//! `shimgate frames`: SSE bytes on stdin to one JSON object per event.

use std::process::ExitCode;

/// Runs the command on stdin/stdout.
pub fn run_stdio(include_incomplete: bool) -> ExitCode {
    let _ = include_incomplete;
    ExitCode::from(1)
}

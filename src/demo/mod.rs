//! `shimgate demo`: both shims, scripted providers and the reference
//! compressor in one process (placeholder until the demo lands).

use std::process::ExitCode;

/// Runs the demo.
pub fn run(turns: u32, keep: bool) -> ExitCode {
    let _ = (turns, keep);
    eprintln!("shimgate demo: not built yet");
    ExitCode::FAILURE
}

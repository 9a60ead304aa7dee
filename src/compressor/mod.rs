//! The reference compression proxy (placeholder until it lands).

use std::net::SocketAddr;
use std::process::ExitCode;

/// Default threshold: compress once message content passes this many characters.
pub const DEFAULT_THRESHOLD_CHARS: usize = 8000;

/// Runs the compressor until stopped.
pub fn run(listen: SocketAddr, upstream: &str, threshold_chars: usize) -> ExitCode {
    let _ = (listen, upstream, threshold_chars);
    eprintln!("shimgate compressor: not built yet");
    ExitCode::FAILURE
}

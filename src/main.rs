//! The `shimgate` binary: parse the CLI, then hand over to the library.

use std::process::ExitCode;

use clap::Parser;
use shimgate::cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Frames { include_incomplete } => shimgate::frames::run_stdio(include_incomplete),
        Command::Serve { .. } | Command::CheckConfig { .. } => {
            eprintln!("shimgate: not built yet");
            ExitCode::from(1)
        }
    }
}

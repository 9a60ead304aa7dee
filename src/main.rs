//! The `shimgate` binary: parse the CLI, set up logging, hand over to the
//! library.

use std::process::ExitCode;

use clap::Parser;
use shimgate::cmd::cli::{Cli, Command};
use shimgate::cmd::env::Target;
use shimgate::cmd::serve;

fn main() -> ExitCode {
    let cli = Cli::parse();
    serve::init_tracing(cli.log_format);
    match cli.command {
        Command::Serve { config } => serve::serve(config.as_deref()),
        Command::CheckConfig { file } => serve::check_config(&file),
        Command::Paths { config } => shimgate::cmd::paths::run(config.as_deref()),
        Command::Autostart { action } => shimgate::cmd::autostart::run(action),
        Command::Ca { action } => shimgate::cmd::ca::run(action),
        Command::Env {
            target,
            shell,
            config,
        } => shimgate::cmd::env::run(target, shell, config.as_deref()),
        Command::Launch {
            proxy,
            config,
            command,
        } => {
            let target = if proxy { Target::Proxy } else { Target::Qoder };
            shimgate::cmd::launch::run(target, config.as_deref(), &command)
        }
        Command::Frames { include_incomplete } => {
            shimgate::cmd::frames::run_stdio(include_incomplete)
        }
        Command::Demo { turns, keep } => shimgate::demo::run(turns, keep, cli.log_format),
        Command::Compressor {
            listen,
            upstream,
            threshold_chars,
            keep_turns,
            pass_through,
        } => shimgate::compressor::run(
            listen,
            &upstream,
            shimgate::compressor::Policy {
                threshold_chars,
                keep_turns,
                pass_through,
            },
        ),
        Command::Translate { shim, leg, check } => shimgate::cmd::translate::run(&shim, leg, check),
    }
}

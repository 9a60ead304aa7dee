//! `shimgate launch [--proxy] [--config FILE] -- CMD ARGS…`: runs a client
//! with the variables `shimgate env qoder` (or, with `--proxy`, `shimgate
//! env proxy`) prints set for that one process, so nothing
//! else on the machine changes. The client is found as a shell finds it
//! (on Windows through `PATHEXT`, so npm's `qodercli.cmd` shim answers to
//! `qodercli`), then runs in this process's place ([`os::run_in_place`]):
//! it owns the terminal, gets Ctrl-C, and its exit code is launch's. A
//! shimgate that does not answer on the listener is a warning, not a
//! refusal: the user may start it next.

use std::ffi::OsString;
use std::path::{Path, MAIN_SEPARATOR};
use std::process::ExitCode;

use crate::cmd::env::{self, Target};
use crate::cmd::probe;
use crate::cmd::serve::{resolve_config, EXIT_CONFIG};
use crate::os;

/// Exit code when the command cannot be found (as shells use it).
pub const EXIT_NOT_FOUND: u8 = 127;

/// Exit code when the command was found but could not be started.
pub const EXIT_CANNOT_RUN: u8 = 126;

/// Runs `command` (the program, then its arguments) for `target`'s
/// clients.
pub fn run(target: Target, config: Option<&Path>, command: &[OsString]) -> ExitCode {
    let Some((typed, args)) = command.split_first() else {
        eprintln!("shimgate launch: no command given (shimgate launch -- CMD ARGS…)");
        return ExitCode::from(EXIT_CONFIG);
    };
    let config = match resolve_config(config) {
        Ok((c, _)) => c,
        Err(e) => {
            eprintln!("shimgate: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let prepared = match env::prepare(target, &config, &|k| std::env::var_os(k)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("shimgate launch: {e}");
            return ExitCode::FAILURE;
        }
    };
    for note in &prepared.notes {
        eprintln!("{note}");
    }
    let program = match which::which(typed) {
        Ok(p) => p,
        Err(_) => {
            eprintln!("shimgate launch: {}", not_found(typed));
            return ExitCode::from(EXIT_NOT_FOUND);
        }
    };
    let (answers, asked) = match target {
        Target::Qoder => (
            probe::version_at(prepared.listener).is_some(),
            "GET /status",
        ),
        Target::Proxy => (probe::capture_at(prepared.listener), "its capture listener"),
    };
    if !answers {
        eprintln!(
            "shimgate launch: warning: no shimgate answers on {} ({asked}): start it with `shimgate serve`; running {} anyway",
            prepared.listener,
            typed.to_string_lossy()
        );
    }
    match os::run_in_place(&program, typed, args, &prepared.pairs()) {
        // The client's own code, whole (Windows codes are 32 bits).
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("shimgate launch: cannot run {}: {e}", program.display());
            ExitCode::from(EXIT_CANNOT_RUN)
        }
    }
}

/// Why `typed` was not found, with how to get it when it is the Qoder CLI.
fn not_found(typed: &OsString) -> String {
    let name = typed.to_string_lossy();
    let path_like = name.contains(MAIN_SEPARATOR) || name.contains('/');
    let mut text = if path_like {
        format!("{name}: no such program (or it may not be run)")
    } else {
        format!("`{name}` was not found {}", os::PROGRAM_SEARCH)
    };
    if name == "qodercli" {
        text.push_str("; the Qoder CLI installs with `npm install -g @qoder-ai/qodercli`");
    }
    text
}

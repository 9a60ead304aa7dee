//! `shimgate autostart enable|disable|status`: the command side of
//! `crate::autostart` (what it installs, per OS). `status` also asks the
//! configured listeners whether a shimgate answers, since an entry that is
//! installed says nothing about whether it started.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::autostart::{self, Installed, Launch};
use crate::cmd::cli::AutostartAction;
use crate::cmd::probe;
use crate::cmd::serve::{resolve_config, EXIT_CONFIG};
use crate::config::paths;

/// Runs one action.
pub fn run(action: AutostartAction) -> ExitCode {
    let entry = match autostart::for_this_os() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("shimgate autostart: {e}");
            return ExitCode::FAILURE;
        }
    };
    match action {
        AutostartAction::Enable { config } => {
            let launch = match launch(config.as_deref()) {
                Ok(l) => l,
                Err(code) => return code,
            };
            match entry.enable(&launch) {
                Ok(at) => {
                    println!("installed {at}");
                    println!(
                        "runs at login: {} {}",
                        launch.exe.display(),
                        launch.args().join(" ")
                    );
                    println!("to start it now: {}", entry.start_now_hint());
                    println!("to remove it: shimgate autostart disable");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("shimgate autostart enable: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        AutostartAction::Disable => match entry.disable() {
            Ok(removed) if removed.is_empty() => {
                println!(
                    "nothing of shimgate's installed: {}",
                    describe(&entry.status())
                );
                ExitCode::SUCCESS
            }
            Ok(removed) => {
                for r in removed {
                    println!("removed {r}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("shimgate autostart disable: {e}");
                ExitCode::FAILURE
            }
        },
        AutostartAction::Status { config } => status(entry.status(), config),
    }
}

/// The binary running now and the config the entry will name: `--config`,
/// else what `serve` would find now, made absolute (the login session
/// starts in another folder).
fn launch(config: Option<&Path>) -> Result<Launch, ExitCode> {
    let exe = std::env::current_exe().map_err(|e| {
        eprintln!("shimgate autostart: cannot tell where this binary is: {e}");
        ExitCode::FAILURE
    })?;
    let (found, _) = resolve_config(config).map_err(|e| {
        eprintln!("shimgate autostart: config error: {e}");
        ExitCode::from(EXIT_CONFIG)
    })?;
    Ok(Launch {
        exe: paths::shown(&exe),
        config: found.source,
    })
}

fn describe(installed: &Installed) -> String {
    match installed {
        Installed::Nothing { at } => format!("nothing at {at}"),
        Installed::Ours { at, command, .. } => format!("{at} runs: {command}"),
        Installed::Foreign { at } => format!("{at} exists but was not written by shimgate"),
    }
}

fn status(installed: Installed, config: Option<PathBuf>) -> ExitCode {
    println!("autostart: {}", describe(&installed));
    let named = match &installed {
        Installed::Ours { config, .. } => config.clone(),
        _ => None,
    };
    let config = match resolve_config(config.or(named).as_deref()) {
        Ok((c, _)) => c,
        Err(e) => {
            eprintln!("shimgate autostart status: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    for shim in config.shims.iter().filter(|s| s.enabled) {
        if shim.listen.port() == 0 {
            println!(
                "listener {} {}: a free port picked at start, not asked",
                shim.name, shim.listen
            );
            continue;
        }
        let answer = match probe::version_at(shim.listen) {
            Some(version) => format!("a shimgate answers (version {version})"),
            None => "nothing answers".to_owned(),
        };
        println!("listener {} {}: {answer}", shim.name, shim.listen);
    }
    ExitCode::SUCCESS
}

//! Start at login, opt-in and reversible (`docs/desktops.md`): one per-user entry
//! that runs `shimgate serve --config FILE`, installed only when asked
//! (`shimgate autostart enable`) and removed exactly (`disable`): the
//! most repeated complaint in the issue trackers of local daemons is an
//! autostart that cannot be turned off.
//!
//! Each OS's entry is a module: a systemd user unit on Linux, a
//! LaunchAgent plist on macOS, a `HKCU\…\Run` value on Windows. All three
//! build everywhere, so their content is tested on every OS; which one
//! this OS uses, and the registry itself, are [`crate::os`]'s. A per-user
//! entry, not a system service: a service cannot see the user's folders or
//! proxy settings.

pub mod launchd;
pub mod run_key;
pub mod systemd;

use std::path::{Path, PathBuf};

use crate::os::{self, LoginEntry};

/// What every entry marks itself with, so `disable` removes only its own.
pub const MARKER: &str =
    "installed by `shimgate autostart enable`; `shimgate autostart disable` removes it";

/// The command an entry runs at login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The shimgate binary, absolute.
    pub exe: PathBuf,
    /// The config file, absolute; `None` runs with what `serve` finds then
    /// (the per-user config file, else defaults).
    pub config: Option<PathBuf>,
}

impl Launch {
    /// The arguments after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["serve".to_owned()];
        if let Some(config) = &self.config {
            args.push("--config".to_owned());
            args.push(config.display().to_string());
        }
        args
    }
}

/// What is installed where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// Nothing at `at`.
    Nothing { at: String },
    /// Our entry at `at`, running `command`; `config` is the file it names.
    Ours {
        at: String,
        command: String,
        config: Option<PathBuf>,
    },
    /// Something at `at` that `enable` did not write: left alone.
    Foreign { at: String },
}

impl Installed {
    /// Ours at `at`, running `words` (the binary, then its arguments).
    pub(crate) fn ours(at: String, words: Vec<String>) -> Installed {
        Installed::Ours {
            config: config_in(&words),
            command: words.join(" "),
            at,
        }
    }

    /// What a file-based entry holds: nothing, ours (its text carries
    /// `marker`; its command read by `words`), or something else.
    pub(crate) fn of_file(file: &Path, marker: &str, words: fn(&str) -> Vec<String>) -> Installed {
        let at = file.display().to_string();
        match std::fs::read_to_string(file) {
            Err(_) => Installed::Nothing { at },
            Ok(text) if text.contains(marker) => Installed::ours(at, words(&text)),
            Ok(_) => Installed::Foreign { at },
        }
    }

    /// `enable`'s refusal when something shimgate did not write holds the
    /// place: it is left alone.
    pub(crate) fn refuse_foreign(&self) -> std::io::Result<()> {
        match self {
            Installed::Foreign { at } => Err(std::io::Error::other(format!(
                "{at} exists and was not written by shimgate: left alone"
            ))),
            _ => Ok(()),
        }
    }
}

/// One OS's kind of entry.
pub trait Entry {
    /// Installs (or replaces our own) entry; returns where it is.
    fn enable(&self, launch: &Launch) -> std::io::Result<String>;
    /// Removes what `enable` installed; returns what was removed (empty
    /// when nothing of ours was there).
    fn disable(&self) -> std::io::Result<Vec<String>>;
    /// What is installed.
    fn status(&self) -> Installed;
    /// What a user runs to start it now, without logging in again.
    fn start_now_hint(&self) -> &'static str;
}

/// This OS's entry, rooted at the user's folders.
pub fn for_this_os() -> Result<Box<dyn Entry>, String> {
    let home = dirs::home_dir().ok_or("no home folder known for this user")?;
    Ok(match os::LOGIN_ENTRY {
        LoginEntry::RunKey => Box::new(run_key::RunKey),
        LoginEntry::LaunchAgent => Box::new(launchd::LaunchAgent::in_home(&home)),
        LoginEntry::SystemdUser => {
            let config = dirs::config_dir().unwrap_or_else(|| home.join(".config"));
            Box::new(systemd::UserUnit::in_config_dir(&config))
        }
    })
}

/// The config named after `--config` in an entry's command, for `status`.
pub fn config_in(args: &[String]) -> Option<PathBuf> {
    args.iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
}

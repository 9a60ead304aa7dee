//! Where shimgate's files live, per user, by each OS's convention
//! (`docs/desktops.md`), and how a path is shown. The OS folders come from the
//! `dirs` crate (XDG on Linux, the Standard Directories on macOS, the Known
//! Folder API on Windows); only `XDG_STATE_HOME` is read here by name, since
//! it is shimgate's own rule on every OS (tests and power users isolate a
//! run with it). Nothing defaults to the current directory: a state dir
//! that followed the folder shimgate was started from would lose the proxy
//! identity and the learned route order at every start elsewhere.

use std::path::{Path, PathBuf};

/// The name of the folder shimgate keeps its files in, under each OS's
/// per-user folder.
pub const APP_DIR: &str = "shimgate";

/// The config file's name, in the current directory or the per-user
/// config folder.
pub const CONFIG_FILE: &str = super::DEFAULT_CONFIG_FILE;

/// The state dir when the config names none: `$XDG_STATE_HOME/shimgate`
/// when that variable is set (any OS), else Linux
/// `~/.local/state/shimgate`, macOS `~/Library/Application
/// Support/shimgate`, Windows `%LOCALAPPDATA%\shimgate`. With no home
/// folder known at all (no `HOME`, no profile), the system's temporary
/// folder: still never the current directory.
pub fn default_state_dir() -> PathBuf {
    if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join(APP_DIR);
    }
    // `dirs` knows a state folder on Linux (and the other Unixes but
    // macOS) only; macOS and Windows keep state in the per-user data
    // folder that is not synced (`~/Library/Application Support`,
    // `%LOCALAPPDATA%`), which is what `data_local_dir` is there.
    dirs::state_dir()
        .or_else(dirs::data_local_dir)
        .map(|d| d.join(APP_DIR))
        .unwrap_or_else(|| std::env::temp_dir().join(APP_DIR))
}

/// The per-user config file: Linux `$XDG_CONFIG_HOME/shimgate/shimgate.toml`
/// or `~/.config/shimgate/shimgate.toml`, macOS `~/Library/Application
/// Support/shimgate/shimgate.toml`, Windows `%APPDATA%\shimgate\shimgate.toml`.
pub fn user_config_file() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join(APP_DIR).join(CONFIG_FILE))
}

/// Where `serve` without `--config` found its file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// `./shimgate.toml` in the current directory.
    CurrentDir(PathBuf),
    /// The per-user config file.
    User(PathBuf),
    /// Neither exists: built-in defaults (the per-user file it looked for).
    Defaults(Option<PathBuf>),
}

impl Found {
    /// The file to load, if any.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Found::CurrentDir(p) | Found::User(p) => Some(p),
            Found::Defaults(_) => None,
        }
    }

    /// Why this file (or none), for `serve` and `paths`.
    pub fn reason(&self) -> String {
        match self {
            Found::CurrentDir(_) => format!("./{CONFIG_FILE} in the current directory"),
            Found::User(_) => "the per-user config file".to_owned(),
            Found::Defaults(Some(user)) => format!(
                "built-in defaults: no ./{CONFIG_FILE}, no {}",
                shown(user).display()
            ),
            Found::Defaults(None) => {
                format!("built-in defaults: no ./{CONFIG_FILE}, no per-user config folder")
            }
        }
    }
}

/// `./shimgate.toml`, else the per-user config file, else defaults.
pub fn discover_config() -> Found {
    let here = PathBuf::from(CONFIG_FILE);
    if here.is_file() {
        return Found::CurrentDir(here);
    }
    match user_config_file() {
        Some(user) if user.is_file() => Found::User(user),
        user => Found::Defaults(user),
    }
}

/// A path from the config with `~` put in for the home folder: `~/…` on
/// every OS, and `~\…` too on Windows (`std::path::is_separator` knows
/// each OS's separators).
pub fn expand_home(path: &str) -> PathBuf {
    let rest = path.strip_prefix('~').and_then(|r| {
        let mut chars = r.chars();
        match chars.next() {
            None => Some(""),
            Some(c) if std::path::is_separator(c) => Some(chars.as_str()),
            Some(_) => None,
        }
    });
    match (rest, dirs::home_dir()) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    }
}

/// `path` made absolute against the current directory as the user wrote it:
/// no symlink resolved, and on Windows no `\\?\` prefix (which
/// `canonicalize` adds and a user never typed). What `/status`, the log and
/// the route state file's name use, the same way on every OS.
pub fn shown(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_shown_absolute_and_as_written() {
        let shown = shown(Path::new("some/dir/../shimgate.toml"));
        assert!(shown.is_absolute());
        let text = shown.display().to_string();
        assert!(!text.starts_with(r"\\?\"), "{text}");
        assert!(text.ends_with("shimgate.toml"), "{text}");
    }

    #[test]
    fn tilde_expands_to_the_home_folder_on_every_os() {
        let Some(home) = dirs::home_dir() else { return };
        assert_eq!(expand_home("~/x/y"), home.join("x/y"));
        assert_eq!(expand_home("~"), home);
        assert_eq!(expand_home("/abs/~/x"), PathBuf::from("/abs/~/x"));
        assert_eq!(expand_home("~other/x"), PathBuf::from("~other/x"));
        let native = format!("~{}x", std::path::MAIN_SEPARATOR);
        assert_eq!(expand_home(&native), home.join("x"));
    }

    #[test]
    fn the_default_state_dir_is_never_the_current_directory() {
        let dir = default_state_dir();
        assert!(dir.is_absolute(), "{}", dir.display());
        assert!(dir.ends_with(APP_DIR), "{}", dir.display());
    }

    /// The OS folder each platform's convention names, when no
    /// `XDG_STATE_HOME` is set (the tests that set it run the binary):
    /// Linux `~/.local/state`, macOS `~/Library/Application Support`,
    /// Windows `%LOCALAPPDATA%` (under the profile folder).
    #[test]
    fn the_state_dir_follows_the_os_convention() {
        if std::env::var_os("XDG_STATE_HOME").is_some() {
            return;
        }
        let (Some(home), dir) = (dirs::home_dir(), default_state_dir()) else {
            return;
        };
        let conventions = [
            ".local/state",
            "Library/Application Support",
            "AppData/Local",
        ];
        assert!(
            conventions
                .iter()
                .any(|under| dir == home.join(under).join(APP_DIR)),
            "{}",
            dir.display()
        );
    }
}

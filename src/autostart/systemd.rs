//! Linux: a systemd **user** unit, `~/.config/systemd/user/shimgate.service`,
//! enabled the way `systemctl --user enable` does it (a link in
//! `default.target.wants`), so enabling needs no running user manager and
//! `disable` removes exactly the two files it made.

use std::path::{Path, PathBuf};

use super::{Entry, Installed, Launch, MARKER};
use crate::os;

/// The unit's file name.
pub const UNIT: &str = "shimgate.service";

/// The unit in one config folder (`$XDG_CONFIG_HOME` or `~/.config`).
pub struct UserUnit {
    dir: PathBuf,
}

impl UserUnit {
    pub fn in_config_dir(config_dir: &Path) -> UserUnit {
        UserUnit {
            dir: config_dir.join("systemd").join("user"),
        }
    }

    fn unit(&self) -> PathBuf {
        self.dir.join(UNIT)
    }

    fn wants_link(&self) -> PathBuf {
        self.dir.join("default.target.wants").join(UNIT)
    }
}

/// One word of `ExecStart=`, quoted the way systemd reads it.
fn quoted(word: &str) -> String {
    let escaped = word
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('%', "%%")
        .replace('$', "$$");
    format!("\"{escaped}\"")
}

/// The unit file's text.
pub fn unit_text(launch: &Launch) -> String {
    let mut exec = vec![quoted(&launch.exe.display().to_string())];
    exec.extend(launch.args().iter().map(|a| quoted(a)));
    format!(
        "# {MARKER}\n\
         [Unit]\n\
         Description=shimgate: loopback gateway for the qoder and trae wires\n\
         \n\
         [Service]\n\
         ExecStart={}\n\
         Restart=on-failure\n\
         RestartSec=5\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        exec.join(" ")
    )
}

/// The words of our unit's `ExecStart=`, unquoted.
fn exec_words(text: &str) -> Vec<String> {
    let Some(line) = text.lines().find_map(|l| l.strip_prefix("ExecStart=")) else {
        return Vec::new();
    };
    let mut words = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut word = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => word.extend(chars.next()),
                '"' => break,
                c => word.push(c),
            }
        }
        words.push(word.replace("%%", "%").replace("$$", "$"));
    }
    words
}

impl Entry for UserUnit {
    fn enable(&self, launch: &Launch) -> std::io::Result<String> {
        self.status().refuse_foreign()?;
        os::replace_atomically(&self.unit(), unit_text(launch).as_bytes())?;
        let link = self.wants_link();
        std::fs::create_dir_all(link.parent().unwrap_or(&self.dir))?;
        let _ = std::fs::remove_file(&link);
        link_to(&self.unit(), &link)?;
        Ok(self.unit().display().to_string())
    }

    fn disable(&self) -> std::io::Result<Vec<String>> {
        let mut removed = Vec::new();
        if !matches!(self.status(), Installed::Ours { .. }) {
            return Ok(removed);
        }
        let link = self.wants_link();
        if std::fs::read_link(&link).is_ok_and(|to| to == self.unit()) {
            std::fs::remove_file(&link)?;
            removed.push(link.display().to_string());
        }
        std::fs::remove_file(self.unit())?;
        removed.push(self.unit().display().to_string());
        Ok(removed)
    }

    fn status(&self) -> Installed {
        Installed::of_file(&self.unit(), MARKER, exec_words)
    }

    fn start_now_hint(&self) -> &'static str {
        "systemctl --user daemon-reload && systemctl --user start shimgate"
    }
}

#[cfg(unix)]
fn link_to(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

/// Only Linux runs systemd; elsewhere (tests of this module on Windows) a
/// copy stands where the link would.
#[cfg(not(unix))]
fn link_to(target: &Path, link: &Path) -> std::io::Result<()> {
    std::fs::copy(target, link).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            exe: PathBuf::from("/opt/my tools/shimgate"),
            config: Some(PathBuf::from("/home/u/100% \"x\"/shimgate.toml")),
        }
    }

    #[test]
    fn the_unit_runs_serve_with_the_config_and_reads_back() {
        let text = unit_text(&launch());
        assert!(text.starts_with(&format!("# {MARKER}\n")));
        assert!(text.contains("WantedBy=default.target"));
        assert!(text.contains(r#"ExecStart="/opt/my tools/shimgate" "serve" "--config" "/home/u/100%% \"x\"/shimgate.toml""#), "{text}");
        let words = exec_words(&text);
        assert_eq!(words[0], "/opt/my tools/shimgate");
        assert_eq!(&words[1..], launch().args().as_slice());
    }

    #[cfg(unix)]
    #[test]
    fn enable_then_disable_leaves_nothing_and_a_foreign_unit_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let unit = UserUnit::in_config_dir(tmp.path());
        assert!(matches!(unit.status(), Installed::Nothing { .. }));
        unit.enable(&launch()).unwrap();
        let Installed::Ours { config, .. } = unit.status() else {
            panic!()
        };
        assert_eq!(config, launch().config);
        assert_eq!(std::fs::read_link(unit.wants_link()).unwrap(), unit.unit());
        assert_eq!(unit.disable().unwrap().len(), 2);
        assert!(matches!(unit.status(), Installed::Nothing { .. }));
        // The folders it made may stay; no file of ours does.
        assert!(!unit.wants_link().exists() && !unit.unit().exists());

        std::fs::write(unit.unit(), "[Service]\nExecStart=/bin/true\n").unwrap();
        assert!(matches!(unit.status(), Installed::Foreign { .. }));
        assert!(unit.enable(&launch()).is_err());
        assert!(unit.disable().unwrap().is_empty());
        assert!(unit.unit().exists());
    }
}

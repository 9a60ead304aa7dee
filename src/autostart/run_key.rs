//! Windows: a value named `shimgate` under
//! `HKCU\Software\Microsoft\Windows\CurrentVersion\Run`, which Windows runs
//! at the user's logon. Ours is recognised by its command: the quoted path
//! of a `shimgate.exe` followed by `serve`; anything else under that name is
//! left alone. The registry is read and written through [`crate::os`], so
//! this file builds, and its command line is tested, on every OS.

use super::{Entry, Installed, Launch};
use crate::os;

/// The value's name.
pub const VALUE: &str = "shimgate";

/// The per-user Run value.
pub struct RunKey;

/// One word of the command line, quoted for Windows' argument rules.
fn quoted(word: &str) -> String {
    format!("\"{}\"", word.replace('"', "\\\""))
}

/// The value's data.
pub fn command_line(launch: &Launch) -> String {
    let mut words = vec![quoted(&launch.exe.display().to_string())];
    words.extend(launch.args().iter().map(|a| quoted(a)));
    words.join(" ")
}

/// The words of a command line we wrote.
fn words(line: &str) -> Vec<String> {
    line.split('"')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, w)| w.to_owned())
        .collect()
}

fn is_ours(line: &str) -> bool {
    let w = words(line);
    w.len() >= 2 && w[0].to_ascii_lowercase().ends_with("shimgate.exe") && w[1] == "serve"
}

fn at() -> String {
    format!(r"HKCU\Software\Microsoft\Windows\CurrentVersion\Run\{VALUE}")
}

impl Entry for RunKey {
    fn enable(&self, launch: &Launch) -> std::io::Result<String> {
        self.status().refuse_foreign()?;
        os::set_run_value(VALUE, &command_line(launch))?;
        Ok(at())
    }

    fn disable(&self) -> std::io::Result<Vec<String>> {
        if !matches!(self.status(), Installed::Ours { .. }) {
            return Ok(Vec::new());
        }
        os::delete_run_value(VALUE)?;
        Ok(vec![at()])
    }

    fn status(&self) -> Installed {
        // An unreadable key reads as nothing there, as Windows' own
        // startup list shows it.
        match os::run_value(VALUE).ok().flatten() {
            None => Installed::Nothing { at: at() },
            Some(line) if is_ours(&line) => Installed::ours(at(), words(&line)),
            Some(_) => Installed::Foreign { at: at() },
        }
    }

    fn start_now_hint(&self) -> &'static str {
        "start it from a console: shimgate serve (or log off and on)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_command_line_quotes_each_word_and_reads_back() {
        let launch = Launch {
            exe: PathBuf::from(r"C:\Program Files\shimgate\shimgate.exe"),
            config: Some(PathBuf::from(
                r"C:\Users\u\AppData\Roaming\shimgate\shimgate.toml",
            )),
        };
        let line = command_line(&launch);
        assert_eq!(
            line,
            r#""C:\Program Files\shimgate\shimgate.exe" "serve" "--config" "C:\Users\u\AppData\Roaming\shimgate\shimgate.toml""#
        );
        assert!(is_ours(&line));
        assert!(!is_ours(r#""C:\other.exe" "serve""#));
        assert_eq!(super::super::config_in(&words(&line)), launch.config);
    }
}

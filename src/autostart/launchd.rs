//! macOS: a LaunchAgent, `~/Library/LaunchAgents/dev.shimgate.serve.plist`,
//! loaded by launchd at the user's next login (`RunAtLoad`), restarted if
//! it exits with an error; its output goes to `~/Library/Logs/shimgate.log`.
//! Built on every OS (a plain file), so its content is tested everywhere.

use std::path::{Path, PathBuf};

use super::{Entry, Installed, Launch, MARKER};
use crate::os;

/// The agent's label (and file name without `.plist`).
pub const LABEL: &str = "dev.shimgate.serve";

/// The agent in one home folder.
pub struct LaunchAgent {
    home: PathBuf,
}

impl LaunchAgent {
    pub fn in_home(home: &Path) -> LaunchAgent {
        LaunchAgent {
            home: home.to_path_buf(),
        }
    }

    fn plist(&self) -> PathBuf {
        self.home
            .join("Library/LaunchAgents")
            .join(format!("{LABEL}.plist"))
    }
}

fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn unxml(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// The plist's text.
pub fn plist_text(launch: &Launch, home: &Path) -> String {
    let mut args = vec![launch.exe.display().to_string()];
    args.extend(launch.args());
    let args: String = args
        .iter()
        .map(|a| format!("        <string>{}</string>\n", xml(a)))
        .collect();
    // macOS paths, written with `/` whatever OS builds the text.
    let home = home.display().to_string();
    let log = xml(&format!(
        "{}/Library/Logs/shimgate.log",
        home.trim_end_matches('/')
    ));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- {} -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \x20   <key>Label</key>\n\
         \x20   <string>{LABEL}</string>\n\
         \x20   <key>ProgramArguments</key>\n\
         \x20   <array>\n\
         {args}\
         \x20   </array>\n\
         \x20   <key>RunAtLoad</key>\n\
         \x20   <true/>\n\
         \x20   <key>KeepAlive</key>\n\
         \x20   <dict>\n\
         \x20       <key>SuccessfulExit</key>\n\
         \x20       <false/>\n\
         \x20   </dict>\n\
         \x20   <key>StandardOutPath</key>\n\
         \x20   <string>{log}</string>\n\
         \x20   <key>StandardErrorPath</key>\n\
         \x20   <string>{log}</string>\n\
         </dict>\n\
         </plist>\n",
        comment_marker()
    )
}

/// The marker as an XML comment may hold it (no `--`).
fn comment_marker() -> String {
    xml(MARKER).replace("--", "- -")
}

/// The `ProgramArguments` strings of a plist we wrote.
fn program_arguments(text: &str) -> Vec<String> {
    let Some(start) = text.find("<key>ProgramArguments</key>") else {
        return Vec::new();
    };
    let rest = &text[start..];
    let end = rest.find("</array>").unwrap_or(rest.len());
    rest[..end]
        .split("<string>")
        .skip(1)
        .filter_map(|s| s.split("</string>").next())
        .map(unxml)
        .collect()
}

impl Entry for LaunchAgent {
    fn enable(&self, launch: &Launch) -> std::io::Result<String> {
        self.status().refuse_foreign()?;
        os::replace_atomically(&self.plist(), plist_text(launch, &self.home).as_bytes())?;
        Ok(self.plist().display().to_string())
    }

    fn disable(&self) -> std::io::Result<Vec<String>> {
        if !matches!(self.status(), Installed::Ours { .. }) {
            return Ok(Vec::new());
        }
        std::fs::remove_file(self.plist())?;
        Ok(vec![self.plist().display().to_string()])
    }

    fn status(&self) -> Installed {
        Installed::of_file(&self.plist(), &comment_marker(), program_arguments)
    }

    fn start_now_hint(&self) -> &'static str {
        "launchctl load ~/Library/LaunchAgents/dev.shimgate.serve.plist"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            exe: PathBuf::from("/Applications/shim & gate/shimgate"),
            config: Some(PathBuf::from(
                "/Users/u/Library/Application Support/shimgate/shimgate.toml",
            )),
        }
    }

    #[test]
    fn the_plist_is_a_launch_agent_running_serve_with_the_config() {
        let text = plist_text(&launch(), Path::new("/Users/u"));
        assert!(text.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE plist"));
        assert!(text.contains("<key>Label</key>\n    <string>dev.shimgate.serve</string>"));
        assert!(text.contains("<string>/Applications/shim &amp; gate/shimgate</string>"));
        assert!(text.contains("<key>RunAtLoad</key>\n    <true/>"));
        assert!(text.contains("<string>/Users/u/Library/Logs/shimgate.log</string>"));
        // An XML comment may not hold "--".
        let comment = text
            .split("<!--")
            .nth(1)
            .unwrap()
            .split("-->")
            .next()
            .unwrap();
        assert!(!comment.contains("--"), "{comment}");
        let mut expected = vec![launch().exe.display().to_string()];
        expected.extend(launch().args());
        assert_eq!(program_arguments(&text), expected);
    }

    #[test]
    fn enable_then_disable_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let agent = LaunchAgent::in_home(tmp.path());
        assert!(matches!(agent.status(), Installed::Nothing { .. }));
        agent.enable(&launch()).unwrap();
        let Installed::Ours { config, .. } = agent.status() else {
            panic!()
        };
        assert_eq!(config, launch().config);
        assert_eq!(agent.disable().unwrap().len(), 1);
        assert!(matches!(agent.status(), Installed::Nothing { .. }));
        std::fs::write(agent.plist(), "<plist/>").unwrap();
        assert!(matches!(agent.status(), Installed::Foreign { .. }));
        assert!(agent.disable().unwrap().is_empty());
    }
}

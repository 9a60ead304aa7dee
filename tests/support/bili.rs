//! The real billion-context proxy (bili 0.1.45, the bundle in
//! `../shared/third_party/billion-context`, or the folder `SHIMGATE_BILI`
//! names), started with its own `run.sh` on a free port. Skipped with a note
//! when the bundle or Node is missing, unless `SHIMGATE_REQUIRE_EXTERNAL=1`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::client;

/// A running bili, stopped when dropped.
pub struct Bili {
    pub pid: u32,
    pub port: u16,
    /// Its config, XDG dirs and `bili.log`.
    pub scratch: tempfile::TempDir,
}

impl Drop for Bili {
    /// `run.sh` starts bili in the background and prints its pid: not our
    /// child, so it gets a `TERM` by pid (what `kill PID` sent).
    fn drop(&mut self) {
        super::signal::send(self.pid, "TERM");
    }
}

/// The bundle, or `None` (skip) when it or Node is missing.
pub fn bundle() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("SHIMGATE_BILI")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("../shared/third_party/billion-context"));
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let why = if !dir.join("run.sh").is_file() {
        format!(
            "billion-context is not at {} (set SHIMGATE_BILI to its folder)",
            dir.display()
        )
    } else if !node {
        "billion-context needs Node (`node` is not on PATH)".to_string()
    } else {
        return Some(dir);
    };
    if std::env::var("SHIMGATE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

impl Bili {
    /// Starts bili in front of `upstream` (one shimgate listener) with a
    /// `window`-token context window for every model.
    pub async fn start(dir: &std::path::Path, upstream: &str, window: u64) -> Bili {
        let scratch = tempfile::tempdir().unwrap();
        let port = super::external::free_port();
        let out = Command::new("bash")
            .arg(dir.join("run.sh"))
            .arg(upstream)
            .arg(port.to_string())
            .arg(scratch.path().join("bili"))
            .env("BILI_WINDOW", window.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "bili did not start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let bili = Bili { pid, port, scratch };
        let health = format!("{}/__bili/health", bili.url());
        let up = super::eventually(Duration::from_secs(20), || {
            let health = health.clone();
            async move {
                tokio::time::timeout(Duration::from_millis(500), client::get_ok(&health))
                    .await
                    .unwrap_or(false)
            }
        })
        .await;
        assert!(up, "bili did not answer on {health}:\n{}", bili.log());
        bili
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything bili logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.scratch.path().join("bili/bili.log")).unwrap_or_default()
    }

    /// bili's sessions (`GET /__bili/stats`).
    pub async fn sessions(&self) -> Vec<Value> {
        let v = client::get(&format!("{}/__bili/stats", self.url()))
            .await
            .json();
        v["sessions"].as_array().cloned().unwrap_or_default()
    }
}

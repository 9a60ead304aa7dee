//! A real browser for the tests: Debian's Chromium, headless, driven by
//! Playwright for Python (`tests/support/browser/run.py`, in `.venv` from
//! `tests/requirements.txt`; `.ci/run` installs Chromium with apt). A test
//! whose browser is missing is skipped with a note, unless
//! `SHIMGATE_REQUIRE_EXTERNAL=1` makes that a failure.

use std::path::PathBuf;
use std::process::Stdio;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::external::python_with;

/// What runs a scenario: a Python with Playwright and the Chromium binary.
pub struct Browser {
    python: PathBuf,
    chromium: PathBuf,
}

impl Browser {
    /// The browser, or `None` (skip) when Playwright or Chromium is missing.
    pub fn find() -> Option<Browser> {
        let python = python_with("playwright")?;
        let chromium = std::env::var_os("SHIMGATE_CHROMIUM")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
        if !chromium.exists() {
            let why = format!(
                "no Chromium at {}: `apt-get install -y chromium` (or set SHIMGATE_CHROMIUM)",
                chromium.display()
            );
            if std::env::var("SHIMGATE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1") {
                panic!("{why}");
            }
            eprintln!("SKIPPED: {why}");
            return None;
        }
        Some(Browser { python, chromium })
    }

    /// Runs `scenario` with `params` and returns what it found; a failed
    /// scenario fails the test with its stderr.
    pub async fn run(&self, scenario: &str, params: &Value) -> Value {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/browser/run.py");
        let mut child = tokio::process::Command::new(&self.python)
            .arg(script)
            .arg(scenario)
            .env("SHIMGATE_CHROMIUM", &self.chromium)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(params.to_string().as_bytes())
            .await
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "browser scenario {scenario} failed:\n{stderr}\n{stdout}"
        );
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| {
            panic!("scenario {scenario} printed no JSON ({e}):\n{stdout}\n{stderr}")
        })
    }
}

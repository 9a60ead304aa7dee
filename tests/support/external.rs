//! Third-party programs the tests run: the official openai Python SDK (as a
//! proxy that parses what the return leg sends) and context-guardian (a real
//! compression proxy). `.ci/run` installs them into `.venv`; elsewhere a test
//! that needs a missing one is skipped with a note, unless
//! `SHIMGATE_REQUIRE_EXTERNAL=1` makes that a failure.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A child process killed when dropped.
pub struct Proc {
    pub child: Child,
    pub port: u16,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// A Python that can import `module`, or `None` (skip) when there is none.
pub fn python_with(module: &str) -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("SHIMGATE_PYTHON").map(PathBuf::from),
        Some(root.join(".venv/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    for py in candidates.into_iter().flatten() {
        let ok = Command::new(&py)
            .args(["-c", &format!("import {module}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(py);
        }
    }
    let why = format!("no Python with `{module}`: run `.ci/run` once, or `python3 -m venv .venv && .venv/bin/pip install -r tests/requirements.txt`");
    if std::env::var("SHIMGATE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
    None
}

/// Starts the SDK proxy in front of `upstream`.
pub fn sdk_proxy(python: &PathBuf, upstream: &str) -> Proc {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/sdk_proxy.py");
    let mut child = Command::new(python)
        .args([script, upstream])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("sdk proxy said {line:?}"));
    Proc { child, port }
}

/// A free loopback port (for programs that need one given).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts context-guardian forwarding to `upstream`, with a tiny window so
/// it compacts early.
pub async fn guardian(python: &PathBuf, upstream: &str) -> Proc {
    let port = free_port();
    let data = std::env::temp_dir().join(format!("guardian-{port}"));
    let child = Command::new(python)
        .args(["-c", "import context_guardian; context_guardian.main()"])
        .env("GUARDIAN_UPSTREAM_URL", upstream)
        .env("GUARDIAN_HOST", "127.0.0.1")
        .env("GUARDIAN_PORT", port.to_string())
        .env("GUARDIAN_NUM_CTX", "2000")
        .env("GUARDIAN_COMPACT_THRESHOLD", "0.5")
        .env("GUARDIAN_RESERVE_OUTPUT", "200")
        .env("GUARDIAN_VERSION_CHECK", "0")
        .env("GUARDIAN_NO_UPDATE_CHECK", "1")
        .env("GUARDIAN_DETECT_CONTEXT", "0")
        .env("GUARDIAN_DATA_DIR", &data)
        .env("CI", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let proc = Proc { child, port };
    let health = format!("{}/guardian/health", proc.url());
    let up = super::eventually(Duration::from_secs(20), || {
        let health = health.clone();
        async move {
            tokio::time::timeout(Duration::from_millis(500), super::client::get_ok(&health))
                .await
                .unwrap_or(false)
        }
    })
    .await;
    assert!(up, "context-guardian did not start on port {port}");
    proc
}

//! Third-party programs the tests run: the official openai Python SDK (as a
//! proxy that parses what the return leg sends) and three real compression
//! proxies from PyPI, context-guardian, awecompress and Headroom. `.ci/run`
//! installs them into `.venv`; elsewhere a test that needs a missing one is
//! skipped with a note, unless `SHIMGATE_REQUIRE_EXTERNAL=1` makes that a
//! failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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

/// A program on `PATH` the tests drive (`node`, `openssl`, `certutil`), or
/// `None` (skip, with a note saying how to get it: `install`) when it is
/// not installed; `SHIMGATE_REQUIRE_EXTERNAL=1` makes a missing one fail.
pub fn program(name: &str, install: &str) -> Option<PathBuf> {
    // Any exit status will do: `certutil` has no `--version` and says so.
    let there = Command::new(name)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if there {
        return Some(PathBuf::from(name));
    }
    let why = format!("no `{name}` on PATH: {install}");
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

/// A compression proxy from PyPI started for one test: offline and quiet
/// (see [`offline_and_quiet`]), its HOME, config and state in its own
/// scratch folder, its output in `scratch/log`. Dropping it (the test
/// ending, or panicking) kills it by PID before the folder goes.
pub struct Peer {
    pub name: &'static str,
    child: Child,
    pub port: u16,
    scratch: tempfile::TempDir,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Peer {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything it printed so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.scratch.path().join("log")).unwrap_or_default()
    }

    /// Starts `cmd` (already given its arguments) as `name` on `port`, then
    /// polls `ready` (a path on it) until it answers 2xx; fails with its log
    /// if it exits first or is not ready within `patience`.
    async fn start(
        name: &'static str,
        mut cmd: Command,
        port: u16,
        scratch: tempfile::TempDir,
        ready: &str,
        patience: Duration,
    ) -> Peer {
        let log = std::fs::File::create(scratch.path().join("log")).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name} did not start: {e}"));
        let mut peer = Peer {
            name,
            child,
            port,
            scratch,
        };
        let url = format!("{}{ready}", peer.url());
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = peer.child.try_wait() {
                panic!(
                    "{name} exited ({status}) before it was ready:\n{}",
                    peer.log()
                );
            }
            let up = tokio::time::timeout(Duration::from_millis(500), super::client::get_ok(&url))
                .await
                .unwrap_or(false);
            if up {
                eprintln!("{name} ready in {:.1} s", started.elapsed().as_secs_f64());
                return peer;
            }
            assert!(
                started.elapsed() < patience,
                "{name} was not ready on {url} within {patience:?}:\n{}",
                peer.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What every PyPI peer starts with: HOME and the XDG folders in `scratch`
/// (nothing read from or written to the user's own), `DO_NOT_TRACK=1`,
/// `CI=1` (which both context-guardian and Headroom read as "no update
/// check"), no HTTP proxy (every call it makes is to loopback), unbuffered
/// output so its log is current when a test fails.
fn offline_and_quiet(cmd: &mut Command, scratch: &Path) {
    cmd.env("HOME", scratch)
        .env("XDG_CONFIG_HOME", scratch.join("config"))
        .env("XDG_CACHE_HOME", scratch.join("cache"))
        .env("XDG_DATA_HOME", scratch.join("data"))
        .env("XDG_STATE_HOME", scratch.join("state"))
        .env("DO_NOT_TRACK", "1")
        .env("CI", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env("PYTHONDONTWRITEBYTECODE", "1");
    for var in [
        "http_proxy",
        "https_proxy",
        "all_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
    ] {
        cmd.env_remove(var);
    }
}

/// The awecompress settings the tests run with: past 1,000 estimated
/// tokens (4,000 characters, one turn of [`super::conversation`]) it
/// summarises every turn but the last, once the span is worth 1,000 tokens;
/// each value is awecompress's own minimum.
pub const AWECOMPRESS_CONFIG: &str = r#"{"thresholdTokens": 1000, "keepRecentTurns": 1, "minSpanTokens": 1000, "summaryMaxTokens": 256}"#;

/// Starts awecompress 0.2 (`awecompress serve`) forwarding to `upstream`,
/// with [`AWECOMPRESS_CONFIG`] and its summary store in a scratch folder.
/// It makes no call of its own but the summary; ready when `GET /` answers.
pub async fn awecompress(python: &Path, upstream: &str) -> Peer {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("awecompress");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.json");
    std::fs::write(&config, AWECOMPRESS_CONFIG).unwrap();
    let port = free_port();
    let mut cmd = Command::new(python);
    cmd.args(["-c", "from awecompress.cli import main; main()", "serve"])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--upstream", upstream])
        .arg("--config")
        .arg(&config)
        // The summary store (summaries.db) lives beside the config.
        .env("AWECOMPRESS_CONFIG_DIR", &dir);
    offline_and_quiet(&mut cmd, scratch.path());
    Peer::start(
        "awecompress",
        cmd,
        port,
        scratch,
        "/",
        Duration::from_secs(30),
    )
    .await
}

/// Starts Headroom 0.42 (`headroom proxy`) in front of `upstream` for
/// OpenAI chat, in `--mode token` (it may rewrite earlier turns) with its
/// rate limiter and response cache off, as users run it in front of a
/// gateway. Offline: `HEADROOM_OFFLINE=1` refuses every connection it
/// would make on its own (beacon, update check, model downloads, pricing
/// table), `HEADROOM_TELEMETRY=off` and `HEADROOM_BEACON=off` turn its
/// local stats and upload beacon off as well, `HEADROOM_UPDATE_CHECK=off`,
/// `HEADROOM_SKIP_UPSTREAM_CHECK=1` stops its health probe of the Anthropic
/// upstream, `--disable-kompress` skips the ML text compressor whose model
/// it would download, `--no-subscription-tracking` its quota pollers. Its
/// workspace and config dirs are in the scratch folder. Ready when `GET
/// /readyz` answers 200 (it takes some seconds: a large Python app).
pub async fn headroom(python: &Path, upstream: &str) -> Peer {
    let scratch = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cmd = Command::new(python);
    cmd.args(["-m", "headroom.cli", "proxy"])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--openai-api-url", upstream])
        // Nothing is sent there; pointing it at loopback keeps even a
        // stray call on this machine.
        .args(["--anthropic-api-url", upstream])
        .args(["--mode", "token", "--no-rate-limit", "--no-cache"])
        .args([
            "--disable-kompress",
            "--no-subscription-tracking",
            "--no-telemetry",
        ])
        .env("HEADROOM_OFFLINE", "1")
        .env("HEADROOM_TELEMETRY", "off")
        .env("HEADROOM_BEACON", "off")
        .env("HEADROOM_TELEMETRY_WARN", "off")
        .env("HEADROOM_UPDATE_CHECK", "off")
        .env("HEADROOM_SKIP_UPSTREAM_CHECK", "1")
        .env("HF_HUB_OFFLINE", "1")
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("HEADROOM_WORKSPACE_DIR", scratch.path().join("headroom"))
        .env(
            "HEADROOM_CONFIG_DIR",
            scratch.path().join("headroom/config"),
        );
    offline_and_quiet(&mut cmd, scratch.path());
    Peer::start(
        "headroom",
        cmd,
        port,
        scratch,
        "/readyz",
        Duration::from_secs(120),
    )
    .await
}

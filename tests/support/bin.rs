//! The real `shimgate` binary as a child process: `serve` with a config
//! file, its ports read from the `listening` lines, its stderr kept for
//! log checks.
//!
//! `SHIMGATE_BIN` names another binary to run instead of the one Cargo
//! built: `.ci/windows` points it at a wrapper that runs `shimgate.exe`
//! under Wine, so the same end-to-end tests drive the Windows binary.
//! There `SHIMGATE_STOP_SIGNAL=INT` (Wine turns SIGINT into the console's
//! Ctrl-C; TERM would end the process without a drain). The tests
//! themselves run on a Unix host: they signal the child with rustix.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `shimgate serve`.
pub struct Served {
    pub child: Child,
    pub qoder: String,
    pub trae: String,
    /// The capture listener (`http://127.0.0.1:PORT`; empty when the
    /// config has no `[capture] listen`).
    pub capture: String,
    pub stderr_file: PathBuf,
}

impl Served {
    /// `serve --config file` with the shims named in `shims` listening,
    /// and `env` added to its environment.
    pub fn start_with(config: &Path, shims: &[String], env: &[(&str, &str)]) -> Served {
        let shims: Vec<&str> = shims.iter().map(String::as_str).collect();
        Served::spawn(config, &[], env, &shims)
    }

    /// Starts `shimgate [args] serve --config file`.
    pub fn start(config: &Path, global_args: &[&str], env: &[(&str, &str)]) -> Served {
        Served::spawn(config, global_args, env, &["qoder", "trae"])
    }

    fn spawn(config: &Path, global_args: &[&str], env: &[(&str, &str)], shims: &[&str]) -> Served {
        let stderr_file = config.with_extension("stderr.log");
        let err = std::fs::File::create(&stderr_file).unwrap();
        let mut cmd = Command::new(shimgate_bin());
        cmd.args(global_args)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(err)
            .env_remove("RUST_LOG")
            // The proxy identity key goes beside the config, not in $HOME.
            .env("XDG_STATE_HOME", config.with_extension("state"));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut qoder, mut trae, mut capture) = (String::new(), String::new(), String::new());
        let wants_capture = has_capture(config);
        let waiting = |qoder: &str, trae: &str, capture: &str| {
            (shims.contains(&"qoder") && qoder.is_empty())
                || (shims.contains(&"trae") && trae.is_empty())
                || (wants_capture && capture.is_empty())
        };
        while waiting(&qoder, &trae, &capture) {
            let Some(Ok(line)) = lines.next() else {
                panic!(
                    "shimgate exited: {}",
                    std::fs::read_to_string(&stderr_file).unwrap_or_default()
                );
            };
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                ["listening", "qoder", addr] => qoder = format!("http://{addr}"),
                ["listening", "trae", addr] => trae = format!("http://{addr}"),
                ["listening", "capture", addr] => capture = format!("http://{addr}"),
                _ => {}
            }
        }
        Served {
            child,
            qoder,
            trae,
            capture,
            stderr_file,
        }
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    /// Stops it as a user would (TERM; Ctrl-C under Wine) and waits until
    /// it exited, so what it writes at shutdown is on disk.
    pub fn stop(mut self) {
        self.signal("TERM");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("shimgate did not stop within 15 s:\n{}", self.stderr());
    }

    /// Sends a signal (`HUP`, `TERM`, `INT`). `TERM` is the stop signal:
    /// `SHIMGATE_STOP_SIGNAL` names another (`INT` under Wine).
    pub fn signal(&self, sig: &str) {
        let stop = std::env::var("SHIMGATE_STOP_SIGNAL").unwrap_or_else(|_| "TERM".into());
        let sig = match (sig, stop.as_str()) {
            ("TERM", "INT") => "INT",
            (sig, _) => sig,
        };
        super::signal::send(self.child.id(), sig);
    }
}

/// Whether the config file sets `[capture] listen` (then `serve` prints
/// `listening capture ADDR` after the shims' lines).
fn has_capture(config: &Path) -> bool {
    std::fs::read_to_string(config)
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok())
        .is_some_and(|t| t.get("capture").and_then(|c| c.get("listen")).is_some())
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary the tests run: `SHIMGATE_BIN`, else the one Cargo built.
pub fn shimgate_bin() -> PathBuf {
    external().unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_shimgate")))
}

/// `SHIMGATE_BIN`, when set: the tests drive that binary (`.ci/windows`).
pub fn external() -> Option<PathBuf> {
    std::env::var_os("SHIMGATE_BIN")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Whether the binary under test is a Windows one (`SHIMGATE_BIN_OS=windows`,
/// set by `.ci/windows`).
pub fn windows_binary() -> bool {
    std::env::var("SHIMGATE_BIN_OS").is_ok_and(|v| v == "windows")
}

/// A test that needs shimgate in this process (a paused clock, a config
/// built in code, a grace period of its own) or a Unix binary: `true`, with
/// a note, when the binary under test is `SHIMGATE_BIN`.
pub fn skip_for_external(why: &str) -> bool {
    if external().is_some() {
        eprintln!("SKIPPED under SHIMGATE_BIN: {why}");
        return true;
    }
    false
}

/// A test whose binary must start a Unix tool (`python3` as the exec
/// codec): `true`, with a note, when the binary under test is a Windows one
/// under Wine, which cannot start a Linux program.
pub fn skip_for_windows_binary(why: &str) -> bool {
    if windows_binary() {
        eprintln!("SKIPPED for the Windows binary: {why}");
        return true;
    }
    false
}

/// How the binary under test shows `path`: absolute as written (Linux), or
/// as Wine shows a Unix path to a Windows program (`Z:\tmp\…`).
pub fn shown(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap();
    if windows_binary() {
        format!("Z:{}", abs.display().to_string().replace('/', "\\"))
    } else {
        abs.display().to_string()
    }
}

/// A fresh temporary directory, removed with everything in it when
/// dropped; it reads as its path (`dir.join(…)`).
pub struct TempDir(tempfile::TempDir);

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// A fresh temporary directory.
pub fn tempdir() -> TempDir {
    TempDir(
        tempfile::Builder::new()
            .prefix("shimgate-test-")
            .tempdir()
            .unwrap(),
    )
}

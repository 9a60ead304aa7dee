//! The real `shimgate` binary as a child process: `serve` with a config
//! file, its ports read from the `listening` lines, its stderr kept for
//! log checks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rustix::process::{kill_process, Pid, Signal};

/// A running `shimgate serve`.
pub struct Served {
    pub child: Child,
    pub qoder: String,
    pub trae: String,
    pub stderr_file: PathBuf,
}

impl Served {
    /// Starts `shimgate [args] serve --config file`.
    pub fn start(config: &Path, global_args: &[&str], env: &[(&str, &str)]) -> Served {
        let stderr_file = config.with_extension("stderr.log");
        let err = std::fs::File::create(&stderr_file).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shimgate"));
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
        let (mut qoder, mut trae) = (String::new(), String::new());
        while qoder.is_empty() || trae.is_empty() {
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
                _ => {}
            }
        }
        Served {
            child,
            qoder,
            trae,
            stderr_file,
        }
    }

    /// Everything written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
    }

    /// Stops it as a user would (TERM) and waits until it exited, so what
    /// it writes at shutdown is on disk.
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

    /// Sends a signal (`HUP`, `TERM`).
    pub fn signal(&self, sig: &str) {
        let sig = match sig {
            "HUP" => Signal::HUP,
            "TERM" => Signal::TERM,
            other => panic!("no signal {other} here: add it"),
        };
        kill_process(Pid::from_child(&self.child), sig).unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

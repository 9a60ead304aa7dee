//! The processes under test: the real `shimgate serve` binary (and the
//! reference `shimgate compressor`), started with a generated config and the
//! file-descriptor limit raised to the machine's hard cap, plus `/status`
//! and the child's memory from `/proc`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::agent::{collect, Conn};

/// The binary under test: `$SHIMGATE_BIN`, else the one cargo built for
/// this bench (same profile), else `target/release/shimgate` beside it.
pub fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SHIMGATE_BIN") {
        return PathBuf::from(p);
    }
    let built = PathBuf::from(env!("CARGO_BIN_EXE_shimgate"));
    if built.exists() {
        return built;
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // …/release/deps/load-HASH → …/release/shimgate
    exe.parent()
        .and_then(|deps| deps.parent())
        .map(|dir| dir.join("shimgate"))
        .unwrap_or(built)
}

/// A free loopback port (bound, read, released; the small race with other
/// programs is acceptable on a bench machine).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The soft descriptor limit a child gets: `ulimit -n` may only rise to
/// the hard cap, which on this kind of machine is below 65,536.
pub fn fd_cap() -> u64 {
    let out = std::process::Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .ok();
    out.and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1024)
}

/// A command every child is started under (the profile phase's
/// `valgrind --tool=callgrind …`); empty: the program itself.
static WRAPPER: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Starts every later child under `wrapper` (`program args…` appended).
pub fn set_wrapper(wrapper: Vec<String>) {
    *WRAPPER.lock().unwrap_or_else(|p| p.into_inner()) = wrapper;
}

fn wrapper() -> Vec<String> {
    WRAPPER.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// A child process that prints `listening …` lines on stdout.
pub struct Proc {
    pub child: Child,
    pub pid: u32,
    /// `listening NAME ADDR` → (NAME, ADDR); the compressor prints no name.
    pub listening: Vec<(String, SocketAddr)>,
    /// Started under a wrapper (valgrind): stopped with SIGTERM, so the
    /// tool writes its file.
    wrapped: bool,
}

impl Proc {
    /// Runs `program args…` through `sh` with the descriptor limit at the
    /// hard cap, waiting until `expect` listening lines were printed.
    pub async fn spawn(
        program: &std::path::Path,
        args: &[String],
        expect: usize,
        log: PathBuf,
        rust_log: &str,
    ) -> Proc {
        let script = "ulimit -n $(ulimit -Hn) 2>/dev/null; exec \"$@\"";
        let stderr = std::fs::File::create(&log).expect("log file");
        let wrapper = wrapper();
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(&wrapper)
            .arg(program)
            .args(args)
            .env("RUST_LOG", rust_log);
        // An experiment knob: the child's tokio worker count (tokio reads
        // TOKIO_WORKER_THREADS), without touching the bench's own runtime.
        if let Some(n) = std::env::var_os("LOAD_SHIMGATE_WORKERS") {
            command.env("TOKIO_WORKER_THREADS", n);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        let pid = child.id().expect("pid");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut listening = Vec::new();
        let wait = async {
            while listening.len() < expect {
                let Ok(Some(line)) = lines.next_line().await else {
                    break;
                };
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["listening", name, addr] => {
                        listening.push((name.to_string(), addr.parse().expect("addr")))
                    }
                    ["listening", addr] => {
                        listening.push((String::new(), addr.parse().expect("addr")))
                    }
                    _ => {}
                }
            }
        };
        // Under valgrind a start takes seconds, not milliseconds.
        let limit = Duration::from_secs(if wrapper.is_empty() { 20 } else { 180 });
        if tokio::time::timeout(limit, wait).await.is_err() || listening.len() < expect {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("{:?} did not start:\n{text}", args);
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Proc {
            child,
            pid,
            listening,
            wrapped: !wrapper.is_empty(),
        }
    }

    /// The address printed for `name` ("" for the compressor).
    pub fn addr(&self, name: &str) -> SocketAddr {
        self.listening
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("{name} is not listening"))
    }

    /// `VmRSS` and `VmHWM` (peak) in KiB.
    pub fn memory_kib(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// CPU time the child's threads used so far, in nanoseconds from
    /// `/proc/PID/task/*/schedstat` (the tokio threads live as long as the
    /// process), else from `/proc/PID/stat` in clock ticks of 10 ms.
    pub fn cpu(&self) -> std::time::Duration {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid));
        let ns: Option<u64> = tasks.ok().and_then(|dir| {
            dir.map(|t| {
                let t = t.ok()?;
                let s = std::fs::read_to_string(t.path().join("schedstat")).ok()?;
                s.split_whitespace().next()?.parse::<u64>().ok()
            })
            .sum()
        });
        if let Some(ns) = ns.filter(|&n| n > 0) {
            return std::time::Duration::from_nanos(ns);
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        // Fields after the `(comm)`; utime and stime are the 14th and 15th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
        std::time::Duration::from_millis(ticks * 10)
    }

    /// Read and write system calls (`/proc/PID/io` `syscr` + `syscw`) and
    /// context switches (every thread's, voluntary and not) so far.
    pub fn kernel_counts(&self) -> (u64, u64) {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.pid)).unwrap_or_default();
        let field = |text: &str, name: &str| -> u64 {
            text.lines()
                .filter(|l| l.starts_with(name))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum()
        };
        let syscalls = field(&io, "syscr:") + field(&io, "syscw:");
        let switches = std::fs::read_dir(format!("/proc/{}/task", self.pid))
            .into_iter()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
            .map(|s| {
                field(&s, "voluntary_ctxt_switches:") + field(&s, "nonvoluntary_ctxt_switches:")
            })
            .sum();
        (syscalls, switches)
    }

    /// Open descriptors of the child.
    pub fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Stops the child (SIGKILL: nothing to flush, and it is ours).
    pub async fn stop(mut self) {
        if self.wrapped {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &self.pid.to_string()])
                .status()
                .await;
            let _ = tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await;
        }
        let _ = self.child.kill().await;
    }
}

/// A scratch directory for configs and logs.
pub fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("shimgate-load-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

/// Starts `shimgate serve` with `toml` on two pre-picked ports, under
/// `$LOAD_SERVE_WRAP` when set (a command line, e.g. `valgrind
/// --tool=dhat --dhat-out-file=/tmp/serve.dhat`: to see where the memory of
/// a phase goes).
pub async fn serve(name: &str, toml: &str, rust_log: &str) -> Proc {
    let outer = wrapper();
    if let Ok(w) = std::env::var("LOAD_SERVE_WRAP") {
        set_wrapper(w.split_whitespace().map(str::to_owned).collect());
    }
    let proc = serve_as_is(name, toml, rust_log).await;
    set_wrapper(outer);
    proc
}

async fn serve_as_is(name: &str, toml: &str, rust_log: &str) -> Proc {
    let dir = scratch();
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, toml).expect("config");
    let args = vec![
        "serve".to_string(),
        "--config".to_string(),
        file.display().to_string(),
    ];
    Proc::spawn(
        &binary(),
        &args,
        2,
        dir.join(format!("{name}.log")),
        rust_log,
    )
    .await
}

/// Starts `shimgate compressor` in front of `upstream`.
pub async fn compressor(upstream: &str, threshold_chars: usize) -> Proc {
    compressor_with(upstream, threshold_chars, false).await
}

/// Starts `shimgate compressor --pass-through` in front of `upstream`: a
/// plain proxy that forwards chat requests untouched too.
pub async fn pass_through(upstream: &str) -> Proc {
    compressor_with(upstream, 1_000_000, true).await
}

async fn compressor_with(upstream: &str, threshold_chars: usize, pass_through: bool) -> Proc {
    let dir = scratch();
    let mut args = vec![
        "compressor".to_string(),
        "--listen".to_string(),
        "127.0.0.1:0".to_string(),
        "--upstream".to_string(),
        upstream.to_string(),
        "--threshold-chars".to_string(),
        threshold_chars.to_string(),
    ];
    if pass_through {
        args.push("--pass-through".to_string());
    }
    let log = dir.join(numbered("compressor"));
    Proc::spawn(&binary(), &args, 1, log, "error").await
}

/// Starts the bench's own bare forwarder in a process of its own (this
/// executable again, `--forwarder URL`), so it pays the same process and
/// scheduling costs as shimgate.
pub async fn bare_forwarder(upstream: &str) -> Proc {
    bare_forwarder_with(upstream, None).await
}

/// The bare forwarder, serving TLS with a leaf of the local CA in
/// `tls_state` (a state dir) when given.
pub async fn bare_forwarder_with(upstream: &str, tls_state: Option<&std::path::Path>) -> Proc {
    let exe = std::env::current_exe().expect("own executable");
    let mut args = vec!["--forwarder".to_string(), upstream.to_string()];
    if let Some(state) = tls_state {
        args.push("--tls".into());
        args.push(state.display().to_string());
    }
    let log = scratch().join(numbered("forwarder"));
    Proc::spawn(&exe, &args, 1, log, "error").await
}

/// `NAME-N.log`, N counting the children of one name (the compressor
/// path runs several of each).
fn numbered(name: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{name}-{n}.log")
}

/// `GET /status` of a shimgate listener.
pub async fn status(addr: SocketAddr) -> Value {
    let mut conn = Conn::new(addr);
    match conn.send(Method::GET, "/status", &[], Bytes::new()).await {
        Ok(resp) => {
            let whole = collect(resp, Duration::from_secs(10)).await;
            serde_json::from_slice(&whole.body).unwrap_or(Value::Null)
        }
        Err(_) => Value::Null,
    }
}

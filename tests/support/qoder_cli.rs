//! The real Qoder CLI (`@qoder-ai/qodercli` 1.1.52 from npm, unmodified)
//! run by the tests with no traffic past loopback: [`find`] locates Node
//! and the CLI's bundle, [`CliEnv`] builds what it runs with (a temporary
//! HOME, the loopback world as its proxy, the test CA, an offline
//! sign-in, telemetry off, the no-egress preload), [`run`] runs it with a
//! hard timeout and returns what it printed, its exit code and every
//! connection the preload refused.
//!
//! What the CLI needs, found by reading and running it:
//! - **Sign-in without a browser**: `QODER_JOB_TOKEN='{"token":"…"}'`
//!   (then only `GET https://openapi.qoder.sh/api/v1/userinfo` with that
//!   Bearer, answered `{"id": …}`), or `QODER_PERSONAL_ACCESS_TOKEN`
//!   (exchanged first at `POST /api/v1/jobToken/exchange`). With HOME in a
//!   temporary folder it stores only a machine id there.
//! - **Telemetry off**: its OpenTelemetry exporter is always on in the
//!   published build (endpoint `https://api2.qoder.sh`, no setting turns
//!   it off) and opens its own sockets, ignoring `HTTPS_PROXY`;
//!   `OTEL_SDK_DISABLED=true` stops the SDK from starting, so it never
//!   connects. `QODER_DISABLE_UMID_REPORT=1` stops the device-fingerprint
//!   helper, a native binary it unpacks into `~/.qoder/.bin` that resolves
//!   an Alibaba host through the system's DNS server (out of the preload's
//!   reach).
//! - **No security scanner**: `securityScan` off in `~/.qoder/settings.json`,
//!   or its session hook runs `curl` to download a scanner binary.
//! - **Everything else** follows `HTTPS_PROXY`/`HTTP_PROXY` (`NO_PROXY`
//!   keeps loopback direct) and trusts the roots in `NODE_EXTRA_CA_CERTS`;
//!   what it calls and what each call needs is in `qoder_world.rs`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::Semaphore;

use super::process_tree;

/// CLI runs at once, across every test of the process (two cores; each
/// run loads a 33 MB bundle).
static RUNS: Semaphore = Semaphore::const_new(2);

/// The pinned version `.ci/run` installs.
pub const VERSION: &str = "1.1.52";

/// The token the tests sign in with (`QODER_JOB_TOKEN`): what the model
/// server must see as `Authorization: Bearer …`.
pub const TOKEN: &str = "jt-shimgate-test-token";

/// What the CLI prints when the model server says the login expired.
pub const SAYS_LOGIN_EXPIRED: &str = "Your authentication has expired. Please sign in again.";

/// What the CLI prints for most failures it gives up on.
pub const SAYS_NOT_COMPLETED: &str = "The request could not be completed. Please try again.";

/// What the CLI prints when it gives up on `429`s.
pub const SAYS_USAGE_LIMIT: &str =
    "The usage limit has been reached. Please check your quota and try again later.";

/// Where Node and the CLI are.
#[derive(Debug, Clone)]
pub struct Cli {
    pub node: PathBuf,
    /// `bundle/qodercli.js` of the installed package.
    pub bundle: PathBuf,
}

/// Node: `SHIMGATE_NODE`, else `node` on PATH.
pub fn node() -> PathBuf {
    std::env::var_os("SHIMGATE_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"))
}

/// Whether Node runs; when it does not, a note (skip), or a failure under
/// `SHIMGATE_REQUIRE_EXTERNAL=1`.
pub fn node_available() -> bool {
    let ok = std::process::Command::new(node())
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip("Node is not on PATH (SHIMGATE_NODE names another)".to_owned());
    }
    ok
}

/// The CLI, or `None` (skip, with a note) when Node or the CLI is
/// missing; a failure instead under `SHIMGATE_REQUIRE_EXTERNAL=1`. The
/// bundle is `SHIMGATE_QODERCLI`, else where `.ci/run` installs it
/// (`.qoder-cli/` in the clone).
pub fn find() -> Option<Cli> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bundle = std::env::var_os("SHIMGATE_QODERCLI")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            root.join(".qoder-cli/node_modules/@qoder-ai/qodercli/bundle/qodercli.js")
        });
    if !node_available() {
        return None;
    }
    if !bundle.is_file() {
        skip(format!(
            "the Qoder CLI is not at {} (`.ci/run` installs it; SHIMGATE_QODERCLI names another bundle/qodercli.js)",
            bundle.display()
        ));
        return None;
    }
    Some(Cli {
        node: node(),
        bundle,
    })
}

/// Says why a test is skipped, or fails it under `SHIMGATE_REQUIRE_EXTERNAL=1`.
fn skip(why: String) {
    if std::env::var("SHIMGATE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// The preload that refuses non-loopback sockets and DNS.
pub fn preload() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/no_egress.cjs")
}

/// What the CLI runs with: a HOME of its own (kept across runs of one
/// test, so `--continue` finds the session), its working folder, and the
/// variables.
pub struct CliEnv {
    pub home: tempfile::TempDir,
    vars: Vec<(String, String)>,
}

/// `settings.json` in the temporary HOME: the built-in security scanner
/// off (its hook would download a binary with curl).
const SETTINGS: &str = r#"{"securityScan": {"l1StaticCheck": false, "l2LightweightScan": false, "l3DeepScan": false}}"#;

impl CliEnv {
    /// The environment for the CLI behind `proxy` (the loopback world's
    /// URL), trusting the roots in `ca_bundle`, signed in with [`TOKEN`].
    pub fn new(proxy: &str, ca_bundle: &Path) -> CliEnv {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".qoder")).unwrap();
        std::fs::write(h.join(".qoder/settings.json"), SETTINGS).unwrap();
        std::fs::create_dir_all(h.join("work")).unwrap();
        std::fs::create_dir_all(h.join("tmp")).unwrap();
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut env = CliEnv {
            vars: Vec::new(),
            home,
        };
        let h = env.home.path().to_owned();
        for (k, v) in [
            ("HOME", path(h.clone())),
            ("USERPROFILE", path(h.clone())),
            ("APPDATA", path(h.join("AppData/Roaming"))),
            ("LOCALAPPDATA", path(h.join("AppData/Local"))),
            ("XDG_CONFIG_HOME", path(h.join(".config"))),
            ("XDG_CACHE_HOME", path(h.join(".cache"))),
            ("XDG_DATA_HOME", path(h.join(".local/share"))),
            ("XDG_STATE_HOME", path(h.join(".local/state"))),
            ("TMPDIR", path(h.join("tmp"))),
            ("TEMP", path(h.join("tmp"))),
            ("TMP", path(h.join("tmp"))),
            ("HTTPS_PROXY", proxy.to_owned()),
            ("HTTP_PROXY", proxy.to_owned()),
            ("https_proxy", proxy.to_owned()),
            ("http_proxy", proxy.to_owned()),
            ("NO_PROXY", "127.0.0.1,localhost,::1".to_owned()),
            ("no_proxy", "127.0.0.1,localhost,::1".to_owned()),
            ("NODE_EXTRA_CA_CERTS", path(ca_bundle.to_owned())),
            (
                "QODER_JOB_TOKEN",
                serde_json::json!({ "token": TOKEN }).to_string(),
            ),
            ("OTEL_SDK_DISABLED", "true".to_owned()),
            ("QODER_DISABLE_UMID_REPORT", "1".to_owned()),
            ("NO_COLOR", "1".to_owned()),
            ("SHIMGATE_NO_EGRESS_LOG", path(h.join("no-egress.jsonl"))),
            ("NODE_OPTIONS", format!("--require {}", quoted(&preload()))),
        ] {
            env.set(k, &v);
        }
        env
    }

    /// Sets (or replaces) a variable.
    pub fn set(&mut self, key: &str, value: &str) -> &mut CliEnv {
        self.remove(key);
        self.vars.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Removes a variable.
    pub fn remove(&mut self, key: &str) -> &mut CliEnv {
        self.vars.retain(|(k, _)| k != key);
        self
    }

    /// Points the CLI's `http` transport at `host` (`127.0.0.1:PORT`).
    pub fn model_server(&mut self, host: &str) -> &mut CliEnv {
        self.set("QODER_MODEL_TRANSPORT", "http")
            .set("QODER_MODEL_SERVER_HOST", host)
    }

    /// The variables, as set.
    pub fn vars(&self) -> &[(String, String)] {
        &self.vars
    }

    /// Where the CLI runs (its project folder).
    pub fn workdir(&self) -> PathBuf {
        self.home.path().join("work")
    }

    /// The preload's refusals so far (one JSON object each).
    pub fn refusals(&self) -> Vec<Value> {
        std::fs::read_to_string(self.home.path().join("no-egress.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The CLI's own log of its last run (`~/.qoder/logs/runs/*/qodercli.log`).
    pub fn cli_log(&self) -> String {
        let runs = self.home.path().join(".qoder/logs/runs");
        let mut logs: Vec<PathBuf> = std::fs::read_dir(runs)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("qodercli.log"))
            .filter(|p| p.is_file())
            .collect();
        logs.sort();
        logs.last()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }
}

/// The run printed `stdout` exactly, exited with `code`, and tried to
/// leave loopback nowhere (the calls the world answered are shown when
/// it did not).
pub fn assert_run(run: &Run, stdout: &str, code: i32, world: &super::qoder_world::World) {
    assert!(
        run.leaks().is_empty(),
        "the CLI tried to leave loopback: {}\nits calls:\n{}",
        run.describe(),
        world.summary()
    );
    assert_eq!(
        (run.stdout.as_str(), run.code),
        (stdout, Some(code)),
        "{}\nits calls:\n{}",
        run.describe(),
        world.summary()
    );
}

/// A `resolve4` of one of qoder's hosts (see [`Run::leaks`]).
fn is_failure_report_lookup(refusal: &Value) -> bool {
    let host = refusal["host"].as_str().unwrap_or_default();
    refusal["kind"] == "dns-resolve4"
        && (host.ends_with(".qoder.sh") || host.ends_with(".qoder.com"))
}

/// A path quoted for NODE_OPTIONS (which splits on spaces).
fn quoted(path: &Path) -> String {
    let text = path
        .to_string_lossy()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!("\"{text}\"")
}

/// What one run of the CLI did.
#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    /// `None` when it was killed (timeout).
    pub code: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
    /// What the preload refused during this run.
    pub refusals: Vec<Value>,
    /// The ERROR lines of the CLI's own log of this run.
    pub log_errors: Vec<String>,
}

impl Run {
    /// The refusals that fail a test: all but the CLI's look-up of a
    /// qoder host right after a request to it failed. Its error reporter
    /// resolves the host with `dns.promises.resolve4` (past any proxy) to
    /// put the host's addresses in the report; the preload answers
    /// ENOTFOUND and nothing leaves the machine. A request fails that way
    /// when the CLI's own event loop stalls past a short timeout (its
    /// region election allows 1 s; loading the bundle blocks the loop for
    /// seconds on a busy machine), so these come and go with the load.
    pub fn leaks(&self) -> Vec<&Value> {
        self.refusals
            .iter()
            .filter(|r| !is_failure_report_lookup(r))
            .collect()
    }

    /// The refusals [`Run::leaks`] leaves out.
    pub fn failure_report_lookups(&self) -> Vec<&Value> {
        self.refusals
            .iter()
            .filter(|r| is_failure_report_lookup(r))
            .collect()
    }

    /// A one-paragraph account for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "exit {:?} (timed out: {}) after {:.1} s\nstdout: {:?}\nstderr: {}\nrefused: {:?}\nthe CLI's log said:\n{}",
            self.code,
            self.timed_out,
            self.elapsed.as_secs_f64(),
            self.stdout,
            self.stderr,
            self.refusals,
            self.log_errors.join("\n")
        )
    }
}

/// Runs `node <bundle> args…` in `env`'s working folder with only `env`'s
/// variables (and PATH), killing it and its children after `timeout`. The
/// preload is loaded through NODE_OPTIONS, so a Node child the CLI starts
/// loads it too. At most two runs at once ([`RUNS`]).
pub async fn run(cli: &Cli, env: &CliEnv, args: &[&str], timeout: Duration) -> Run {
    let mut all: Vec<OsString> = vec![cli.bundle.clone().into()];
    all.extend(args.iter().map(OsString::from));
    run_program(&cli.node, &all, env, timeout).await
}

/// Runs the CLI through `shimgate launch --config CONFIG -- node <bundle>
/// args…`, with `env`'s variables: `launch` adds those that point it at
/// the shimgate of `config` (the binary Cargo built, a program of this
/// host, since it starts the CLI; `exec` on Unix, so the run's process is
/// the CLI's).
pub async fn launch(
    cli: &Cli,
    env: &CliEnv,
    config: &Path,
    args: &[&str],
    timeout: Duration,
) -> Run {
    let mut all: Vec<OsString> = ["launch", "--config"].map(OsString::from).to_vec();
    all.push(config.into());
    all.push("--".into());
    all.push(cli.node.clone().into());
    all.push(cli.bundle.clone().into());
    all.extend(args.iter().map(OsString::from));
    let shimgate = PathBuf::from(env!("CARGO_BIN_EXE_shimgate"));
    run_program(&shimgate, &all, env, timeout).await
}

/// The variables `shimgate env qoder --shell sh --config CONFIG` prints
/// when run with `env`'s variables (so it sees the CLI's own
/// `NODE_EXTRA_CA_CERTS` and `NO_PROXY`), read back from its `export
/// NAME='value'` lines (the binary Cargo built: its paths are this
/// host's).
pub fn printed_env(env: &CliEnv, config: &Path) -> Vec<(String, String)> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_shimgate"));
    cmd.args(["env", "qoder", "--shell", "sh", "--config"])
        .arg(config)
        .env_clear();
    for (k, v) in host_vars().into_iter().chain(
        env.vars()
            .iter()
            .map(|(k, v)| (k.into(), OsString::from(v))),
    ) {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "shimgate env: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| {
            let (name, quoted) = l
                .strip_prefix("export ")
                .and_then(|r| r.split_once('='))
                .unwrap_or_else(|| panic!("not an export line: {l}"));
            let value = quoted
                .strip_prefix('\'')
                .and_then(|q| q.strip_suffix('\''))
                .unwrap_or_else(|| panic!("not single-quoted: {l}"))
                .replace("'\\''", "'");
            (name.to_owned(), value)
        })
        .collect()
}

/// What finding programs needs from the test's own environment.
fn host_vars() -> Vec<(String, OsString)> {
    [
        "PATH",
        "SystemRoot",
        "SYSTEMROOT",
        "WINDIR",
        "COMSPEC",
        "PATHEXT",
    ]
    .into_iter()
    .filter_map(|k| std::env::var_os(k).map(|v| (k.to_owned(), v)))
    .collect()
}

/// Runs `program args…` as [`run`] does.
async fn run_program(program: &Path, args: &[OsString], env: &CliEnv, timeout: Duration) -> Run {
    let _permit = RUNS.acquire().await.unwrap();
    let before = env.refusals().len();
    let out_path = env.home.path().join("stdout.txt");
    let err_path = env.home.path().join("stderr.txt");
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(env.workdir())
        .env_clear()
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .kill_on_drop(true);
    for (k, v) in host_vars() {
        cmd.env(k, v);
    }
    for (k, v) in env.vars() {
        cmd.env(k, v);
    }
    process_tree::own_group(&mut cmd);
    let started = Instant::now();
    let mut child = cmd.spawn().expect("the CLI starts");
    let pid = child.id().unwrap_or_default();
    let waited = tokio::time::timeout(timeout, child.wait()).await;
    // Whatever it left running (hooks, shells) goes with it.
    process_tree::kill_tree(pid);
    let (code, timed_out) = match waited {
        Ok(status) => (status.ok().and_then(|s| s.code()), false),
        Err(_) => {
            let _ = child.kill().await;
            (None, true)
        }
    };
    Run {
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        code,
        timed_out,
        elapsed: started.elapsed(),
        refusals: env.refusals().split_off(before),
        log_errors: env
            .cli_log()
            .lines()
            .filter(|l| l.contains(" ERROR "))
            .map(|l| l.chars().take(600).collect())
            .collect(),
    }
}

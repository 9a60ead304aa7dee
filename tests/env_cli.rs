//! `shimgate env` and `shimgate launch` through the real binary, in a
//! temporary home: the exact lines for each shell, the user's `NO_PROXY`
//! kept with loopback added, the user's own `NODE_EXTRA_CA_CERTS` roots
//! joined with shimgate's, a listener no client can be sent to refused
//! with why; `launch` hands a child the variables (and nothing else
//! changes), passes its exit code on, says when the command is not found,
//! warns when no shimgate answers (and not when one does), and, on Unix,
//! the child gets Ctrl-C itself. The child is Node, which every machine
//! that runs the Qoder CLI has. `env proxy` and `launch --proxy` (the
//! capture listener): the proxy variables, the roots bundle that keeps the
//! user's roots, and a clear refusal when `[capture] listen` is not set.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A temporary home with a config whose qoder listener is `listen`.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new(listen: &str) -> Home {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("shimgate.toml"),
            format!(
                "[shims.qoder]\nlisten = \"{listen}\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n"
            ),
        )
        .unwrap();
        Home { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn config(&self) -> PathBuf {
        self.path().join("shimgate.toml")
    }

    /// The CA root `env` names (under the test's XDG_STATE_HOME).
    fn root(&self) -> PathBuf {
        self.path().join("state/shimgate/ca/root.pem")
    }

    /// `shimgate ARGS` with none of the user's proxy or CA variables,
    /// then `vars`.
    fn command(&self, args: &[&str], vars: &[(&str, &str)]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_shimgate"));
        cmd.args(args)
            .current_dir(self.path())
            .env("HOME", self.path())
            .env("USERPROFILE", self.path())
            .env("XDG_CONFIG_HOME", self.path().join(".config"))
            .env("XDG_STATE_HOME", self.path().join("state"))
            .env_remove("RUST_LOG");
        for k in [
            "NO_PROXY",
            "no_proxy",
            "NODE_EXTRA_CA_CERTS",
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "REQUESTS_CA_BUNDLE",
            "HTTPS_PROXY",
            "https_proxy",
            "HTTP_PROXY",
            "http_proxy",
        ] {
            cmd.env_remove(k);
        }
        for (k, v) in vars {
            cmd.env(k, v);
        }
        cmd
    }

    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        self.command(args, vars).output().unwrap()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines `env qoder` prints for `shell`, with the root at `root`.
fn expected(shell: &str, port: u16, root: &Path, no_proxy: &str) -> String {
    let root = root.display();
    let vars = [
        ("QODER_MODEL_TRANSPORT", "http".to_owned()),
        ("QODER_MODEL_SERVER_HOST", format!("127.0.0.1:{port}")),
        ("NODE_EXTRA_CA_CERTS", root.to_string()),
        ("NO_PROXY", no_proxy.to_owned()),
        ("no_proxy", no_proxy.to_owned()),
    ];
    vars.iter()
        .map(|(k, v)| match shell {
            "sh" => format!("export {k}='{v}'\n"),
            "powershell" => format!("$env:{k} = '{v}'\n"),
            _ => format!("set \"{k}={v}\"\n"),
        })
        .collect()
}

#[test]
fn env_prints_the_variables_for_each_shell() {
    let home = Home::new("127.0.0.1:47123");
    let config = home.config();
    let config = config.to_str().unwrap();
    let loopback = "127.0.0.1,localhost,::1";
    for (i, shell) in ["sh", "powershell", "cmd"].into_iter().enumerate() {
        let out = home.run(&["env", "qoder", "--shell", shell, "--config", config], &[]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            expected(shell, 47123, &home.root(), loopback),
            "{shell}"
        );
        let made = text(&out.stderr).contains("made a new local CA");
        assert_eq!(made, i == 0, "the CA is made once: {}", text(&out.stderr));
    }
    assert!(home.root().is_file());
    // The default shell is this OS's: sh here.
    let out = home.run(&["env", "qoder", "--config", config], &[]);
    assert_eq!(
        text(&out.stdout),
        expected("sh", 47123, &home.root(), loopback)
    );
}

#[test]
fn env_keeps_the_user_s_no_proxy_entries_and_adds_loopback() {
    let home = Home::new("127.0.0.1:47123");
    let config = home.config();
    let vars = [
        ("NO_PROXY", ".corp.example, intranet"),
        ("no_proxy", "INTRANET,localhost,10.0.0.0/8"),
    ];
    let out = home.run(
        &["env", "qoder", "--config", config.to_str().unwrap()],
        &vars,
    );
    let merged = ".corp.example,intranet,localhost,10.0.0.0/8,127.0.0.1,::1";
    assert_eq!(
        text(&out.stdout),
        expected("sh", 47123, &home.root(), merged)
    );
}

#[test]
fn env_joins_the_user_s_own_roots_with_shimgate_s() {
    let home = Home::new("127.0.0.1:47123");
    let corp = home.path().join("corp.pem");
    let corp_pem = "-----BEGIN CERTIFICATE-----\nQ09SUA==\n-----END CERTIFICATE-----\n";
    std::fs::write(&corp, corp_pem).unwrap();
    let config = home.config();
    let args = ["env", "qoder", "--config", config.to_str().unwrap()];
    let vars = [("NODE_EXTRA_CA_CERTS", corp.to_str().unwrap())];
    let out = home.run(&args, &vars);
    let bundle = home.path().join("state/shimgate/node-extra-ca-certs.pem");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "export NODE_EXTRA_CA_CERTS='{}'\n",
            bundle.display()
        )),
        "{stdout}"
    );
    let joined = std::fs::read_to_string(&bundle).unwrap();
    let root = std::fs::read_to_string(home.root()).unwrap();
    assert_eq!(joined, format!("{corp_pem}{root}"));
    assert!(text(&out.stderr).contains("now holds its roots and shimgate's"));
    // Again: the same file, not written again, nothing said.
    let again = home.run(&args, &vars);
    assert_eq!(text(&again.stdout), stdout);
    assert!(
        !text(&again.stderr).contains("now holds"),
        "{}",
        text(&again.stderr)
    );
}

#[test]
fn env_refuses_a_listener_no_client_can_be_sent_to() {
    for (toml, says) in [
        (
            "[shims.qoder]\nenabled = false\n",
            "shimgate env: the qoder listener is disabled ([shims.qoder] enabled = false in ",
        ),
        (
            "[shims.qoder]\nlisten = \"0.0.0.0:47001\"\nallow_remote = true\n",
            "shimgate env: the qoder listener is 0.0.0.0:47001, not a loopback address: a client would send its token off this machine, and the local CA signs for loopback only; set [shims.qoder] listen = \"127.0.0.1:47001\" in ",
        ),
        (
            "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n",
            "shimgate env: the qoder listener's port is 0 (a free one picked at each start): a client needs a fixed port; set [shims.qoder] listen = \"127.0.0.1:47001\" in ",
        ),
    ] {
        let home = Home::new("127.0.0.1:47123");
        std::fs::write(home.config(), toml).unwrap();
        let config = home.config();
        let out = home.run(&["env", "qoder", "--config", config.to_str().unwrap()], &[]);
        assert_eq!(out.status.code(), Some(1), "{toml}");
        assert!(out.stdout.is_empty(), "nothing to eval: {toml}");
        assert!(text(&out.stderr).starts_with(says), "{}", text(&out.stderr));
        assert!(!home.root().exists(), "no CA made for a refusal");
    }
}

/// Node, or `None` (skipped with a note; a failure under
/// `SHIMGATE_REQUIRE_EXTERNAL=1`).
fn node() -> Option<&'static str> {
    let ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("SHIMGATE_REQUIRE_EXTERNAL").as_deref() != Ok("1"),
            "Node is not on PATH"
        );
        eprintln!("SKIPPED: Node is not on PATH");
    }
    ok.then_some("node")
}

/// A loopback port nothing listens on (bound, then let go).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Node script that prints the variables launch sets, as JSON, and
/// exits 7.
const PRINT_VARS: &str = "const e = process.env; console.log(JSON.stringify({t: e.QODER_MODEL_TRANSPORT, h: e.QODER_MODEL_SERVER_HOST, ca: e.NODE_EXTRA_CA_CERTS, np: e.NO_PROXY, np2: e.no_proxy, mine: e.SHIMGATE_TEST_MINE})); process.exit(7)";

#[test]
fn launch_gives_the_child_the_variables_and_passes_its_exit_code_on() {
    let Some(node) = node() else { return };
    let port = free_port();
    let home = Home::new(&format!("127.0.0.1:{port}"));
    let config = home.config();
    let out = home.run(
        &[
            "launch",
            "--config",
            config.to_str().unwrap(),
            "--",
            node,
            "-e",
            PRINT_VARS,
        ],
        &[("SHIMGATE_TEST_MINE", "kept"), ("NO_PROXY", "intranet")],
    );
    assert_eq!(out.status.code(), Some(7), "{}", text(&out.stderr));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let np = "intranet,127.0.0.1,localhost,::1";
    assert_eq!(
        seen,
        serde_json::json!({
            "t": "http",
            "h": format!("127.0.0.1:{port}"),
            "ca": home.root().to_str().unwrap(),
            "np": np,
            "np2": np,
            "mine": "kept",
        })
    );
    assert_eq!(
        text(&out.stderr).lines().last().unwrap_or_default(),
        format!("shimgate launch: warning: no shimgate answers on 127.0.0.1:{port} (GET /status): start it with `shimgate serve`; running node anyway")
    );
}

#[test]
fn launch_says_nothing_when_a_shimgate_answers() {
    let Some(node) = node() else { return };
    let port = free_port();
    let home = Home::new(&format!("127.0.0.1:{port}"));
    let config = home.config();
    let config = config.to_str().unwrap();
    let mut serve = home
        .command(&["serve", "--config", config], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    while !lines
        .next()
        .unwrap()
        .unwrap()
        .starts_with("listening qoder")
    {}
    let out = home.run(
        &[
            "launch",
            "--config",
            config,
            "--",
            node,
            "-e",
            "process.exit(0)",
        ],
        &[],
    );
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn launch_says_when_the_command_is_not_found() {
    let home = Home::new("127.0.0.1:47123");
    let config = home.config();
    let config = config.to_str().unwrap();
    let out = home.run(
        &["launch", "--config", config, "--", "qodercli", "-p", "hi"],
        &[("PATH", "")],
    );
    assert_eq!(out.status.code(), Some(127));
    assert_eq!(
        text(&out.stderr).lines().last().unwrap_or_default(),
        "shimgate launch: `qodercli` was not found on PATH; the Qoder CLI installs with `npm install -g @qoder-ai/qodercli`"
    );
    let missing = home.path().join("no-such-program");
    let out = home.run(
        &[
            "launch",
            "--config",
            config,
            "--",
            missing.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(127));
    assert!(
        text(&out.stderr).contains("no-such-program: no such program"),
        "{}",
        text(&out.stderr)
    );
}

/// Ctrl-C (SIGINT to the process the user started) reaches the client
/// itself: on Unix `launch` has become it.
#[cfg(unix)]
#[test]
fn ctrl_c_reaches_the_child() {
    use rustix::process::{kill_process, Pid, Signal};
    let Some(node) = node() else { return };
    let home = Home::new(&format!("127.0.0.1:{}", free_port()));
    let config = home.config();
    let script = "process.on('SIGINT', () => { console.log('got SIGINT'); process.exit(3) }); console.log('ready'); setInterval(() => {}, 1000)";
    let mut child = home
        .command(
            &[
                "launch",
                "--config",
                config.to_str().unwrap(),
                "--",
                node,
                "-e",
                script,
            ],
            &[],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    kill_process(pid, Signal::INT).unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "got SIGINT");
    assert_eq!(child.wait().unwrap().code(), Some(3));
}

/// A home whose config has the capture listener at `listen`.
fn proxy_home(listen: &str) -> Home {
    let home = Home::new("127.0.0.1:47123");
    std::fs::write(
        home.config(),
        format!(
            "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n[capture]\nlisten = \"{listen}\"\n"
        ),
    )
    .unwrap();
    home
}

/// The lines `env proxy` prints for `shell`.
fn expected_proxy(shell: &str, port: u16, root: &Path, bundle: Option<&Path>) -> String {
    let url = format!("http://127.0.0.1:{port}");
    let np = "127.0.0.1,localhost,::1";
    let mut vars: Vec<(&str, String)> = vec![
        ("HTTPS_PROXY", url.clone()),
        ("https_proxy", url.clone()),
        ("HTTP_PROXY", url.clone()),
        ("http_proxy", url),
        ("NO_PROXY", np.to_owned()),
        ("no_proxy", np.to_owned()),
        ("NODE_EXTRA_CA_CERTS", root.display().to_string()),
    ];
    if let Some(b) = bundle {
        vars.push(("SSL_CERT_FILE", b.display().to_string()));
        vars.push(("REQUESTS_CA_BUNDLE", b.display().to_string()));
    }
    vars.iter()
        .map(|(k, v)| match shell {
            "sh" => format!("export {k}='{v}'\n"),
            "powershell" => format!("$env:{k} = '{v}'\n"),
            _ => format!("set \"{k}={v}\"\n"),
        })
        .collect()
}

#[test]
fn env_proxy_prints_the_capture_listener_and_a_bundle_that_keeps_the_user_s_roots() {
    let home = proxy_home("127.0.0.1:47000");
    let corp = home.path().join("corp.pem");
    let corp_pem = "-----BEGIN CERTIFICATE-----\nQ09SUA==\n-----END CERTIFICATE-----\n";
    std::fs::write(&corp, corp_pem).unwrap();
    let config = home.config();
    let bundle = home.path().join("state/shimgate/ca-bundle.pem");
    for shell in ["sh", "powershell", "cmd"] {
        let out = home.run(
            &[
                "env",
                "proxy",
                "--shell",
                shell,
                "--config",
                config.to_str().unwrap(),
            ],
            &[("SSL_CERT_FILE", corp.to_str().unwrap())],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            expected_proxy(shell, 47000, &home.root(), Some(&bundle)),
            "{shell}"
        );
    }
    let root = std::fs::read_to_string(home.root()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&bundle).unwrap(),
        format!("{corp_pem}{root}")
    );
}

#[test]
fn env_proxy_without_roots_of_the_user_s_joins_this_os_s_with_shimgate_s() {
    let home = proxy_home("127.0.0.1:47000");
    let config = home.config();
    let out = home.run(&["env", "proxy", "--config", config.to_str().unwrap()], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bundle = home.path().join("state/shimgate/ca-bundle.pem");
    let stdout = text(&out.stdout);
    if stdout.contains("SSL_CERT_FILE") {
        assert_eq!(
            stdout,
            expected_proxy("sh", 47000, &home.root(), Some(&bundle))
        );
        let joined = std::fs::read_to_string(&bundle).unwrap();
        let root = std::fs::read_to_string(home.root()).unwrap();
        assert!(joined.ends_with(&root));
        let certs = joined.matches("-----BEGIN CERTIFICATE-----").count();
        assert!(certs > 1, "this OS's roots and shimgate's: {certs}");
        eprintln!("FIGURES env proxy: the bundle holds {certs} roots");
    } else {
        // A machine with no roots in its store: nothing that would break
        // the tunnelled hosts, and why.
        assert_eq!(stdout, expected_proxy("sh", 47000, &home.root(), None));
        assert!(
            text(&out.stderr).contains("found no roots"),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn env_proxy_says_how_to_turn_the_capture_listener_on() {
    for (toml, says) in [
        (
            "",
            "shimgate env: the capture listener is not configured ([capture] listen is not set in ",
        ),
        (
            "[capture]\nlisten = \"127.0.0.1:0\"\n",
            "shimgate env: the capture listener's port is 0 (a free one picked at each start): a client needs a fixed port; set [capture] listen = \"127.0.0.1:47000\" in ",
        ),
    ] {
        let home = Home::new("127.0.0.1:47123");
        std::fs::write(home.config(), toml).unwrap();
        let config = home.config();
        let out = home.run(&["env", "proxy", "--config", config.to_str().unwrap()], &[]);
        assert_eq!(out.status.code(), Some(1), "{toml}");
        assert!(out.stdout.is_empty(), "nothing to eval: {toml}");
        assert!(text(&out.stderr).starts_with(says), "{}", text(&out.stderr));
        assert!(!home.root().exists(), "no CA made for a refusal");
        let out = home.run(
            &["launch", "--proxy", "--config", config.to_str().unwrap(), "--", "node", "-e", "0"],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{toml}");
        assert!(
            text(&out.stderr).starts_with(&says.replace("shimgate env:", "shimgate launch:")),
            "{}",
            text(&out.stderr)
        );
    }
}

#[test]
fn launch_proxy_gives_the_child_the_proxy_variables() {
    let Some(node) = node() else { return };
    let port = free_port();
    let home = proxy_home(&format!("127.0.0.1:{port}"));
    let config = home.config();
    let script = "const e = process.env; console.log(JSON.stringify({hp: e.HTTPS_PROXY, hp2: e.https_proxy, p: e.HTTP_PROXY, np: e.NO_PROXY, ca: e.NODE_EXTRA_CA_CERTS, ssl: e.SSL_CERT_FILE === e.REQUESTS_CA_BUNDLE, t: e.QODER_MODEL_TRANSPORT || null})); process.exit(5)";
    let out = home.run(
        &[
            "launch",
            "--proxy",
            "--config",
            config.to_str().unwrap(),
            "--",
            node,
            "-e",
            script,
        ],
        &[("NO_PROXY", "intranet")],
    );
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let url = format!("http://127.0.0.1:{port}");
    assert_eq!(
        seen,
        serde_json::json!({
            "hp": url, "hp2": url, "p": url,
            "np": "intranet,127.0.0.1,localhost,::1",
            "ca": home.root().to_str().unwrap(),
            "ssl": true,
            "t": null,
        })
    );
    assert_eq!(
        text(&out.stderr).lines().last().unwrap_or_default(),
        format!("shimgate launch: warning: no shimgate answers on 127.0.0.1:{port} (its capture listener): start it with `shimgate serve`; running node anyway")
    );
}

#[test]
fn launch_proxy_says_nothing_when_the_capture_listener_answers() {
    let Some(node) = node() else { return };
    let port = free_port();
    let home = proxy_home(&format!("127.0.0.1:{port}"));
    let config = home.config();
    let config = config.to_str().unwrap();
    let mut serve = home
        .command(&["serve", "--config", config], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(serve.stdout.take().unwrap()).lines();
    while !lines
        .next()
        .unwrap()
        .unwrap()
        .starts_with("listening capture")
    {}
    let out = home.run(
        &[
            "launch",
            "--proxy",
            "--config",
            config,
            "--",
            node,
            "-e",
            "process.exit(0)",
        ],
        &[],
    );
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        !text(&out.stderr).contains("warning"),
        "{}",
        text(&out.stderr)
    );
}

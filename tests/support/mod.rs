//! Shared pieces of the end-to-end tests: a scripted upstream, an HTTP
//! client, and shimgate itself started in-process on port 0 — or, when
//! `SHIMGATE_BIN` names a binary (`.ci/windows`: `shimgate.exe` under
//! Wine), that binary as a child process with the same config, so the same
//! tests drive it over the same sockets (`Gate::binary`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod bili;
pub mod bin;
pub mod browser;
pub mod capture;
pub mod client;
pub mod conversation;
pub mod cosy_check;
pub mod external;
pub mod model;
pub mod process_tree;
pub mod proxy;
pub mod qoder;
pub mod qoder_cli;
pub mod qoder_gate;
pub mod qoder_model_server;
pub mod qoder_world;
pub mod scripted_https;
pub mod signal;
pub mod test_ca;
pub mod tls;
pub mod trae;
pub mod upstream;

use std::time::Duration;

use shimgate::config::Config;
use shimgate::server::{self, Running};

/// shimgate running in this process (or as `SHIMGATE_BIN`), both
/// listeners on free ports.
pub struct Gate {
    pub running: Option<Running>,
    pub qoder: String,
    pub trae: String,
    /// The test-only OpenAI shim's listener (empty unless enabled).
    pub openai: String,
    /// The capture listener, `http://127.0.0.1:PORT` (empty unless the
    /// config has `[capture] listen`).
    pub capture: String,
    /// The child process when `SHIMGATE_BIN` is set.
    child: Option<Child>,
}

/// A gate run as `SHIMGATE_BIN`: the process, its config file, their folder.
struct Child {
    served: bin::Served,
    file: std::path::PathBuf,
    _dir: bin::TempDir,
}

impl Gate {
    /// Starts shimgate with a config given as TOML (listen addresses are
    /// replaced by port 0).
    pub async fn start(toml: &str) -> Gate {
        if bin::external().is_some() {
            return Gate::binary(toml).await;
        }
        let mut config = Config::from_toml(toml).expect("test config");
        config.listen_on_free_ports();
        Gate::start_config(config).await
    }

    /// Starts shimgate with a ready config (its state dir, unless the
    /// test set one, is a temporary one shared by this test process, and
    /// then keeps no route state file and no savings file: tests must not
    /// learn from each other).
    pub async fn start_config(mut config: Config) -> Gate {
        if config.state_dir == shimgate::config::default_state_dir() {
            config.state_dir = test_state_dir();
            config.state_ttl = Duration::ZERO;
            config.savings.file = false;
        }
        let running = server::start(config).await;
        let url = |n| {
            running
                .addr(n)
                .map(|a| format!("http://{a}"))
                .unwrap_or_default()
        };
        Gate {
            qoder: url("qoder"),
            trae: url("trae"),
            openai: url("openai"),
            capture: running
                .capture_addr()
                .map(|a| format!("http://{a}"))
                .unwrap_or_default(),
            running: Some(running),
            child: None,
        }
    }

    /// Starts shimgate as a child process whatever `SHIMGATE_BIN` says
    /// (that binary, else the one Cargo built), logging at debug, for a
    /// test that reads what it logged ([`Gate::log`]).
    pub async fn start_process(toml: &str) -> Gate {
        Gate::spawn(toml, &[("RUST_LOG", "shimgate=debug,info")]).await
    }

    /// What the child process wrote to stderr so far (its log); empty for
    /// a gate in this process.
    pub fn log(&self) -> String {
        self.child
            .as_ref()
            .map(|c| c.served.stderr())
            .unwrap_or_default()
    }

    /// `SHIMGATE_BIN serve` on `toml` written to a file, its listeners on
    /// free ports and, as in-process gates, no route state file unless the
    /// test asks for `[state]`.
    async fn binary(toml: &str) -> Gate {
        Gate::spawn(toml, &[]).await
    }

    async fn spawn(toml: &str, env: &[(&'static str, &'static str)]) -> Gate {
        let dir = bin::tempdir();
        let file = dir.join("shimgate.toml");
        let (text, shims) = binary_toml(toml, None);
        std::fs::write(&file, text).unwrap();
        let (f, env) = (file.clone(), env.to_vec());
        let served = tokio::task::spawn_blocking(move || bin::Served::start_with(&f, &shims, &env))
            .await
            .unwrap();
        Gate {
            running: None,
            qoder: served.qoder.clone(),
            trae: served.trae.clone(),
            openai: String::new(),
            capture: served.capture.clone(),
            child: Some(Child {
                served,
                file,
                _dir: dir,
            }),
        }
    }

    /// Points the running gate at a compressor, keeping the rest of `base`
    /// (the proxy needs the shim's port and the shim the proxy's, so the
    /// shim starts first and is then reconfigured).
    pub fn use_compressor(&self, compressor: &str, base: &str) {
        if let Some(child) = &self.child {
            return self.reload_binary(
                child,
                &format!("[compressor]\nurl = \"{compressor}\"\n{base}"),
            );
        }
        let mut cfg =
            Config::from_toml(&format!("[compressor]\nurl = \"{compressor}\"\n{base}")).unwrap();
        cfg.listen_on_free_ports();
        self.running.as_ref().unwrap().app.replace_config(cfg);
    }

    /// Starts shimgate on `base`, a test proxy in front of the `shim`
    /// listener, and points shimgate at the proxy.
    pub async fn behind_proxy(
        base: &str,
        shim: &str,
        options: proxy::Options,
    ) -> (Gate, proxy::TestProxy) {
        let gate = Gate::start(base).await;
        let listener = match shim {
            "qoder" => gate.qoder.clone(),
            "openai" => gate.openai.clone(),
            _ => gate.trae.clone(),
        };
        let test_proxy = proxy::TestProxy::start(listener, options).await;
        gate.use_compressor(&test_proxy.url(), base);
        (gate, test_proxy)
    }

    /// `/status` as JSON (read from the qoder listener, else trae).
    pub async fn status(&self) -> serde_json::Value {
        let base = if self.qoder.is_empty() {
            &self.trae
        } else {
            &self.qoder
        };
        client::get(&format!("{base}/status")).await.json()
    }

    /// Rewrites the child's config file (its listeners where they are) and
    /// has it reload: `POST /reload`, the way that works on every OS.
    fn reload_binary(&self, child: &Child, toml: &str) {
        let strip = |u: &str| u.trim_start_matches("http://").to_owned();
        let (text, _) = binary_toml(toml, Some((&strip(&self.qoder), &strip(&self.trae))));
        std::fs::write(&child.file, text).unwrap();
        let url = format!(
            "{}/reload",
            if self.qoder.is_empty() {
                &self.trae
            } else {
                &self.qoder
            }
        );
        let reloaded = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(client::send(http::Method::POST, &url, &[], ""))
        })
        .join()
        .unwrap();
        assert_eq!(reloaded.status, http::StatusCode::OK, "{}", reloaded.text());
    }

    /// Stops the listeners with a grace period (a child process gets the
    /// stop signal and its own grace).
    pub async fn stop(mut self, grace: Duration) {
        if let Some(r) = self.running.take() {
            r.shutdown(grace).await;
        }
        if let Some(child) = self.child.take() {
            tokio::task::spawn_blocking(move || child.served.stop())
                .await
                .unwrap();
        }
    }
}

/// The test's TOML for a child process: each shim's `listen` set (port 0,
/// or where it already listens), `[state] ttl_ms = 0` and `[savings] file
/// = false` unless the test has a `[state]`; with the shims that will
/// listen.
fn binary_toml(toml: &str, listens: Option<(&str, &str)>) -> (String, Vec<String>) {
    let mut doc: toml_edit::DocumentMut = toml.parse().expect("test config");
    let mut shims = Vec::new();
    // A config with no `[shims]` at all: indexing would make it an inline
    // `shims = {}` that drops the tables put in it, leaving the shims on
    // their default ports (taken by a test running beside this one).
    if doc.get("shims").is_none() {
        let mut table = toml_edit::Table::new();
        table.set_implicit(true);
        doc["shims"] = toml_edit::Item::Table(table);
    }
    for (i, name) in ["qoder", "trae"].into_iter().enumerate() {
        let at = match listens {
            Some((q, t)) => [q, t][i].to_owned(),
            None => "127.0.0.1:0".to_owned(),
        };
        let table = doc["shims"][name].or_insert(toml_edit::table());
        if table.get("enabled").and_then(|v| v.as_bool()) != Some(false) {
            shims.push(name.to_owned());
        }
        table["listen"] = toml_edit::value(at);
    }
    if doc.get("state").is_none() {
        doc["state"]["ttl_ms"] = toml_edit::value(0);
        if doc.get("savings").is_none() {
            doc["savings"]["file"] = toml_edit::value(false);
        }
    }
    (doc.to_string(), shims)
}

#[test]
fn a_config_without_shims_gets_free_ports_for_both() {
    let (text, shims) = binary_toml("[capture]\nlisten = \"127.0.0.1:0\"\n", None);
    assert_eq!(shims, ["qoder", "trae"]);
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    for name in ["qoder", "trae"] {
        assert_eq!(
            doc["shims"][name]["listen"].as_str(),
            Some("127.0.0.1:0"),
            "{text}"
        );
    }
}

/// The state dir of in-process gates: one per test process, so the proxy
/// identity key is not written to `$HOME`.
pub fn test_state_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("shimgate-test-state-{}", std::process::id()))
}

/// Retries `check` until it holds or `patience` passes (no fixed sleeps).
pub async fn eventually<F, Fut>(patience: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > patience {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Prints one line of what a compression proxy did to a conversation, for
/// README's table of proxies (read with `--nocapture`): the turns, how many
/// `folded`, the bytes of the agent's last request and of what the upstream
/// got for it, and the shim's counters (`shim` is its `/status` section).
pub fn print_figures(
    proxy: &str,
    wire: &str,
    turns: usize,
    shim: &serde_json::Value,
    agent_bytes: usize,
    upstream_bytes: usize,
    extra: &str,
) {
    eprintln!(
        "FIGURES {proxy} {wire}: turns {turns}, folded {}, last turn agent sent {agent_bytes} bytes, upstream got {upstream_bytes} bytes; intercepted {} forwarded {} sideRequests {}{extra}",
        shim["folded"], shim["intercepted"], shim["forwarded"], shim["sideRequests"],
    );
}

/// The `data:` payloads of an SSE body, in order.
pub fn sse_data(body: &[u8]) -> Vec<String> {
    shimgate_shim_api::sse::parse_all(body)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8_lossy(&e.data).into_owned())
        .collect()
}

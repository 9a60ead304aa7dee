//! The real Qoder CLI through shimgate, the way a user runs it: the CLI
//! (its account and configuration calls answered by the loopback world)
//! reaches shimgate's qoder listener over TLS, trusting shimgate's CA
//! through `NODE_EXTRA_CA_CERTS` (joined with the world's test root by
//! `shimgate launch`, as it joins a user's corporate root); shimgate's
//! ingress hands the request to the reference compressor, which calls
//! the return leg back; the return leg sends it on to a scripted model
//! server, an https `[[shims.qoder.model_routes]]` route trusted through
//! `[upstream] ca_file`.
//!
//! shimgate runs as a child process (`SHIMGATE_BIN` when set, so
//! `.ci/windows` drives `shimgate.exe` under Wine; else the binary Cargo
//! built), logging at debug so a test can read its log. The CLI, a Linux
//! program, is started by `shimgate launch` of the Linux build; against a
//! Windows binary (which cannot start a Linux program) it gets the
//! variables `shimgate env` printed instead. Everything the test gives
//! the gate is a file path or a loopback address, so the same test runs
//! against either.

use std::path::PathBuf;
use std::time::Duration;

use shimgate::compressor::{self, Compressor, Policy};
use shimgate::config::Config;

use super::bin;
use super::qoder_cli::{self, Cli, CliEnv, Run, TOKEN};
use super::qoder_model_server::ModelServer;
use super::qoder_world::World;
use super::scripted_https::{Call, Reply};
use super::test_ca::TestCa;
use super::Gate;

/// The hard limit of one CLI run (it retries some failures without end;
/// a run took 110 s on two cores under a load of 13).
pub const TIMEOUT: Duration = Duration::from_secs(240);

/// The compressor's threshold, in characters of message content: below
/// the CLI's first request (about 19,000 characters of messages in an
/// 80 KB body), so every request of the CLI is compressed.
pub const THRESHOLD_CHARS: usize = 8000;

/// The CLI, shimgate, the compressor and a model server, wired up.
pub struct GateStack {
    pub world: World,
    pub model: ModelServer,
    pub gate: Gate,
    /// The config `shimgate env` and `launch` read: the gate's qoder
    /// listener and its state dir (so its CA).
    pub client_config: PathBuf,
    /// The world's test root alone: the CLI's own `NODE_EXTRA_CA_CERTS`,
    /// before shimgate's root is added.
    pub world_roots: PathBuf,
    _compressor: Compressor,
    _dir: bin::TempDir,
}

impl GateStack {
    /// Starts everything; the model server answers its n-th request by
    /// `script`.
    pub async fn start(script: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static) -> Self {
        let dir = bin::tempdir();
        let (world_ca, model_ca) = (TestCa::new(), TestCa::new());
        let world = World::start(world_ca.clone()).await;
        let model = ModelServer::start(model_ca.clone(), TOKEN, script).await;
        let state = dir.join("state");
        // Made before the gate starts, as `shimgate ca path` makes it.
        make_ca(&state);
        let model_root = dir.join("model-root.pem");
        std::fs::write(&model_root, model_ca.root_pem()).unwrap();
        let world_roots = dir.join("world-roots.pem");
        world_ca.write_bundle(&world_roots, &[]);
        let base = format!(
            "[state]\ndir = \"{}\"\nttl_ms = 0\n[savings]\nfile = false\n\
             [upstream]\nca_file = \"{}\"\n\
             [retry]\ninitial_delay_ms = 10\nmax_delay_ms = 1000\njitter_ratio = 0\n\
             [[shims.qoder.model_routes]]\nname = \"model\"\nurl = \"https://{}\"\n",
            toml_path(&state),
            toml_path(&model_root),
            model.host()
        );
        let gate = Gate::start_process(&base).await;
        let policy = Policy {
            threshold_chars: THRESHOLD_CHARS,
            // The CLI's current turn is kept; the turns before it fold.
            keep_turns: 1,
            pass_through: false,
        };
        let listen = "127.0.0.1:0".parse().unwrap();
        let compressor = compressor::start(listen, &gate.qoder, policy)
            .await
            .unwrap();
        gate.use_compressor(&compressor.url(), &base);
        let client_config = dir.join("client.toml");
        std::fs::write(
            &client_config,
            format!(
                "[state]\ndir = \"{}\"\n[shims.qoder]\nlisten = \"{}\"\n",
                toml_path(&state),
                gate.qoder.trim_start_matches("http://")
            ),
        )
        .unwrap();
        GateStack {
            world,
            model,
            gate,
            client_config,
            world_roots,
            _compressor: compressor,
            _dir: dir,
        }
    }

    /// The CLI's environment without anything of shimgate's: the world as
    /// its proxy, the world's root trusted, signed in offline.
    pub fn cli_env(&self) -> CliEnv {
        CliEnv::new(&self.world.proxy_url(), &self.world_roots)
    }

    /// Runs the CLI pointed at shimgate: through `shimgate launch` (it
    /// adds the variables), or, against a Windows binary, with the
    /// variables `shimgate env qoder` printed set in `env`. At most two
    /// runs at once.
    pub async fn run(&self, cli: &Cli, env: &mut CliEnv, args: &[&str]) -> Run {
        let run = if bin::windows_binary() {
            for (k, v) in qoder_cli::printed_env(env, &self.client_config) {
                env.set(&k, &v);
            }
            qoder_cli::run(cli, env, args, TIMEOUT).await
        } else {
            qoder_cli::launch(cli, env, &self.client_config, args, TIMEOUT).await
        };
        eprintln!("qodercli {args:?} through shimgate: {}", run.describe());
        run
    }

    /// `/status`, as JSON.
    pub async fn status(&self) -> serde_json::Value {
        self.gate.status().await
    }
}

/// The local CA of the state dir `state`, made now.
fn make_ca(state: &std::path::Path) {
    let config = Config {
        state_dir: state.to_path_buf(),
        ..Default::default()
    };
    let made = shimgate::tls::ensure_ca(&config).unwrap();
    assert!(made.created);
}

/// A path as a TOML string's content (forward slashes: read the same by
/// a Windows binary under Wine).
fn toml_path(path: &std::path::Path) -> String {
    path.display().to_string().replace('\\', "/")
}

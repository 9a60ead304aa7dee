//! The state every listener shares: the live config (swapped whole on
//! reload), the upstream client, the chain's memory, the rid registry, the
//! proxy identity, and per-shim status.

pub mod admin;
pub mod capture;
pub mod exchange;
pub mod identity;
pub mod ledger;
pub mod rid;
pub mod route_store;
pub mod secret_file;
pub mod state_file;
pub mod stats;
pub mod upstream;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Instant, SystemTime};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::chain::state::ChainState;
use crate::chain::ChainCtx;
use crate::clock::iso8601;
use crate::clock::Now;
use crate::config::{Config, ConfigError};
use crate::http::client::{proxy, HttpClient};
use crate::registry;
use identity::ProxyIdentity;
use rid::RidRegistry;
use route_store::RouteStore;
use stats::ShimStats;

/// The environment's (or system's) proxy setting for `config`, a proxy at
/// its capture listener ignored (said in the log and `/status`): a user
/// who points `HTTPS_PROXY` or the OS's proxy at the capture listener for
/// their clients must not send shimgate's own connections through it.
fn own_environment(config: &Config, capture: &capture::CaptureBook) -> proxy::Environment {
    let own = capture.addr().or(config.capture.listen);
    let env = proxy::Environment::read().excluding(own);
    if env.names_own() {
        let source = env.source().as_str();
        tracing::warn!(
            setting = source,
            capture = %own.map(|a| a.to_string()).unwrap_or_default(),
            "the {source} proxy setting names shimgate's own capture listener: ignored for shimgate's own connections (they go direct, or through [upstream] proxy)"
        );
        capture.ignoring(Some(source));
    } else {
        capture.ignoring(None);
    }
    env
}

/// A config together with the client built for its timeouts; replaced whole
/// on reload so a request sees one consistent snapshot.
pub struct Live {
    pub config: Arc<Config>,
    pub client: HttpClient,
    /// The environment's (or system's) proxy setting as read for this
    /// config, a proxy at the capture listener ignored: what the capture
    /// listener's onward connections resolve their proxy by.
    pub env: Arc<proxy::Environment>,
}

/// Reload bookkeeping for `/status.config`.
#[derive(Debug, Default, Clone)]
struct ReloadState {
    reloads: u64,
    last_reload_at: Option<SystemTime>,
    last_reload_error: Option<String>,
}

/// Everything the listeners share.
pub struct App {
    live: RwLock<Arc<Live>>,
    pub chain: Arc<ChainState>,
    pub hard_stop: CancellationToken,
    pub started: Instant,
    shims: BTreeMap<&'static str, Arc<ShimStats>>,
    reload: Mutex<ReloadState>,
    /// The rid registry every listener shares.
    pub rids: RidRegistry,
    /// What the compression proxy sees as each agent's `Authorization`.
    pub identity: ProxyIdentity,
    /// The route state file of this config: what the chain learnt, kept
    /// across restarts.
    pub route_file: Arc<RouteStore>,
    /// The admin surface's token and refusal counts (`docs/security.md`).
    pub admin: admin::AdminState,
    /// What compression saved, in tokens, kept across restarts.
    pub ledger: Arc<ledger::Ledger>,
    /// TLS on every listener: the local CA, the leaves, the handshake
    /// counts (its state dir and `[ca] names` as at start).
    pub tls: Arc<crate::tls::Tls>,
    /// What the capture listener did, host by host.
    pub capture: capture::CaptureBook,
}

impl App {
    /// State for a validated config.
    pub fn new(mut config: Config) -> Arc<App> {
        let capture = capture::CaptureBook::default();
        let env = Arc::new(own_environment(&config, &capture));
        upstream::resolve_proxies(&mut config, &env);
        let client = upstream::client(&config);
        let identity = ProxyIdentity::load_or_create(&config.state_dir);
        let chain = Arc::new(ChainState::new());
        let route_file = Arc::new(RouteStore::open(&config, &chain, Now::system()));
        let admin = admin::AdminState::for_config(&config);
        let ledger = ledger::Ledger::open(&config);
        let tls = Arc::new(crate::tls::Tls::new(&config));
        Arc::new(App {
            tls,
            live: RwLock::new(Arc::new(Live {
                config: Arc::new(config),
                client,
                env,
            })),
            capture,
            chain,
            hard_stop: CancellationToken::new(),
            started: Instant::now(),
            shims: registry::names()
                .map(|n| (n, Arc::new(ShimStats::default())))
                .collect(),
            reload: Mutex::default(),
            rids: RidRegistry::default(),
            identity,
            route_file,
            admin,
            ledger,
        })
    }

    /// The live snapshot.
    pub fn live(&self) -> Arc<Live> {
        self.live.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The live config.
    pub fn config(&self) -> Arc<Config> {
        self.live().config.clone()
    }

    /// What a chain call needs.
    pub fn chain_ctx(&self) -> ChainCtx {
        ChainCtx {
            client: self.live().client.clone(),
            state: self.chain.clone(),
            hard_stop: self.hard_stop.clone(),
        }
    }

    /// A shim's status (one per registered shim; an unknown name gets a
    /// detached one, so a caller's typo shows as zeros, never as another
    /// shim's figures).
    pub fn shim_stats(&self, shim: &str) -> Arc<ShimStats> {
        self.shims.get(shim).cloned().unwrap_or_default()
    }

    /// Swaps in a validated config (the next request uses it; streams in
    /// flight keep the snapshot they started with).
    pub fn replace_config(&self, mut config: Config) -> Arc<Config> {
        // The environment's proxy setting is read again: a change takes
        // effect with a reload.
        let env = Arc::new(own_environment(&config, &self.capture));
        upstream::resolve_proxies(&mut config, &env);
        let client = upstream::client(&config);
        let config = Arc::new(config);
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Live {
            config: config.clone(),
            client,
            env,
        });
        config
    }

    /// Re-reads the config file. Routes, retry, ordering and timeouts apply
    /// to the next request; listeners and streams in flight are untouched.
    /// A bad file is rejected and the old config stays.
    pub fn reload(&self) -> Result<Arc<Config>, ConfigError> {
        let current = self.config();
        let result = match &current.source {
            Some(path) => Config::load(path),
            None => Err(ConfigError {
                path: String::new(),
                message: "shimgate runs on built-in defaults: there is no config file to re-read"
                    .into(),
            }),
        };
        let mut state = self.reload.lock().unwrap_or_else(|p| p.into_inner());
        state.last_reload_at = Some(SystemTime::now());
        match result {
            Ok(new) => {
                let new = self.replace_config(new);
                self.admin.reread(&new);
                // Hosts tunnelled after refusals are decrypted again (the
                // user may have given the client the CA meanwhile).
                self.capture.reset_tunnelling();
                state.reloads += 1;
                state.last_reload_error = None;
                Ok(new)
            }
            Err(e) => {
                state.last_reload_error = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// The `/status.config` section.
    pub fn config_status(&self) -> Value {
        let config = self.config();
        let r = self
            .reload
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        json!({
            "path": config.source.as_ref().map(|p| p.display().to_string()),
            "compressor": config.compressor,
            "reloads": r.reloads,
            "lastReloadAt": r.last_reload_at.map(iso8601),
            "lastReloadError": r.last_reload_error,
        })
    }
}

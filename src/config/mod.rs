//! The validated runtime config and how it is loaded.
//!
//! Loading is two-staged: the TOML is read into the raw structs of [`raw`]
//! (unknown keys rejected, type errors reported with their key path by
//! `serde_path_to_error`), then [`Config::from_raw`] checks every value and
//! fills defaults. Both stages run before any socket is bound.

pub mod ca;
pub mod capture;
pub mod edit;
pub mod paths;
pub mod raw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::header::{HeaderName, HeaderValue};
use shimgate_shim_api::FailureCode;

use crate::http::client::proxy::{ProxySetting, Via};
use crate::registry::{self, Facts};
pub use paths::{default_state_dir, expand_home};
use raw::{RawConfig, RawRoute, RawShim};

/// Retries per route after the first try.
pub const DEFAULT_MAX_RETRIES: u32 = 5;
/// First backoff delay.
pub const DEFAULT_INITIAL_DELAY_MS: u64 = 500;
/// Backoff cap; a Retry-After above it switches route at once.
pub const DEFAULT_MAX_DELAY_MS: u64 = 10_000;
/// Symmetric jitter applied to each backoff delay.
pub const DEFAULT_JITTER_RATIO: f64 = 0.1;
/// Codes retried in place by default (transient by nature).
pub const DEFAULT_RETRYABLE: [FailureCode; 5] = [
    FailureCode::EmptyResponse,
    FailureCode::RateLimit,
    FailureCode::Server,
    FailureCode::Timeout,
    FailureCode::Transport,
];
/// How long a route rests after a quota failure when the upstream names no reset (12 h).
pub const DEFAULT_QUOTA_COOLDOWN_MS: u64 = 43_200_000;
/// In-place retries may be at most this share of the calls of the last
/// 10 s (Envoy's and linkerd's 20 %) ...
pub const DEFAULT_BUDGET_RATIO: f64 = 0.2;
/// ... plus this many a second (Envoy's `min_retry_concurrency` 3).
pub const DEFAULT_BUDGET_MIN_PER_S: u32 = 3;
/// How long measured ordering remembers an attempt (10 min): older
/// evidence says little about a channel now.
pub const DEFAULT_MEASURE_WINDOW_MS: u64 = 600_000;
/// Consecutive non-quota failures that open a route's breaker.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// How long an opened breaker stays open before one call is let through.
pub const DEFAULT_BREAKER_OPEN_MS: u64 = 30_000;
/// The longest an open breaker's period grows to by doubling (10 min).
pub const DEFAULT_BREAKER_MAX_OPEN_MS: u64 = 600_000;
/// How old the route state file may be and still be read at start (24 h).
pub const DEFAULT_STATE_TTL_MS: u64 = 86_400_000;
/// Days of token savings kept (`[savings] days`), today included.
pub const DEFAULT_SAVINGS_DAYS: u32 = 90;
/// Conversations whose savings are kept one by one (`[savings]
/// conversations`); older and further ones are summed into one line.
pub const DEFAULT_SAVINGS_CONVERSATIONS: usize = 100;
/// The most days `[savings] days` may keep (ten years).
pub const MAX_SAVINGS_DAYS: u32 = 3660;
/// The most conversations `[savings] conversations` may keep one by one
/// (every `/status` lists them).
pub const MAX_SAVINGS_CONVERSATIONS: usize = 10_000;
/// TCP connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
/// Time allowed until the upstream's response head.
pub const DEFAULT_FIRST_BYTE_TIMEOUT_MS: u64 = 120_000;
/// Longest silence between two body chunks.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Request bodies above this answer 413 (32 MiB).
pub const DEFAULT_MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// A client must send a request head within this time (30 s).
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 30_000;
/// A client connection with no request in flight is closed after this (120 s).
pub const DEFAULT_CLIENT_IDLE_TIMEOUT_MS: u64 = 120_000;
/// Open client connections per listener at most; beyond it a new one gets
/// `503` at once (1,024: an agent opens a handful).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// `[limits] workers` by default: one thread runs every connection, on
/// tokio's current-thread scheduler (`cmd::serve::runtime`). A request's
/// way through shimgate is a few hundred microseconds of work that hands
/// itself from the agent's connection to the proxy's and back; for one
/// user's few streams a second worker thread mostly adds wake-ups and
/// cross-core hand-offs (measured: `benches/README.md`, "2026-12-02
/// (16:00 UTC)").
pub const DEFAULT_WORKERS: usize = 1;

/// The most `[limits] workers` takes.
pub const MAX_WORKERS: usize = 64;

/// The admin token's file name in the state dir (`[admin] token_file`
/// unset).
pub const DEFAULT_ADMIN_TOKEN_FILE: &str = "admin.token";
/// The file `serve` reads when no `--config` is given.
pub const DEFAULT_CONFIG_FILE: &str = "shimgate.toml";
/// Backoff delays are capped here whatever the config says (1 h): a larger
/// value is surely a unit mistake.
const MAX_SANE_DELAY_MS: u64 = 3_600_000;

/// A config error, naming the key path and the bad value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted key path (`shims.trae.routes[1].url`), empty for file-level errors.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// In-place retry policy (`[retry]`).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
    pub jitter_ratio: f64,
    pub retryable: Vec<FailureCode>,
    /// The retry budget: share of the recent calls ...
    pub budget_ratio: f64,
    /// ... plus retries a second.
    pub budget_min_per_s: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: DEFAULT_MAX_RETRIES,
            initial_delay: Duration::from_millis(DEFAULT_INITIAL_DELAY_MS),
            max_delay: Duration::from_millis(DEFAULT_MAX_DELAY_MS),
            jitter_ratio: DEFAULT_JITTER_RATIO,
            retryable: DEFAULT_RETRYABLE.to_vec(),
            budget_ratio: DEFAULT_BUDGET_RATIO,
            budget_min_per_s: DEFAULT_BUDGET_MIN_PER_S,
        }
    }
}

/// How routes are ordered for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderingMode {
    /// Quota cooldowns skip routes (all cooling: cooldowns ignored).
    Auto,
    /// Strict configured order, nothing skipped for quota.
    Manual,
    /// Ranked by measured success rate and speed (README: the score);
    /// cooling and breaker-open routes skipped as in auto.
    Measured,
}

impl OrderingMode {
    /// The config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderingMode::Auto => "auto",
            OrderingMode::Manual => "manual",
            OrderingMode::Measured => "measured",
        }
    }

    /// Whether cooldowns and open breakers skip routes (all but manual).
    pub fn skips_resting(self) -> bool {
        self != OrderingMode::Manual
    }
}

/// `[ordering]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ordering {
    pub mode: OrderingMode,
    pub quota_cooldown: Duration,
    /// The local hour (0–23) a quota rest ends at, never before
    /// `quota_cooldown`.
    pub quota_cooldown_hour: Option<u8>,
    /// How long measured ordering remembers an attempt.
    pub measure_window: Duration,
    /// `zone`: of the quota hour, the route windows and a reset stated as
    /// a wall time (default: the system's).
    pub zone: crate::clock::Zone,
}

impl Default for Ordering {
    fn default() -> Self {
        Ordering {
            mode: OrderingMode::Auto,
            quota_cooldown: Duration::from_millis(DEFAULT_QUOTA_COOLDOWN_MS),
            quota_cooldown_hour: None,
            measure_window: Duration::from_millis(DEFAULT_MEASURE_WINDOW_MS),
            zone: crate::clock::Zone::LOCAL,
        }
    }
}

/// `[breaker]`: consecutive non-quota failures open a route.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    /// 0 = no breaker.
    pub failures: u32,
    pub open: Duration,
    pub max_open: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failures: DEFAULT_BREAKER_FAILURES,
            open: Duration::from_millis(DEFAULT_BREAKER_OPEN_MS),
            max_open: Duration::from_millis(DEFAULT_BREAKER_MAX_OPEN_MS),
        }
    }
}

/// `[upstream]` timeouts.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeouts {
    pub connect: Duration,
    pub first_byte: Duration,
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_millis(DEFAULT_CONNECT_TIMEOUT_MS),
            first_byte: Duration::from_millis(DEFAULT_FIRST_BYTE_TIMEOUT_MS),
            idle: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
        }
    }
}

/// What a client connection may take (`[limits]`; read when the
/// listeners start, not on reload).
#[derive(Debug, Clone, PartialEq)]
pub struct ClientLimits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Threads of the runtime that serves every connection (read once,
    /// when `serve` starts).
    pub workers: usize,
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            header_read_timeout: Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS),
            idle_timeout: Duration::from_millis(DEFAULT_CLIENT_IDLE_TIMEOUT_MS),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            workers: DEFAULT_WORKERS,
        }
    }
}

/// `[admin]` (`docs/security.md`): the admin surface's trust settings.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AdminConfig {
    /// `Host` names (lowercase, optionally with `:port`) the admin surface
    /// answers besides the loopback ones.
    pub allowed_hosts: Vec<String>,
    /// `token_file`; `None`: `admin.token` in the state dir.
    pub token_file: Option<PathBuf>,
}

/// `[savings]`: how much of the token ledger is kept, and where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavingsConfig {
    /// Days kept, today included (in the `[ordering] zone`).
    pub days: u32,
    /// Conversations kept one by one.
    pub conversations: usize,
    /// Whether the ledger is kept in a file in the state dir (`false`:
    /// since start only).
    pub file: bool,
}

impl Default for SavingsConfig {
    fn default() -> Self {
        SavingsConfig {
            days: DEFAULT_SAVINGS_DAYS,
            conversations: DEFAULT_SAVINGS_CONVERSATIONS,
            file: true,
        }
    }
}

/// How the qoder shim turns a rebuilt ask into an upstream request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Codec {
    /// POST the ask JSON as is.
    Plain,
    /// A co-process: one JSON line in, one JSON line out.
    Exec(Vec<String>),
    /// qoder's body encoding and the COSY signature, made again for every
    /// attempt from the request's own COSY headers (needs them).
    Cosy,
}

impl Codec {
    /// The config spelling.
    pub fn kind(&self) -> &'static str {
        match self {
            Codec::Plain => "plain",
            Codec::Exec(_) => "exec",
            Codec::Cosy => "cosy",
        }
    }
}

/// One upstream route.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub name: String,
    /// Base URL without a trailing slash; the request path is appended.
    pub url: String,
    /// 0 = no cap.
    pub max_concurrency: usize,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The model's context window in tokens, when the user knows it: named
    /// in context-overflow errors so the proxy learns the window.
    pub context_tokens: Option<u64>,
    /// When it may be tried (`active_hours`, `until`).
    pub window: Window,
    /// Its own `proxy`, as written (`None`: not set).
    pub proxy: Option<ProxySetting>,
    /// The proxy its connections take (its own, `[upstream] proxy` or the
    /// environment's; `Config::from_raw` fills it).
    pub via: Via,
}

/// A route's window (`docs/failover.md`, route windows): the local hours it may be
/// tried and the last local day. Both empty: always.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Window {
    /// `(from, to)` local hours, both inclusive; `from > to` crosses
    /// midnight. Empty: all day.
    pub hours: Vec<(u8, u8)>,
    /// The last local day it may be tried.
    pub until: Option<chrono::NaiveDate>,
}

impl Window {
    /// Whether the route is always in its window.
    pub fn always(&self) -> bool {
        self.hours.is_empty() && self.until.is_none()
    }
}

/// `[shims.NAME]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ShimConfig {
    /// The shim's registry name.
    pub name: &'static str,
    pub enabled: bool,
    pub listen: SocketAddr,
    pub allow_remote: bool,
    /// Per-shim compressor override.
    pub compressor: Option<String>,
    /// Only for shims whose rebuilt request goes through a codec.
    pub codec: Codec,
    pub routes: Vec<Route>,
    /// `routes` are the shim's built-in ones (`Shim::DEFAULT_ROUTES`; none
    /// for most shims), not written in the file: the capture listener
    /// then sends a call to the host its client asked for.
    pub routes_built_in: bool,
}

impl ShimConfig {
    /// The defaults of a registered shim (its default routes included).
    fn of(facts: &Facts) -> Self {
        ShimConfig {
            name: facts.name,
            enabled: facts.enabled_by_default,
            listen: facts
                .default_listen
                .parse()
                .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0))),
            allow_remote: false,
            compressor: None,
            codec: Codec::Plain,
            routes: default_routes(facts),
            routes_built_in: true,
        }
    }
}

/// A shim's built-in routes (`Shim::DEFAULT_ROUTES`), as if configured.
fn default_routes(facts: &Facts) -> Vec<Route> {
    facts
        .default_routes
        .iter()
        .filter_map(|(name, url)| {
            let raw = RawRoute {
                name: (*name).to_owned(),
                url: (*url).to_owned(),
                max_concurrency: None,
                headers: None,
                context_tokens: None,
                active_hours: None,
                until: None,
                proxy: None,
            };
            check_route(&facts.routes_path(), raw).ok()
        })
        .collect()
}

/// The validated runtime config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (reload re-reads it); `None` for built-in defaults.
    pub source: Option<PathBuf>,
    /// Global compressor base URL; `None` = direct mode.
    pub compressor: Option<String>,
    pub retry: RetryPolicy,
    pub ordering: Ordering,
    pub breaker: BreakerPolicy,
    pub timeouts: Timeouts,
    pub max_body_bytes: u64,
    pub client: ClientLimits,
    /// `[state] dir`: where shimgate keeps what outlives a restart (the
    /// proxy identity key, one route state file per config file).
    pub state_dir: PathBuf,
    /// `[state] ttl_ms`: how old the route state file may be when read at start;
    /// zero = no route state file at all.
    pub state_ttl: Duration,
    pub admin: AdminConfig,
    /// `[savings]`.
    pub savings: SavingsConfig,
    /// `[ca]`: what the local CA may sign for (read when the CA is made
    /// and when `serve` starts).
    pub ca: ca::CaConfig,
    /// `[capture]`: the loopback proxy for clients that only follow one
    /// (read when the listeners start; its list and threshold on reload).
    pub capture: capture::CaptureConfig,
    /// `[upstream] proxy`.
    pub upstream_proxy: Option<ProxySetting>,
    /// `[upstream] roots`.
    pub roots: crate::http::client::Roots,
    /// `[upstream] ca_file`: roots added to `roots` (read when the client
    /// is built; checked when the config is).
    pub ca_file: Option<PathBuf>,
    /// Every registered shim's section, in registry order.
    pub shims: Vec<ShimConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            source: None,
            compressor: None,
            retry: RetryPolicy::default(),
            ordering: Ordering::default(),
            breaker: BreakerPolicy::default(),
            timeouts: Timeouts::default(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            client: ClientLimits::default(),
            state_dir: default_state_dir(),
            state_ttl: Duration::from_millis(DEFAULT_STATE_TTL_MS),
            admin: AdminConfig::default(),
            savings: SavingsConfig::default(),
            ca: ca::CaConfig::default(),
            capture: capture::CaptureConfig::default(),
            upstream_proxy: None,
            roots: crate::http::client::Roots::default(),
            ca_file: None,
            shims: registry::facts().iter().map(ShimConfig::of).collect(),
        }
    }
}

impl Config {
    /// The config of one shim by name.
    pub fn shim(&self, name: &str) -> Option<&ShimConfig> {
        self.shims.iter().find(|s| s.name == name)
    }

    /// Every shim listens on a free loopback port (`127.0.0.1:0`): for the
    /// demo and for tests, which must not need fixed ports. (`[capture]
    /// listen` is left as written: a test that needs it names port 0.)
    pub fn listen_on_free_ports(&mut self) {
        for s in &mut self.shims {
            s.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        }
    }

    /// The config of one shim by name, to change.
    pub fn shim_mut(&mut self, name: &str) -> Option<&mut ShimConfig> {
        self.shims.iter_mut().find(|s| s.name == name)
    }

    /// The file the admin token of `allow_remote` listeners is kept in.
    pub fn admin_token_file(&self) -> PathBuf {
        self.admin
            .token_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join(DEFAULT_ADMIN_TOKEN_FILE))
    }

    /// The compressor URL a shim uses (its own override, else the global one).
    pub fn compressor_for(&self, shim: &str) -> Option<&str> {
        self.shim(shim)
            .and_then(|s| s.compressor.as_deref())
            .or(self.compressor.as_deref())
    }

    /// Parses and validates TOML text.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let de = toml::Deserializer::new(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let message = inner.message().to_string();
            let path = if path == "." { String::new() } else { path };
            match inner.span() {
                Some(span) if path.is_empty() => {
                    let line = text[..span.start.min(text.len())].lines().count().max(1);
                    ConfigError::at("", format!("line {line}: {message}"))
                }
                _ => ConfigError::at(path, message),
            }
        })?;
        Config::from_raw(raw)
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError::at("", format!("cannot read {}: {e}", path.display())))?;
        let mut config = Config::from_toml(&text)?;
        // Absolute, so `/status`, the log and a reload name the same file
        // whatever the working directory; as written (no symlink resolved,
        // no `\\?\` prefix on Windows).
        config.source = Some(paths::shown(path));
        Ok(config)
    }

    /// Validates the raw file and fills defaults.
    pub fn from_raw(raw: RawConfig) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        if let Some(c) = raw.compressor {
            if let Some(url) = c.url {
                config.compressor = Some(check_url("compressor.url", &url)?);
            }
        }
        if let Some(r) = raw.retry {
            apply_retry(r, &mut config.retry)?;
        }
        if let Some(o) = raw.ordering {
            apply_ordering(o, &mut config.ordering)?;
        }
        if let Some(b) = raw.breaker {
            apply_breaker(b, &mut config.breaker)?;
        }
        if let Some(u) = raw.upstream {
            if let Some(ms) = u.connect_timeout_ms {
                config.timeouts.connect = positive_ms("upstream.connect_timeout_ms", ms)?;
            }
            if let Some(ms) = u.first_byte_timeout_ms {
                config.timeouts.first_byte = positive_ms("upstream.first_byte_timeout_ms", ms)?;
            }
            if let Some(ms) = u.idle_timeout_ms {
                config.timeouts.idle = positive_ms("upstream.idle_timeout_ms", ms)?;
            }
            if let Some(p) = u.proxy {
                config.upstream_proxy = Some(proxy_setting("upstream.proxy", &p)?);
            }
            config.roots = match u.roots.as_deref().map(str::trim) {
                None | Some("system") => crate::http::client::Roots::System,
                Some("bundled") => crate::http::client::Roots::Bundled,
                Some(other) => {
                    return Err(ConfigError::at(
                        "upstream.roots",
                        format!("{other:?} is not \"system\" or \"bundled\""),
                    ))
                }
            };
            if let Some(file) = u.ca_file {
                let path = expand_home(&file);
                crate::http::client::pem_roots(&path)
                    .map_err(|e| ConfigError::at("upstream.ca_file", e))?;
                config.ca_file = Some(path);
            }
        }
        if let Some(l) = raw.limits {
            if let Some(n) = l.max_body_bytes {
                if n == 0 {
                    return Err(ConfigError::at(
                        "limits.max_body_bytes",
                        "must be > 0, got 0",
                    ));
                }
                config.max_body_bytes = n;
            }
            if let Some(ms) = l.header_read_timeout_ms {
                config.client.header_read_timeout =
                    positive_ms("limits.header_read_timeout_ms", ms)?;
            }
            if let Some(ms) = l.client_idle_timeout_ms {
                config.client.idle_timeout = positive_ms("limits.client_idle_timeout_ms", ms)?;
            }
            if let Some(n) = l.max_connections {
                if n == 0 {
                    return Err(ConfigError::at(
                        "limits.max_connections",
                        "must be > 0, got 0",
                    ));
                }
                config.client.max_connections = n as usize;
            }
            if let Some(n) = l.workers {
                let n = n as usize;
                if !(1..=MAX_WORKERS).contains(&n) {
                    return Err(ConfigError::at(
                        "limits.workers",
                        format!("must be 1 to {MAX_WORKERS}, got {n}"),
                    ));
                }
                config.client.workers = n;
            }
        }
        let state = raw.state.unwrap_or_default();
        if let Some(dir) = state.dir {
            if dir.trim().is_empty() {
                return Err(ConfigError::at("state.dir", "must not be empty"));
            }
            config.state_dir = expand_home(&dir);
        }
        if let Some(ms) = state.ttl_ms {
            config.state_ttl = Duration::from_millis(ms);
        }
        if let Some(a) = raw.admin {
            config.admin = check_admin(a)?;
        }
        if let Some(s) = raw.savings {
            apply_savings(s, &mut config.savings)?;
        }
        if let Some(c) = raw.ca {
            config.ca = ca::check(c)?;
        }
        config.capture = capture::check(raw.capture.unwrap_or_default(), &config.ca.names)?;
        capture::refuse_self(
            "upstream.proxy",
            config.upstream_proxy.as_ref(),
            &config.capture,
        )?;
        for (name, mut raw_shim) in raw.shims.unwrap_or_default() {
            let section = registry::find(&name).filter(|f| f.listens());
            let Some(shim) =
                section.and_then(|f| config.shims.iter_mut().find(|s| s.name == f.name))
            else {
                let known: Vec<_> = registry::facts()
                    .iter()
                    .filter(|f| f.listens())
                    .map(|f| f.name)
                    .collect();
                return Err(ConfigError::at(
                    format!("shims.{name}"),
                    format!("unknown shim {name:?} (known: {})", known.join(", ")),
                ));
            };
            let riders = take_riders(&name, &mut raw_shim.other)?;
            apply_shim(raw_shim, shim)?;
            let enabled = shim.enabled;
            for (facts, routes) in riders {
                if let Some(rider) = config.shims.iter_mut().find(|s| s.name == facts.name) {
                    apply_routes(&facts.routes_path(), routes, rider, enabled)?;
                }
            }
        }
        share_host_settings(&mut config.shims);
        check_listen_clashes(&config.shims)?;
        check_capture_clashes(&config)?;
        Ok(config)
    }
}

/// `[savings]`.
fn apply_savings(s: raw::RawSavings, c: &mut SavingsConfig) -> Result<(), ConfigError> {
    if let Some(days) = s.days {
        if !(1..=MAX_SAVINGS_DAYS).contains(&days) {
            return Err(ConfigError::at(
                "savings.days",
                format!("must be 1 to {MAX_SAVINGS_DAYS}, got {days}"),
            ));
        }
        c.days = days;
    }
    if let Some(n) = s.conversations {
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if !(1..=MAX_SAVINGS_CONVERSATIONS).contains(&n) {
            return Err(ConfigError::at(
                "savings.conversations",
                format!("must be 1 to {MAX_SAVINGS_CONVERSATIONS}, got {n}"),
            ));
        }
        c.conversations = n;
    }
    if let Some(file) = s.file {
        c.file = file;
    }
    Ok(())
}

/// `[retry]`.
fn apply_retry(r: raw::RawRetry, p: &mut RetryPolicy) -> Result<(), ConfigError> {
    if let Some(n) = r.max_retries {
        if n > 100 {
            return Err(ConfigError::at(
                "retry.max_retries",
                format!("{n} is more than 100 retries per route"),
            ));
        }
        p.max_retries = n;
    }
    if let Some(ms) = r.initial_delay_ms {
        p.initial_delay = positive_ms("retry.initial_delay_ms", ms)?;
    }
    if let Some(ms) = r.max_delay_ms {
        p.max_delay = positive_ms("retry.max_delay_ms", ms)?;
    }
    if p.max_delay < p.initial_delay {
        return Err(ConfigError::at(
            "retry.max_delay_ms",
            format!(
                "{} is below retry.initial_delay_ms ({})",
                p.max_delay.as_millis(),
                p.initial_delay.as_millis()
            ),
        ));
    }
    if let Some(j) = r.jitter_ratio {
        if !(0.0..=1.0).contains(&j) || j.is_nan() {
            return Err(ConfigError::at(
                "retry.jitter_ratio",
                format!("{j} is not between 0 and 1"),
            ));
        }
        p.jitter_ratio = j;
    }
    if let Some(codes) = r.retryable {
        let mut parsed = Vec::new();
        for (i, name) in codes.iter().enumerate() {
            let code = FailureCode::parse(name).ok_or_else(|| {
                ConfigError::at(
                    format!("retry.retryable[{i}]"),
                    format!("unknown failure code {name:?}"),
                )
            })?;
            parsed.push(code);
        }
        p.retryable = parsed;
    }
    if let Some(ratio) = r.budget_ratio {
        // Above 100 retries per call the budget means nothing; a typo.
        if !(0.0..=100.0).contains(&ratio) || ratio.is_nan() {
            return Err(ConfigError::at(
                "retry.budget_ratio",
                format!("{ratio} is not between 0 and 100"),
            ));
        }
        p.budget_ratio = ratio;
    }
    if let Some(n) = r.budget_min_per_s {
        p.budget_min_per_s = n;
    }
    Ok(())
}

/// `[ordering]`.
fn apply_ordering(o: raw::RawOrdering, ordering: &mut Ordering) -> Result<(), ConfigError> {
    if let Some(mode) = o.mode {
        ordering.mode = match mode.as_str() {
            "auto" => OrderingMode::Auto,
            "manual" => OrderingMode::Manual,
            "measured" => OrderingMode::Measured,
            other => {
                return Err(ConfigError::at(
                    "ordering.mode",
                    format!("{other:?} is not \"auto\", \"manual\" or \"measured\""),
                ))
            }
        };
    }
    if let Some(ms) = o.quota_cooldown_ms {
        ordering.quota_cooldown = positive_ms("ordering.quota_cooldown_ms", ms)?;
    }
    if let Some(hour) = o.quota_cooldown_hour {
        ordering.quota_cooldown_hour =
            Some(u8::try_from(hour).ok().filter(|h| *h < 24).ok_or_else(|| {
                ConfigError::at(
                    "ordering.quota_cooldown_hour",
                    format!("{hour} is not an hour of the day (0-23)"),
                )
            })?);
    }
    if let Some(ms) = o.measure_window_ms {
        ordering.measure_window = positive_ms("ordering.measure_window_ms", ms)?;
    }
    if let Some(name) = o.zone {
        ordering.zone = crate::clock::Zone::named(&name).ok_or_else(|| {
            ConfigError::at(
                "ordering.zone",
                format!("{name:?} is not an IANA zone name (e.g. \"Asia/Shanghai\", \"UTC\")"),
            )
        })?;
    }
    Ok(())
}

/// `[admin]`: host names as a browser writes them in `Host` (no scheme,
/// no path), the token file a path.
fn check_admin(a: raw::RawAdmin) -> Result<AdminConfig, ConfigError> {
    let mut admin = AdminConfig::default();
    for (i, host) in a.allowed_hosts.unwrap_or_default().iter().enumerate() {
        let bad = |why: &str| {
            ConfigError::at(
                format!("admin.allowed_hosts[{i}]"),
                format!("{host:?} {why}"),
            )
        };
        if host.is_empty() || host.contains(['/', '@', ' ']) || host.contains("://") {
            return Err(bad(
                "is not a host name as it appears in Host (e.g. \"myhost.lan\" or \"myhost.lan:47001\")",
            ));
        }
        if host.parse::<http::uri::Authority>().is_err() {
            return Err(bad("is not a host name"));
        }
        admin.allowed_hosts.push(host.to_ascii_lowercase());
    }
    if let Some(file) = a.token_file {
        if file.trim().is_empty() {
            return Err(ConfigError::at("admin.token_file", "must not be empty"));
        }
        admin.token_file = Some(expand_home(&file));
    }
    Ok(admin)
}

/// `[breaker]`.
fn apply_breaker(b: raw::RawBreaker, p: &mut BreakerPolicy) -> Result<(), ConfigError> {
    if let Some(n) = b.failures {
        p.failures = n;
    }
    if let Some(ms) = b.open_ms {
        p.open = positive_ms("breaker.open_ms", ms)?;
    }
    if let Some(ms) = b.max_open_ms {
        p.max_open = positive_ms("breaker.max_open_ms", ms)?;
    }
    if p.max_open < p.open {
        return Err(ConfigError::at(
            "breaker.max_open_ms",
            format!(
                "{} is below breaker.open_ms ({})",
                p.max_open.as_millis(),
                p.open.as_millis()
            ),
        ));
    }
    Ok(())
}

/// The routes of the shims that ride on the section `host`, taken out of
/// its other keys (`model_routes`), with their key paths checked; any key
/// left is unknown (refused, named as serde names one).
fn take_riders(
    host: &str,
    other: &mut std::collections::BTreeMap<String, toml::Value>,
) -> Result<Vec<(&'static Facts, Vec<RawRoute>)>, ConfigError> {
    let mut taken = Vec::new();
    let riders = registry::facts()
        .iter()
        .filter(|f| f.rides_on == Some(host));
    for facts in riders {
        let Some(value) = other.remove(facts.routes_key) else {
            continue;
        };
        let path = facts.routes_path();
        let routes: Vec<RawRoute> = serde_path_to_error::deserialize(value).map_err(|e| {
            let inner = e.path().to_string();
            let at = match inner.as_str() {
                "." => path.clone(),
                p if p.starts_with('[') => format!("{path}{p}"),
                p => format!("{path}.{p}"),
            };
            ConfigError::at(at, e.into_inner().to_string())
        })?;
        taken.push((facts, routes));
    }
    if let Some(key) = other.keys().next() {
        let mut expected: Vec<&str> = RawShim::FIELDS.to_vec();
        expected.extend(
            registry::facts()
                .iter()
                .filter(|f| f.rides_on == Some(host))
                .map(|f| f.routes_key),
        );
        let listed: Vec<String> = expected.iter().map(|k| format!("`{k}`")).collect();
        return Err(ConfigError::at(
            format!("shims.{host}.{key}"),
            format!(
                "unknown field `{key}`, expected one of {}",
                listed.join(", ")
            ),
        ));
    }
    Ok(taken)
}

/// A shim that rides on another takes its host's `enabled`, `listen`,
/// `allow_remote` and `compressor`: one listener, one section.
fn share_host_settings(shims: &mut [ShimConfig]) {
    for i in 0..shims.len() {
        let Some(host) = registry::find(shims[i].name).and_then(|f| f.rides_on) else {
            continue;
        };
        let Some(h) = shims.iter().find(|s| s.name == host).cloned() else {
            continue;
        };
        let rider = &mut shims[i];
        rider.enabled = h.enabled;
        rider.listen = h.listen;
        rider.allow_remote = h.allow_remote;
        rider.compressor = h.compressor;
    }
}

/// Two enabled shims cannot share a listen address (port 0 excepted); a
/// shim that rides on another has none of its own.
fn check_listen_clashes(shims: &[ShimConfig]) -> Result<(), ConfigError> {
    let listening = |s: &&ShimConfig| registry::find(s.name).is_none_or(Facts::listens);
    let shims: Vec<&ShimConfig> = shims.iter().filter(listening).collect();
    for (i, later) in shims.iter().enumerate() {
        let clash = shims[..i].iter().find(|earlier| {
            earlier.enabled
                && later.enabled
                && earlier.listen == later.listen
                && later.listen.port() != 0
        });
        if let Some(earlier) = clash {
            return Err(ConfigError::at(
                format!("shims.{}.listen", later.name),
                format!(
                    "{} is also the {} shim's listen address",
                    later.listen, earlier.name
                ),
            ));
        }
    }
    Ok(())
}

/// The capture listener has an address of its own, and no route's proxy
/// names it (a route's connections would loop through shimgate).
fn check_capture_clashes(config: &Config) -> Result<(), ConfigError> {
    let Some(listen) = config.capture.listen else {
        return Ok(());
    };
    let shims = config.shims.iter().filter(|s| {
        s.enabled && registry::find(s.name).is_none_or(Facts::listens) && listen.port() != 0
    });
    if let Some(s) = shims.into_iter().find(|s| s.listen == listen) {
        return Err(ConfigError::at(
            "capture.listen",
            format!("{listen} is also the {} shim's listen address", s.name),
        ));
    }
    for shim in &config.shims {
        let facts = registry::find(shim.name);
        for (i, r) in shim.routes.iter().enumerate() {
            let path = match facts {
                Some(f) => format!("{}[{i}].proxy", f.routes_path()),
                None => format!("shims.{}.routes[{i}].proxy", shim.name),
            };
            capture::refuse_self(&path, r.proxy.as_ref(), &config.capture)?;
        }
    }
    Ok(())
}

fn positive_ms(path: &str, ms: u64) -> Result<Duration, ConfigError> {
    if ms == 0 {
        return Err(ConfigError::at(path, "must be > 0, got 0"));
    }
    if ms > MAX_SANE_DELAY_MS && path.starts_with("retry.") {
        return Err(ConfigError::at(
            path,
            format!("{ms} ms is more than an hour"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

/// Checks an absolute http(s) URL and returns it without a trailing slash.
fn check_url(path: &str, url: &str) -> Result<String, ConfigError> {
    let bad = |why: &str| ConfigError::at(path, format!("{why}: {url:?}"));
    if url.trim() != url || url.is_empty() {
        return Err(bad("not a URL"));
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad("relative URL without a base"));
    };
    if scheme != "http" && scheme != "https" {
        return Err(bad("scheme must be http or https"));
    }
    if rest.is_empty() || rest.starts_with('/') {
        return Err(bad("URL has no host"));
    }
    if url.contains('?') || url.contains('#') {
        return Err(bad("a base URL cannot carry a query or fragment"));
    }
    let uri: http::Uri = url.parse().map_err(|_| bad("not a valid URL"))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("URL has no host"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

fn apply_shim(raw: RawShim, shim: &mut ShimConfig) -> Result<(), ConfigError> {
    let name = shim.name;
    let key = |k: &str| format!("shims.{name}.{k}");
    if let Some(e) = raw.enabled {
        shim.enabled = e;
    }
    if let Some(a) = raw.allow_remote {
        shim.allow_remote = a;
    }
    if let Some(listen) = raw.listen {
        shim.listen = listen.parse().map_err(|_| {
            ConfigError::at(
                key("listen"),
                format!("{listen:?} is not an ip:port address"),
            )
        })?;
    }
    if !shim.listen.ip().is_loopback() && !shim.allow_remote {
        return Err(ConfigError::at(
            key("listen"),
            format!(
                "{} is not a loopback address; set shims.{name}.allow_remote = true to allow it",
                shim.listen
            ),
        ));
    }
    if let Some(url) = raw.compressor {
        shim.compressor = Some(check_url(&key("compressor"), &url)?);
    }
    let has_codec = registry::find(name).is_some_and(|f| f.codec);
    if let Some(codec) = codec_of(&key, has_codec, raw.codec.as_deref(), raw.codec_command)? {
        shim.codec = codec;
    }
    if let Some(routes) = raw.routes {
        let enabled = shim.enabled;
        apply_routes(&key("routes"), routes, shim, enabled)?;
    }
    Ok(())
}

/// A shim's routes as written at `path` (`shims.trae.routes`): each
/// checked, names unique; an empty list is refused when the shim is on.
fn apply_routes(
    path: &str,
    routes: Vec<RawRoute>,
    shim: &mut ShimConfig,
    enabled: bool,
) -> Result<(), ConfigError> {
    if routes.is_empty() && enabled {
        return Err(ConfigError::at(
            path,
            format!("is empty: give the shim at least one [[{path}]], or leave the key out"),
        ));
    }
    shim.routes = Vec::with_capacity(routes.len());
    shim.routes_built_in = false;
    for (i, r) in routes.into_iter().enumerate() {
        let route = check_route(&format!("{path}[{i}]"), r)?;
        if shim.routes.iter().any(|o| o.name == route.name) {
            return Err(ConfigError::at(
                format!("{path}[{i}].name"),
                format!("{:?} is used by an earlier route", route.name),
            ));
        }
        shim.routes.push(route);
    }
    Ok(())
}

/// `codec` and `codec_command`, for a shim that has a codec or not.
fn codec_of(
    key: &dyn Fn(&str) -> String,
    has_codec: bool,
    codec: Option<&str>,
    command: Option<Vec<String>>,
) -> Result<Option<Codec>, ConfigError> {
    if !has_codec {
        return match (codec, command) {
            (None, None) => Ok(None),
            (Some(_), _) => Err(ConfigError::at(key("codec"), "this shim has no codec")),
            (None, Some(_)) => Err(ConfigError::at(
                key("codec_command"),
                "this shim has no codec",
            )),
        };
    }
    match (codec, command) {
        (None, None) => Ok(None),
        (Some("plain"), None) => Ok(Some(Codec::Plain)),
        (Some("cosy"), None) => Ok(Some(Codec::Cosy)),
        (Some("plain" | "cosy") | None, Some(_)) => Err(ConfigError::at(
            key("codec_command"),
            "only used with codec = \"exec\"",
        )),
        (Some("exec"), Some(cmd)) if !cmd.is_empty() && !cmd[0].is_empty() => {
            Ok(Some(Codec::Exec(cmd)))
        }
        (Some("exec"), _) => Err(ConfigError::at(
            key("codec_command"),
            "codec = \"exec\" needs a command, e.g. [\"node\", \"encode.mjs\"]",
        )),
        (Some(other), _) => Err(ConfigError::at(
            key("codec"),
            format!("{other:?} is not \"plain\", \"exec\" or \"cosy\""),
        )),
    }
}

fn check_route(path: &str, raw: RawRoute) -> Result<Route, ConfigError> {
    let name = raw.name.trim().to_string();
    if name.is_empty() {
        return Err(ConfigError::at(format!("{path}.name"), "must not be empty"));
    }
    let url = check_url(&format!("{path}.url"), &raw.url)?;
    let mut headers = Vec::new();
    for (k, v) in raw.headers.unwrap_or_default() {
        let hn = HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
            ConfigError::at(
                format!("{path}.headers"),
                format!("{k:?} is not a header name"),
            )
        })?;
        let hv = HeaderValue::from_str(&v).map_err(|_| {
            ConfigError::at(
                format!("{path}.headers.{k}"),
                "not a valid header value (control characters?)",
            )
        })?;
        headers.push((hn, hv));
    }
    if raw.context_tokens == Some(0) {
        return Err(ConfigError::at(
            format!("{path}.context_tokens"),
            "must be > 0, got 0",
        ));
    }
    let proxy = match raw.proxy {
        Some(p) => Some(proxy_setting(&format!("{path}.proxy"), &p)?),
        None => None,
    };
    Ok(Route {
        name,
        url,
        max_concurrency: raw.max_concurrency.unwrap_or(0) as usize,
        headers,
        context_tokens: raw.context_tokens,
        window: window_of(path, raw.active_hours, raw.until)?,
        proxy,
        via: Via::default(),
    })
}

/// A `proxy` key: a proxy URL or `"none"`.
fn proxy_setting(path: &str, text: &str) -> Result<ProxySetting, ConfigError> {
    ProxySetting::parse(text).map_err(|e| ConfigError::at(path, e))
}

/// `active_hours = ["22-6", "9-12"]` and `until = "2026-12-31"`.
fn window_of(
    path: &str,
    hours: Option<Vec<String>>,
    until: Option<String>,
) -> Result<Window, ConfigError> {
    let mut window = Window::default();
    for (i, range) in hours.unwrap_or_default().iter().enumerate() {
        let hour = |h: &str| h.trim().parse::<u8>().ok().filter(|h| *h < 24);
        let parsed = range
            .split_once('-')
            .and_then(|(from, to)| Some((hour(from)?, hour(to)?)));
        let Some(pair) = parsed else {
            return Err(ConfigError::at(
                format!("{path}.active_hours[{i}]"),
                format!(
                    "{range:?} is not a range of local hours \"FROM-TO\" (0-23, both ends included, e.g. \"9-12\" or \"22-6\")"
                ),
            ));
        };
        window.hours.push(pair);
    }
    if let Some(day) = until {
        let parsed = chrono::NaiveDate::parse_from_str(day.trim(), "%Y-%m-%d").map_err(|e| {
            ConfigError::at(
                format!("{path}.until"),
                format!("{day:?} is not a day as YYYY-MM-DD ({e})"),
            )
        })?;
        window.until = Some(parsed);
    }
    Ok(window)
}

#[cfg(test)]
mod tests;

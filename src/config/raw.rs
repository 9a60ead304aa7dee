//! The config file as written: every key optional, unknown keys rejected.
//!
//! These structs only describe the TOML shape; [`super::Config::from_raw`]
//! turns them into the validated runtime config, so nothing downstream ever
//! sees an unchecked value.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub compressor: Option<RawCompressor>,
    pub retry: Option<RawRetry>,
    pub ordering: Option<RawOrdering>,
    pub upstream: Option<RawUpstream>,
    pub limits: Option<RawLimits>,
    pub state: Option<RawState>,
    pub breaker: Option<RawBreaker>,
    pub admin: Option<RawAdmin>,
    pub savings: Option<RawSavings>,
    pub ca: Option<RawCa>,
    pub capture: Option<RawCapture>,
    /// `[shims.NAME]`, one table per shim of the registry.
    pub shims: Option<BTreeMap<String, RawShim>>,
}

/// `[state]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    pub dir: Option<String>,
    pub ttl_ms: Option<u64>,
}

/// `[savings]`: the token ledger's bounds and file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSavings {
    pub days: Option<u32>,
    pub conversations: Option<u64>,
    pub file: Option<bool>,
}

/// `[admin]`: who the admin surface answers besides loopback names.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub allowed_hosts: Option<Vec<String>>,
    pub token_file: Option<String>,
}

/// `[ca]`: the names the local CA may sign for besides loopback.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCa {
    pub names: Option<Vec<String>>,
}

/// `[capture]`: the loopback HTTP proxy for clients that only follow a
/// proxy.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCapture {
    pub listen: Option<String>,
    pub intercept: Option<Vec<String>>,
    pub tunnel_after_refusals: Option<u32>,
}

/// `[breaker]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBreaker {
    pub failures: Option<u32>,
    pub open_ms: Option<u64>,
    pub max_open_ms: Option<u64>,
}

/// `[compressor]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCompressor {
    pub url: Option<String>,
}

/// `[retry]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRetry {
    pub max_retries: Option<u32>,
    pub initial_delay_ms: Option<u64>,
    pub max_delay_ms: Option<u64>,
    pub jitter_ratio: Option<f64>,
    pub retryable: Option<Vec<String>>,
    pub budget_ratio: Option<f64>,
    pub budget_min_per_s: Option<u32>,
}

/// `[ordering]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOrdering {
    pub mode: Option<String>,
    pub quota_cooldown_ms: Option<u64>,
    pub quota_cooldown_hour: Option<u64>,
    pub measure_window_ms: Option<u64>,
    /// IANA zone name of the quota hour and route windows.
    pub zone: Option<String>,
}

/// `[upstream]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUpstream {
    pub connect_timeout_ms: Option<u64>,
    pub first_byte_timeout_ms: Option<u64>,
    pub idle_timeout_ms: Option<u64>,
    /// A proxy URL or `"none"` (`docs/networks.md`).
    pub proxy: Option<String>,
    /// `"system"` or `"bundled"`.
    pub roots: Option<String>,
    /// Extra trusted roots (PEM).
    pub ca_file: Option<String>,
}

/// `[limits]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub max_body_bytes: Option<u64>,
    pub header_read_timeout_ms: Option<u64>,
    pub client_idle_timeout_ms: Option<u64>,
    pub max_connections: Option<u32>,
    pub workers: Option<u32>,
}

/// `[shims.NAME]`.
///
/// Not `deny_unknown_fields`: the routes of a shim that rides on this one
/// (`[[shims.qoder.model_routes]]`, named by that shim's `ROUTES_KEY`)
/// land in [`RawShim::other`], and `Config::from_raw` refuses any other
/// key there as serde would, naming it.
#[derive(Debug, Default, Deserialize)]
pub struct RawShim {
    pub enabled: Option<bool>,
    pub listen: Option<String>,
    pub allow_remote: Option<bool>,
    pub compressor: Option<String>,
    pub codec: Option<String>,
    pub codec_command: Option<Vec<String>>,
    pub routes: Option<Vec<RawRoute>>,
    /// Every other key, read where the registry says what it is.
    #[serde(flatten)]
    pub other: BTreeMap<String, toml::Value>,
}

impl RawShim {
    /// The keys the struct itself takes, for an unknown key's error.
    pub const FIELDS: [&'static str; 7] = [
        "enabled",
        "listen",
        "allow_remote",
        "compressor",
        "codec",
        "codec_command",
        "routes",
    ];
}

/// `[[shims.NAME.routes]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: String,
    pub url: String,
    pub max_concurrency: Option<u32>,
    pub headers: Option<BTreeMap<String, String>>,
    pub context_tokens: Option<u64>,
    pub active_hours: Option<Vec<String>>,
    pub until: Option<String>,
    /// A proxy URL or `"none"`, over `[upstream] proxy`.
    pub proxy: Option<String>,
}

//! The route state file in the state dir: what the chain learnt
//! of its routes (counters, last failures, cooldown and breaker deadlines,
//! pins and disables) outlives a restart, so a quota wall the upstream
//! named just before a restart is not hit again right after it.
//!
//! **One file per config file** ([`file_name`]): `routes-<hash of the
//! config's path>.json`, `routes.json` for built-in defaults. The state dir
//! is per user by default, so two `serve`s with different configs share it;
//! each writes its whole state, read once at start, so with one file the
//! last to write replaced what the other had saved since. Each config's
//! own file is written by the one instance that serves it (a second one on
//! the same config cannot bind the same listeners), so nothing is lost and
//! no lock or merge is needed. `/status` `chain.stateFile` names the file.
//!
//! Read once at start; a file older than `[state] ttl_ms` is ignored, a
//! corrupt or unreadable one is a warning, never a failed start. Written
//! whole and for its owner only ([`os::write_owner_only`]) by one task, at
//! most once a second (a busy gateway changes its counters on every call),
//! and once more at shutdown. `ttl_ms = 0`: no file is read or written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use crate::app::state_file::{self, FileReport};
use crate::chain::state::{ChainState, RoutesFile};
use crate::clock::Now;
use crate::config::Config;
use crate::os;

/// The file's name inside the state dir when shimgate runs on built-in
/// defaults (no config file).
pub const ROUTES_FILE: &str = "routes.json";

/// The route state file's name inside the state dir for the config loaded
/// from `config` (as loaded: canonical): `routes-<16 hex digits of the
/// SHA-256 of its path>.json`, or [`ROUTES_FILE`] without a config file.
/// The path, not the content, names it: editing the config (or a reload)
/// keeps its state; moving the file starts afresh.
pub fn file_name(config: Option<&Path>) -> String {
    state_file::name_for("routes", config)
}
/// The writer saves at most this often.
pub const DEBOUNCE: Duration = Duration::from_secs(1);
/// After a change the writer waits this long before saving, so the rest of
/// what the same call records (its attempt after its cooldown) is in the
/// same save.
const SETTLE: Duration = Duration::from_millis(20);

/// Where the route state lives and how it went.
#[derive(Debug)]
pub struct RouteStore {
    /// `None`: `ttl_ms = 0`, no file.
    path: Option<PathBuf>,
    /// The config file it belongs to (`None`: built-in defaults).
    config: Option<PathBuf>,
    ttl: Duration,
    report: FileReport,
}

impl RouteStore {
    /// Reads the file of `config` (when it keeps one) into `chain`.
    pub fn open(config: &Config, chain: &ChainState, now: Now) -> RouteStore {
        let ttl = config.state_ttl;
        let name = file_name(config.source.as_deref());
        let path = (!ttl.is_zero()).then(|| config.state_dir.join(name));
        let report = FileReport::new("the route state file");
        if let Some(path) = &path {
            match read(path, ttl, now.wall) {
                Ok(Loaded::Absent) => report.started("absent", None, None),
                Ok(Loaded::Expired(age)) => {
                    report.started("expired", None, None);
                    tracing::info!(path = %path.display(), age_ms = age.as_millis() as u64, "route state file older than [state] ttl_ms: ignored");
                }
                Ok(Loaded::Fresh(file)) => {
                    chain.restore(&file, now);
                    let saved = UNIX_EPOCH + Duration::from_millis(file.saved_at_ms);
                    report.started("loaded", None, Some(saved));
                }
                Err(problem) => {
                    tracing::warn!(path = %path.display(), "cannot use the route state file ({problem}); starting without it");
                    report.started("unreadable", Some(problem), None);
                }
            }
        }
        RouteStore {
            path,
            config: config.source.clone(),
            ttl,
            report,
        }
    }

    /// No file (tests and the demo).
    pub fn off() -> RouteStore {
        RouteStore {
            path: None,
            config: None,
            ttl: Duration::ZERO,
            report: FileReport::new("the route state file"),
        }
    }

    /// The `/status` `chain.stateFile` section.
    pub fn status(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "path".into(),
            json!(self.path.as_ref().map(|p| p.display().to_string())),
        );
        m.insert(
            "config".into(),
            json!(self.config.as_ref().map(|p| p.display().to_string())),
        );
        m.insert("ttlMs".into(), json!(self.ttl.as_millis() as u64));
        m.extend(self.report.fields());
        Value::Object(m)
    }

    /// Writes the chain's state now (a no-op without a file).
    pub async fn save(self: &Arc<Self>, chain: &ChainState) {
        let Some(path) = self.path.clone() else {
            return;
        };
        let now = Now::system();
        let bytes = match serde_json::to_vec_pretty(&chain.snapshot(now)) {
            Ok(b) => b,
            Err(e) => return self.report.wrote(Err(e.to_string()), now.wall),
        };
        let written = tokio::task::spawn_blocking(move || os::write_owner_only(&path, &bytes))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        self.report.wrote(written, now.wall);
    }

    /// Saves whenever the chain's state changed, at most once per
    /// [`DEBOUNCE`]; runs until aborted (shutdown saves once more).
    pub async fn writer(self: Arc<Self>, chain: Arc<ChainState>) {
        if self.path.is_none() {
            return;
        }
        loop {
            chain.changed.notified().await;
            tokio::time::sleep(SETTLE).await;
            self.save(&chain).await;
            tokio::time::sleep(DEBOUNCE - SETTLE).await;
        }
    }
}

/// What reading the file gave.
#[derive(Debug)]
enum Loaded {
    Absent,
    Expired(Duration),
    Fresh(RoutesFile),
}

/// Reads and checks the file at `path` at `now`.
fn read(path: &Path, ttl: Duration, now: SystemTime) -> Result<Loaded, String> {
    let text = match std::fs::read(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::Absent),
        Err(e) => return Err(e.to_string()),
    };
    let file: RoutesFile =
        serde_json::from_slice(&text).map_err(|e| format!("not a route state file: {e}"))?;
    if file.version != crate::chain::state::SNAPSHOT_VERSION {
        return Err(format!(
            "version {} is not {}",
            file.version,
            crate::chain::state::SNAPSHOT_VERSION
        ));
    }
    let saved = UNIX_EPOCH + Duration::from_millis(file.saved_at_ms);
    // A file from the future (the clock moved back) counts as new.
    let age = now.duration_since(saved).unwrap_or_default();
    if age > ttl {
        return Ok(Loaded::Expired(age));
    }
    Ok(Loaded::Fresh(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, ttl_ms: u64) -> Config {
        Config {
            state_dir: dir.to_path_buf(),
            state_ttl: Duration::from_millis(ttl_ms),
            ..Config::default()
        }
    }

    #[tokio::test]
    async fn a_saved_state_is_read_back_at_the_next_start() {
        let tmp = tempfile::tempdir().unwrap();
        let chain = Arc::new(ChainState::new());
        let now = Now::system();
        chain.cool("trae", "a", (Duration::from_secs(60), "test"), "QUOTA", now);
        let store = Arc::new(RouteStore::open(&config(tmp.path(), 60_000), &chain, now));
        assert_eq!(store.status()["atStart"], "absent");
        store.save(&chain).await;
        assert_eq!(store.status()["writes"], 1);
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [ROUTES_FILE], "no temporary file stays");
        let fresh = ChainState::new();
        let again = RouteStore::open(&config(tmp.path(), 60_000), &fresh, Now::system());
        assert_eq!(again.status()["atStart"], "loaded");
        assert_eq!(
            fresh.snapshot(now).shims["trae"].routes["a"].cooldown,
            chain.snapshot(now).shims["trae"].routes["a"].cooldown
        );
    }

    #[test]
    fn each_config_file_has_a_state_file_of_its_own() {
        let a = file_name(Some(Path::new("/home/u/a/shimgate.toml")));
        let b = file_name(Some(Path::new("/home/u/b/shimgate.toml")));
        assert_ne!(a, b);
        assert_eq!(a, file_name(Some(Path::new("/home/u/a/shimgate.toml"))));
        assert!(
            a.starts_with("routes-") && a.ends_with(".json") && a.len() == 28,
            "{a}"
        );
        assert_eq!(file_name(None), ROUTES_FILE);
    }

    #[test]
    fn a_corrupt_file_is_a_problem_not_a_failure_and_an_old_one_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join(ROUTES_FILE);
        std::fs::write(&file, "{ not json").unwrap();
        let chain = ChainState::new();
        let store = RouteStore::open(&config(tmp.path(), 60_000), &chain, Now::system());
        assert_eq!(store.status()["atStart"], "unreadable");
        assert!(store.status()["problem"]
            .as_str()
            .unwrap()
            .contains("not a route state file"));
        let old = RoutesFile {
            version: crate::chain::state::SNAPSHOT_VERSION,
            saved_at_ms: crate::clock::epoch_ms(SystemTime::now()) - 120_000,
            ..RoutesFile::default()
        };
        std::fs::write(&file, serde_json::to_vec(&old).unwrap()).unwrap();
        let store = RouteStore::open(&config(tmp.path(), 60_000), &chain, Now::system());
        assert_eq!(store.status()["atStart"], "expired");
    }

    #[tokio::test]
    async fn ttl_zero_reads_and_writes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(ROUTES_FILE), "{ not json").unwrap();
        let chain = Arc::new(ChainState::new());
        let store = Arc::new(RouteStore::open(
            &config(tmp.path(), 0),
            &chain,
            Now::system(),
        ));
        assert_eq!(store.status()["atStart"], "off");
        std::fs::remove_file(tmp.path().join(ROUTES_FILE)).unwrap();
        store.save(&chain).await;
        assert!(!tmp.path().join(ROUTES_FILE).exists());
    }
}

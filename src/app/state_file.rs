//! What the state files shimgate keeps in the state dir (the route state,
//! the savings book) have in common: a name per config file, so two
//! instances on one state dir keep their own, and what `/status` tells of
//! each file (how it was at start, the last save, the last write error,
//! said once in the log and not on every retry).

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::clock::iso8601;

/// The file's name for the config loaded from `config` (as loaded:
/// canonical): `<stem>-<16 hex digits of the SHA-256 of its path>.json`,
/// or `<stem>.json` without a config file. The path, not the content,
/// names it: editing the config (or a reload) keeps the file; moving the
/// config starts afresh.
pub fn name_for(stem: &str, config: Option<&Path>) -> String {
    let Some(path) = config else {
        return format!("{stem}.json");
    };
    let digest = Sha256::digest(path.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{stem}-{hex}.json")
}

/// How a state file has fared since start, for `/status`.
#[derive(Debug)]
pub struct FileReport {
    /// Named in the log line of a failed write ("the route state file").
    what: &'static str,
    inner: Mutex<Report>,
}

#[derive(Debug, Default, Clone)]
struct Report {
    start: &'static str,
    problem: Option<String>,
    saved_at: Option<SystemTime>,
    writes: u64,
    last_write_error: Option<String>,
}

impl FileReport {
    /// A report for `what`, starting `off` (no file) until [`Self::started`].
    pub fn new(what: &'static str) -> FileReport {
        FileReport {
            what,
            inner: Mutex::new(Report {
                start: "off",
                ..Report::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Report> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How reading the file at start went (`loaded`, `absent`, `expired`,
    /// `unreadable`), with the problem when there was one and the time the
    /// file was saved when it says.
    pub fn started(
        &self,
        start: &'static str,
        problem: Option<String>,
        saved_at: Option<SystemTime>,
    ) {
        let mut r = self.lock();
        r.start = start;
        r.problem = problem;
        r.saved_at = saved_at;
    }

    /// Records a write made at `at`: counted when it worked; a failure is
    /// kept for `/status` and logged when it differs from the last one.
    pub fn wrote(&self, result: Result<(), String>, at: SystemTime) {
        let mut r = self.lock();
        match result {
            Ok(()) => {
                r.writes += 1;
                r.saved_at = Some(at);
                r.last_write_error = None;
            }
            Err(e) => {
                if r.last_write_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(error = %e, "cannot write {}", self.what);
                }
                r.last_write_error = Some(e);
            }
        }
    }

    /// The report's `/status` fields: `atStart`, `problem`, `savedAt`,
    /// `writes`, `lastWriteError`.
    pub fn fields(&self) -> Map<String, Value> {
        let r = self.lock().clone();
        let mut m = Map::new();
        m.insert("atStart".into(), json!(r.start));
        m.insert("problem".into(), json!(r.problem));
        m.insert("savedAt".into(), json!(r.saved_at.map(iso8601)));
        m.insert("writes".into(), json!(r.writes));
        m.insert("lastWriteError".into(), json!(r.last_write_error));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_names_its_own_file_and_no_config_the_plain_one() {
        assert_eq!(name_for("routes", None), "routes.json");
        let a = name_for("savings", Some(Path::new("/a/shimgate.toml")));
        let b = name_for("savings", Some(Path::new("/b/shimgate.toml")));
        assert!(a.starts_with("savings-") && a.ends_with(".json") && a.len() == 29);
        assert_ne!(a, b);
    }

    #[test]
    fn a_write_error_is_kept_until_a_write_works() {
        let r = FileReport::new("a test file");
        r.wrote(Err("disk full".into()), SystemTime::UNIX_EPOCH);
        assert_eq!(r.fields()["lastWriteError"], "disk full");
        assert_eq!(r.fields()["writes"], 0);
        r.wrote(Ok(()), SystemTime::UNIX_EPOCH);
        let f = r.fields();
        assert_eq!(
            (f["writes"].clone(), f["lastWriteError"].clone()),
            (json!(1), Value::Null)
        );
        assert_eq!(f["atStart"], "off");
    }
}

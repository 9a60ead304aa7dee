//! What the admin surface's trust rules (`admin::trust`, `docs/security.md`) keep
//! between requests: the token that `allow_remote` listeners require, and
//! how many requests each rule refused (a page that tried shows in
//! `/status`).
//!
//! The token is read from `[admin] token_file` (created when absent: 32
//! random bytes as hex, mode 0600) only when a listener binds a
//! non-loopback address, and again at each config reload (a token is
//! rotated by writing the file and reloading); only its SHA-256 is held,
//! so no log, `Debug` or `/status` can show it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::secret_file;
use crate::config::Config;

/// The shortest token a user may write into the token file themselves.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Why the trust rules refused an admin request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// `Host` is not a loopback name nor allowed (DNS rebinding).
    Host,
    /// A state-changing request from another origin (CSRF).
    Origin,
    /// No or a wrong token on a remote listener.
    Token,
}

/// The admin token and the refusal counters.
#[derive(Debug, Default)]
pub struct AdminState {
    /// `None` when no listener needs one; `Err` when it could not be had
    /// (every token-guarded request is then refused).
    token: RwLock<Option<Result<AdminToken, String>>>,
    /// Whether a listener is reachable from other machines (listeners
    /// are bound once: a reload does not change this).
    remote: bool,
    refused: [AtomicU64; 3],
}

impl AdminState {
    /// The state for `config`: a token only when some enabled listener is
    /// reachable from other machines.
    pub fn for_config(config: &Config) -> AdminState {
        let remote = config
            .shims
            .iter()
            .any(|s| s.enabled && !s.listen.ip().is_loopback());
        AdminState {
            token: RwLock::new(remote.then(|| load(config))),
            remote,
            refused: Default::default(),
        }
    }

    /// The token the remote listeners need now.
    pub fn token(&self) -> Option<Result<AdminToken, String>> {
        self.token.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reads the token file of `config` again (a reload): a rotated token
    /// replaces the old one at once; one that cannot be read refuses every
    /// token-guarded request until a reload reads a good one.
    pub fn reread(&self, config: &Config) {
        if self.remote {
            *self.token.write().unwrap_or_else(|p| p.into_inner()) = Some(load(config));
        }
    }

    /// Counts one refusal.
    pub fn refused(&self, why: Refused) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The refusals per code, for `/metrics`.
    pub fn refused_counts(&self) -> [(&'static str, u64); 3] {
        let count = |why: Refused| self.refused[why as usize].load(Ordering::Relaxed);
        [
            ("FORBIDDEN_HOST", count(Refused::Host)),
            ("FORBIDDEN_ORIGIN", count(Refused::Origin)),
            ("UNAUTHORIZED", count(Refused::Token)),
        ]
    }

    /// The `/status.admin` section (never the token).
    pub fn status(&self, config: &Config) -> Value {
        let count = |why: Refused| self.refused[why as usize].load(Ordering::Relaxed);
        let token = self.token();
        json!({
            "allowedHosts": config.admin.allowed_hosts,
            "tokenFile": match &token {
                Some(Ok(t)) => Some(t.file.display().to_string()),
                _ => None,
            },
            "tokenError": token.as_ref().and_then(|t| t.as_ref().err()),
            "refused": {
                "forbiddenHost": count(Refused::Host),
                "forbiddenOrigin": count(Refused::Origin),
                "unauthorized": count(Refused::Token),
            },
        })
    }
}

/// The token of `config`'s token file, logged by its file only.
fn load(config: &Config) -> Result<AdminToken, String> {
    let token = AdminToken::load_or_create(&config.admin_token_file());
    match &token {
        Ok(t) => tracing::info!(file = %t.file.display(), "admin token for allow_remote listeners"),
        Err(e) => tracing::error!("{e}; admin requests on allow_remote listeners are refused"),
    }
    token
}

/// A token, known by its digest only.
#[derive(Debug, Clone)]
pub struct AdminToken {
    digest: [u8; 32],
    /// The file it was read from or written to.
    pub file: PathBuf,
}

impl AdminToken {
    /// Reads the token from `file`, creating a fresh one when the file is
    /// absent. A file others may read is used, with a warning.
    pub fn load_or_create(file: &Path) -> Result<AdminToken, String> {
        let shown = file.display();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let fresh = secret_file::random_bytes()
                    .map(|b| secret_file::hex(&b))
                    .and_then(|t| secret_file::write(file, &t).map(|()| t))
                    .map_err(|e| format!("cannot create the admin token file {shown}: {e}"))?;
                return Ok(AdminToken::of(&fresh, file));
            }
            Err(e) => return Err(format!("cannot read the admin token file {shown}: {e}")),
        };
        let token = text.trim();
        if token.len() < MIN_TOKEN_CHARS || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the admin token file {shown} must hold one token of at least {MIN_TOKEN_CHARS} printable characters"
            ));
        }
        if secret_file::readable_by_others(file) {
            tracing::warn!(file = %shown, "the admin token file is readable by others: chmod 600 it");
        }
        Ok(AdminToken::of(token, file))
    }

    fn of(token: &str, file: &Path) -> AdminToken {
        AdminToken {
            digest: Sha256::digest(token.as_bytes()).into(),
            file: file.to_path_buf(),
        }
    }

    /// Whether `presented` is the token. Digests are compared, so the time
    /// taken says nothing about how much of the token was right.
    pub fn matches(&self, presented: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        digest == self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_token_file_is_created_and_then_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("state/admin.token");
        let first = AdminToken::load_or_create(&file).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let token = text.trim();
        assert_eq!(token.len(), 64);
        assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(!secret_file::readable_by_others(&file));
        assert!(first.matches(token));
        assert!(!first.matches(&token[1..]));
        let again = AdminToken::load_or_create(&file).unwrap();
        assert!(again.matches(token));
        assert!(
            !format!("{again:?}").contains(token),
            "Debug shows only the digest"
        );
    }

    #[test]
    fn a_short_or_empty_token_file_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("admin.token");
        std::fs::write(&file, "short\n").unwrap();
        let e = AdminToken::load_or_create(&file).unwrap_err();
        assert!(e.contains("at least 16"), "{e}");
        std::fs::write(&file, "\n").unwrap();
        assert!(AdminToken::load_or_create(&file).is_err());
    }
}

//! The identity shimgate shows the compression proxy for one agent.
//!
//! billion-context keys a session (and its whole compression state) on
//! `hash(protocol, upstream, Authorization, conversation id)` and decides to
//! compress from the `prompt_tokens` that *same* session reported last turn.
//! So the `Authorization` the proxy sees must be the same on every turn of a
//! conversation and after a restart, differ per agent and per shim, and
//! never be (or reveal) the agent's credential: `Bearer
//! shimgate-<shim>-<HMAC-SHA256 of the agent's identity header>`, keyed by
//! a random key kept in the state dir (`proxy-identity.key`).
//!
//! An agent sends the same credential call after call, so the last few
//! identities are kept by the exact bytes they were computed from: the
//! MAC (two SHA-256 compressions and a clone, about 9k instructions) is
//! on the way to the first token. Those bytes are the agent's header
//! values, which the rid entries hold as long; they are never shown.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hmac::{Hmac, Mac};
use http::HeaderMap;
use sha2::Sha256;

use super::secret_file;

/// The key file's name inside the state dir.
pub const KEY_FILE: &str = "proxy-identity.key";
/// The prefix of every identity (`Bearer shimgate-<shim>-…`).
pub const IDENTITY_PREFIX: &str = "shimgate-";
/// Hex characters of the keyed hash kept in an identity (128 bits): plenty
/// to keep agents apart, short enough to read in a proxy's log.
const HASH_HEX: usize = 32;
/// Identities kept by their input: a few agents at one desk.
const CACHED: usize = 8;

/// The key and where it lives.
pub struct ProxyIdentity {
    /// The MAC with the key already taken in (the key's two blocks are
    /// hashed once, not on every request).
    mac: Hmac<Sha256>,
    /// The key file, when the key was read from or written to it.
    pub file: Option<PathBuf>,
    /// Why the key could not be kept (it then lasts until a restart).
    pub problem: Option<String>,
    /// The latest identities, by the MAC's input (newest last).
    cache: Mutex<Vec<(Vec<u8>, String)>>,
}

impl ProxyIdentity {
    /// Reads the key from `dir`, creating it (and `dir`) on first use. A
    /// key that cannot be read or written is replaced by one that lives in
    /// memory, with the reason in [`ProxyIdentity::problem`]: the proxy then
    /// starts new sessions after a restart, nothing else breaks.
    pub fn load_or_create(dir: &Path) -> ProxyIdentity {
        let file = dir.join(KEY_FILE);
        match read_key(&file).or_else(|_| write_key(&file)) {
            Ok(key) => ProxyIdentity {
                mac: keyed(&key),
                file: Some(file),
                problem: None,
                cache: Mutex::default(),
            },
            Err(e) => {
                let problem = format!(
                    "cannot keep the proxy identity key in {}: {e}; the identity lasts until a restart",
                    file.display()
                );
                tracing::warn!("{problem}");
                ProxyIdentity {
                    mac: keyed(&secret_file::random_bytes().unwrap_or([7; 32])),
                    file: None,
                    problem: Some(problem),
                    cache: Mutex::default(),
                }
            }
        }
    }

    /// A key given directly (tests).
    pub fn with_key(key: [u8; 32]) -> ProxyIdentity {
        ProxyIdentity {
            mac: keyed(&key),
            file: None,
            problem: None,
            cache: Mutex::default(),
        }
    }

    /// The identity of the agent that sent `headers` to `shim`: the keyed
    /// hash of the first of `names` it carries (no such header: the shim's
    /// anonymous identity).
    pub fn of(&self, shim: &str, names: &[&str], headers: &HeaderMap) -> String {
        let mut input = Vec::with_capacity(64);
        input.extend_from_slice(shim.as_bytes());
        input.push(0);
        let named = names.iter().find(|n| headers.contains_key(**n));
        if let Some(name) = named {
            input.extend_from_slice(name.as_bytes());
            for v in headers.get_all(*name) {
                input.push(0);
                input.extend_from_slice(v.as_bytes());
            }
        }
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, id)) = cache.iter().find(|(i, _)| *i == input) {
            return id.clone();
        }
        let id = self.computed(shim, &input);
        if cache.len() == CACHED {
            cache.remove(0);
        }
        cache.push((input, id.clone()));
        id
    }

    /// The identity of one MAC input.
    fn computed(&self, shim: &str, input: &[u8]) -> String {
        let mut mac = self.mac.clone();
        mac.update(input);
        let digest = mac.finalize().into_bytes();
        // Written digit by digit: a `format!` per byte cost more than the MAC.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut id = String::with_capacity(IDENTITY_PREFIX.len() + shim.len() + 1 + HASH_HEX);
        id.push_str(IDENTITY_PREFIX);
        id.push_str(shim);
        id.push('-');
        for b in digest.iter().take(HASH_HEX / 2) {
            id.push(char::from(HEX[usize::from(b >> 4)]));
            id.push(char::from(HEX[usize::from(b & 15)]));
        }
        id
    }
}

/// The MAC keyed with `key` (HMAC takes keys of any length: the fallback,
/// an all-zero key, is never taken).
fn keyed(key: &[u8; 32]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key)
        .unwrap_or_else(|_| <Hmac<Sha256> as hmac::digest::KeyInit>::new(&Default::default()))
}

fn read_key(file: &Path) -> std::io::Result<[u8; 32]> {
    let text = std::fs::read_to_string(file)?;
    parse_hex_key(text.trim()).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "not 64 hex characters")
    })
}

fn parse_hex_key(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(key)
}

/// Writes a fresh key readable by its owner only. An existing but unreadable
/// file is replaced (it held no usable key).
fn write_key(file: &Path) -> std::io::Result<[u8; 32]> {
    let key = secret_file::random_bytes()?;
    secret_file::write(file, &secret_file::hex(&key))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const NAMES: &[&str] = &["x-uid", "authorization"];

    #[test]
    fn the_identity_is_the_published_hmac_in_lowercase_hex() {
        // Python: hmac.new(bytes([7]*32), b"trae\0x-uid\0u-42", "sha256").hexdigest()[:32]
        let id = ProxyIdentity::with_key([7; 32]);
        assert_eq!(
            id.of("trae", NAMES, &headers(&[("x-uid", "u-42")])),
            "shimgate-trae-3865648a0a82c37ca9e0a7d6cd65225e"
        );
    }

    #[test]
    fn one_agent_has_one_identity_and_it_never_shows_the_credential() {
        let id = ProxyIdentity::with_key([1; 32]);
        let a = headers(&[("authorization", "Cloud-IDE-JWT secret-token-1")]);
        let first = id.of("trae", NAMES, &a);
        assert_eq!(first, id.of("trae", NAMES, &a));
        assert!(first.starts_with("shimgate-trae-"), "{first}");
        assert_eq!(first.len(), "shimgate-trae-".len() + HASH_HEX);
        assert!(!first.contains("secret"));
    }

    #[test]
    fn a_kept_identity_is_the_computed_one_and_few_are_kept() {
        let id = ProxyIdentity::with_key([7; 32]);
        let a = headers(&[("x-uid", "u-42")]);
        let want = "shimgate-trae-3865648a0a82c37ca9e0a7d6cd65225e";
        assert_eq!(id.of("trae", NAMES, &a), want);
        for n in 0..3 * CACHED {
            let other = headers(&[("x-uid", &format!("u-{n}"))]);
            assert_ne!(id.of("trae", NAMES, &other), want);
        }
        assert_eq!(id.cache.lock().unwrap().len(), CACHED);
        assert_eq!(
            id.of("trae", NAMES, &a),
            want,
            "computed again once evicted"
        );
        assert_eq!(id.of("trae", NAMES, &a), want, "and kept");
    }

    #[test]
    fn identities_differ_per_credential_shim_and_key() {
        let id = ProxyIdentity::with_key([1; 32]);
        let a = headers(&[("authorization", "Bearer a")]);
        let b = headers(&[("authorization", "Bearer b")]);
        assert_ne!(id.of("trae", NAMES, &a), id.of("trae", NAMES, &b));
        assert_ne!(id.of("trae", NAMES, &a), id.of("qoder", NAMES, &a));
        let other = ProxyIdentity::with_key([2; 32]);
        assert_ne!(id.of("trae", NAMES, &a), other.of("trae", NAMES, &a));
    }

    #[test]
    fn the_first_named_header_wins_so_a_token_refresh_keeps_the_identity() {
        let id = ProxyIdentity::with_key([1; 32]);
        let before = headers(&[("x-uid", "u1"), ("authorization", "token-1")]);
        let after = headers(&[("x-uid", "u1"), ("authorization", "token-2")]);
        assert_eq!(id.of("trae", NAMES, &before), id.of("trae", NAMES, &after));
    }

    #[test]
    fn the_key_survives_a_restart_and_a_corrupt_file_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        let a = headers(&[("authorization", "Bearer a")]);
        let first = ProxyIdentity::load_or_create(&dir);
        assert!(first.problem.is_none(), "{:?}", first.problem);
        let again = ProxyIdentity::load_or_create(&dir);
        assert_eq!(first.of("trae", NAMES, &a), again.of("trae", NAMES, &a));
        std::fs::write(dir.join(KEY_FILE), "garbage").unwrap();
        let fresh = ProxyIdentity::load_or_create(&dir);
        assert!(fresh.problem.is_none());
        assert_ne!(first.of("trae", NAMES, &a), fresh.of("trae", NAMES, &a));
    }
}

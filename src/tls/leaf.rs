//! Leaves: one per name a client asks for, minted by the intermediate on
//! first use and kept in memory (never on disk) with the rustls server
//! config that presents it. A leaf lives at most [`LEAF_LIFETIME`] and is
//! minted anew once it is within [`RENEW_BEFORE`] of its end, on the next
//! connection that asks for it: a shimgate that runs for months needs no
//! restart. The cache is bounded ([`MAX_LEAVES`]): the names it holds are
//! the few a user's clients ask for.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rcgen::KeyPair;
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::rustls::server::ServerConfig;
use tokio_rustls::rustls::sign::{CertifiedKey, SingleCertAndKey};

use super::ca::{Authority, BACKDATE};
use super::names::LeafName;

/// The longest a leaf is valid.
pub const LEAF_LIFETIME: Duration = Duration::from_secs(30 * 86_400);
/// A leaf this close to its end is minted anew when next asked for.
pub const RENEW_BEFORE: Duration = Duration::from_secs(10 * 86_400);
/// Leaves kept at most; past it the one closest to its end goes.
pub const MAX_LEAVES: usize = 256;
/// The application protocol every listener speaks.
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// One leaf and what serves it.
pub struct Leaf {
    pub name: LeafName,
    pub not_after: SystemTime,
    /// The root's fingerprint of the CA that signed it.
    pub ca: String,
    /// A server config presenting this leaf (and the intermediate).
    pub config: Arc<ServerConfig>,
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf")
            .field("name", &self.name)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// Whether a leaf ending at `not_after` is to be minted anew at `now`.
pub fn needs_renewal(not_after: SystemTime, now: SystemTime) -> bool {
    now + RENEW_BEFORE >= not_after
}

/// rustls on ring, as the upstream client uses.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

/// A server config presenting `key`, HTTP/1.1 only.
pub fn server_config(key: Arc<CertifiedKey>) -> Result<Arc<ServerConfig>, String> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    config.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
    Ok(Arc::new(config))
}

/// Mints a leaf for `name` at `now`: a fresh P-256 key, valid from `now`
/// (backdated) until [`LEAF_LIFETIME`] later or the CA's end if sooner.
pub fn mint(authority: &Authority, name: &LeafName, now: SystemTime) -> Result<Leaf, String> {
    let ca_end = authority.not_after();
    if ca_end <= now {
        return Err(format!(
            "the local CA ended at {}: `shimgate ca rotate` makes a new one (then give clients the new PEM)",
            crate::clock::iso8601(ca_end)
        ));
    }
    let not_after = (now + LEAF_LIFETIME).min(ca_end);
    let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let der = authority
        .sign_leaf(name, &key, not_before, not_after)
        .map_err(|e| e.to_string())?;
    let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signing = provider()
        .key_provider
        .load_private_key(private)
        .map_err(|e| e.to_string())?;
    let chain = vec![der, authority.intermediate_der().clone()];
    let config = server_config(Arc::new(CertifiedKey::new(chain, signing)))?;
    Ok(Leaf {
        name: name.clone(),
        not_after,
        ca: authority.root.fingerprint.clone(),
        config,
    })
}

/// The leaves minted so far, by name.
#[derive(Default)]
pub struct Leaves {
    map: Mutex<HashMap<LeafName, Arc<Leaf>>>,
    minted: AtomicU64,
    renewed: AtomicU64,
}

impl Leaves {
    /// The leaf for `name` from `authority` at `now`: the cached one while
    /// it is fresh and from this CA, else a new one.
    pub fn get(
        &self,
        authority: &Authority,
        name: &LeafName,
        now: SystemTime,
    ) -> Result<Arc<Leaf>, String> {
        let cached = self.lock().get(name).cloned();
        if let Some(leaf) = &cached {
            if leaf.ca == authority.root.fingerprint && !needs_renewal(leaf.not_after, now) {
                return Ok(leaf.clone());
            }
        }
        // Minted outside the lock (a key and a signature, well under a
        // millisecond): two connections asking at once may both mint, and
        // the later one is kept; either leaf is valid.
        let leaf = Arc::new(mint(authority, name, now)?);
        self.minted.fetch_add(1, Ordering::Relaxed);
        if cached.is_some() {
            self.renewed.fetch_add(1, Ordering::Relaxed);
        }
        let mut map = self.lock();
        if map.len() >= MAX_LEAVES && !map.contains_key(name) {
            if let Some(oldest) = map
                .iter()
                .min_by_key(|(_, l)| l.not_after)
                .map(|(n, _)| n.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert(name.clone(), leaf.clone());
        Ok(leaf)
    }

    /// Forgets every leaf (the CA changed).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Leaves held now.
    pub fn held(&self) -> usize {
        self.lock().len()
    }

    /// Leaves minted so far, and how many of them replaced one near its end.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.minted.load(Ordering::Relaxed),
            self.renewed.load(Ordering::Relaxed),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeafName, Arc<Leaf>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ca::{ensure, CaFiles};

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_leaf_is_renewed_near_its_end_and_kept_before() {
        let tmp = tempfile::tempdir().unwrap();
        let t0 = SystemTime::now();
        let (ca, _) = ensure(&CaFiles::in_state_dir(tmp.path()), &["qoder.sh".into()], t0).unwrap();
        let leaves = Leaves::default();
        let name = LeafName::Dns("api2.qoder.sh".into());
        let first = leaves.get(&ca, &name, t0).unwrap();
        assert_eq!(first.not_after, t0 + LEAF_LIFETIME);
        let same = leaves.get(&ca, &name, t0 + 19 * DAY).unwrap();
        assert!(Arc::ptr_eq(&first, &same), "fresh: the same leaf");
        let renewed = leaves.get(&ca, &name, t0 + 21 * DAY).unwrap();
        assert!(
            !Arc::ptr_eq(&first, &renewed),
            "10 days from its end: a new leaf"
        );
        assert_eq!(renewed.not_after, t0 + 21 * DAY + LEAF_LIFETIME);
        assert_eq!(leaves.counts(), (2, 1));
        assert_eq!(leaves.held(), 1);
    }

    #[test]
    fn a_leaf_never_outlives_its_ca_and_an_ended_ca_mints_none() {
        let tmp = tempfile::tempdir().unwrap();
        let t0 = SystemTime::now();
        let (ca, _) = ensure(&CaFiles::in_state_dir(tmp.path()), &[], t0).unwrap();
        let name = LeafName::Ip("127.0.0.1".parse().unwrap());
        let late = ca.not_after() - 5 * DAY;
        assert_eq!(mint(&ca, &name, late).unwrap().not_after, ca.not_after());
        let e = mint(&ca, &name, ca.not_after() + DAY).unwrap_err();
        assert!(e.contains("shimgate ca rotate"), "{e}");
    }

    #[test]
    fn the_cache_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        let t0 = SystemTime::now();
        let (ca, _) = ensure(&CaFiles::in_state_dir(tmp.path()), &["qoder.sh".into()], t0).unwrap();
        let leaves = Leaves::default();
        for i in 0..MAX_LEAVES + 3 {
            let name = LeafName::Dns(format!("h{i}.qoder.sh"));
            leaves
                .get(&ca, &name, t0 + Duration::from_secs(i as u64))
                .unwrap();
        }
        assert_eq!(leaves.held(), MAX_LEAVES);
    }
}

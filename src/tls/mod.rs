//! TLS on the shim listeners, under a local certificate authority made
//! narrow by construction (`docs/local-ca.md`): the official clients
//! (the Qoder CLI and IDE) call fixed `https` hosts, and pointed at
//! shimgate they speak TLS to it.
//!
//! - [`names`]: what the CA may sign for (loopback and `[ca] names`).
//! - [`ca`]: the authority on disk (root and intermediate with critical
//!   name constraints, the root's key not kept), made, read, rotated.
//! - [`leaf`]: leaves minted per name, in memory, renewed while running.
//! - [`accept`]: the listener side (the name asked for decides the leaf
//!   or a refusal; counts for `/status` and `/metrics`).
//! - [`store`]: the opt-in per-user OS trust store (`shimgate ca trust`,
//!   `untrust`), one module per OS.
//!
//! What other parts call: [`ensure_ca`] (the CA, made if missing; what
//! `shimgate ca path`, `env` and `launch` give clients), [`Tls`] (the
//! listeners'), [`OverTls`] (the mark on a request that came over TLS).

pub mod accept;
pub mod ca;
pub mod leaf;
pub mod names;
pub mod store;

use std::path::PathBuf;
use std::time::SystemTime;

pub use accept::{Outcome, Tls};
pub use ca::CaError;

use crate::config::Config;

/// Marks a request that came over TLS (in its extensions): the admin
/// trust rules compare `Origin` with `https://` + `Host` for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverTls;

/// The local CA as callers outside this module need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaInfo {
    /// The root certificate (PEM): the file to give clients
    /// (`NODE_EXTRA_CA_CERTS`, an OS store).
    pub root_pem: PathBuf,
    /// The CA's folder.
    pub dir: PathBuf,
    /// SHA-256 of the root, `AB:CD:…`.
    pub fingerprint: String,
    /// When the CA ends (then `shimgate ca rotate`).
    pub not_after: SystemTime,
    /// What it may sign for (`localhost`, `qoder.sh`, …, `127.0.0.0/8`, `::1/128`).
    pub permitted: Vec<String>,
    /// It was made by this call.
    pub created: bool,
    /// How it differs from `[ca] names` now, with what to do; `None` when
    /// it matches.
    pub mismatch: Option<String>,
}

/// The folder of `config`'s CA (nothing read or made).
pub fn ca_files(config: &Config) -> ca::CaFiles {
    ca::CaFiles::in_state_dir(&config.state_dir)
}

/// The root PEM `config`'s CA has (or will have once made).
pub fn root_pem_path(config: &Config) -> PathBuf {
    ca_files(config).root()
}

/// The local CA of `config` (its state dir), made for `[ca] names` when
/// there is none. A CA that is there is never replaced (clients trust it):
/// one unusable, or made for other names, is reported, not re-made.
pub fn ensure_ca(config: &Config) -> Result<CaInfo, CaError> {
    let (authority, created) = ca::ensure(&ca_files(config), &config.ca.names, SystemTime::now())?;
    Ok(info(&authority, created, config))
}

/// What [`CaInfo`] says of `authority` against `config`.
pub fn info(authority: &ca::Authority, created: bool, config: &Config) -> CaInfo {
    let wanted = names::Permitted::for_names(&config.ca.names);
    CaInfo {
        root_pem: authority.files.root(),
        dir: authority.files.dir.clone(),
        fingerprint: authority.root.fingerprint.clone(),
        not_after: authority.not_after(),
        permitted: authority.permitted.shown(),
        created,
        mismatch: authority.permitted.compare(&wanted).describe(),
    }
}

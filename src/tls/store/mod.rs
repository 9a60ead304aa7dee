//! The local CA in the user's OS trust store: opt-in (`shimgate ca
//! trust`), per user, and reversible (`shimgate ca untrust`), the way
//! `mkcert -install` / `-uninstall` are. Per-process trust
//! (`NODE_EXTRA_CA_CERTS`) is what the docs lead with; this is for
//! programs that read only the OS store.
//!
//! Each addition is written to a record in the state dir
//! ([`RECORD_FILE`]): the store, where, the label and the certificate's
//! fingerprints and PEM. `untrust` removes exactly what the record names,
//! and only when the store still holds that very certificate (by SHA-256,
//! or the SHA-1 thumbprint the Windows and macOS tools take): a certificate
//! shimgate did not add is never touched. An addition is checked by
//! reading the store back, since `certutil` has been seen to report
//! success without installing anything.
//!
//! One module per OS, each a command-line tool driven the same way, so
//! all of them build everywhere: the NSS database `~/.pki/nssdb`
//! (`certutil` of libnss3-tools) on Linux, the login keychain (`security`)
//! on macOS, the current user's Root store (`certutil -user`) on Windows.

pub mod keychain;
pub mod nss;
pub mod windows;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::{Deserialize, Serialize};

use super::ca::{Authority, CertFacts};

/// The record's file name in the state dir.
pub const RECORD_FILE: &str = "ca-trust.json";

/// One certificate shimgate added to a store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Which kind of store ([`Store::kind`]).
    pub store: String,
    /// Where, as [`Store::location`] names it.
    pub location: String,
    /// The label (nickname) it was added under.
    pub label: String,
    /// SHA-256 of the certificate, `AB:CD:…`.
    pub sha256: String,
    /// SHA-1 thumbprint, hex.
    pub sha1: String,
    /// The certificate itself, so it can be named to the store after a
    /// rotation replaced the file.
    pub pem: String,
    /// When it was added (RFC 3339).
    pub added_at: String,
}

/// The record of additions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub note: String,
    pub entries: Vec<Entry>,
}

impl Record {
    /// The record in `file`; empty when there is none.
    pub fn load(file: &Path) -> Result<Record, String> {
        match std::fs::read(file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{} is not a record shimgate wrote: {e}", file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Record::default()),
            Err(e) => Err(format!("cannot read {}: {e}", file.display())),
        }
    }

    /// Writes it to `file` (a temporary file renamed), or removes the file
    /// when nothing is recorded.
    pub fn save(&self, file: &Path) -> Result<(), String> {
        if self.entries.is_empty() {
            return match std::fs::remove_file(file) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(format!("cannot remove {}: {e}", file.display()))
                }
                _ => Ok(()),
            };
        }
        let record = Record {
            note: "written by `shimgate ca trust`; `shimgate ca untrust` removes exactly these"
                .into(),
            entries: self.entries.clone(),
        };
        let text = serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?;
        let dir = file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let tmp = dir.join(format!(".{RECORD_FILE}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, text + "\n")
            .and_then(|()| std::fs::rename(&tmp, file))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))
    }
}

/// One OS trust store, as a command-line tool reaches it.
pub trait Store {
    /// The kind recorded with each entry (`nss`, `keychain`, `windows`).
    fn kind(&self) -> &'static str;
    /// Where it adds, as a user reads it.
    fn location(&self) -> String;
    /// Adds the root in `pem_file` as a trusted CA for servers, labelled `label`.
    fn add(&self, pem_file: &Path, label: &str) -> Result<(), String>;
    /// Whether it holds the very certificate of `entry`.
    fn holds(&self, entry: &Entry) -> Result<bool, String>;
    /// Removes the certificate of `entry` (called only when it holds it).
    fn remove(&self, entry: &Entry) -> Result<(), String>;
    /// Who reads this store, for the user.
    fn readers(&self) -> &'static str;
}

/// This OS's per-user store, rooted at the user's home folder.
pub fn for_this_os() -> Result<Box<dyn Store>, String> {
    let home = dirs::home_dir().ok_or("no home folder known for this user")?;
    Ok(match crate::os::TRUST_STORE {
        crate::os::TrustStore::UserRoot => Box::new(windows::UserRoot::default()),
        crate::os::TrustStore::Keychain => Box::new(keychain::Keychain::in_home(&home)),
        crate::os::TrustStore::Nss => Box::new(nss::Nss::in_home(&home)),
    })
}

/// The label a root is added under: recognisable, and unique per root.
pub fn label(facts: &CertFacts) -> String {
    let short: String = facts
        .fingerprint
        .replace(':', "")
        .chars()
        .take(16)
        .collect();
    format!("shimgate local CA {short}")
}

/// What `trust` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trusted {
    /// Added now.
    Added(Entry),
    /// Already there, added earlier.
    Already(Entry),
}

/// Adds `authority`'s root to `store`, checks it is there, and records it.
pub fn trust(
    store: &dyn Store,
    record_file: &Path,
    authority: &Authority,
) -> Result<Trusted, String> {
    let mut record = Record::load(record_file)?;
    let root = &authority.root;
    let mine = |e: &&Entry| {
        e.store == store.kind() && e.location == store.location() && e.sha256 == root.fingerprint
    };
    if let Some(entry) = record.entries.iter().find(mine).cloned() {
        if store.holds(&entry)? {
            return Ok(Trusted::Already(entry));
        }
        record.entries.retain(|e| e != &entry);
    }
    let entry = Entry {
        store: store.kind().into(),
        location: store.location(),
        label: label(root),
        sha256: root.fingerprint.clone(),
        sha1: root.sha1.clone(),
        pem: super::ca::pem("CERTIFICATE", &root.der),
        added_at: crate::clock::iso8601(std::time::SystemTime::now()),
    };
    store.add(&authority.files.root(), &entry.label)?;
    if !store.holds(&entry)? {
        return Err(format!(
            "{} reported success but does not hold the certificate (SHA-256 {}): nothing recorded",
            store.location(),
            entry.sha256
        ));
    }
    record.entries.push(entry.clone());
    record.save(record_file)?;
    Ok(Trusted::Added(entry))
}

/// What `untrust` did with one recorded entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untrusted {
    /// Removed from the store.
    Removed(Entry),
    /// The store no longer held it (removed by hand): only the record line goes.
    Gone(Entry),
}

/// Removes from `store` every certificate the record says shimgate added
/// there, each only if the store still holds that very certificate.
/// Entries of other stores stay recorded.
pub fn untrust(store: &dyn Store, record_file: &Path) -> Result<Vec<Untrusted>, String> {
    let mut record = Record::load(record_file)?;
    let mut done = Vec::new();
    let mut kept = Vec::new();
    for entry in record.entries.drain(..) {
        if entry.store != store.kind() || entry.location != store.location() {
            kept.push(entry);
            continue;
        }
        if !store.holds(&entry)? {
            done.push(Untrusted::Gone(entry));
            continue;
        }
        store.remove(&entry)?;
        if store.holds(&entry)? {
            return Err(format!(
                "{} still holds the certificate {} after removing it",
                store.location(),
                entry.sha256
            ));
        }
        done.push(Untrusted::Removed(entry));
    }
    record.entries = kept;
    record.save(record_file)?;
    Ok(done)
}

/// Runs `program` with `args`; a missing program is named with how to get it.
pub(crate) fn run(
    program: &Path,
    args: &[&std::ffi::OsStr],
    missing: &str,
) -> Result<Output, String> {
    Command::new(program).args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{} not found: {missing}", program.display())
        } else {
            format!("cannot run {}: {e}", program.display())
        }
    })
}

/// What a failed run said.
pub(crate) fn failure(program: &Path, what: &str, out: &Output) -> String {
    let said = String::from_utf8_lossy(&out.stderr);
    let said = if said.trim().is_empty() {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        said.into_owned()
    };
    format!(
        "{} {what} failed ({}): {}",
        program.display(),
        out.status,
        said.trim().chars().take(400).collect::<String>()
    )
}

/// The SHA-256 fingerprints (`AB:CD:…`) of the certificates in PEM text.
pub(crate) fn fingerprints(pem_text: &[u8]) -> Vec<String> {
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::CertificateDer;
    CertificateDer::pem_slice_iter(pem_text)
        .filter_map(Result::ok)
        .filter_map(|der| super::ca::facts(&der).ok())
        .map(|f| f.fingerprint)
        .collect()
}

/// A PEM written to a temporary file for a tool that takes a file;
/// removed when dropped.
pub(crate) struct PemFile {
    pub path: PathBuf,
}

impl PemFile {
    pub(crate) fn of(entry: &Entry) -> Result<PemFile, String> {
        let written = tempfile::Builder::new()
            .prefix("shimgate-root-")
            .suffix(".pem")
            .tempfile()
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, entry.pem.as_bytes())?;
                f.keep().map_err(|e| e.error)
            });
        let (_, path) = written.map_err(|e| format!("cannot write a temporary PEM: {e}"))?;
        Ok(PemFile { path })
    }
}

impl Drop for PemFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

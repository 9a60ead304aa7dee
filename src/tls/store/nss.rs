//! Linux: the user's NSS database, `~/.pki/nssdb`, which Chrome, Chromium
//! and other NSS programs of this user read (Firefox keeps its own per
//! profile; Node reads neither). Driven by `certutil` from libnss3-tools;
//! the database is made (empty password) when the user has none yet.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::{failure, fingerprints, run, Entry, Store};

/// What a user without `certutil` is told.
pub const MISSING: &str = "install libnss3-tools (Debian, Ubuntu) or nss-tools (Fedora; nss on Arch) to use the NSS store";

/// The NSS database of one user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nss {
    /// The database folder.
    pub db: PathBuf,
    /// The `certutil` to run.
    pub certutil: PathBuf,
}

impl Nss {
    /// `~/.pki/nssdb` under `home`, with the `certutil` on `PATH`.
    pub fn in_home(home: &Path) -> Nss {
        Nss {
            db: home.join(".pki").join("nssdb"),
            certutil: PathBuf::from("certutil"),
        }
    }

    /// `sql:<db>`: the database format every current NSS uses.
    fn database(&self) -> String {
        format!("sql:{}", self.db.display())
    }

    fn certutil(&self, args: &[&OsStr]) -> Result<std::process::Output, String> {
        run(&self.certutil, args, MISSING)
    }
}

impl Store for Nss {
    fn kind(&self) -> &'static str {
        "nss"
    }

    fn location(&self) -> String {
        format!("the NSS database {}", self.db.display())
    }

    fn readers(&self) -> &'static str {
        "Chrome, Chromium and other NSS programs of this user (not Firefox, which keeps its own, nor Node)"
    }

    fn add(&self, pem_file: &Path, label: &str) -> Result<(), String> {
        let db = self.database();
        if !self.db.join("cert9.db").exists() {
            std::fs::create_dir_all(&self.db)
                .map_err(|e| format!("cannot create {}: {e}", self.db.display()))?;
            let out = self.certutil(&[
                "-N".as_ref(),
                "-d".as_ref(),
                db.as_ref(),
                "--empty-password".as_ref(),
            ])?;
            if !out.status.success() {
                return Err(failure(&self.certutil, "-N (make the database)", &out));
            }
        }
        // `C,,`: a CA trusted to issue server certificates, nothing else.
        let out = self.certutil(&[
            "-A".as_ref(),
            "-d".as_ref(),
            db.as_ref(),
            "-t".as_ref(),
            "C,,".as_ref(),
            "-n".as_ref(),
            label.as_ref(),
            "-i".as_ref(),
            pem_file.as_os_str(),
        ])?;
        if !out.status.success() {
            return Err(failure(&self.certutil, "-A (add)", &out));
        }
        Ok(())
    }

    fn holds(&self, entry: &Entry) -> Result<bool, String> {
        if !self.db.exists() {
            return Ok(false);
        }
        let db = self.database();
        let out = self.certutil(&[
            "-L".as_ref(),
            "-d".as_ref(),
            db.as_ref(),
            "-n".as_ref(),
            entry.label.as_ref(),
            "-a".as_ref(),
        ])?;
        // Not found under that label: exit status non-zero, nothing printed.
        Ok(out.status.success() && fingerprints(&out.stdout).contains(&entry.sha256))
    }

    fn remove(&self, entry: &Entry) -> Result<(), String> {
        let db = self.database();
        let out = self.certutil(&[
            "-D".as_ref(),
            "-d".as_ref(),
            db.as_ref(),
            "-n".as_ref(),
            entry.label.as_ref(),
        ])?;
        if !out.status.success() {
            return Err(failure(&self.certutil, "-D (remove)", &out));
        }
        Ok(())
    }
}

//! macOS: the user's login keychain, with the root trusted for TLS
//! servers in the user's trust settings (`security add-trusted-cert`,
//! which asks for the user's password). Safari, Chrome and other programs
//! that use the system's verifier read it; Node does not. Built on every
//! OS (it only runs `security`); tried on macOS only by its users so far.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::{failure, run, Entry, PemFile, Store};

const MISSING: &str = "`security` ships with macOS; it is missing from this system";

/// The user's login keychain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keychain {
    pub keychain: PathBuf,
    pub security: PathBuf,
}

impl Keychain {
    /// `~/Library/Keychains/login.keychain-db` under `home`.
    pub fn in_home(home: &Path) -> Keychain {
        Keychain {
            keychain: home
                .join("Library")
                .join("Keychains")
                .join("login.keychain-db"),
            security: PathBuf::from("/usr/bin/security"),
        }
    }

    fn security(&self, args: &[&OsStr]) -> Result<std::process::Output, String> {
        run(&self.security, args, MISSING)
    }
}

impl Store for Keychain {
    fn kind(&self) -> &'static str {
        "keychain"
    }

    fn location(&self) -> String {
        format!("the login keychain {}", self.keychain.display())
    }

    fn readers(&self) -> &'static str {
        "Safari, Chrome and other programs that verify with macOS (not Node, nor Firefox by default)"
    }

    fn add(&self, pem_file: &Path, _label: &str) -> Result<(), String> {
        let out = self.security(&[
            "add-trusted-cert".as_ref(),
            "-r".as_ref(),
            "trustRoot".as_ref(),
            "-p".as_ref(),
            "ssl".as_ref(),
            "-k".as_ref(),
            self.keychain.as_os_str(),
            pem_file.as_os_str(),
        ])?;
        if !out.status.success() {
            return Err(failure(&self.security, "add-trusted-cert", &out));
        }
        Ok(())
    }

    fn holds(&self, entry: &Entry) -> Result<bool, String> {
        // `-Z` prints each certificate's SHA-1 (and on newer systems its
        // SHA-256) hash, upper-case hex.
        let out = self.security(&[
            "find-certificate".as_ref(),
            "-a".as_ref(),
            "-Z".as_ref(),
            "-c".as_ref(),
            super::super::ca::ORGANISATION.as_ref(),
            self.keychain.as_os_str(),
        ])?;
        let listed = String::from_utf8_lossy(&out.stdout).to_ascii_uppercase();
        Ok(out.status.success() && listed.contains(&entry.sha1))
    }

    fn remove(&self, entry: &Entry) -> Result<(), String> {
        // The trust setting first (it names the certificate by its file),
        // then the certificate by its SHA-1.
        let pem = PemFile::of(entry)?;
        let _ = self.security(&["remove-trusted-cert".as_ref(), pem.path.as_os_str()]);
        let out = self.security(&[
            "delete-certificate".as_ref(),
            "-Z".as_ref(),
            entry.sha1.as_ref(),
            self.keychain.as_os_str(),
        ])?;
        if !out.status.success() {
            return Err(failure(&self.security, "delete-certificate", &out));
        }
        Ok(())
    }
}

//! Windows: the current user's Root store (`certutil -user`; Windows asks
//! the user to confirm the addition). Edge, Chrome, curl and git with
//! Schannel read it; Node does not. Built on every OS (it only runs
//! `certutil.exe`); tried on Windows only by its users so far.

use std::ffi::OsStr;
use std::path::PathBuf;

use super::{failure, run, Entry, Store};

const MISSING: &str = "certutil.exe ships with Windows; it is missing from this system";

/// The current user's trusted root store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRoot {
    pub certutil: PathBuf,
}

impl Default for UserRoot {
    fn default() -> Self {
        UserRoot {
            certutil: PathBuf::from("certutil.exe"),
        }
    }
}

impl UserRoot {
    fn certutil(&self, args: &[&OsStr]) -> Result<std::process::Output, String> {
        run(&self.certutil, args, MISSING)
    }
}

impl Store for UserRoot {
    fn kind(&self) -> &'static str {
        "windows"
    }

    fn location(&self) -> String {
        r"the current user's Root store (Cert:\CurrentUser\Root)".into()
    }

    fn readers(&self) -> &'static str {
        "Edge, Chrome and programs that verify with Windows (not Node, nor Firefox by default)"
    }

    fn add(&self, pem_file: &std::path::Path, _label: &str) -> Result<(), String> {
        let out = self.certutil(&[
            "-user".as_ref(),
            "-addstore".as_ref(),
            "Root".as_ref(),
            pem_file.as_os_str(),
        ])?;
        if !out.status.success() {
            return Err(failure(&self.certutil, "-addstore", &out));
        }
        Ok(())
    }

    fn holds(&self, entry: &Entry) -> Result<bool, String> {
        // A thumbprint names exactly one certificate; not found: non-zero exit.
        let out = self.certutil(&[
            "-user".as_ref(),
            "-store".as_ref(),
            "Root".as_ref(),
            entry.sha1.as_ref(),
        ])?;
        Ok(out.status.success())
    }

    fn remove(&self, entry: &Entry) -> Result<(), String> {
        let out = self.certutil(&[
            "-user".as_ref(),
            "-delstore".as_ref(),
            "Root".as_ref(),
            entry.sha1.as_ref(),
        ])?;
        if !out.status.success() {
            return Err(failure(&self.certutil, "-delstore", &out));
        }
        Ok(())
    }
}

//! The file `SSL_CERT_FILE` (and `REQUESTS_CA_BUNDLE`) names for a client
//! behind the capture listener. Unlike `NODE_EXTRA_CA_CERTS`, which adds
//! roots, these variables *replace* a client's roots (OpenSSL, curl,
//! Python's `ssl` and httpx, requests): a file holding shimgate's root
//! alone would break every host the listener tunnels. So the file holds
//! the roots the client trusted before (the user's own `SSL_CERT_FILE`,
//! else this OS's store, read with `rustls-native-certs`), then
//! shimgate's root; rewritten whole only when its text changes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::config::Config;
use crate::os;

/// The bundle's name in the state dir.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";

/// Why there is no bundle to give.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot read {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
}

/// The bundle for `config` whose last root is the CA's (`root`, a PEM
/// file), and notes for the user; `None` when no roots but shimgate's
/// were found (a file of shimgate's root alone would break the tunnelled
/// hosts, so none is named). `current` is the user's `SSL_CERT_FILE`.
pub fn prepare(
    config: &Config,
    root: &Path,
    current: Option<OsString>,
    notes: &mut Vec<String>,
) -> Result<Option<PathBuf>, BundleError> {
    let mine = std::fs::read_to_string(root).map_err(|error| BundleError::Read {
        path: root.to_path_buf(),
        error,
    })?;
    let bundle = config.state_dir.join(BUNDLE_FILE);
    let theirs = current
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .filter(|p| *p != bundle);
    let before = match theirs {
        Some(file) => match std::fs::read_to_string(&file) {
            Ok(text) if text.contains(mine.trim()) => return Ok(Some(file)),
            Ok(text) => text.trim_end().to_owned(),
            Err(e) => {
                notes.push(format!(
                    "warning: SSL_CERT_FILE names {}, which cannot be read ({e}): this OS's roots are used instead",
                    file.display()
                ));
                system_roots(&mine)
            }
        },
        None => system_roots(&mine),
    };
    if before.is_empty() {
        notes.push(
            "warning: found no roots in this OS's store: SSL_CERT_FILE is not set (a file with shimgate's root alone would make the tunnelled hosts fail); Node clients trust shimgate through NODE_EXTRA_CA_CERTS".to_owned(),
        );
        return Ok(None);
    }
    let joined = format!("{before}\n{}", mine.trim_start());
    if std::fs::read_to_string(&bundle).ok().as_deref() != Some(joined.as_str()) {
        os::replace_atomically(&bundle, joined.as_bytes()).map_err(|error| BundleError::Write {
            path: bundle.clone(),
            error,
        })?;
        notes.push(format!(
            "{} now holds this machine's roots and shimgate's (for SSL_CERT_FILE)",
            bundle.display()
        ));
    }
    Ok(Some(bundle))
}

/// This OS's roots as PEM, without shimgate's own (`mine`, PEM) when the
/// store already holds it (`shimgate ca trust`). Empty when none were
/// found.
fn system_roots(mine: &str) -> String {
    let own = ders(mine);
    let found = rustls_native_certs::load_native_certs();
    let mut text = String::new();
    for cert in found.certs {
        if own.iter().any(|d| d.as_slice() == cert.as_ref()) {
            continue;
        }
        text.push_str(&pem(cert.as_ref()));
    }
    text.trim_end().to_owned()
}

/// A certificate's DER as a PEM block.
fn pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::with_capacity(b64.len() + b64.len() / 64 + 60);
    out.push_str("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The DER of each certificate block in `text`.
fn ders(text: &str) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines().map(str::trim) {
        match (line, block.as_mut()) {
            ("-----BEGIN CERTIFICATE-----", _) => block = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                if let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64.as_bytes()) {
                    out.push(der);
                }
                block = None;
            }
            (_, Some(b64)) => b64.push_str(line),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_and_ders_round_trip() {
        let der: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        let text = pem(&der);
        assert!(text.lines().all(|l| l.len() <= 64));
        assert_eq!(ders(&format!("junk\n{text}{text}")), vec![der.clone(), der]);
    }

    #[test]
    fn the_user_s_file_comes_first_and_one_holding_the_root_is_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut config = Config::from_toml("").unwrap();
        config.state_dir = tmp.path().to_path_buf();
        let root = tmp.path().join("root.pem");
        let mine = pem(b"shimgate");
        std::fs::write(&root, &mine).unwrap();
        let corp = tmp.path().join("corp.pem");
        let theirs = pem(b"corp");
        std::fs::write(&corp, &theirs).unwrap();
        let mut notes = Vec::new();
        let got = prepare(&config, &root, Some(corp.clone().into()), &mut notes)
            .unwrap()
            .unwrap();
        assert_eq!(got, tmp.path().join(BUNDLE_FILE));
        assert_eq!(
            std::fs::read_to_string(&got).unwrap(),
            format!("{theirs}{mine}")
        );
        assert_eq!(notes.len(), 1, "{notes:?}");
        // Again: unchanged, nothing said.
        let again = prepare(&config, &root, Some(corp.into()), &mut notes).unwrap();
        assert_eq!(again, Some(got.clone()));
        assert_eq!(notes.len(), 1, "{notes:?}");
        // A file that already holds shimgate's root is named as it is.
        let both = tmp.path().join("both.pem");
        std::fs::write(&both, format!("{theirs}{mine}")).unwrap();
        let kept = prepare(&config, &root, Some(both.clone().into()), &mut notes).unwrap();
        assert_eq!(kept, Some(both));
    }
}

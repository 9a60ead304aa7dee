//! `shimgate env TARGET` and what `shimgate launch` sets: the variables
//! that point an official client at this shimgate, for one shell or one
//! process (nothing system-wide changes). For `qoder` (the Qoder CLI and
//! the Qoder IDE's background process, on qoder's model-server wire):
//! `QODER_MODEL_TRANSPORT=http`, `QODER_MODEL_SERVER_HOST` = the qoder
//! listener, `NODE_EXTRA_CA_CERTS` = the local CA's root (joined with the
//! user's own extra roots when they already name some: Node reads one
//! file), and `NO_PROXY`/`no_proxy` = the user's entries plus loopback, so
//! a corporate `HTTPS_PROXY` does not carry the call to 127.0.0.1 away.
//! For `proxy` (any client that follows a proxy, through the capture
//! listener, `[capture] listen`): `HTTPS_PROXY`/`HTTP_PROXY` (both
//! spellings) = the capture listener, `NO_PROXY` as above, the CA's root
//! in `NODE_EXTRA_CA_CERTS`, and `SSL_CERT_FILE`/`REQUESTS_CA_BUNDLE` = a
//! bundle of the roots the client trusted before plus shimgate's
//! ([`cert_bundle`]: those variables replace a client's roots).
//!
//! The targets are one enum ([`Target`]): another way in is one more arm
//! of it, and `env`, `launch` and the docs iterate the same list.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::ValueEnum;

use crate::cmd::cert_bundle::{self, BundleError};
use crate::cmd::serve::{resolve_config, EXIT_CONFIG};
use crate::config::Config;
use crate::os::{self, Shell};
use crate::tls;

/// What the variables point a client at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// The Qoder CLI and the Qoder IDE: qoder's model-server wire, over
    /// TLS, at the qoder listener.
    Qoder,
    /// Any client that follows `HTTPS_PROXY` (the Qoder CLI and IDE on
    /// their legacy transport, scripts), through the capture listener.
    Proxy,
}

/// The loopback names `NO_PROXY` gains, so no proxy carries a call to
/// shimgate away.
pub const LOOPBACK: [&str; 3] = ["127.0.0.1", "localhost", "::1"];

/// The file `NODE_EXTRA_CA_CERTS` names, in the state dir, when the user
/// already named roots of their own there (a corporate root): theirs, then
/// shimgate's root. Rewritten, whole, when either changes.
pub const NODE_BUNDLE_FILE: &str = "node-extra-ca-certs.pem";

/// One variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub value: String,
}

/// The variables for a target, with what to tell the user on stderr.
#[derive(Debug)]
pub struct Prepared {
    pub vars: Vec<Var>,
    /// The listener the client will call.
    pub listener: SocketAddr,
    /// Notes for stderr: a CA made now, roots joined, a CA warning.
    pub notes: Vec<String>,
}

impl Prepared {
    /// The variables as `(name, value)` pairs, for a child's environment.
    pub fn pairs(&self) -> Vec<(String, String)> {
        self.vars
            .iter()
            .map(|v| (v.name.to_owned(), v.value.clone()))
            .collect()
    }
}

/// Why the variables cannot be given.
#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("the {shim} listener is disabled ([shims.{shim}] enabled = false{file}): no client can reach it")]
    Disabled { shim: &'static str, file: String },
    #[error("the {shim} listener is {addr}, not a loopback address: a client would send its token off this machine, and the local CA signs for loopback only; set [shims.{shim}] listen = \"127.0.0.1:{port}\"{file}", port = addr.port())]
    NotLoopback {
        shim: &'static str,
        addr: SocketAddr,
        file: String,
    },
    #[error("the {shim} listener's port is 0 (a free one picked at each start): a client needs a fixed port; set [shims.{shim}] listen = \"127.0.0.1:47001\"{file}")]
    NoFixedPort { shim: &'static str, file: String },
    #[error("the capture listener is not configured ([capture] listen is not set{file}): set [capture] listen = \"127.0.0.1:47000\" and restart shimgate")]
    CaptureOff { file: String },
    #[error("the capture listener's port is 0 (a free one picked at each start): a client needs a fixed port; set [capture] listen = \"127.0.0.1:47000\"{file}")]
    CaptureNoFixedPort { file: String },
    #[error("{0}")]
    Bundle(#[from] BundleError),
    #[error("local CA: {0}")]
    Ca(#[from] tls::CaError),
    #[error("cannot write {path}: {error}")]
    Write {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{what} is not valid UTF-8: {path:?}")]
    NotUtf8 { what: &'static str, path: PathBuf },
    #[error("{name} holds a character cmd cannot take in `set` (\", % or a line break): use --shell powershell")]
    NotForCmd { name: &'static str },
}

/// The variables that point a `target` client at the shimgate of
/// `config`, from the user's current environment (`lookup`: its
/// `NO_PROXY`, `no_proxy`, `NODE_EXTRA_CA_CERTS`). Makes the local CA
/// when there is none.
pub fn prepare(
    target: Target,
    config: &Config,
    lookup: &dyn Fn(&str) -> Option<OsString>,
) -> Result<Prepared, EnvError> {
    let listener = match target {
        Target::Qoder => listener(config, "qoder")?,
        Target::Proxy => capture_listener(config)?,
    };
    let mut notes = Vec::new();
    let ca = tls::ensure_ca(config)?;
    if ca.created {
        notes.push(format!(
            "made a new local CA in {} (SHA-256 {})",
            ca.dir.display(),
            ca.fingerprint
        ));
    }
    if let Some(text) = &ca.mismatch {
        notes.push(format!("warning: local CA: {text}"));
    }
    let roots = node_roots(
        config,
        &ca.root_pem,
        lookup("NODE_EXTRA_CA_CERTS"),
        &mut notes,
    )?;
    let roots = roots
        .to_str()
        .ok_or_else(|| EnvError::NotUtf8 {
            what: "the CA's path",
            path: roots.clone(),
        })?
        .to_owned();
    let no_proxy = merged_no_proxy(&[lookup("NO_PROXY"), lookup("no_proxy")]);
    let vars = match target {
        Target::Qoder => vec![
            var("QODER_MODEL_TRANSPORT", "http"),
            var("QODER_MODEL_SERVER_HOST", &listener.to_string()),
            var("NODE_EXTRA_CA_CERTS", &roots),
            // Both spellings: some of a client's libraries read one, some
            // the other, and lowercase often wins.
            var("NO_PROXY", &no_proxy),
            var("no_proxy", &no_proxy),
        ],
        Target::Proxy => {
            // HTTP_PROXY too: a client's plain-http calls (qoder's
            // HTTP-DNS) take the same way, forwarded unchanged.
            let url = format!("http://{listener}");
            let mut vars = vec![
                var("HTTPS_PROXY", &url),
                var("https_proxy", &url),
                var("HTTP_PROXY", &url),
                var("http_proxy", &url),
                var("NO_PROXY", &no_proxy),
                var("no_proxy", &no_proxy),
                var("NODE_EXTRA_CA_CERTS", &roots),
            ];
            if let Some(bundle) =
                cert_bundle::prepare(config, &ca.root_pem, lookup("SSL_CERT_FILE"), &mut notes)?
            {
                let bundle = bundle.to_str().ok_or_else(|| EnvError::NotUtf8 {
                    what: "the bundle's path",
                    path: bundle.clone(),
                })?;
                vars.push(var("SSL_CERT_FILE", bundle));
                vars.push(var("REQUESTS_CA_BUNDLE", bundle));
            }
            vars
        }
    };
    Ok(Prepared {
        vars,
        listener,
        notes,
    })
}

fn var(name: &'static str, value: &str) -> Var {
    Var {
        name,
        value: value.to_owned(),
    }
}

/// The address of `shim`'s listener, when a client on this machine can
/// be sent to it: enabled, loopback, a fixed port.
fn listener(config: &Config, shim: &'static str) -> Result<SocketAddr, EnvError> {
    let file = config
        .source
        .as_ref()
        .map(|f| format!(" in {}", f.display()))
        .unwrap_or_default();
    let section = config.shim(shim);
    let Some(s) = section.filter(|s| s.enabled) else {
        return Err(EnvError::Disabled { shim, file });
    };
    if !s.listen.ip().is_loopback() {
        return Err(EnvError::NotLoopback {
            shim,
            addr: s.listen,
            file,
        });
    }
    if s.listen.port() == 0 {
        return Err(EnvError::NoFixedPort { shim, file });
    }
    Ok(s.listen)
}

/// The capture listener's address, when it is on and has a fixed port
/// (the config check keeps it on loopback).
fn capture_listener(config: &Config) -> Result<SocketAddr, EnvError> {
    let file = config
        .source
        .as_ref()
        .map(|f| format!(" in {}", f.display()))
        .unwrap_or_default();
    match config.capture.listen {
        None => Err(EnvError::CaptureOff { file }),
        Some(a) if a.port() == 0 => Err(EnvError::CaptureNoFixedPort { file }),
        Some(a) => Ok(a),
    }
}

/// The user's `NO_PROXY` and `no_proxy` entries (each once, in order,
/// names compared without case), then each loopback name they lack.
pub fn merged_no_proxy(current: &[Option<OsString>]) -> String {
    let mut entries: Vec<String> = Vec::new();
    let mut add = |entry: &str| {
        if !entries.iter().any(|e| e.eq_ignore_ascii_case(entry)) {
            entries.push(entry.to_owned());
        }
    };
    for list in current.iter().flatten() {
        let list = list.to_string_lossy();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            add(entry);
        }
    }
    for name in LOOPBACK {
        add(name);
    }
    entries.join(",")
}

/// The file for `NODE_EXTRA_CA_CERTS`: the CA's root, or, when the user
/// names a file of their own that lacks it, [`NODE_BUNDLE_FILE`] with
/// their roots and shimgate's (one that already holds it is kept as is).
fn node_roots(
    config: &Config,
    root: &Path,
    current: Option<OsString>,
    notes: &mut Vec<String>,
) -> Result<PathBuf, EnvError> {
    let Some(theirs) = current.filter(|v| !v.is_empty()).map(PathBuf::from) else {
        return Ok(root.to_path_buf());
    };
    if theirs == root {
        return Ok(theirs);
    }
    let mine = std::fs::read_to_string(root).map_err(|source| {
        EnvError::Ca(tls::CaError::Io {
            what: "read",
            path: root.to_path_buf(),
            source,
        })
    })?;
    let text = match std::fs::read_to_string(&theirs) {
        Ok(t) => t,
        Err(e) => {
            notes.push(format!(
                "warning: NODE_EXTRA_CA_CERTS names {}, which cannot be read ({e}): left out",
                theirs.display()
            ));
            return Ok(root.to_path_buf());
        }
    };
    if text.contains(mine.trim()) {
        return Ok(theirs);
    }
    let bundle = config.state_dir.join(NODE_BUNDLE_FILE);
    let joined = format!("{}\n{}", text.trim_end(), mine);
    if std::fs::read_to_string(&bundle).ok().as_deref() != Some(joined.as_str()) {
        os::replace_atomically(&bundle, joined.as_bytes()).map_err(|error| EnvError::Write {
            path: bundle.clone(),
            error,
        })?;
        notes.push(format!(
            "NODE_EXTRA_CA_CERTS named {}: {} now holds its roots and shimgate's",
            theirs.display(),
            bundle.display()
        ));
    }
    Ok(bundle)
}

/// `NAME=value` in `shell`'s syntax, quoted so the value arrives as it
/// is.
pub fn line(shell: Shell, var: &Var) -> Result<String, EnvError> {
    let v = &var.value;
    Ok(match shell {
        // Single quotes take everything literally; a quote ends them,
        // is written escaped, and they start again.
        Shell::Sh => format!("export {}='{}'", var.name, v.replace('\'', r"'\''")),
        // PowerShell reads the typographic single quotes as quotes too;
        // each is doubled.
        Shell::PowerShell => {
            let mut quoted = String::with_capacity(v.len());
            for c in v.chars() {
                if matches!(c, '\'' | '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}') {
                    quoted.push(c);
                }
                quoted.push(c);
            }
            format!("$env:{} = '{quoted}'", var.name)
        }
        // `set "X=…"`: the quotes keep spaces, `&` and a trailing space
        // in; cmd has no way to write `"` or `%` (it expands `%X%`) there.
        Shell::Cmd => {
            if v.contains(['"', '%', '\n', '\r']) {
                return Err(EnvError::NotForCmd { name: var.name });
            }
            format!("set \"{}={v}\"", var.name)
        }
    })
}

/// `shimgate env TARGET [--shell S] [--config FILE]`.
pub fn run(target: Target, shell: Option<Shell>, config: Option<&Path>) -> ExitCode {
    let config = match resolve_config(config) {
        Ok((c, _)) => c,
        Err(e) => {
            eprintln!("shimgate: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let shell = shell.unwrap_or(os::DEFAULT_SHELL);
    let lines = prepare(target, &config, &|k| std::env::var_os(k)).and_then(|p| {
        for note in &p.notes {
            eprintln!("{note}");
        }
        p.vars
            .iter()
            .map(|v| line(shell, v))
            .collect::<Result<Vec<_>, _>>()
    });
    match lines {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shimgate env: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(name: &'static str, value: &str) -> Var {
        var(name, value)
    }

    #[test]
    fn each_shell_gets_its_own_quoting() {
        let path = v("NODE_EXTRA_CA_CERTS", "/home/o'neil/ca root.pem");
        assert_eq!(
            line(Shell::Sh, &path).unwrap(),
            r"export NODE_EXTRA_CA_CERTS='/home/o'\''neil/ca root.pem'"
        );
        assert_eq!(
            line(Shell::PowerShell, &path).unwrap(),
            "$env:NODE_EXTRA_CA_CERTS = '/home/o''neil/ca root.pem'"
        );
        assert_eq!(
            line(Shell::Cmd, &path).unwrap(),
            r#"set "NODE_EXTRA_CA_CERTS=/home/o'neil/ca root.pem""#
        );
        let curly = v("X", "a\u{2019}b");
        assert_eq!(
            line(Shell::PowerShell, &curly).unwrap(),
            "$env:X = 'a\u{2019}\u{2019}b'"
        );
        for bad in ["50%", "a\"b", "a\nb"] {
            assert!(matches!(
                line(Shell::Cmd, &v("X", bad)),
                Err(EnvError::NotForCmd { name: "X" })
            ));
        }
    }

    #[test]
    fn no_proxy_keeps_the_user_s_entries_once_and_adds_loopback() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(merged_no_proxy(&[None, None]), "127.0.0.1,localhost,::1");
        assert_eq!(
            merged_no_proxy(&[os(".corp.example, intranet ,"), os("INTRANET,localhost")]),
            ".corp.example,intranet,localhost,127.0.0.1,::1"
        );
    }

    fn config_in(dir: &Path, toml: &str) -> Config {
        let mut c = Config::from_toml(toml).unwrap();
        c.state_dir = dir.to_path_buf();
        c
    }

    #[test]
    fn a_listener_a_client_cannot_be_sent_to_is_refused_with_why() {
        let tmp = tempfile::tempdir().unwrap();
        let none = |_: &str| None;
        for (toml, says) in [
            ("[shims.qoder]\nenabled = false\n", "disabled"),
            (
                "[shims.qoder]\nlisten = \"0.0.0.0:47001\"\nallow_remote = true\n",
                "not a loopback address",
            ),
            ("[shims.qoder]\nlisten = \"127.0.0.1:0\"\n", "port is 0"),
        ] {
            let e = prepare(Target::Qoder, &config_in(tmp.path(), toml), &none).unwrap_err();
            assert!(e.to_string().contains(says), "{toml}: {e}");
        }
        assert!(!tmp.path().join("ca").exists(), "no CA made for a refusal");
    }

    #[test]
    fn the_user_s_own_roots_are_joined_with_the_ca_s_once() {
        let tmp = tempfile::tempdir().unwrap();
        let config = config_in(tmp.path(), "");
        let corp = tmp.path().join("corp.pem");
        std::fs::write(
            &corp,
            "-----BEGIN CERTIFICATE-----\nCORP\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let corp_env = corp.clone();
        let lookup = move |k: &str| (k == "NODE_EXTRA_CA_CERTS").then(|| corp_env.clone().into());
        let p = prepare(Target::Qoder, &config, &lookup).unwrap();
        let bundle = tmp.path().join(NODE_BUNDLE_FILE);
        assert_eq!(p.vars[2].value, bundle.to_str().unwrap());
        let text = std::fs::read_to_string(&bundle).unwrap();
        let root = std::fs::read_to_string(tls::root_pem_path(&config)).unwrap();
        assert!(text.starts_with("-----BEGIN CERTIFICATE-----\nCORP\n"));
        assert!(text.ends_with(&root));
        // The bundle itself named again: kept, not joined twice.
        let again = |k: &str| (k == "NODE_EXTRA_CA_CERTS").then(|| bundle.clone().into());
        let p = prepare(Target::Qoder, &config, &again).unwrap();
        assert_eq!(p.vars[2].value, bundle.to_str().unwrap());
        assert_eq!(std::fs::read_to_string(&bundle).unwrap(), text);
        // No roots of the user's: the CA's root itself.
        let p = prepare(Target::Qoder, &config, &|_| None).unwrap();
        assert_eq!(
            p.vars[2].value,
            tls::root_pem_path(&config).to_str().unwrap()
        );
        assert_eq!(p.vars[1].value, "127.0.0.1:47001");
    }
}

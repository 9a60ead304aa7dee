//! `shimgate ca path|show|rotate|trust|untrust`: the command side of the
//! local CA (`crate::tls`). `path` prints only the root PEM's path, so
//! `NODE_EXTRA_CA_CERTS="$(shimgate ca path)"` works; the others say what
//! they did and what to do next. A CA is made on first use, never remade
//! behind the user's back: `rotate` is the one command that replaces it.

use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use crate::clock::iso8601;
use crate::cmd::cli::CaAction;
use crate::cmd::serve::{resolve_config, EXIT_CONFIG};
use crate::config::Config;
use crate::tls::ca::{self, Authority};
use crate::tls::store::{self, Store, Trusted, Untrusted};
use crate::tls::{self as tls, names::Permitted};

/// Runs one action.
pub fn run(action: CaAction) -> ExitCode {
    let config_path = match &action {
        CaAction::Path { config }
        | CaAction::Show { config }
        | CaAction::Rotate { config }
        | CaAction::Trust { config }
        | CaAction::Untrust { config } => config.clone(),
    };
    let config = match resolve_config(config_path.as_deref()) {
        Ok((c, _)) => c,
        Err(e) => {
            eprintln!("shimgate: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let done = match action {
        CaAction::Path { .. } => path(&config),
        CaAction::Show { .. } => show(&config),
        CaAction::Rotate { .. } => rotate(&config),
        CaAction::Trust { .. } => trust(&config),
        CaAction::Untrust { .. } => untrust(&config),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shimgate ca: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The CA of `config`, made if missing; a note on stderr when it was.
fn ensured(config: &Config) -> Result<Authority, String> {
    let (authority, made) = ca::ensure(&tls::ca_files(config), &config.ca.names, SystemTime::now())
        .map_err(|e| e.to_string())?;
    if made {
        eprintln!(
            "made a new local CA in {} (SHA-256 {})",
            authority.files.dir.display(),
            authority.root.fingerprint
        );
    }
    if let Some(text) = warnings(config, &authority).first() {
        eprintln!("warning: {text}");
    }
    Ok(authority)
}

/// `ca path`: the root PEM's path alone on stdout.
fn path(config: &Config) -> Result<(), String> {
    let authority = ensured(config)?;
    println!("{}", authority.files.root().display());
    Ok(())
}

/// What is wrong with `authority` for `config`: names, expiry, key file.
pub fn warnings(config: &Config, authority: &Authority) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(text) = authority
        .permitted
        .compare(&Permitted::for_names(&config.ca.names))
        .describe()
    {
        out.push(format!("local CA: {text}"));
    }
    if let Some(left) = authority.ending(SystemTime::now()) {
        out.push(format!(
            "local CA: it ends at {} ({} days left): `shimgate ca rotate` makes a new one (then give clients the new PEM)",
            iso8601(authority.not_after()),
            left.as_secs() / 86_400
        ));
    }
    if authority.key_exposed {
        out.push(format!(
            "local CA: {} may be read by other users",
            authority.files.key().display()
        ));
    }
    out
}

/// What `check-config` adds: the CA already made for this config's state
/// dir, if any, against its `[ca] names` (nothing is made).
pub fn check_lines(config: &Config) -> Vec<String> {
    let files = tls::ca_files(config);
    if !files.any_exists() {
        return Vec::new();
    }
    match ca::load(&files) {
        Ok(authority) => warnings(config, &authority),
        Err(e) => vec![format!("local CA: {e}")],
    }
}

/// `ca show`.
fn show(config: &Config) -> Result<(), String> {
    let a = ensured(config)?;
    let now = SystemTime::now();
    let days = |t: SystemTime| t.duration_since(now).map_or(0, |d| d.as_secs() / 86_400);
    let line = |name: &str, value: String| println!("{name:<13} {value}");
    line(
        "root",
        format!("{}  (give this file to clients)", a.files.root().display()),
    );
    line("fingerprint", format!("SHA-256 {}", a.root.fingerprint));
    line(
        "valid",
        format!(
            "{} to {} ({} days left)",
            iso8601(a.root.not_before),
            iso8601(a.not_after()),
            days(a.not_after())
        ),
    );
    line(
        "may sign",
        format!(
            "{} (critical name constraints on the root and the intermediate; a DNS name covers its subdomains)",
            a.permitted.shown().join(", ")
        ),
    );
    line(
        "intermediate",
        format!(
            "{}  (SHA-256 {}, ends {})",
            a.files.intermediate().display(),
            a.intermediate.fingerprint,
            iso8601(a.intermediate.not_after)
        ),
    );
    let key_note = if a.key_exposed {
        "MAY BE READ BY OTHER USERS"
    } else {
        "owner only"
    };
    line("key", format!("{}  ({key_note})", a.files.key().display()));
    line(
        "root key",
        "not kept: the root signed the intermediate and nothing more; a new CA comes from `shimgate ca rotate`".into(),
    );
    line("leaves", "minted per name by a running shimgate, in memory only, at most 30 days, renewed while it runs".into());
    line("OS store", os_store_line(config, &a));
    let warnings = warnings(config, &a);
    if warnings.is_empty() {
        line("config", "[ca] names match the CA".into());
    }
    for w in warnings {
        line("warning", w);
    }
    Ok(())
}

/// Whether `ca trust` added this root anywhere, from the record.
fn os_store_line(config: &Config, a: &Authority) -> String {
    let file = config.state_dir.join(store::RECORD_FILE);
    match store::Record::load(&file) {
        Err(e) => e,
        Ok(record) => {
            let here: Vec<String> = record
                .entries
                .iter()
                .filter(|e| e.sha256 == a.root.fingerprint)
                .map(|e| format!("in {} as {:?} since {}", e.location, e.label, e.added_at))
                .collect();
            let others = record
                .entries
                .iter()
                .filter(|e| e.sha256 != a.root.fingerprint)
                .count();
            let mut text = if here.is_empty() {
                "not added (`shimgate ca trust` adds it for this user; per-process trust, NODE_EXTRA_CA_CERTS, needs none)".to_owned()
            } else {
                format!("{} (`shimgate ca untrust` removes it)", here.join("; "))
            };
            if others > 0 {
                text.push_str(&format!(
                    "; {others} earlier root(s) still added: `shimgate ca untrust` removes them"
                ));
            }
            text
        }
    }
}

/// `ca rotate`.
fn rotate(config: &Config) -> Result<(), String> {
    let files = tls::ca_files(config);
    let old = files
        .any_exists()
        .then(|| ca::load(&files).ok())
        .flatten()
        .map(|a| a.root.fingerprint);
    let a = ca::rotate(&files, &config.ca.names, SystemTime::now()).map_err(|e| e.to_string())?;
    println!("made a new local CA: SHA-256 {}", a.root.fingerprint);
    if let Some(old) = old {
        println!("replaced SHA-256 {old}");
    }
    println!("may sign {}", a.permitted.shown().join(", "));
    println!(
        "give clients the new root: {} (clients given the old one refuse shimgate until then)",
        a.files.root().display()
    );
    println!("a running shimgate uses the new CA from its next TLS connection, without a restart");
    let record = store::Record::load(&config.state_dir.join(store::RECORD_FILE))?;
    if record
        .entries
        .iter()
        .any(|e| e.sha256 != a.root.fingerprint)
    {
        println!(
            "an earlier root is still in your OS trust store: `shimgate ca untrust` removes it, `shimgate ca trust` adds the new one"
        );
    }
    Ok(())
}

fn os_store() -> Result<Box<dyn Store>, String> {
    store::for_this_os()
}

/// `ca trust`.
fn trust(config: &Config) -> Result<(), String> {
    let a = ensured(config)?;
    let store = os_store()?;
    let record = config.state_dir.join(store::RECORD_FILE);
    match store::trust(store.as_ref(), &record, &a)? {
        Trusted::Added(e) => println!(
            "added the local CA (SHA-256 {}) to {} as {:?}",
            e.sha256, e.location, e.label
        ),
        Trusted::Already(e) => println!(
            "already added to {} as {:?} on {}",
            e.location, e.label, e.added_at
        ),
    }
    println!("read by {}", store.readers());
    println!(
        "Node clients (the Qoder CLI and IDE) still need NODE_EXTRA_CA_CERTS={}",
        a.files.root().display()
    );
    println!("to remove it: shimgate ca untrust");
    Ok(())
}

/// `ca untrust`.
fn untrust(config: &Config) -> Result<(), String> {
    let store = os_store()?;
    let record = config.state_dir.join(store::RECORD_FILE);
    let done = store::untrust(store.as_ref(), &record)?;
    if done.is_empty() {
        println!(
            "nothing of shimgate's recorded in {} (the record: {})",
            store.location(),
            shown(&record)
        );
    }
    for d in done {
        match d {
            Untrusted::Removed(e) => println!(
                "removed SHA-256 {} ({:?}) from {}",
                e.sha256, e.label, e.location
            ),
            Untrusted::Gone(e) => println!(
                "SHA-256 {} ({:?}) was no longer in {}: forgotten",
                e.sha256, e.label, e.location
            ),
        }
    }
    Ok(())
}

fn shown(path: &Path) -> String {
    crate::config::paths::shown(path).display().to_string()
}

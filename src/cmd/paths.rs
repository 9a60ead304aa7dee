//! `shimgate paths [--config FILE]`: the files `serve` would use, so a user
//! (or a support thread) can see where the state, the secrets, the local
//! CA and the learned route order live on this machine without reading the docs.

use std::path::Path;
use std::process::ExitCode;

use crate::app::{identity, route_store};
use crate::cmd::serve::{resolve_config, EXIT_CONFIG};
use crate::config::paths;

/// Prints one `name  path  (note)` line per file.
pub fn run(config: Option<&Path>) -> ExitCode {
    let (config, why) = match resolve_config(config) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("shimgate: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    let state = paths::shown(&config.state_dir);
    let line = |name: &str, path: &Path, note: &str| {
        let there = if path.exists() { "" } else { ", absent" };
        println!("{name:<12} {}  ({note}{there})", path.display());
    };
    match &config.source {
        Some(file) => line("config", file, &why),
        None => println!("{:<12} none  ({why})", "config"),
    }
    if let Some(user) = paths::user_config_file() {
        line(
            "user config",
            &paths::shown(&user),
            "read when there is no ./shimgate.toml",
        );
    }
    let state_note = if std::env::var_os("XDG_STATE_HOME").is_some_and(|v| !v.is_empty()) {
        "state dir, from XDG_STATE_HOME"
    } else {
        "state dir"
    };
    line("state", &state, state_note);
    line(
        "identity",
        &state.join(identity::KEY_FILE),
        "the proxy identity key, secret",
    );
    line(
        "token",
        &paths::shown(&config.admin_token_file()),
        "the admin token of allow_remote listeners, secret",
    );
    line(
        "ca",
        &paths::shown(&crate::tls::root_pem_path(&config)),
        "the local CA's root, for TLS clients; its key beside it, secret",
    );
    if !config.state_ttl.is_zero() {
        let name = route_store::file_name(config.source.as_deref());
        line(
            "routes",
            &state.join(name),
            "the learned route state of this config",
        );
    }
    if config.savings.file {
        let name = crate::app::ledger::store::file_name(config.source.as_deref());
        line(
            "savings",
            &state.join(name),
            "the token savings ledger of this config",
        );
    }
    ExitCode::SUCCESS
}

//! `shimgate serve` and `shimgate check-config`: load the config, start the
//! listeners, react to stop and reload events: each stop event of the OS
//! ([`os::stop_events`]) drains the streams in flight
//! (`server::Running::shutdown`); a reload event (SIGHUP; Windows has none,
//! there it is `POST /reload` or the panel, as everywhere) reads the config
//! again.

use std::path::Path;
use std::process::ExitCode;

use tracing::info;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cmd::cli::LogFormat;
use crate::config::{paths, Config, ConfigError};
use crate::os::{self, Event};
use crate::server::{self, SHUTDOWN_GRACE};

/// Exit code for an invalid config.
pub const EXIT_CONFIG: u8 = 2;

/// Sets up logging on stderr: `RUST_LOG` if set, else info for shimgate and
/// warnings for its libraries.
pub fn init_tracing(format: LogFormat) {
    let _ = log_subscriber(format, "shimgate=info,warn").try_init();
}

/// The stderr log subscriber in `format`: `RUST_LOG` if set, else
/// `default_filter`. Colours only on a terminal.
pub fn log_subscriber(
    format: LogFormat,
    default_filter: &str,
) -> Box<dyn tracing::Subscriber + Send + Sync> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Pretty => Box::new(builder.finish()),
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .finish(),
        ),
    }
}

/// Which config `serve` uses: `--config`, else `./shimgate.toml`, else the
/// per-user config file, else built-in defaults; with why.
pub fn resolve_config(path: Option<&Path>) -> Result<(Config, String), ConfigError> {
    match path {
        Some(p) => Ok((Config::load(p)?, "--config".to_owned())),
        None => {
            let found = paths::discover_config();
            let config = match found.file() {
                Some(file) => Config::load(file)?,
                None => Config::default(),
            };
            Ok((config, found.reason()))
        }
    }
}

/// `shimgate check-config FILE`.
pub fn check_config(path: &Path) -> ExitCode {
    match Config::load(path) {
        Ok(c) => {
            // One entry per listener, with the shims that ride on it
            // (`qoder 1 routes + qoderModel 2 routes on 127.0.0.1:47001`).
            let shims: Vec<String> = crate::registry::facts()
                .iter()
                .filter(|f| f.listens())
                .filter_map(|f| c.shim(f.name).filter(|s| s.enabled))
                .map(|s| {
                    let routes: Vec<String> = crate::registry::served_by(s.name)
                        .filter_map(|f| c.shim(f.name))
                        .map(|r| format!("{} {} routes", r.name, r.routes.len()))
                        .collect();
                    format!("{} on {}", routes.join(" + "), s.listen)
                })
                .collect();
            println!(
                "{}: ok ({}, compressor {})",
                path.display(),
                shims.join(", "),
                c.compressor.as_deref().unwrap_or("none: direct mode")
            );
            // The config is valid; a CA made for other names is said aloud.
            for line in crate::cmd::ca::check_lines(&c) {
                eprintln!("warning: {line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{}: {e}", path.display());
            ExitCode::from(EXIT_CONFIG)
        }
    }
}

/// `shimgate serve`.
pub fn serve(path: Option<&Path>) -> ExitCode {
    let (config, why) = match resolve_config(path) {
        Ok(found) => found,
        Err(e) => {
            eprintln!("shimgate: config error: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match &config.source {
        // A stable line on stdout, like `listening`, so a user sees which
        // file was loaded.
        Some(path) => println!("config {}", path.display()),
        None => println!("config none ({why})"),
    }
    info!(found_by = %why, state_dir = %config.state_dir.display(), "config");
    let runtime = match runtime(config.client.workers) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shimgate: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        // Handlers first: a signal sent as soon as the `listening` lines
        // appear must reach them, not the default action.
        let events = os::stop_events();
        let running = server::start(config).await;
        for name in crate::registry::names() {
            if let Some(addr) = running.addr(name) {
                // A stable line on stdout so scripts (and tests) learn the ports.
                println!("listening {name} {addr}");
                // Unlike `listening`, nobody need read it: a closed stdout must not stop serve.
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stdout(),
                    format_args!("panel http://{addr}/ui\n"),
                );
            }
        }
        if let Some(addr) = running.capture_addr() {
            // The capture listener: what a client's HTTPS_PROXY names.
            println!("listening capture {addr}");
        }
        let why = until_stop(events, &running).await;
        info!("stopping ({why})");
        running.shutdown(SHUTDOWN_GRACE).await;
    });
    ExitCode::SUCCESS
}

/// Waits for a stop event, reloading the config on each reload event;
/// returns what stopped it.
async fn until_stop(mut events: os::Events, running: &server::Running) -> &'static str {
    loop {
        match events.next().await {
            Event::Stop(why) => return why,
            Event::Reload(why) => match running.app.reload() {
                Ok(_) => info!("config reloaded ({why})"),
                Err(e) => {
                    tracing::warn!(error = %e, "config reload rejected; the old config stays")
                }
            },
        }
    }
}

/// The runtime `serve` runs on, with `workers` threads (`[limits]
/// workers`). One worker is tokio's current-thread scheduler: everything
/// (the accept loops, every connection, the timers) on the thread that
/// calls `block_on`, without the work-stealing scheduler's bookkeeping
/// (its queue tuning, its parking); more are the multi-threaded one. With
/// one thread either way, the current-thread scheduler costs 3–8 % fewer
/// instructions a call, shimgate's and a bare forwarder's alike
/// (`benches/README.md`, "2026-12-02 (20:40 UTC)"). The load tool's bare
/// forwarder runs on the same, so the yardstick keeps shimgate's shape.
pub fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    // The workers, and the pool that writes the route state file, under
    // one name a user finds in `top -H` (15 bytes: Linux keeps no more).
    builder.thread_name(WORKER_THREAD_NAME).enable_all().build()
}

/// What the runtime's threads are called.
pub const WORKER_THREAD_NAME: &str = "shimgate-worker";

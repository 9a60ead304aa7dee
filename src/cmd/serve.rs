//! `shimgate serve` and `shimgate check-config`: load the config, start the
//! listeners, react to signals.

use std::path::Path;
use std::process::ExitCode;

use tracing::info;
use tracing_subscriber::util::SubscriberInitExt;

use crate::cmd::cli::LogFormat;
use crate::cmd::stop::Stop;
use crate::config::{paths, Config, ConfigError};
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
/// per-user config file, else built-in defaults; with why (DESIGN §10).
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
            let shims: Vec<String> = c
                .shims
                .iter()
                .filter(|s| s.enabled)
                .map(|s| format!("{} {} routes on {}", s.name, s.routes.len(), s.listen))
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
        let stop = Stop::install();
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
        stop.wait(&running).await;
        info!("shutting down");
        running.shutdown(SHUTDOWN_GRACE).await;
    });
    ExitCode::SUCCESS
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

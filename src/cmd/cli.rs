//! Command-line arguments (clap derive); only argument structs live here.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::PossibleValue;
use clap::{Parser, Subcommand, ValueEnum};

use crate::cmd::env::Target;
use crate::os::Shell;

/// shimgate: lets a context-compression proxy work for the qoder and trae wires.
#[derive(Debug, Parser)]
#[command(version, about)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Pretty)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the shim listeners.
    Serve {
        /// Config file (default: ./shimgate.toml if present, else the
        /// per-user config file, else built-in defaults).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Print the config file, state dir, secrets and route state file
    /// `serve` would use.
    Paths {
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Start `shimgate serve` at login, for this user only (opt-in,
    /// reversible).
    Autostart {
        #[command(subcommand)]
        action: AutostartAction,
    },
    /// The local certificate authority behind TLS on the listeners: its
    /// PEM for clients, what it may sign, rotation, and (opt-in) this
    /// user's OS trust store.
    Ca {
        #[command(subcommand)]
        action: CaAction,
    },
    /// Print the variables that point a client at this shimgate, for a
    /// shell (nothing is changed: eval them, or set them where you choose).
    Env {
        /// Which clients: `qoder` (the Qoder CLI and the Qoder IDE, on
        /// qoder's model-server wire), `proxy` (any client that follows
        /// HTTPS_PROXY, through the capture listener).
        #[arg(value_enum)]
        target: Target,
        /// The shell to write for (default: sh on Unix, powershell on Windows).
        #[arg(long, value_enum)]
        shell: Option<Shell>,
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Run a client with those variables set for it alone: `shimgate
    /// launch -- qodercli -p "say hi"`. Its exit code is launch's.
    Launch {
        /// Through the capture listener (`shimgate env proxy`'s variables)
        /// instead of the qoder listener.
        #[arg(long)]
        proxy: bool,
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
        /// The command and its arguments (after `--`).
        #[arg(
            required = true,
            num_args = 1..,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "CMD"
        )]
        command: Vec<OsString>,
    },
    /// Validate a config file; exit 2 with the key path on failure.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
    },
    /// Read an SSE byte stream on stdin and print one JSON object per event.
    Frames {
        /// Also print an unterminated trailing event, marked `"incomplete":true`.
        #[arg(long)]
        include_incomplete: bool,
    },
    /// Run both shims, scripted providers and the reference compressor in one
    /// process, play an agent on each wire, and show compression happening.
    Demo {
        /// Conversation turns per shim.
        #[arg(long, default_value_t = 40)]
        turns: u32,
        /// Keep serving after the run (so you can curl /status).
        #[arg(long)]
        keep: bool,
    },
    /// The reference compression proxy on its own (OpenAI-compatible, keeps
    /// the request path, shortens old messages past a threshold).
    Compressor {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8787")]
        listen: SocketAddr,
        /// Upstream base URL (a shim listener, e.g. http://127.0.0.1:47011).
        #[arg(long)]
        upstream: String,
        /// Compress once a request's message content passes this many characters.
        #[arg(long, default_value_t = crate::compressor::DEFAULT_THRESHOLD_CHARS)]
        threshold_chars: usize,
        /// Once compressing, keep this many of the latest turns verbatim.
        #[arg(long, default_value_t = crate::compressor::DEFAULT_KEEP_TURNS)]
        keep_turns: usize,
        /// Forward every request byte for byte, chat requests included (a
        /// plain proxy on the compression path, for measuring).
        #[arg(long)]
        pass_through: bool,
    },
    /// Translate a captured stream offline: what the shim would forward.
    Translate {
        /// Which shim's translation (one of the registry's shims).
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crate::registry::names().collect::<Vec<_>>()))]
        shim: String,
        /// `return`: upstream native SSE to bare OpenAI; `ingress`: OpenAI (as
        /// the proxy relays it) to what the agent reads.
        #[arg(long, value_enum)]
        leg: Leg,
        /// Report frame problems instead of translating.
        #[arg(long)]
        check: bool,
    },
}

impl ValueEnum for Shell {
    fn value_variants<'a>() -> &'a [Self] {
        &Shell::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()))
    }
}

/// What `autostart` does.
#[derive(Debug, Subcommand)]
pub enum AutostartAction {
    /// Install the per-user entry that runs `shimgate serve --config FILE`
    /// at login.
    Enable {
        /// Config file the entry runs with (default: as `serve` finds it
        /// now, made absolute).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Remove exactly what `enable` installed.
    Disable,
    /// Say what is installed and whether a shimgate answers on the listener.
    Status {
        /// Config file whose listener to ask (default: the one the
        /// installed entry names).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
}

/// What `ca` does. Each takes the config whose state dir holds the CA
/// and whose `[ca] names` a new CA is made for.
#[derive(Debug, Subcommand)]
pub enum CaAction {
    /// Print the path of the root certificate (PEM) to give clients; makes
    /// the CA when there is none.
    Path {
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Show the CA: fingerprint, what it may sign, expiry, its files, and
    /// whether `trust` added it to the OS store.
    Show {
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Replace the CA with a new one (clients must then be given the new PEM).
    Rotate {
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Add the root to this user's OS trust store (opt-in; recorded, undone by `untrust`).
    Trust {
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
    /// Remove from the OS trust store exactly what `trust` added.
    Untrust {
        /// Config file (default: as `serve` finds it).
        #[arg(short, long)]
        config: Option<PathBuf>,
    },
}

/// A translation leg.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Leg {
    /// Upstream native SSE to bare OpenAI frames.
    Return,
    /// Bare OpenAI frames to the agent's wire.
    Ingress,
}

//! Command-line arguments (clap derive); only argument structs live here.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

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
        /// Config file (default: ./shimgate.toml if present, else built-in defaults).
        #[arg(short, long)]
        config: Option<PathBuf>,
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
}

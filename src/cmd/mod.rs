//! The subcommands, one file each: `serve` and `check-config`, `paths`,
//! `autostart`, `frames`, `translate`, `ca`; the command line itself and
//! logging setup. (`demo` and `compressor` have folders of their own; what
//! stops or reloads a process is [`crate::os::stop_events`].)

pub mod autostart;
pub mod ca;
pub mod cli;
pub mod frames;
pub mod paths;
pub mod serve;
pub mod translate;

//! The subcommands, one file each: `serve` and `check-config`, `paths`,
//! `autostart`, `frames`, `translate`, `ca`, `env` (with `cert_bundle`,
//! the roots file of a client behind the capture listener), `launch`; the command
//! line itself, logging setup, and asking a listener whether a shimgate
//! answers (`probe`). (`demo` and `compressor` have folders of their own; what
//! stops or reloads a process is [`crate::os::stop_events`].)

pub mod autostart;
pub mod ca;
pub mod cert_bundle;
pub mod cli;
pub mod env;
pub mod frames;
pub mod launch;
pub mod paths;
pub mod probe;
pub mod serve;
pub mod translate;

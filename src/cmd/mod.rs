//! The subcommands, one file each: `serve` and `check-config` (with the
//! signals that stop it, `stop`), `paths`, `autostart`, `frames`,
//! `translate`, `ca`; the command line itself and logging setup. (`demo` and
//! `compressor` have folders of their own.)

pub mod autostart;
pub mod ca;
pub mod cli;
pub mod frames;
pub mod paths;
pub mod serve;
pub mod stop;
pub mod translate;

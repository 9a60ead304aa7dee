//! The subcommands, one file each: `serve` and `check-config`, `frames`,
//! `translate`; the command line itself and logging setup. (`demo` and
//! `compressor` have folders of their own.)

pub mod cli;
pub mod frames;
pub mod serve;
pub mod translate;

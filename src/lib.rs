//! shimgate: a loopback gateway that lets a context-compression proxy work
//! for providers whose wire it cannot read.

pub mod aggregate;
pub mod app;
pub mod body;
pub mod chain;
pub mod cli;
pub mod clock;
pub mod compressor;
pub mod config;
pub mod demo;
pub mod exchange;
pub mod frames;
pub mod headers;
pub mod host;
pub mod identity;
pub mod metrics;
pub mod rid;
pub mod router;
pub mod serve;
pub mod server;
pub mod status;
pub mod translate;
pub mod upstream;

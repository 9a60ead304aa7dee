//! shimgate: a loopback gateway that lets a context-compression proxy work
//! for providers whose wire it cannot read.
//!
//! One folder per concern, dependencies pointing one way (each uses only
//! those above it): `config` (the validated config), `http` (bodies,
//! headers, the upstream client), `chain` (the failover core), `app` (the
//! state every listener shares: live config, rid registry, proxy identity,
//! counters), `host` (the runtime side of each shim: ingress, return leg,
//! codecs), `tls` (the local CA and TLS on the listeners), `admin` (`/status`,
//! `/metrics`, reload), `server` (listeners and dispatch), `cmd` (subcommands); `compressor` and `demo` sit on the side.

pub mod admin;
pub mod app;
pub mod autostart;
pub mod chain;
pub mod clock;
pub mod cmd;
pub mod compressor;
pub mod config;
pub mod demo;
pub mod host;
pub mod http;
pub mod registry;
pub mod server;
pub mod tls;

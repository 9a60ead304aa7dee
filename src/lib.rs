//! shimgate: a loopback gateway that lets a context-compression proxy work
//! for providers whose wire it cannot read.
//!
//! One folder per concern, and the imports point one way: each module uses
//! only those listed before it (`tests/layers.rs` fails on an arrow the
//! other way, whether a `use` line or a `crate::…` path in the code):
//!
//! 1. `os` — every platform difference: stop and reload events, files
//!    written whole and owner-only, socket flags, the login entry's kind,
//!    the default shell, a client run in this process's place.
//! 2. `clock` — now, the zone local hours are read in, `/status` stamps.
//! 3. `registry` — the one list of shims.
//! 4. `http` — bodies and stable error codes, request bodies within the
//!    limit, header hygiene, the upstream client.
//! 5. `config` — raw TOML to the validated config, and where files live.
//! 6. `chain` — the failover core: the call driver and its pure rules.
//! 7. `tls` — the local CA and TLS on the listeners: what the CA may
//!    sign, the authority on disk, leaves minted per name, the OS stores.
//! 8. `app` — the state every listener shares, assembled from the config:
//!    live config and upstream client, rid registry, proxy identity,
//!    counters, the route state file, the savings ledger.
//! 9. `host` — the runtime side of each shim: ingress, return leg, codecs.
//! 10. `admin` — `/status`, `/metrics`, reload, the panel and its writes.
//! 11. `capture` — the loopback HTTP proxy for clients that only follow
//!     one: decrypts the listed hosts, hands their inference calls to the
//!     shims, tunnels everything else.
//! 12. `server` — listeners and dispatch.
//! 13. `autostart` — the per-user login entry of each OS.
//! 14. `compressor` — the reference compressor.
//! 15. `cmd` — the subcommands and the command line.
//! 16. `demo` — the embedded demo (its own stack of the above).

pub mod admin;
pub mod app;
pub mod autostart;
pub mod capture;
pub mod chain;
pub mod clock;
pub mod cmd;
pub mod compressor;
pub mod config;
pub mod demo;
pub mod host;
pub mod http;
pub mod os;
pub mod registry;
pub mod server;
pub mod tls;

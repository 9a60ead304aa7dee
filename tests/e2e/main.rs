//! End-to-end tests: real loopback upstreams, real shimgate listeners.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../support/mod.rs"]
mod support;

mod bad_input;
mod bili;
mod bili_model;
mod browser;
mod capture;
mod chain;
mod external;
mod learning;
mod lifecycle;
mod networks;
mod operator;
mod panel_api;
mod proxy_failures;
mod pypi_proxies;
mod qoder;
mod qoder_cli;
mod qoder_cosy;
mod return_errors;
mod savings;
mod secrets;
mod tls;
mod trae;
mod trust;

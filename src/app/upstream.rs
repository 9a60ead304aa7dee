//! What the config asks of the upstream side, put together when the
//! runtime is (at start and at each reload): the client built for its
//! timeouts and trust, and each route's way out through a proxy. The
//! config only describes them; this layer, which owns the live client,
//! builds them.

use crate::config::Config;
use crate::http::client::{pem_roots, proxy, HttpClient, Tls};

/// The upstream client for `config`'s timeouts and trust.
pub fn client(config: &Config) -> HttpClient {
    let extra = match &config.ca_file {
        // Checked at load; a file gone since is reported, not skipped.
        Some(path) => match pem_roots(path) {
            Ok(certs) => certs,
            Err(e) => {
                tracing::warn!(error = %e, "upstream.ca_file cannot be read; its roots are not added");
                Vec::new()
            }
        },
        None => Vec::new(),
    };
    HttpClient::with_tls(config.timeouts.connect, Tls::for_roots(config.roots, extra))
}

/// Fills each route's [`proxy::Via`] from its own `proxy`, `[upstream]
/// proxy` and `env` (the environment's or system's setting).
pub fn resolve_proxies(config: &mut Config, env: &proxy::Environment) {
    let upstream = config.upstream_proxy.clone();
    for shim in &mut config.shims {
        for r in &mut shim.routes {
            r.via = proxy::resolve(r.proxy.as_ref(), upstream.as_ref(), env, &r.url);
        }
    }
}

//! `[capture]`: the loopback HTTP proxy for clients that only follow a
//! proxy (`docs/capture.md`). Off unless `listen` is set; loopback only.
//! It decrypts the hosts of `intercept` (each one exactly, never its
//! subdomains), so each one written must be a name the local CA may sign
//! for (inside `[ca] names`); the defaults are kept where they lie inside
//! it (a user who narrowed `[ca] names` did not write them); every other
//! host is a byte tunnel.

use std::net::SocketAddr;

use super::raw::RawCapture;
use super::ConfigError;
use crate::http::client::proxy::{ProxySetting, ProxyUrl};

/// The hosts decrypted when `intercept` is not set: qoder's legacy ask
/// host, its model servers (international and CN), and TRAE's inference
/// hosts (CN, then the international ones).
pub const DEFAULT_INTERCEPT: [&str; 6] = [
    "api2.qoder.sh",
    "api2-v2.qoder.sh",
    "gateway.qoder.com.cn",
    "trae-api-cn.mchost.guru",
    "trae-api-sg.mchost.guru",
    "trae-api-us.mchost.guru",
];

/// Client refusals of shimgate's certificate in a row after which a host
/// is tunnelled (untouched) instead, until a reload or restart: a client
/// that does not trust the local CA keeps working, uncompressed.
pub const DEFAULT_TUNNEL_AFTER_REFUSALS: u32 = 3;

/// `[capture]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureConfig {
    /// Where the proxy listens (loopback); `None`: off.
    pub listen: Option<SocketAddr>,
    /// Hosts decrypted (lowercase, each matched exactly), in the order
    /// written, without duplicates.
    pub intercept: Vec<String>,
    /// Client refusals in a row that make a host a tunnel; 0: never.
    pub tunnel_after_refusals: u32,
}

impl Default for CaptureConfig {
    fn default() -> Self {
        CaptureConfig {
            listen: None,
            intercept: DEFAULT_INTERCEPT.iter().map(|h| (*h).to_owned()).collect(),
            tunnel_after_refusals: DEFAULT_TUNNEL_AFTER_REFUSALS,
        }
    }
}

impl CaptureConfig {
    /// Whether `host` (as a `CONNECT` or a URL names it) is decrypted.
    pub fn intercepts(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.intercept.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Whether `proxy` is this capture listener itself (a loopback host
    /// on its port): shimgate's own connections through it would loop.
    pub fn is_self(&self, proxy: &ProxyUrl) -> bool {
        self.listen
            .is_some_and(|l| crate::http::client::proxy::names_listener(proxy, l))
    }
}

/// Checks `[capture]` against the CA's names (`ca_names`, already checked).
pub fn check(raw: RawCapture, ca_names: &[String]) -> Result<CaptureConfig, ConfigError> {
    let mut c = CaptureConfig::default();
    if let Some(listen) = raw.listen {
        let addr: SocketAddr = listen.trim().parse().map_err(|_| {
            ConfigError::at(
                "capture.listen",
                format!("{listen:?} is not an ip:port address"),
            )
        })?;
        if !addr.ip().is_loopback() {
            return Err(ConfigError::at(
                "capture.listen",
                format!("{addr} is not a loopback address: the capture proxy listens on loopback only (127.0.0.1, ::1)"),
            ));
        }
        c.listen = Some(addr);
    }
    let written = raw.intercept.is_some();
    if let Some(hosts) = raw.intercept {
        c.intercept = Vec::with_capacity(hosts.len());
        for (i, host) in hosts.iter().enumerate() {
            let at = || format!("capture.intercept[{i}]");
            let name = super::ca::check_name(host)
                .map_err(|why| ConfigError::at(at(), format!("{host:?} {why}")))?;
            if !c.intercept.contains(&name) {
                c.intercept.push(name);
            }
        }
    }
    let inside = |host: &str| ca_names.iter().any(|base| super::ca::dns_in(host, base));
    if !written {
        c.intercept.retain(|h| inside(h));
    }
    for (i, host) in c.intercept.iter().enumerate() {
        if !inside(host) {
            return Err(ConfigError::at(
                format!("capture.intercept[{i}]"),
                format!(
                    "{host:?} is not inside [ca] names ({}): the local CA could not sign for it; add its domain to [ca] names (then `shimgate ca rotate`) or leave it out",
                    if ca_names.is_empty() { "none".to_owned() } else { ca_names.join(", ") }
                ),
            ));
        }
    }
    if let Some(n) = raw.tunnel_after_refusals {
        c.tunnel_after_refusals = n;
    }
    Ok(c)
}

/// A proxy setting at `path` that names the capture listener itself.
pub fn refuse_self(
    path: &str,
    setting: Option<&ProxySetting>,
    capture: &CaptureConfig,
) -> Result<(), ConfigError> {
    match setting {
        Some(ProxySetting::Via(p)) if capture.is_self(p) => Err(ConfigError::at(
            path,
            format!(
                "{p} is shimgate's own capture listener (capture.listen): its connections would loop through itself; name the proxy the clients would use without shimgate, or \"none\""
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        crate::config::ca::DEFAULT_CA_NAMES
            .iter()
            .map(|n| (*n).to_owned())
            .collect()
    }

    fn raw(listen: Option<&str>, intercept: Option<&[&str]>) -> RawCapture {
        RawCapture {
            listen: listen.map(str::to_owned),
            intercept: intercept.map(|l| l.iter().map(|h| (*h).to_owned()).collect()),
            tunnel_after_refusals: None,
        }
    }

    #[test]
    fn off_unless_listen_is_set_and_the_defaults_lie_inside_the_ca_names() {
        let c = check(RawCapture::default(), &names()).unwrap();
        assert_eq!(c.listen, None);
        assert_eq!(c.intercept, DEFAULT_INTERCEPT);
        assert_eq!(c.tunnel_after_refusals, 3);
        let on = check(raw(Some("127.0.0.1:47000"), None), &names()).unwrap();
        assert_eq!(on.listen, Some("127.0.0.1:47000".parse().unwrap()));
        assert!(on.intercepts("API2.qoder.sh."));
        assert!(!on.intercepts("openapi.qoder.sh"), "exact names only");
    }

    #[test]
    fn a_non_loopback_listen_or_a_name_outside_the_ca_is_refused_with_its_key() {
        let e = check(raw(Some("0.0.0.0:47000"), None), &names()).unwrap_err();
        assert_eq!(e.path, "capture.listen");
        assert!(e.message.contains("loopback only"), "{e}");
        let e = check(
            raw(None, Some(&["api2.qoder.sh", "api.example.com"])),
            &names(),
        )
        .unwrap_err();
        assert_eq!(e.path, "capture.intercept[1]");
        assert!(e.message.contains("not inside [ca] names"), "{e}");
        let e = check(raw(None, Some(&["*.qoder.sh"])), &names()).unwrap_err();
        assert_eq!(e.path, "capture.intercept[0]");
        // The defaults are kept where the CA may sign for them.
        assert!(check(RawCapture::default(), &[])
            .unwrap()
            .intercept
            .is_empty());
        let qoder = check(RawCapture::default(), &["qoder.sh".to_owned()]).unwrap();
        assert_eq!(qoder.intercept, ["api2.qoder.sh", "api2-v2.qoder.sh"]);
        let c = check(
            raw(None, Some(&["API2.qoder.sh", "api2.qoder.sh"])),
            &names(),
        )
        .unwrap();
        assert_eq!(c.intercept, ["api2.qoder.sh"]);
    }

    #[test]
    fn a_proxy_naming_the_capture_listener_is_refused() {
        let c = check(raw(Some("127.0.0.1:47000"), None), &names()).unwrap();
        let own = ProxySetting::parse("http://u:secret@localhost:47000").unwrap();
        let e = refuse_self("upstream.proxy", Some(&own), &c).unwrap_err();
        assert!(e.message.contains("loop"), "{e}");
        assert!(!e.message.contains("secret"), "{e}");
        let other = ProxySetting::parse("http://127.0.0.1:7890").unwrap();
        assert!(refuse_self("upstream.proxy", Some(&other), &c).is_ok());
        assert!(refuse_self("upstream.proxy", None, &c).is_ok());
    }
}

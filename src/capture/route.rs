//! Where a captured inference call goes: the routes the user wrote for its
//! wire, as for a call to the shim's listener; when they wrote none (qoder's
//! legacy ask and TRAE have no built-in routes, qoder's model-server wire
//! has built-in ones that name fixed hosts), the host its client asked
//! for, as one implicit route named `capture:HOST` (shown so in `/status`
//! and the call log), never a `502 NO_ROUTES`.

use std::sync::Arc;

use crate::config::{Config, Route, Window};
use crate::http::client::proxy::{self, Environment};

/// The prefix of an implicit route's name.
pub const IMPLICIT_PREFIX: &str = "capture:";

/// The origin a captured call was sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `https` (a decrypted tunnel, or an `https://` absolute-form target).
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl Target {
    /// `https://host[:port]` (the port only when not the scheme's own).
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        let default = if self.tls { 443 } else { 80 };
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == default {
            format!("{scheme}://{host}")
        } else {
            format!("{scheme}://{host}:{}", self.port)
        }
    }

    /// The implicit route's name: `capture:HOST` (`:PORT` when not the
    /// scheme's own).
    pub fn route_name(&self) -> String {
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            format!("{IMPLICIT_PREFIX}{}", self.host)
        } else {
            format!("{IMPLICIT_PREFIX}{}:{}", self.host, self.port)
        }
    }
}

/// The config a call for `shim` captured on `target` runs on, and the
/// implicit route's name when it runs on one; `(None, None)`: the live
/// config as it is (the user wrote routes for the wire).
pub fn runs_on(
    config: &Config,
    shim: &str,
    target: &Target,
    env: &Environment,
) -> (Option<Arc<Config>>, Option<String>) {
    let Some(section) = config.shim(shim) else {
        return (None, None);
    };
    if !section.routes.is_empty() && !section.routes_built_in {
        return (None, None);
    }
    let url = target.base_url();
    let name = target.route_name();
    let route = Route {
        name: name.clone(),
        via: proxy::resolve(None, config.upstream_proxy.as_ref(), env, &url),
        url,
        max_concurrency: 0,
        headers: Vec::new(),
        context_tokens: None,
        window: Window::default(),
        proxy: None,
    };
    let mut own = config.clone();
    if let Some(s) = own.shim_mut(shim) {
        s.routes = vec![route];
        s.routes_built_in = false;
    }
    (Some(Arc::new(own)), Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(host: &str, port: u16) -> Target {
        Target {
            tls: true,
            host: host.into(),
            port,
        }
    }

    #[test]
    fn a_wire_without_written_routes_goes_to_the_host_its_client_asked_for() {
        let config = Config::default();
        let env = Environment::none();
        let (own, name) = runs_on(
            &config,
            "trae",
            &target("trae-api-cn.mchost.guru", 443),
            &env,
        );
        let own = own.unwrap();
        assert_eq!(name.as_deref(), Some("capture:trae-api-cn.mchost.guru"));
        let routes = &own.shim("trae").unwrap().routes;
        assert_eq!(routes.len(), 1);
        assert_eq!(routes[0].url, "https://trae-api-cn.mchost.guru");
        // qoder's model-server wire has built-in routes, not written ones.
        let (own, name) = runs_on(
            &config,
            "qoderModel",
            &target("gateway.qoder.com.cn", 8443),
            &env,
        );
        assert_eq!(name.as_deref(), Some("capture:gateway.qoder.com.cn:8443"));
        assert_eq!(
            own.unwrap().shim("qoderModel").unwrap().routes[0].url,
            "https://gateway.qoder.com.cn:8443"
        );
        // The live config is untouched.
        assert!(config.shim("trae").unwrap().routes.is_empty());
    }

    #[test]
    fn written_routes_are_used_as_for_the_shims_listener() {
        let config = Config::from_toml(
            "[upstream]\nproxy = \"http://127.0.0.1:7890\"\n[[shims.trae.routes]]\nname = \"mine\"\nurl = \"https://trae-api-cn.mchost.guru\"\n",
        )
        .unwrap();
        let env = Environment::none();
        assert_eq!(
            runs_on(
                &config,
                "trae",
                &target("trae-api-cn.mchost.guru", 443),
                &env
            ),
            (None, None)
        );
        // The implicit route takes [upstream] proxy like any route.
        let (own, _) = runs_on(&config, "qoder", &target("api2.qoder.sh", 443), &env);
        let own = own.unwrap();
        assert_eq!(
            own.shim("qoder").unwrap().routes[0].via.shown(),
            "http://127.0.0.1:7890"
        );
    }
}

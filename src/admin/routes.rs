//! The route hand controls (`docs/failover.md`): `POST /routes/reset` clears
//! every cooldown and breaker; `POST /routes/{shim}/{route}/disable` and
//! `…/enable` take a route out of every order and put it back; `POST
//! /routes/{shim}/pin` with `{"route": NAME}` forces the head of the order
//! (`{"route": null}` unpins). Each answers 200 with the shim's new
//! effective order (reset: every shim's); an unknown shim or route is 404
//! naming it. What they set is kept in the route state file.
//! `POST /routes/{shim}/{route}/restore` clears one route's cooldown and
//! breaker (never a hand disable: that is the user's choice).
//!
//! They change what every agent's next call does, so they sit behind the
//! admin trust rules (`admin::trust`).

use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::app::App;
use crate::clock::Now;
use crate::config::{Config, ShimConfig};
use crate::http::body::{self, Body, ErrorCode};
use crate::http::read::read_body;
use crate::registry;

/// A pin body is a route name in a small JSON object.
const PIN_BODY_LIMIT: u64 = 4096;

/// One hand control, as its path names it (segments percent-decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    Reset,
    Disable {
        shim: String,
        route: String,
    },
    Enable {
        shim: String,
        route: String,
    },
    Restore {
        shim: String,
        route: String,
    },
    Pin {
        shim: String,
    },
    /// `POST /routes/{shim}/order`: the configured order, written to the
    /// config file (`admin::config_write`).
    Order {
        shim: String,
    },
}

/// The control a path names, or `None` when it names none.
pub fn parse(path: &str) -> Option<Control> {
    let rest = path.strip_prefix("/routes/")?;
    let parts: Vec<String> = rest.split('/').map(percent_decode).collect();
    match parts.as_slice() {
        [reset] if reset == "reset" => Some(Control::Reset),
        [shim, pin] if pin == "pin" => Some(Control::Pin { shim: shim.clone() }),
        [shim, order] if order == "order" => Some(Control::Order { shim: shim.clone() }),
        [shim, route, verb] if verb == "disable" => Some(Control::Disable {
            shim: shim.clone(),
            route: route.clone(),
        }),
        [shim, route, verb] if verb == "enable" => Some(Control::Enable {
            shim: shim.clone(),
            route: route.clone(),
        }),
        [shim, route, verb] if verb == "restore" => Some(Control::Restore {
            shim: shim.clone(),
            route: route.clone(),
        }),
        _ => None,
    }
}

/// Carries a control out.
pub async fn handle(app: &App, control: Control, body: Incoming) -> Response<Body> {
    let config = app.config();
    let (shim, route) = match &control {
        Control::Reset => {
            app.chain.reset();
            tracing::info!("route cooldowns and breakers reset (POST /routes/reset)");
            return body::json_response(StatusCode::OK, &all_effective(app, &config));
        }
        Control::Disable { shim, route }
        | Control::Enable { shim, route }
        | Control::Restore { shim, route } => (shim.as_str(), Some(route.clone())),
        Control::Order { shim } => {
            return match known_shim(&config, shim) {
                Some(s) => super::config_write::order(app, s.name, body).await,
                None => unknown_shim(shim),
            };
        }
        Control::Pin { shim } => {
            let bytes = match read_body(body, None, PIN_BODY_LIMIT).await {
                Ok(b) => b,
                Err(e) => return e.into_response(),
            };
            match pin_target(&bytes) {
                Ok(route) => (shim.as_str(), route),
                Err(e) => return body::error_response(ErrorCode::BadRequest, &e),
            }
        }
    };
    let Some(s) = known_shim(&config, shim) else {
        return unknown_shim(shim);
    };
    if let Some(name) = route.as_deref() {
        if !s.routes.iter().any(|r| r.name == name) {
            let known: Vec<_> = s.routes.iter().map(|r| r.name.as_str()).collect();
            return body::error_response(
                ErrorCode::UnknownRoute,
                &format!(
                    "the {} shim has no route {name:?} (routes: {})",
                    s.name,
                    known.join(", ")
                ),
            );
        }
    }
    match (&control, route.as_deref()) {
        (Control::Disable { .. }, Some(r)) => app.chain.set_disabled(s.name, r, true),
        (Control::Enable { .. }, Some(r)) => app.chain.set_disabled(s.name, r, false),
        (Control::Restore { .. }, Some(r)) => app.chain.restore_route(s.name, r),
        (Control::Pin { .. }, r) => app.chain.pin(s.name, r),
        _ => {}
    }
    tracing::info!(shim = s.name, route = route.as_deref().unwrap_or("-"), control = ?control, "route control");
    let effective = app
        .chain
        .effective(s.name, &s.routes, &config.ordering, Now::system());
    body::json_response(
        StatusCode::OK,
        &json!({"shim": s.name, "effective": effective}),
    )
}

fn unknown_shim(shim: &str) -> Response<Body> {
    let known: Vec<_> = registry::names().collect();
    body::error_response(
        ErrorCode::UnknownShim,
        &format!("unknown shim {shim:?} (known: {})", known.join(", ")),
    )
}

/// The shim's config by a name from a path (the registry's own name).
fn known_shim<'c>(config: &'c Config, name: &str) -> Option<&'c ShimConfig> {
    registry::find(name).and_then(|f| config.shim(f.name))
}

/// Every shim's effective order (the answer to a reset).
fn all_effective(app: &App, config: &Config) -> Value {
    let now = Now::system();
    let effective: serde_json::Map<String, Value> = config
        .shims
        .iter()
        .map(|s| {
            let order = app
                .chain
                .effective(s.name, &s.routes, &config.ordering, now);
            (s.name.to_string(), order)
        })
        .collect();
    json!({"reset": true, "effective": effective})
}

/// The route a pin body names: `{"route": NAME}`, or `null` to unpin.
fn pin_target(bytes: &[u8]) -> Result<Option<String>, String> {
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("a pin takes {{\"route\": NAME}} or {{\"route\": null}}: {e}"))?;
    match v.get("route") {
        Some(Value::String(name)) => Ok(Some(name.clone())),
        Some(Value::Null) => Ok(None),
        _ => Err("a pin takes {\"route\": NAME} or {\"route\": null}".into()),
    }
}

/// `%XX` escapes decoded (a route name may hold any character); a bad
/// escape is kept as written, bytes that are not UTF-8 become U+FFFD.
pub fn percent_decode(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_control() {
        assert_eq!(parse("/routes/reset"), Some(Control::Reset));
        assert_eq!(
            parse("/routes/trae/pin"),
            Some(Control::Pin {
                shim: "trae".into()
            })
        );
        assert_eq!(
            parse("/routes/trae/a%20b%2Fc/disable"),
            Some(Control::Disable {
                shim: "trae".into(),
                route: "a b/c".into()
            })
        );
        assert_eq!(
            parse("/routes/qoder/pin/enable"),
            Some(Control::Enable {
                shim: "qoder".into(),
                route: "pin".into()
            })
        );
        assert_eq!(
            parse("/routes/trae/a/restore"),
            Some(Control::Restore {
                shim: "trae".into(),
                route: "a".into()
            })
        );
        assert_eq!(parse("/routes/trae/a/b/disable"), None);
        assert_eq!(parse("/routes"), None);
        assert_eq!(parse("/api/routes/reset"), None);
    }

    #[test]
    fn a_pin_body_names_a_route_or_null() {
        assert_eq!(pin_target(br#"{"route":"r2"}"#), Ok(Some("r2".into())));
        assert_eq!(pin_target(br#"{"route":null}"#), Ok(None));
        assert!(pin_target(br#"{"route":3}"#).is_err());
        assert!(pin_target(b"{}").is_err());
        assert!(pin_target(b"nope").is_err());
    }

    #[test]
    fn a_bad_escape_is_kept() {
        assert_eq!(percent_decode("a%2"), "a%2");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%41"), "A");
        assert_eq!(percent_decode("%E4%B8%AD%ff"), "中\u{fffd}");
    }
}

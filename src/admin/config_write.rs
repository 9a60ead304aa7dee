//! The panel's writes to the config file (`docs/panel.md`): `POST
//! /routes/{shim}/order {"routes": [...]}` (move up/down, adopt the
//! measured order) and `POST /ordering {"mode": ...}`.
//!
//! The file is edited as a document ([`crate::config::edit`]: comments and
//! layout kept), the result is checked to load, written to a temporary
//! file beside it (same permissions) and renamed over it
//! ([`os::replace_atomically`]), then reloaded as
//! `POST /reload` would. A refusal touches nothing: `400` for a request
//! that is not a permutation or not a mode, `409` when there is no file
//! (built-in defaults), it is read-only, or it no longer matches what runs.

use std::sync::{Arc, Mutex};

use http::{Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::app::App;
use crate::clock::Now;
use crate::config::edit::{self, EditError};
use crate::config::{Config, OrderingMode};
use crate::http::body::{self, Body, ErrorCode};
use crate::http::read::{read_body, BodyError};
use crate::os;

/// An order or mode body is a small JSON object.
const BODY_LIMIT: u64 = 64 * 1024;

/// Why a request was refused (answered at the edge with its code).
struct Refused(ErrorCode, String);

impl Refused {
    fn bad(why: impl Into<String>) -> Refused {
        Refused(ErrorCode::BadRequest, why.into())
    }

    fn conflict(why: impl Into<String>) -> Refused {
        Refused(ErrorCode::ConfigConflict, why.into())
    }

    fn into_response(self) -> Response<Body> {
        body::error_response(self.0, &self.1)
    }
}

impl From<EditError> for Refused {
    fn from(e: EditError) -> Refused {
        match e {
            EditError::Bad(why) => Refused::bad(why),
            EditError::Conflict(why) => Refused::conflict(why),
        }
    }
}

/// One write at a time: two panels clicking at once must not interleave
/// read-edit-write.
static WRITING: Mutex<()> = Mutex::new(());

/// `POST /routes/{shim}/order`.
pub async fn order(app: &App, shim: &'static str, body: Incoming) -> Response<Body> {
    let names = match read_json(body).await.and_then(|v| route_list(&v)) {
        Ok(n) => n,
        Err(refused) => return refused.into_response(),
    };
    let running: Vec<String> = app
        .config()
        .shim(shim)
        .map(|s| s.routes.iter().map(|r| r.name.clone()).collect())
        .unwrap_or_default();
    let written = write(app, |text| {
        let in_file = edit::route_names(text, shim)?;
        if in_file != running {
            return Err(EditError::Conflict(format!(
                "the config file's {shim} routes ({}) differ from the running ones ({}): reload first (POST /reload)",
                in_file.join(", "),
                running.join(", ")
            )));
        }
        edit::reorder_routes(text, shim, &names)
    });
    match written {
        Ok(config) => {
            let configured: Vec<&str> = config
                .shim(shim)
                .map(|s| s.routes.iter().map(|r| r.name.as_str()).collect())
                .unwrap_or_default();
            tracing::info!(shim, order = %configured.join(","), "route order written to the config file");
            let effective = effective(app, &config, shim);
            body::json_response(
                StatusCode::OK,
                &json!({"shim": shim, "configured": configured, "effective": effective}),
            )
        }
        Err(refused) => refused.into_response(),
    }
}

/// `POST /ordering`.
pub async fn mode(app: &App, body: Incoming) -> Response<Body> {
    let v = match read_json(body).await {
        Ok(v) => v,
        Err(refused) => return refused.into_response(),
    };
    let mode = match v.get("mode").and_then(Value::as_str) {
        Some("auto") => OrderingMode::Auto,
        Some("manual") => OrderingMode::Manual,
        Some("measured") => OrderingMode::Measured,
        other => {
            return body::error_response(
                ErrorCode::BadRequest,
                &format!(
                    "/ordering takes {{\"mode\": \"auto\" | \"manual\" | \"measured\"}}, not {}",
                    other.map_or_else(|| v.to_string(), |m| format!("{m:?}"))
                ),
            )
        }
    };
    match write(app, |text| edit::set_mode(text, mode)) {
        Ok(config) => {
            tracing::info!(
                mode = mode.as_str(),
                "ordering mode written to the config file"
            );
            let effective: serde_json::Map<String, Value> = config
                .shims
                .iter()
                .map(|s| (s.name.to_string(), effective(app, &config, s.name)))
                .collect();
            body::json_response(
                StatusCode::OK,
                &json!({"mode": config.ordering.mode.as_str(), "effective": effective}),
            )
        }
        Err(refused) => refused.into_response(),
    }
}

fn effective(app: &App, config: &Config, shim: &'static str) -> Value {
    let routes = config.shim(shim).map_or(&[][..], |s| s.routes.as_slice());
    app.chain
        .effective(shim, routes, &config.ordering, Now::system())
}

async fn read_json(body: Incoming) -> Result<Value, Refused> {
    let bytes = read_body(body, None, BODY_LIMIT)
        .await
        .map_err(|e| match e {
            BodyError::TooLarge(limit) => Refused(
                ErrorCode::RequestTooLarge,
                format!("the body is over the {limit}-byte limit of this endpoint"),
            ),
            BodyError::Broken(why) => Refused::bad(format!("could not read the body: {why}")),
        })?;
    serde_json::from_slice(&bytes).map_err(|e| Refused::bad(format!("the body is not JSON: {e}")))
}

/// `{"routes": ["a", "b", …]}`.
fn route_list(v: &Value) -> Result<Vec<String>, Refused> {
    v.get("routes")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|n| n.as_str().map(str::to_owned)).collect())
        .ok_or_else(|| {
            Refused::bad(
                "an order takes {\"routes\": [every configured route name, in the new order]}",
            )
        })
}

/// Edits the config file with `change`, writes it atomically and reloads;
/// the new config, or the refusal (nothing written).
fn write(
    app: &App,
    change: impl FnOnce(&str) -> Result<String, EditError>,
) -> Result<Arc<Config>, Refused> {
    let _one = WRITING.lock().unwrap_or_else(|p| p.into_inner());
    let Some(path) = app.config().source.clone() else {
        return Err(Refused::conflict(
            "shimgate runs on built-in defaults: there is no config file to write (start it with --config FILE)",
        ));
    };
    let shown = path.display();
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Refused::conflict(format!("cannot read the config file {shown}: {e}")))?;
    // The user's choice, even to a process that could write it anyway.
    if let Some(why) = os::read_only(&path) {
        return Err(Refused::conflict(format!(
            "the config file {shown} is read-only ({why}): nothing was written"
        )));
    }
    let edited = change(&text)?;
    if let Err(e) = Config::from_toml(&edited) {
        return Err(Refused::conflict(format!(
            "the edited config file would not load ({e}); nothing was written"
        )));
    }
    if edited != text {
        os::replace_atomically(&path, edited.as_bytes())
            .map_err(|e| Refused::conflict(format!("cannot write the config file {shown}: {e}")))?;
    }
    app.reload().map_err(|e| {
        // Put the user's file back as it was: the edit did not take.
        let _ = os::replace_atomically(&path, text.as_bytes());
        Refused::conflict(format!(
            "the written config did not reload ({e}); the file was put back"
        ))
    })
}

//! `POST /reload` (and SIGHUP, in `cmd::serve`): re-read the config file.

use http::{Response, StatusCode};

use crate::app::App;
use crate::http::body::ErrorCode;
use crate::http::body::{self, Body};

/// `POST /reload`: re-reads the config file; a bad file is refused with its
/// key-path error and the running config stays.
pub fn reload(app: &App) -> Response<Body> {
    match app.reload() {
        Ok(config) => {
            tracing::info!("config reloaded (POST /reload)");
            body::json_response(
                StatusCode::OK,
                &serde_json::json!({"ok": true, "path": config.source.as_ref().map(|p| p.display().to_string())}),
            )
        }
        Err(e) => {
            tracing::warn!(error = %e, "config reload rejected; the old config stays");
            body::error_response(ErrorCode::ConfigInvalid, &e.to_string())
        }
    }
}

//! The `/status` document: one JSON with both shims, the chain, the admin
//! surface, TLS and the capture listener. Header values never appear, only names; no key ever.

use serde_json::{json, Value};

use crate::app::App;
use crate::clock::Now;
use crate::config::Config;
use crate::host::Shims;
use crate::registry;

/// The whole document.
pub fn document(app: &App, shims: &Shims) -> Value {
    let config = app.config();
    let mut doc = serde_json::Map::new();
    doc.insert("version".into(), json!(env!("CARGO_PKG_VERSION")));
    doc.insert(
        "uptimeMs".into(),
        json!(app.started.elapsed().as_millis() as u64),
    );
    doc.insert("config".into(), app.config_status());
    for facts in registry::facts() {
        doc.insert(facts.status_key(), shim(app, shims, &config, facts.name));
    }
    doc.insert("chain".into(), chain(app, &config));
    doc.insert("savings".into(), app.ledger.status(&config));
    doc.insert("admin".into(), app.admin.status(&config));
    doc.insert("tls".into(), app.tls.status());
    doc.insert("capture".into(), app.capture.status(&config.capture));
    Value::Object(doc)
}

fn shim(app: &App, shims: &Shims, config: &Config, name: &str) -> Value {
    let Some(shim) = config.shim(name) else {
        return Value::Null;
    };
    let mut m = app
        .shim_stats(name)
        .base_json(shim.enabled, &shim.listen.to_string());
    m.insert("compressor".into(), json!(config.compressor_for(name)));
    if let Some(host) = shims.get(name) {
        m.extend(host.status(app, config));
    }
    m.insert(
        "targets".into(),
        json!(shim.routes.iter().map(|r| &r.name).collect::<Vec<_>>()),
    );
    Value::Object(m)
}

fn chain(app: &App, config: &Config) -> Value {
    let r = &config.retry;
    let routes: Vec<(&str, &[_])> = config
        .shims
        .iter()
        .map(|s| (s.name, s.routes.as_slice()))
        .collect();
    let mut v = app.chain.status(&routes, &config.ordering, Now::system());
    if let Some(m) = v.as_object_mut() {
        m.insert(
            "retry".into(),
            json!({
                "maxRetries": r.max_retries,
                "initialDelayMs": r.initial_delay.as_millis() as u64,
                "maxDelayMs": r.max_delay.as_millis() as u64,
                "jitterRatio": r.jitter_ratio,
                "retryableCodes": r.retryable.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                "budgetRatio": r.budget_ratio,
                "budgetMinPerS": r.budget_min_per_s,
            }),
        );
        let b = &config.breaker;
        m.insert(
            "breaker".into(),
            json!({
                "failures": b.failures,
                "openMs": b.open.as_millis() as u64,
                "maxOpenMs": b.max_open.as_millis() as u64,
            }),
        );
        m.insert("stateFile".into(), app.route_file.status());
    }
    v
}

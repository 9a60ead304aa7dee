//! `GET /metrics`: the `/status` counters, the chain's attempts, retries,
//! switches and cooldowns, streams in flight, and latency histograms, in the
//! Prometheus text exposition format.

use std::fmt::Write as _;

use serde_json::Value;

use crate::app::stats::Counter;
use crate::app::App;
use crate::host::Shims;
use crate::registry;

/// Escapes a label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The whole exposition.
pub fn render(app: &App, shims: &Shims) -> String {
    let mut out = String::with_capacity(8192);
    let status = super::status::document(app, shims);
    for counter in Counter::ALL {
        let name = counter.metric_name();
        header(
            &mut out,
            name,
            "counter",
            &format!("`{}` in /status, per shim.", counter.status_key()),
        );
        for shim in registry::names() {
            let _ = writeln!(
                out,
                "{name}{{shim=\"{shim}\"}} {}",
                app.shim_stats(shim).get(counter)
            );
        }
    }
    header(
        &mut out,
        "shimgate_listening",
        "gauge",
        "1 when the shim's listener is up.",
    );
    for shim in registry::names() {
        let up = status[format!("{shim}Shim")]["listening"]
            .as_bool()
            .unwrap_or(false);
        let _ = writeln!(
            out,
            "shimgate_listening{{shim=\"{shim}\"}} {}",
            u8::from(up)
        );
    }
    header(
        &mut out,
        "shimgate_rids_live",
        "gauge",
        "Live rid entries per shim.",
    );
    for shim in registry::names() {
        let _ = writeln!(
            out,
            "shimgate_rids_live{{shim=\"{shim}\"}} {}",
            app.rids.live(shim)
        );
    }
    header(
        &mut out,
        "shimgate_streams_in_flight",
        "gauge",
        "Answers streaming to clients right now.",
    );
    let _ = writeln!(
        out,
        "shimgate_streams_in_flight {}",
        app.chain.streams_in_flight()
    );
    route_metrics(&mut out, &status["chain"]);
    header(
        &mut out,
        "shimgate_upstream_first_byte_seconds",
        "histogram",
        "Time from sending an upstream request to its response head.",
    );
    for shim in registry::names() {
        app.chain.latency.first_byte(shim).write(
            &mut out,
            "shimgate_upstream_first_byte_seconds",
            &format!("shim=\"{shim}\""),
        );
    }
    header(
        &mut out,
        "shimgate_overhead_seconds",
        "histogram",
        "Time shimgate adds to a call that succeeded on its first try.",
    );
    for shim in registry::names() {
        app.chain.latency.overhead(shim).write(
            &mut out,
            "shimgate_overhead_seconds",
            &format!("shim=\"{shim}\""),
        );
    }
    header(
        &mut out,
        "shimgate_uptime_seconds",
        "gauge",
        "Seconds since start.",
    );
    let _ = writeln!(
        out,
        "shimgate_uptime_seconds {}",
        app.started.elapsed().as_secs_f64()
    );
    out
}

fn route_metrics(out: &mut String, chain: &Value) {
    let routes = |shim: &str| {
        chain["routes"][shim]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    header(
        out,
        "shimgate_route_attempts_total",
        "counter",
        "Upstream attempts per route and outcome code (OK for success).",
    );
    for shim in registry::names() {
        for r in routes(shim) {
            let name = label(r["name"].as_str().unwrap_or(""));
            let ok = r["ok"].as_u64().unwrap_or(0);
            let _ = writeln!(out, "shimgate_route_attempts_total{{shim=\"{shim}\",route=\"{name}\",code=\"OK\"}} {ok}");
            if let Some(failures) = r["failures"].as_object() {
                for (code, n) in failures {
                    let _ = writeln!(out, "shimgate_route_attempts_total{{shim=\"{shim}\",route=\"{name}\",code=\"{}\"}} {}", label(code), n.as_u64().unwrap_or(0));
                }
            }
        }
    }
    for (metric, field, help) in [
        (
            "shimgate_route_retries_total",
            "retries",
            "In-place retries per route.",
        ),
        (
            "shimgate_route_switches_total",
            "switches",
            "Switches away from a route.",
        ),
    ] {
        header(out, metric, "counter", help);
        for shim in registry::names() {
            for r in routes(shim) {
                let name = label(r["name"].as_str().unwrap_or(""));
                let _ = writeln!(
                    out,
                    "{metric}{{shim=\"{shim}\",route=\"{name}\"}} {}",
                    r[field].as_u64().unwrap_or(0)
                );
            }
        }
    }
    header(
        out,
        "shimgate_route_in_flight",
        "gauge",
        "Attempts in flight per route.",
    );
    for shim in registry::names() {
        for r in routes(shim) {
            let name = label(r["name"].as_str().unwrap_or(""));
            let _ = writeln!(
                out,
                "shimgate_route_in_flight{{shim=\"{shim}\",route=\"{name}\"}} {}",
                r["inFlight"].as_u64().unwrap_or(0)
            );
        }
    }
    header(
        out,
        "shimgate_route_cooling",
        "gauge",
        "1 while a route rests after a quota failure.",
    );
    for shim in registry::names() {
        for e in chain["ordering"]["effective"][shim]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = label(e["route"].as_str().unwrap_or(""));
            let cooling = e["cooling"].as_bool().unwrap_or(false);
            let _ = writeln!(
                out,
                "shimgate_route_cooling{{shim=\"{shim}\",route=\"{name}\"}} {}",
                u8::from(cooling)
            );
        }
    }
}

//! `GET /metrics`: the `/status` counters, the chain's attempts, retries,
//! switches and cooldowns, streams in flight, and latency histograms, in the
//! Prometheus text exposition format.

use std::fmt::Write as _;

use serde_json::Value;

use crate::app::{App, SHIM_COUNTERS};
use crate::chain::latency::Latency;
use crate::config::SHIM_NAMES;
use crate::host::Shims;

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
    for counter in SHIM_COUNTERS {
        let name = format!("shimgate_{}_total", snake(counter));
        header(
            &mut out,
            &name,
            "counter",
            &format!("`{counter}` in /status, per shim."),
        );
        for shim in SHIM_NAMES {
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
    for shim in SHIM_NAMES {
        let up = status[key(shim)]["listening"].as_bool().unwrap_or(false);
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
    for shim in SHIM_NAMES {
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
    for shim in SHIM_NAMES {
        app.chain.latency.first_byte[Latency::slot(shim)].write(
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
    for shim in SHIM_NAMES {
        app.chain.latency.overhead[Latency::slot(shim)].write(
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

fn key(shim: &str) -> &'static str {
    if shim == "qoder" {
        "qoderShim"
    } else {
        "traeShim"
    }
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
    for shim in SHIM_NAMES {
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
        for shim in SHIM_NAMES {
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
    for shim in SHIM_NAMES {
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
    for shim in SHIM_NAMES {
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

fn snake(camel: &str) -> String {
    let mut s = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            s.push('_');
            s.push(c.to_ascii_lowercase());
        } else {
            s.push(c);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_names_are_snake_case() {
        assert_eq!(snake("sideRequests"), "side_requests");
    }
}

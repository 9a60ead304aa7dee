//! `GET /metrics`: the `/status` counters, the chain's attempts, retries,
//! switches and cooldowns, streams in flight, and latency histograms, in the
//! Prometheus text exposition format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::app::{App, SHIM_COUNTERS};
use crate::config::SHIM_NAMES;

/// Bucket upper bounds in seconds: fine below a millisecond, where the
/// overhead shimgate adds lives, coarse above, where upstreams live.
pub const BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// A fixed-bucket histogram with lock-free observation.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    /// Sum in microseconds (integer, so it can be atomic).
    sum_micros: AtomicU64,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = BUCKETS.iter().position(|b| secs <= *b) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (i, le) in BUCKETS.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// Latency histograms per shim.
#[derive(Debug, Default)]
pub struct Latency {
    /// Time from sending an upstream request to its response head.
    pub first_byte: [Histogram; 2],
    /// Time shimgate adds to a call that succeeded on its first try:
    /// everything but the upstream's own time to first content.
    pub overhead: [Histogram; 2],
}

impl Latency {
    /// The histogram slot of a shim.
    pub fn slot(shim: &str) -> usize {
        SHIM_NAMES.iter().position(|n| *n == shim).unwrap_or(0)
    }
}

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
pub fn render(app: &App) -> String {
    let mut out = String::with_capacity(8192);
    let status = crate::status::document(app);
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
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        let mut out = String::new();
        h.write(&mut out, "x", "shim=\"q\"");
        assert!(out.contains("x_bucket{shim=\"q\",le=\"0.0001\"} 1"));
        assert!(out.contains("x_bucket{shim=\"q\",le=\"0.005\"} 2"));
        assert!(out.contains("x_bucket{shim=\"q\",le=\"+Inf\"} 2"));
        assert!(out.contains("x_count{shim=\"q\"} 2"));
    }

    #[test]
    fn counter_names_are_snake_case() {
        assert_eq!(snake("sideRequests"), "side_requests");
    }
}

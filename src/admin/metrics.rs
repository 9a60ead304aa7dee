//! `GET /metrics`: the `/status` counters, the chain's attempts, retries,
//! switches and cooldowns, streams in flight, and latency histograms,
//! encoded by `prometheus-client` in the Prometheus text format (0.0.4).
//!
//! Each scrape reads the values from where they are kept (the shims'
//! [`ShimStats`](crate::app::ShimStats), the rid registry, the chain's
//! state and histograms) into a [`Snapshot`], never from the `/status`
//! JSON, so renaming a status field cannot silently zero a metric.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::app::ledger::Totals;
use crate::app::stats::Counter;
use crate::app::App;
use crate::chain::latency::Histogram;
use crate::chain::state::RouteMetrics;
use crate::clock::Now;
use crate::host::Shims;
use crate::registry;

/// The whole exposition.
pub fn render(app: &App, _shims: &Shims) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Snapshot::read(app)));
    let mut out = String::with_capacity(8192);
    // Writing into a String cannot fail, and no value here is one the
    // encoder refuses.
    let _ = prometheus_text::encode(&mut out, &registry);
    out
}

/// Every value `/metrics` shows, read at one scrape.
#[derive(Debug)]
struct Snapshot {
    /// Per [`Counter`]: its value per shim.
    counters: Vec<(Counter, Vec<(&'static str, u64)>)>,
    listening: Vec<(&'static str, bool)>,
    rids_live: Vec<(&'static str, u64)>,
    streams_in_flight: i64,
    routes: Vec<RouteMetrics>,
    /// Per shim: retryable failures that switched because the retry
    /// budget was spent.
    budget_exhausted: Vec<(&'static str, u64)>,
    /// Per shim: content characters the proxy took out.
    chars_saved: Vec<(&'static str, u64)>,
    /// The savings ledger's token counters since start, one family each,
    /// per shim.
    tokens: Vec<TokenFamily>,
    /// Admin requests the trust rules refused, per rule.
    refused: [(&'static str, u64); 3],
    /// TLS connections per handshake outcome (`ok` and each refusal).
    tls_handshakes: Vec<(&'static str, u64)>,
    /// The capture listener's counters.
    capture: crate::app::capture::CaptureMetrics,
    /// Per shim: a handle on the live histogram (read as it is encoded).
    first_byte: Vec<(&'static str, Histogram)>,
    overhead: Vec<(&'static str, Histogram)>,
    uptime_seconds: f64,
}

impl Snapshot {
    fn read(app: &App) -> Snapshot {
        let names: Vec<&'static str> = registry::names().collect();
        let per_shim = |value: &dyn Fn(&'static str) -> u64| {
            names.iter().map(|s| (*s, value(s))).collect::<Vec<_>>()
        };
        let config = app.config();
        let routes: Vec<_> = config
            .shims
            .iter()
            .map(|s| (s.name, s.routes.as_slice()))
            .collect();
        let latency = &app.chain.latency;
        Snapshot {
            counters: Counter::ALL
                .iter()
                .map(|c| (*c, per_shim(&|s| app.shim_stats(s).get(*c))))
                .collect(),
            listening: names
                .iter()
                .map(|s| (*s, app.shim_stats(s).is_listening()))
                .collect(),
            rids_live: per_shim(&|s| app.rids.live(s) as u64),
            streams_in_flight: app.chain.streams_in_flight(),
            routes: app
                .chain
                .route_metrics(&routes, &config.ordering, Now::system()),
            budget_exhausted: app.chain.budget_exhausted_counts(registry::names()),
            chars_saved: per_shim(&|s| app.shim_stats(s).chars_saved()),
            tokens: TOKEN_FAMILIES
                .iter()
                .map(|(name, help, value)| {
                    (*name, *help, per_shim(&|s| value(&app.ledger.totals(s))))
                })
                .collect(),
            refused: app.admin.refused_counts(),
            tls_handshakes: crate::tls::Outcome::ALL
                .iter()
                .map(|o| (o.as_str(), app.tls.count(*o)))
                .collect(),
            capture: app.capture.metrics(&config.capture),
            first_byte: names
                .iter()
                .map(|s| (*s, latency.first_byte(s).clone()))
                .collect(),
            overhead: names
                .iter()
                .map(|s| (*s, latency.overhead(s).clone()))
                .collect(),
            uptime_seconds: app.started.elapsed().as_secs_f64(),
        }
    }
}

impl Collector for Snapshot {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), fmt::Error> {
        // Counter families are named without `_total`: the encoder adds it
        // to the HELP, TYPE and sample lines alike.
        for (counter, values) in &self.counters {
            let name = counter.metric_family();
            let help = format!("`{}` in /status, per shim.", counter.status_key());
            let mut m = enc.encode_descriptor(name, &help, None, MetricType::Counter)?;
            for (shim, v) in values {
                m.encode_family(&[("shim", *shim)])?
                    .encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "shimgate_listening",
            "1 when the shim's listener is up.",
            None,
            MetricType::Gauge,
        )?;
        for (shim, up) in &self.listening {
            m.encode_family(&[("shim", *shim)])?
                .encode_gauge(&u32::from(*up))?;
        }
        let mut m = enc.encode_descriptor(
            "shimgate_rids_live",
            "Live rid entries per shim.",
            None,
            MetricType::Gauge,
        )?;
        for (shim, n) in &self.rids_live {
            m.encode_family(&[("shim", *shim)])?.encode_gauge(n)?;
        }
        enc.encode_descriptor(
            "shimgate_streams_in_flight",
            "Answers streaming to clients right now.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&self.streams_in_flight)?;
        self.encode_routes(&mut enc)?;
        self.encode_capture(&mut enc)?;
        let labelled: [LabelledFamily<'_>; 4] = [
            (
                "shimgate_retry_budget_exhausted",
                "Retryable failures that switched route because the retry budget was spent, per shim.",
                "shim",
                &self.budget_exhausted,
            ),
            (
                "shimgate_chars_saved",
                "Content characters the compression proxy took out of folded requests, per shim.",
                "shim",
                &self.chars_saved,
            ),
            (
                "shimgate_admin_refused",
                "Admin requests refused by the loopback trust rules, per code.",
                "code",
                &self.refused,
            ),
            (
                "shimgate_tls_handshakes",
                "TLS connections per handshake outcome: ok, or why it was refused or failed.",
                "outcome",
                &self.tls_handshakes,
            ),
        ];
        let tokens = self
            .tokens
            .iter()
            .map(|(name, help, values)| (*name, *help, "shim", values.as_slice()));
        for (name, help, label, values) in labelled.into_iter().chain(tokens) {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (value, n) in values {
                m.encode_family(&[(label, *value)])?
                    .encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
        for (name, help, slots) in [
            (
                "shimgate_upstream_first_byte_seconds",
                "Time from sending an upstream request to its response head.",
                &self.first_byte,
            ),
            (
                "shimgate_overhead_seconds",
                "Time shimgate adds to a call that succeeded on its first try.",
                &self.overhead,
            ),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for (shim, h) in slots {
                h.encode(m.encode_family(&[("shim", *shim)])?)?;
            }
        }
        enc.encode_descriptor(
            "shimgate_uptime_seconds",
            "Seconds since start.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&self.uptime_seconds)?;
        Ok(())
    }
}

/// A counter family with one label: name, help, label name, values.
type LabelledFamily<'a> = (
    &'static str,
    &'static str,
    &'static str,
    &'a [(&'static str, u64)],
);

/// A token family of the savings ledger: name, help, values per shim.
type TokenFamily = (&'static str, &'static str, Vec<(&'static str, u64)>);

/// A token counter of the savings ledger: name, help, and how to read it.
type TokenCounter = (&'static str, &'static str, fn(&Totals) -> u64);

/// The savings ledger's counters (since start; `/status` `savings` keeps
/// the days and conversations across restarts). Counters only rise, so
/// a call whose compressed request cost more than the agent's adds to
/// `added`, not to `saved`: `saved - added = agent - sent`.
const TOKEN_FAMILIES: [TokenCounter; 7] = [
    (
        "shimgate_tokens_agent",
        "Prompt tokens the agents' own requests would have cost (estimated: the provider's tokens per character sent, times the characters the agent sent), per shim.",
        |t| t.agent,
    ),
    (
        "shimgate_tokens_sent",
        "Prompt tokens the provider reported for the requests that answered the agents, per shim.",
        |t| t.sent,
    ),
    (
        "shimgate_tokens_saved",
        "Tokens compression took off the calls it shortened (agent minus sent), per shim.",
        |t| t.saved,
    ),
    (
        "shimgate_tokens_added",
        "Tokens compression added to the calls it made longer (sent minus agent), per shim.",
        |t| t.added,
    ),
    (
        "shimgate_tokens_cached",
        "Of the sent prompt tokens, those the provider read from its cache (where its wire reports them), per shim.",
        |t| t.cached,
    ),
    (
        "shimgate_compressor_side_tokens",
        "Prompt and completion tokens of the compressor's own calls (summaries, its tool-loop rounds), per shim.",
        |t| t.side_tokens,
    ),
    (
        "shimgate_compressor_side_calls",
        "The compressor's own calls through the return leg, per shim.",
        |t| t.side_calls,
    ),
];

/// A per-route family: name, help, and how to read its value.
type RouteFamily = (&'static str, &'static str, fn(&RouteMetrics) -> u64);

impl Snapshot {
    /// The capture listener's families (all present, zeros when it is off).
    fn encode_capture(&self, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        let c = &self.capture;
        enc.encode_descriptor(
            "shimgate_capture_listening",
            "1 when the capture listener is up.",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&u32::from(c.listening))?;
        let families: [LabelledFamily<'_>; 3] = [
            (
                "shimgate_capture_connections",
                "CONNECTs to the capture listener, by how they were taken: intercepted (decrypted), tunnelled, loopback.",
                "mode",
                &c.connections,
            ),
            (
                "shimgate_capture_requests",
                "Requests through the capture listener, by kind: handed to a shim, forwarded unchanged, absolute-form, refused as not a proxy request.",
                "kind",
                &c.requests,
            ),
            (
                "shimgate_capture_handed",
                "Inference calls the capture listener handed to each shim.",
                "shim",
                &c.handed,
            ),
        ];
        for (name, help, label, values) in families {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (value, n) in values {
                m.encode_family(&[(label, *value)])?
                    .encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
        let mut m = enc.encode_descriptor(
            "shimgate_capture_client_refusals",
            "Handshakes a client refused on a host of the intercept list (it does not trust the local CA).",
            None,
            MetricType::Counter,
        )?;
        for (host, n) in &c.refusals {
            m.encode_family(&[("host", host.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
        enc.encode_descriptor(
            "shimgate_capture_tunnelled_hosts",
            "Listed hosts tunnelled instead of decrypted after their client's refusals (until a reload).",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&c.tunnelling)?;
        Ok(())
    }

    fn encode_routes(&self, enc: &mut DescriptorEncoder) -> Result<(), fmt::Error> {
        let mut m = enc.encode_descriptor(
            "shimgate_route_attempts",
            "Upstream attempts per route and outcome code (OK for success).",
            None,
            MetricType::Counter,
        )?;
        for r in &self.routes {
            let route = r.route.as_str();
            m.encode_family(&[("shim", r.shim), ("route", route), ("code", "OK")])?
                .encode_counter::<NoLabelSet, _, u64>(&r.ok, None)?;
            for (code, n) in &r.failures {
                m.encode_family(&[("shim", r.shim), ("route", route), ("code", code.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(n, None)?;
            }
        }
        let counters: [RouteFamily; 3] = [
            (
                "shimgate_route_retries",
                "In-place retries per route.",
                |r| r.retries,
            ),
            (
                "shimgate_route_switches",
                "Switches away from a route.",
                |r| r.switches,
            ),
            (
                "shimgate_route_breaker_opens",
                "Times a route's circuit breaker opened (or re-opened after a failed probe).",
                |r| r.breaker_opens,
            ),
        ];
        for (name, help, value) in counters {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for r in &self.routes {
                m.encode_family(&[("shim", r.shim), ("route", r.route.as_str())])?
                    .encode_counter::<NoLabelSet, _, u64>(&value(r), None)?;
            }
        }
        let gauges: [RouteFamily; 3] = [
            (
                "shimgate_route_in_flight",
                "Attempts in flight per route.",
                |r| r.in_flight as u64,
            ),
            (
                "shimgate_route_cooling",
                "1 while a route rests after a quota failure.",
                |r| u64::from(r.cooling),
            ),
            (
                "shimgate_route_breaker_state",
                "A route's circuit breaker: 0 closed, 1 half-open, 2 open.",
                |r| u64::from(r.breaker),
            ),
        ];
        for (name, help, value) in gauges {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for r in &self.routes {
                m.encode_family(&[("shim", r.shim), ("route", r.route.as_str())])?
                    .encode_gauge(&value(r))?;
            }
        }
        let mut m = enc.encode_descriptor(
            "shimgate_route_cooldown_seconds",
            "Seconds left of a route's quota cooldown (0 when none).",
            None,
            MetricType::Gauge,
        )?;
        for r in &self.routes {
            m.encode_family(&[("shim", r.shim), ("route", r.route.as_str())])?
                .encode_gauge(&r.cooldown_seconds)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn text(snapshot: Snapshot) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(snapshot));
        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).unwrap();
        out
    }

    #[test]
    fn families_keep_their_names_labels_and_help() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        let out = text(Snapshot {
            counters: vec![(Counter::SideRequests, vec![("qoder", 2), ("trae", 0)])],
            listening: vec![("qoder", true)],
            rids_live: vec![("qoder", 1)],
            streams_in_flight: 0,
            routes: vec![RouteMetrics {
                shim: "trae",
                route: "a \"b\"".into(),
                ok: 3,
                failures: vec![(shimgate_shim_api::FailureCode::Quota, 1)],
                retries: 1,
                switches: 0,
                in_flight: 0,
                cooling: true,
                cooldown_seconds: 12.5,
                breaker: 2,
                breaker_opens: 3,
            }],
            budget_exhausted: vec![("trae", 4)],
            chars_saved: vec![("qoder", 120)],
            tokens: vec![(
                "shimgate_tokens_saved",
                "Tokens saved.",
                vec![("qoder", 700), ("trae", 0)],
            )],
            refused: [
                ("FORBIDDEN_HOST", 2),
                ("FORBIDDEN_ORIGIN", 0),
                ("UNAUTHORIZED", 0),
            ],
            tls_handshakes: vec![("ok", 7), ("client_refused", 1)],
            capture: crate::app::capture::CaptureMetrics {
                listening: true,
                connections: [("intercepted", 2), ("tunnelled", 5), ("loopback", 0)],
                requests: [
                    ("handed", 2),
                    ("forwarded", 3),
                    ("absolute", 1),
                    ("not_proxy_request", 0),
                ],
                handed: vec![("qoder", 1), ("trae", 1)],
                refusals: vec![("api2.qoder.sh".into(), 3)],
                tunnelling: 1,
            },
            first_byte: vec![("qoder", h)],
            overhead: vec![],
            uptime_seconds: 1.5,
        });
        for line in [
            "# HELP shimgate_side_requests_total `sideRequests` in /status, per shim.",
            "# TYPE shimgate_side_requests_total counter",
            "shimgate_side_requests_total{shim=\"qoder\"} 2",
            "shimgate_listening{shim=\"qoder\"} 1",
            "shimgate_streams_in_flight 0",
            "shimgate_route_attempts_total{shim=\"trae\",route=\"a \\\"b\\\"\",code=\"OK\"} 3",
            "shimgate_route_attempts_total{shim=\"trae\",route=\"a \\\"b\\\"\",code=\"QUOTA\"} 1",
            "shimgate_route_cooling{shim=\"trae\",route=\"a \\\"b\\\"\"} 1",
            "shimgate_route_breaker_state{shim=\"trae\",route=\"a \\\"b\\\"\"} 2",
            "shimgate_route_cooldown_seconds{shim=\"trae\",route=\"a \\\"b\\\"\"} 12.5",
            "shimgate_route_breaker_opens_total{shim=\"trae\",route=\"a \\\"b\\\"\"} 3",
            "shimgate_tls_handshakes_total{outcome=\"ok\"} 7",
            "shimgate_tls_handshakes_total{outcome=\"client_refused\"} 1",
            "# TYPE shimgate_retry_budget_exhausted_total counter",
            "shimgate_retry_budget_exhausted_total{shim=\"trae\"} 4",
            "# TYPE shimgate_upstream_first_byte_seconds histogram",
            "shimgate_upstream_first_byte_seconds_bucket{shim=\"qoder\",le=\"0.0001\"} 1",
            "shimgate_upstream_first_byte_seconds_bucket{shim=\"qoder\",le=\"0.005\"} 2",
            "shimgate_upstream_first_byte_seconds_bucket{shim=\"qoder\",le=\"+Inf\"} 2",
            "shimgate_upstream_first_byte_seconds_count{shim=\"qoder\"} 2",
            "shimgate_uptime_seconds 1.5",
            "shimgate_capture_listening 1",
            "shimgate_capture_connections_total{mode=\"tunnelled\"} 5",
            "shimgate_capture_requests_total{kind=\"forwarded\"} 3",
            "shimgate_capture_handed_total{shim=\"trae\"} 1",
            "shimgate_capture_client_refusals_total{host=\"api2.qoder.sh\"} 3",
            "shimgate_capture_tunnelled_hosts 1",
            "# TYPE shimgate_tokens_saved_total counter",
            "shimgate_tokens_saved_total{shim=\"qoder\"} 700",
        ] {
            assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        }
    }
}

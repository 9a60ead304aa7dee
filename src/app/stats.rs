//! What each shim counts and reports in `/status`: the counters
//! as one enum, so `/status`, `/metrics` and the code that bumps them cannot
//! disagree on a name.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::clock::{epoch_ms, iso8601};

/// The counters every shim keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// Inference calls taken over by the ingress.
    Intercepted,
    /// Return-leg requests restored and sent upstream.
    Forwarded,
    /// Return-leg bodies whose messages differ from what the proxy got.
    Compacted,
    /// Of those, bodies whose message content really got shorter.
    Folded,
    /// Requests sent directly because the proxy path failed or is off.
    Fallback,
    /// The proxy's own calls through the return leg.
    SideRequests,
}

impl Counter {
    /// Every counter, in `/status` order.
    pub const ALL: [Counter; 6] = [
        Counter::Intercepted,
        Counter::Forwarded,
        Counter::Compacted,
        Counter::Folded,
        Counter::Fallback,
        Counter::SideRequests,
    ];

    /// Its `/status` field.
    pub fn status_key(self) -> &'static str {
        match self {
            Counter::Intercepted => "intercepted",
            Counter::Forwarded => "forwarded",
            Counter::Compacted => "compacted",
            Counter::Folded => "folded",
            Counter::Fallback => "fallback",
            Counter::SideRequests => "sideRequests",
        }
    }

    /// Its metric family; the Prometheus encoder adds `_total`
    /// (`shimgate_side_requests_total`).
    pub fn metric_family(self) -> &'static str {
        match self {
            Counter::Intercepted => "shimgate_intercepted",
            Counter::Forwarded => "shimgate_forwarded",
            Counter::Compacted => "shimgate_compacted",
            Counter::Folded => "shimgate_folded",
            Counter::Fallback => "shimgate_fallback",
            Counter::SideRequests => "shimgate_side_requests",
        }
    }
}

/// How often the counters are sampled for the panel's chart.
pub const HISTORY_EVERY: std::time::Duration = std::time::Duration::from_secs(15);
/// Samples kept (10 minutes at [`HISTORY_EVERY`]).
pub const HISTORY_SAMPLES: usize = 40;

/// Status a listener and its shim keep for `/status`.
#[derive(Debug, Default)]
pub struct ShimStats {
    inner: Mutex<ShimText>,
    counters: [AtomicU64; Counter::ALL.len()],
    /// Content characters the proxy took out of the requests it folded.
    saved: AtomicU64,
    /// The counters every [`HISTORY_EVERY`], oldest first.
    history: Mutex<std::collections::VecDeque<Sample>>,
}

/// The counters at one moment.
#[derive(Debug, Clone)]
struct Sample {
    at: SystemTime,
    counters: [u64; Counter::ALL.len()],
    saved: u64,
}

#[derive(Debug, Default, Clone)]
struct ShimText {
    listening: Option<String>,
    start_error: Option<String>,
    last_error: Option<String>,
    last_error_at: Option<SystemTime>,
    last_at: Option<SystemTime>,
}

impl ShimStats {
    fn text(&self) -> std::sync::MutexGuard<'_, ShimText> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds one to a counter.
    pub fn bump(&self, counter: Counter) {
        self.counters[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(&self, counter: Counter) -> u64 {
        self.counters[counter as usize].load(Ordering::Relaxed)
    }

    /// The proxy took `chars` content characters out of a request.
    pub fn saved(&self, chars: u64) {
        self.saved.fetch_add(chars, Ordering::Relaxed);
    }

    /// Content characters saved so far.
    pub fn chars_saved(&self) -> u64 {
        self.saved.load(Ordering::Relaxed)
    }

    /// Takes one sample of the counters for the chart.
    pub fn sample(&self, at: SystemTime) {
        let sample = Sample {
            at,
            counters: Counter::ALL.map(|c| self.get(c)),
            saved: self.chars_saved(),
        };
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() == HISTORY_SAMPLES {
            h.pop_front();
        }
        h.push_back(sample);
    }

    /// The samples, oldest first, with the counters now as the last one.
    fn history_json(&self) -> Value {
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let now = Sample {
            at: SystemTime::now(),
            counters: Counter::ALL.map(|c| self.get(c)),
            saved: self.chars_saved(),
        };
        let samples: Vec<Value> = h
            .iter()
            .chain(std::iter::once(&now))
            .map(|s| {
                let mut m = serde_json::Map::new();
                m.insert("at".into(), json!(iso8601(s.at)));
                for (c, v) in Counter::ALL.iter().zip(s.counters) {
                    m.insert(c.status_key().into(), json!(v));
                }
                m.insert("charsSaved".into(), json!(s.saved));
                Value::Object(m)
            })
            .collect();
        json!({"everyMs": HISTORY_EVERY.as_millis() as u64, "samples": samples})
    }

    /// Whether the listener is up (`/status` `listening`).
    pub fn is_listening(&self) -> bool {
        self.text().listening.is_some()
    }

    /// Notes that the shim handled something just now.
    pub fn touch(&self) {
        self.text().last_at = Some(SystemTime::now());
    }

    /// Records the latest error (a reason, never a credential).
    pub fn error(&self, message: impl Into<String>) {
        let mut t = self.text();
        t.last_error = Some(message.into());
        t.last_error_at = Some(SystemTime::now());
    }

    /// The listener is up on `addr`.
    pub fn listening(&self, addr: std::net::SocketAddr) {
        let mut t = self.text();
        t.listening = Some(addr.to_string());
        t.start_error = None;
    }

    /// The listener could not start.
    pub fn start_failed(&self, message: impl Into<String>) {
        let mut t = self.text();
        t.listening = None;
        t.start_error = Some(message.into());
    }

    /// The common `/status` fields of a shim.
    pub fn base_json(&self, enabled: bool, listen: &str) -> serde_json::Map<String, Value> {
        let t = self.text().clone();
        let mut m = serde_json::Map::new();
        m.insert("enabled".into(), json!(enabled));
        m.insert("listen".into(), json!(listen));
        m.insert("listening".into(), json!(t.listening.is_some()));
        m.insert("boundAddress".into(), json!(t.listening));
        m.insert("startError".into(), json!(t.start_error));
        for c in Counter::ALL {
            m.insert(c.status_key().into(), json!(self.get(c)));
        }
        m.insert("charsSaved".into(), json!(self.chars_saved()));
        m.insert("history".into(), self.history_json());
        m.insert("lastError".into(), json!(t.last_error));
        m.insert("lastErrorAt".into(), json!(t.last_error_at.map(iso8601)));
        m.insert("lastAt".into(), json!(t.last_at.map(epoch_ms)));
        m
    }
}

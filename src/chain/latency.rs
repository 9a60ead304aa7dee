//! Latency histograms the chain fills (time to the upstream's response
//! head, the time shimgate adds to a call) and `/metrics` writes out.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::registry;

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

    /// Writes the histogram in the Prometheus text format.
    pub fn write(&self, out: &mut String, name: &str, labels: &str) {
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

/// Latency histograms per shim, one slot per shim of the registry.
#[derive(Debug)]
pub struct Latency {
    first_byte: Vec<Histogram>,
    overhead: Vec<Histogram>,
    /// Where a name the registry does not know lands (never another
    /// shim's slot).
    unknown: Histogram,
}

impl Default for Latency {
    fn default() -> Self {
        let n = registry::facts().len();
        Latency {
            first_byte: (0..n).map(|_| Histogram::default()).collect(),
            overhead: (0..n).map(|_| Histogram::default()).collect(),
            unknown: Histogram::default(),
        }
    }
}

impl Latency {
    /// Time from sending an upstream request to its response head.
    pub fn first_byte(&self, shim: &str) -> &Histogram {
        registry::index(shim)
            .and_then(|i| self.first_byte.get(i))
            .unwrap_or(&self.unknown)
    }

    /// Time shimgate adds to a call that succeeded on its first try:
    /// everything but the upstream's own time to first content.
    pub fn overhead(&self, shim: &str) -> &Histogram {
        registry::index(shim)
            .and_then(|i| self.overhead.get(i))
            .unwrap_or(&self.unknown)
    }
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
}

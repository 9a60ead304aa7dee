//! Percentiles over collected samples (nearest rank on a sorted copy: with
//! thousands of samples the choice of interpolation does not matter).

/// p50, p99 and the sample count of a set of nanosecond samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub n: usize,
    pub p50: u64,
    pub p99: u64,
}

impl Summary {
    /// Summarises `samples` (nanoseconds).
    pub fn of(samples: &[u64]) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        let mut s = samples.to_vec();
        s.sort_unstable();
        Summary {
            n: s.len(),
            p50: rank(&s, 0.50),
            p99: rank(&s, 0.99),
        }
    }
}

fn rank(sorted: &[u64], q: f64) -> u64 {
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Microseconds with one decimal, from nanoseconds.
pub fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

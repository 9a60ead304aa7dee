//! What the demo prints: the `/status` counters of each shim one line per
//! turn, then a summary that ends in one machine-readable `summary:` line.
//! Everything fits an 80-column terminal.

use std::time::Duration;

use serde_json::Value;

/// The `/status` figures of one shim the demo shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShimView {
    pub intercepted: u64,
    pub forwarded: u64,
    pub compacted: u64,
    pub folded: u64,
    pub fallback: u64,
    /// Message content characters of the last exchange, sent to the
    /// compressor and come back from it.
    pub last: Option<(u64, u64)>,
}

impl ShimView {
    /// Reads section `key` (`qoderShim`, `traeShim`) of a `/status` document.
    pub fn read(doc: &Value, key: &str) -> ShimView {
        let s = &doc[key];
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        let ex = &s["lastExchange"];
        ShimView {
            intercepted: n("intercepted"),
            forwarded: n("forwarded"),
            compacted: n("compacted"),
            folded: n("folded"),
            fallback: n("fallback"),
            last: ex["beforeContent"]
                .as_u64()
                .zip(ex["afterContent"].as_u64()),
        }
    }

    fn counters(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            self.intercepted, self.forwarded, self.compacted, self.folded, self.fallback
        )
    }

    fn content(&self) -> (String, String) {
        self.last
            .map_or(("-".into(), "-".into()), |(b, a)| (chars(b), chars(a)))
    }
}

/// `(before, after)` content of the newest `n` exchanges of a shim.
pub fn recent(doc: &Value, key: &str, n: usize) -> Vec<(u64, u64)> {
    doc[key]["recentExchanges"]
        .as_array()
        .map(|list| {
            list.iter()
                .take(n)
                .filter_map(|e| e["beforeContent"].as_u64().zip(e["afterContent"].as_u64()))
                .collect()
        })
        .unwrap_or_default()
}

/// A character count, short: `812`, `4.3k`.
pub fn chars(n: u64) -> String {
    if n < 1000 {
        n.to_string()
    } else {
        format!("{:.1}k", n as f64 / 1000.0)
    }
}

fn row(turn: &str, q: (&str, &str, &str), t: (&str, &str, &str), ms: &str) -> String {
    format!(
        // Exactly 80 columns with three-digit counters and six-character sizes.
        "{turn:>4} {:<17} {:>6} {} {:<6} | {:<17} {:>6} {} {:<6} {ms:>5}",
        q.0,
        q.1,
        if q.1.is_empty() { " " } else { "→" },
        q.2,
        t.0,
        t.1,
        if t.1.is_empty() { " " } else { "→" },
        t.2,
    )
    .trim_end()
    .to_string()
}

/// The two header lines of the per-turn table.
pub fn table_header() -> [String; 2] {
    [
        row("", ("qoder", "", ""), ("trae", "", ""), ""),
        row(
            "turn",
            ("i/f/c/F/x", "sent", "back"),
            ("i/f/c/F/x", "sent", "back"),
            "ms",
        ),
    ]
}

/// One turn: each shim's counters and last exchange, the slowest request.
pub fn turn_line(turn: u32, q: &ShimView, t: &ShimView, slowest: Duration) -> String {
    let (qb, qa) = q.content();
    let (tb, ta) = t.content();
    row(
        &turn.to_string(),
        (&q.counters(), &qb, &qa),
        (&t.counters(), &tb, &ta),
        &format!("{:.0}", ms(slowest)),
    )
}

/// Milliseconds, fractional.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `p`-th percentile (nearest rank) of some latencies; zero when empty.
pub fn percentile(latencies: &[Duration], p: f64) -> Duration {
    let mut sorted = latencies.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
}

/// The counters table of the summary.
pub fn counters_table(q: &ShimView, t: &ShimView) -> Vec<String> {
    let line = |name: &str, v: &ShimView| {
        format!(
            "  {name:<6} {:>11} {:>9} {:>9} {:>6} {:>8}",
            v.intercepted, v.forwarded, v.compacted, v.folded, v.fallback
        )
    };
    vec![
        format!(
            "  {:<6} {:>11} {:>9} {:>9} {:>6} {:>8}",
            "", "intercepted", "forwarded", "compacted", "folded", "fallback"
        ),
        line("qoder", q),
        line("trae", t),
    ]
}

/// The savings ledger's figures since the demo started (`/status`
/// `savings.totals`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub agent: u64,
    pub sent: u64,
    pub side_calls: u64,
    pub side_tokens: u64,
    pub net: i64,
    pub estimated: u64,
}

impl Tokens {
    /// Reads `savings.totals` of a `/status` document.
    pub fn read(doc: &Value) -> Tokens {
        let t = &doc["savings"]["totals"];
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        Tokens {
            agent: n("agentTokens"),
            sent: n("sentTokens"),
            side_calls: n("sideCalls"),
            side_tokens: n("sideTokens"),
            net: t["netTokens"].as_i64().unwrap_or(0),
            estimated: n("estimatedCalls"),
        }
    }

    /// What the demo prints of them (within 80 columns).
    pub fn lines(&self) -> [String; 3] {
        let saved = self.agent as i64 - self.sent as i64;
        let pct = if self.agent == 0 {
            0.0
        } else {
            saved as f64 * 100.0 / self.agent as f64
        };
        [
            "tokens (the providers' own counts; the agents' estimated from them):".to_owned(),
            format!(
                "  agent {} → sent {}, saved {} ({pct:.0}%)",
                chars(self.agent),
                chars(self.sent),
                signed(saved)
            ),
            format!(
                "  compressor's own calls {} ({} tokens), {} estimated; net {}",
                self.side_calls,
                chars(self.side_tokens),
                self.estimated,
                signed(self.net)
            ),
        ]
    }
}

/// A signed count, short: `+812`, `-4.3k`.
fn signed(n: i64) -> String {
    let sign = if n < 0 { "-" } else { "+" };
    format!("{sign}{}", chars(n.unsigned_abs()))
}

/// `qoder  61.2k → 17.3k chars (saved 43.9k, 72%)`.
pub fn content_line(name: &str, before: u64, after: u64) -> String {
    let saved = before as i64 - after as i64;
    let pct = if before == 0 {
        0.0
    } else {
        saved as f64 * 100.0 / before as f64
    };
    let sign = if saved < 0 { "-" } else { "" };
    format!(
        "  {name:<6} {:>6} → {:>6} chars (saved {sign}{}, {pct:.0}%)",
        chars(before),
        chars(after),
        chars(saved.unsigned_abs()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let l: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&l, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&l, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&l[..1], 99.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }

    #[test]
    fn lines_fit_eighty_columns() {
        let v = ShimView {
            intercepted: 999,
            forwarded: 999,
            compacted: 999,
            folded: 999,
            fallback: 0,
            last: Some((999_000, 9_999)),
        };
        let line = turn_line(999, &v, &v, Duration::from_millis(12_345));
        assert!(
            line.chars().count() <= 80,
            "{} {line}",
            line.chars().count()
        );
        for h in table_header() {
            assert!(h.chars().count() <= 80, "{h}");
        }
        for l in counters_table(&v, &v) {
            assert!(l.chars().count() <= 80, "{l}");
        }
    }

    #[test]
    fn a_status_section_is_read() {
        let doc = json!({"qoderShim": {"intercepted": 3, "forwarded": 3, "compacted": 3, "folded": 1, "fallback": 0,
            "lastExchange": {"beforeContent": 5000, "afterContent": 1200},
            "recentExchanges": [{"beforeContent": 5000, "afterContent": 1200}, {"beforeContent": 4000, "afterContent": 4100}]}});
        let v = ShimView::read(&doc, "qoderShim");
        assert_eq!(v.folded, 1);
        assert_eq!(v.last, Some((5000, 1200)));
        assert_eq!(recent(&doc, "qoderShim", 1), vec![(5000, 1200)]);
        assert_eq!(ShimView::read(&doc, "traeShim"), ShimView::default());
    }
}

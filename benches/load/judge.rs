//! The soak's checks: every call against its ledger entry and the chain
//! rules, and `/status` against the totals.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::Value;

use super::check::{self, Seen};
use super::faults::{self, Fault};
use super::findings::Findings;
use super::soak::{lock, CallResult, Hit, Ledger, LegReport, Path, Settings, RULES};
use super::wire::{self, Wire};

/// Checks every call against its ledger entry and the chain rules, and
/// `/status` against the totals.
pub fn judge(
    settings: &Settings,
    ledger: &Ledger,
    results: &[CallResult],
    status: Value,
    elapsed: Duration,
    peak: u64,
) -> LegReport {
    let mut f = Findings::default();
    let hits = lock(&ledger.hits).clone();
    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    let mut request_ids: HashMap<String, u64> = HashMap::new();
    let (mut succeeded, mut failed) = (0, 0);
    for r in results {
        let tries = hits.get(&r.call).cloned().unwrap_or_default();
        for h in &tries {
            if h.fault != Fault::Ok {
                *faults.entry(format!("{:?}", h.fault)).or_default() += 1;
            }
        }
        judge_tries(&mut f, r, &tries);
        if r.plan.wire == Wire::Qoder && !r.plan.passthrough {
            judge_request_ids(&mut f, r.call, &tries, &mut request_ids);
        }
        let ok = if r.plan.passthrough {
            judge_passthrough(&mut f, r, &tries)
        } else {
            judge_answer(&mut f, r, &tries)
        };
        if ok {
            succeeded += 1;
        } else {
            failed += 1;
        }
    }
    for s in lock(&ledger.strays).iter() {
        f.add(
            "double-send",
            format!("upstream request for no known call: {s}"),
        );
    }
    for b in lock(&ledger.bad_bodies).iter() {
        f.add("malformed", format!("SOLO body refused: {b}"));
    }
    judge_counters(&mut f, settings, results, &status);
    judge_routes(&mut f, &hits, &status);
    let inference = results.iter().filter(|r| !r.plan.passthrough).count();
    LegReport {
        settings: settings.clone(),
        calls: results.len(),
        inference,
        passthrough: results.len() - inference,
        succeeded,
        failed,
        upstream_tries: hits.values().map(Vec::len).sum(),
        faults,
        findings: f,
        status,
        elapsed,
        peak_rss_kib: peak,
    }
}

/// The tries of one call obey the chain rules: nothing after a commit or a
/// never-switch code, retries only for transient codes within the retry
/// budget, a switch to a new route otherwise.
fn judge_tries(f: &mut Findings, r: &CallResult, tries: &[Hit]) {
    let call = r.call;
    if tries.is_empty() && r.broken.is_none() {
        if !(r.seen.errors == 1 && r.seen.status >= 500) {
            f.add(
                "rules",
                format!("call {call}: nothing reached the upstream and the agent got no error"),
            );
        }
        return;
    }
    let mut on_route = 0u32;
    let mut used: Vec<&str> = Vec::new();
    for (i, h) in tries.iter().enumerate() {
        on_route = match used.last() {
            Some(last) if *last == h.route => on_route + 1,
            _ => 1,
        };
        if used.last() != Some(&h.route.as_str()) {
            if used.contains(&h.route.as_str()) {
                f.add(
                    "double-send",
                    format!(
                        "call {call}: route {} tried again after switching away",
                        h.route
                    ),
                );
            }
            used.push(&h.route);
        }
        let next = tries.get(i + 1);
        match (RULES.next(h.fault, on_route), next) {
            (faults::Next::Stop, Some(n)) => f.add(
                "double-send",
                format!(
                    "call {call}: try {} ({:?}) was final, yet try {} went to {}",
                    i + 1,
                    h.fault,
                    i + 2,
                    n.route
                ),
            ),
            (faults::Next::Retry, Some(n)) if n.route != h.route => f.add(
                "rules",
                format!(
                    "call {call}: {:?} on {} should be retried in place, went to {}",
                    h.fault, h.route, n.route
                ),
            ),
            (faults::Next::Retry, None) => f.add(
                "rules",
                format!(
                    "call {call}: {:?} on {} (try {on_route}) should have been retried; the agent got {}",
                    h.fault,
                    h.route,
                    describe(&r.seen, r.broken.as_deref())
                ),
            ),
            (faults::Next::Switch, Some(n)) if n.route == h.route => f.add(
                "double-send",
                format!(
                    "call {call}: {:?} must not be retried on {}, yet it was",
                    h.fault, h.route
                ),
            ),
            _ => {}
        }
    }
}

fn describe(seen: &Seen, broken: Option<&str>) -> String {
    let mut s = format!("status {}", seen.status);
    if !seen.error_codes.is_empty() {
        s.push_str(&format!(" error {}", seen.error_codes.join(",")));
    }
    if let Some(b) = broken {
        s.push_str(&format!(" ({b})"));
    }
    s
}

/// qoder: no `request_id` reaches the upstream twice, whether on two tries
/// of one call or in two calls: every try after a call's first carries a
/// fresh one (qoder refuses a reused id with 103, README "The qoder
/// codec"), so a repeated id is a request sent again as it was.
fn judge_request_ids(f: &mut Findings, call: u64, tries: &[Hit], seen: &mut HashMap<String, u64>) {
    for id in tries.iter().filter_map(|h| h.request_id.as_deref()) {
        if let Some(other) = seen.insert(id.to_string(), call) {
            let what = if other == call {
                format!("call {call}: two tries reached the upstream with one request_id")
            } else {
                format!("calls {other} and {call} reached the upstream with the same request_id")
            };
            f.add("double-send", what);
        }
    }
}

/// A pass-through answer is the upstream's, byte for byte.
fn judge_passthrough(f: &mut Findings, r: &CallResult, tries: &[Hit]) -> bool {
    let last = tries.last().map(|h| h.fault);
    match last {
        Some(Fault::Ok) => {
            let want = faults::passthrough_body(r.call);
            if r.seen.status != 200 || r.body.as_ref() != want.as_bytes() {
                f.add(
                    "lost-or-duplicated",
                    format!(
                        "call {}: pass-through answer changed: status {} body {:?}",
                        r.call,
                        r.seen.status,
                        String::from_utf8_lossy(&r.body)
                    ),
                );
            }
            true
        }
        _ => {
            if r.seen.errors != 1 {
                f.add(
                    "final-error",
                    format!(
                        "call {}: failed pass-through without one error body ({})",
                        r.call,
                        describe(&r.seen, r.broken.as_deref())
                    ),
                );
            }
            false
        }
    }
}

/// The agent's answer matches the last try: complete after success, a
/// prefix and one final error after a cut, one error otherwise.
fn judge_answer(f: &mut Findings, r: &CallResult, tries: &[Hit]) -> bool {
    let call = r.call;
    let s = &r.seen;
    let a = &r.plan.answer;
    for p in &s.problems {
        f.add("malformed", format!("call {call}: {p}"));
    }
    if let Some(b) = &r.broken {
        f.add(
            "final-error",
            format!("call {call}: the agent's stream broke without a final frame: {b}"),
        );
        return false;
    }
    let pieces = check::prefix_len(&s.text, call, a.pieces);
    if pieces.is_none() {
        f.add(
            "lost-or-duplicated",
            format!(
                "call {call}: text is not pieces 0..n in order: {:?}",
                s.text
            ),
        );
    }
    if s.after_end > 0 {
        f.add(
            "final-error",
            format!(
                "call {call}: {} frames after the end or error frame",
                s.after_end
            ),
        );
    }
    let last = tries.last().map(|h| h.fault);
    match last {
        Some(Fault::Ok) => {
            if !s.complete() || pieces != Some(a.pieces) {
                f.add(
                    "lost-or-duplicated",
                    format!(
                        "call {call}: complete answer expected ({} pieces), got {:?} pieces, {}, {} ends",
                        a.pieces,
                        pieces,
                        describe(s, None),
                        s.ends
                    ),
                );
            }
            if a.tool_frags > 0
                && (s.args != wire::args_of(call, a.tool_frags) || s.tool_names.len() != 1)
            {
                f.add(
                    "lost-or-duplicated",
                    format!(
                        "call {call}: tool call arguments {:?} names {:?}",
                        s.args, s.tool_names
                    ),
                );
            }
            if r.plan.wire == Wire::Trae && s.reasoning != wire::REASONING {
                f.add(
                    "lost-or-duplicated",
                    format!("call {call}: reasoning {:?}", s.reasoning),
                );
            }
            s.complete()
        }
        Some(fault @ (Fault::ResetAfterContent | Fault::CloseAfterContent)) => {
            let cut = Fault::cut_at(a.pieces);
            let got = pieces.unwrap_or(0);
            // A reset may discard bytes still in the kernel; a clean close may not.
            let whole = if fault == Fault::CloseAfterContent {
                got == cut
            } else {
                (1..=cut).contains(&got)
            };
            if !whole {
                f.add(
                    "lost-or-duplicated",
                    format!("call {call}: {fault:?} after {cut} pieces, the agent read {got}"),
                );
            }
            if !s.one_final_error() {
                f.add(
                    "final-error",
                    format!(
                        "call {call}: cut stream ended with {} error frames",
                        s.errors
                    ),
                );
            }
            false
        }
        _ => {
            if !s.one_final_error() {
                f.add(
                    "final-error",
                    format!(
                        "call {call}: failed call ({:?} last) ended with {} error frames ({})",
                        last,
                        s.errors,
                        describe(s, None)
                    ),
                );
            }
            if last == Some(Fault::Solo4022) && !s.error_codes.iter().any(|c| c == "4022") {
                f.add(
                    "rules",
                    format!(
                        "call {call}: 4022 should reach the agent as itself, got {:?}",
                        s.error_codes
                    ),
                );
            }
            false
        }
    }
}

/// `/status` adds up: every inference call was intercepted, and each was
/// either forwarded by the return leg or sent directly (`fallback`).
fn judge_counters(f: &mut Findings, settings: &Settings, results: &[CallResult], st: &Value) {
    for wire in [Wire::Qoder, Wire::Trae] {
        let key = format!("{}Shim", wire.name());
        let s = &st[key.as_str()];
        let n = |k: &str| s[k].as_u64().unwrap_or(u64::MAX);
        let sent = results
            .iter()
            .filter(|r| r.plan.wire == wire && !r.plan.passthrough)
            .count() as u64;
        let (intercepted, forwarded, fallback) = (n("intercepted"), n("forwarded"), n("fallback"));
        if intercepted != sent {
            f.add(
                "counters",
                format!("{key}: intercepted {intercepted}, the agents sent {sent}"),
            );
        }
        if intercepted != forwarded.saturating_add(fallback) {
            f.add(
                "counters",
                format!("{key}: intercepted {intercepted} != forwarded {forwarded} + fallback {fallback}"),
            );
        }
        let want_fallback = if settings.path == Path::Direct {
            sent
        } else {
            0
        };
        if fallback != want_fallback {
            f.add(
                "counters",
                format!(
                    "{key}: fallback {fallback}, expected {want_fallback} on the {} path",
                    settings.path.name()
                ),
            );
        }
        let (compacted, folded) = (n("compacted"), n("folded"));
        if compacted > forwarded || folded > compacted || n("sideRequests") != 0 {
            f.add(
                "counters",
                format!("{key}: compacted {compacted}, folded {folded}, forwarded {forwarded}, sideRequests {}", n("sideRequests")),
            );
        }
        if settings.path == Path::Reference && compacted != forwarded {
            f.add(
                "counters",
                format!("{key}: the compressor rewrote every request, yet compacted {compacted} != forwarded {forwarded}"),
            );
        }
    }
}

/// The chain's per-route counters match what the upstream saw: one
/// logged attempt per request received, and the same failure codes.
fn judge_routes(f: &mut Findings, hits: &HashMap<u64, Vec<Hit>>, st: &Value) {
    let mut want: BTreeMap<String, (u64, BTreeMap<String, u64>)> = BTreeMap::new();
    for h in hits.values().flatten() {
        let e = want.entry(h.route.clone()).or_default();
        e.0 += 1;
        if let Some(code) = h.fault.code() {
            *e.1.entry(code.to_string()).or_default() += 1;
        }
    }
    for shim in ["qoder", "trae"] {
        for row in st["chain"]["routes"][shim].as_array().into_iter().flatten() {
            let name = row["name"].as_str().unwrap_or("?").to_string();
            let (attempts, codes) = want.remove(&name).unwrap_or_default();
            let logged = row["attempts"].as_u64().unwrap_or(0);
            let skipped = row["failures"]["CAPACITY"].as_u64().unwrap_or(0);
            if logged - skipped.min(logged) != attempts {
                f.add(
                    "double-send",
                    format!("route {name}: the chain logged {logged} attempts, the upstream received {attempts}"),
                );
            }
            let mut got: BTreeMap<String, u64> = BTreeMap::new();
            for (k, v) in row["failures"].as_object().into_iter().flatten() {
                got.insert(k.clone(), v.as_u64().unwrap_or(0));
            }
            if got != codes {
                // The grouped calls say which kind of call it was, when the
                // ring still holds it.
                let odd: Vec<String> = st["chain"]["calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|c| c["outcome"] == "aborted")
                    .map(|c| format!("{} call {} {}", c["kind"], c["call"], c["routes"]))
                    .collect();
                f.add(
                    "rules",
                    format!(
                        "route {name}: failures logged {got:?}, the upstream played {codes:?}; aborted calls still in /status: {odd:?}"
                    ),
                );
            }
        }
    }
}

//! awecompress and Headroom, the compression proxies users install from
//! PyPI, compressing for real in front of each shim: every turn answered
//! in the agent's own wire, `folded` > 0, no fallback, and the upstream's
//! last request smaller than the agent's. Each test prints its figures
//! (`FIGURES …`, read with `--nocapture`) for the README's table.
//!
//! Both proxies take one upstream and compress the fixed path
//! `/v1/chat/completions`, so as users run them they point at one shimgate
//! listener (the trae one: every listener serves both shims' return legs)
//! and shimgate's `[compressor] url` is that full path (the rid rides in
//! the query and `x-shimgate-rid`).

use serde_json::{json, Value};

use crate::support::client;
use crate::support::conversation::{Conversation, Turn};
use crate::support::external::{awecompress, headroom, python_with, Peer};
use crate::support::model::{Model, Wire};
use crate::support::{print_figures, Gate};

use super::savings::{agent_tokens, check_real};

/// What the agent sends each turn.
#[derive(Clone, Copy)]
enum Content {
    /// A ~4,000-character prose note ([`Conversation::turn`]).
    Prose,
    /// A JSON build log handed back as a tool result.
    BuildLogs,
}

/// One conversation through a proxy, and what it showed.
struct Run {
    gate: Gate,
    model: Model,
    peer: Peer,
    turns: Vec<Turn>,
    /// `qoder` or `trae`.
    name: &'static str,
    /// This shim's section of `/status`.
    shim: Value,
}

impl Run {
    /// Starts a model speaking `wire`, shimgate with that one shim's
    /// route, the proxy from `start` in front of the trae listener, and
    /// plays `turns` turns of `content`, checking each answer.
    async fn play<F, Fut>(wire: Wire, start: F, content: Content, turns: usize) -> Run
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = Peer>,
    {
        let model = Model::start(wire).await;
        let shim = shim_name(wire);
        let base = format!(
            "[retry]\ninitial_delay_ms = 10\n[[shims.{shim}.routes]]\nname = \"r1\"\nurl = \"{}\"\n",
            model.url()
        );
        let gate = Gate::start(&base).await;
        let peer = start(gate.trae.clone()).await;
        gate.use_compressor(&format!("{}/v1/chat/completions", peer.url()), &base);
        let listener = if wire == Wire::Qoder {
            gate.qoder.clone()
        } else {
            gate.trae.clone()
        };
        let mut c = Conversation::new(wire, &format!("conv-{}", peer.name), "cred-1");
        for n in 1..=turns {
            let t = match content {
                Content::Prose => c.turn(&listener).await,
                Content::BuildLogs => c.tool_turn(&listener, "run_build", &build_log(n)).await,
            };
            assert!(
                t.status.is_success() && t.error.is_none() && t.problems.is_empty(),
                "turn {n} through {}: {t:?}\n{}",
                peer.name,
                peer.log()
            );
            assert!(
                t.text.starts_with("Noted, reply "),
                "turn {n}: the model's answer, in the agent's wire: {t:?}"
            );
        }
        let shim = gate.status().await[format!("{shim}Shim")].clone();
        Run {
            gate,
            model,
            peer,
            turns: c.turns,
            name: shim_name(wire),
            shim,
        }
    }

    fn counter(&self, name: &str) -> u64 {
        self.shim[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: {:#}", self.shim))
    }

    /// The compression every run must show: each turn intercepted, none
    /// sent directly, `folded` > 0, and the upstream's last request (the
    /// last turn's, sent after any summary call) smaller than what the
    /// agent sent, in bytes and in content characters.
    fn assert_compressed(&self) {
        let ctx = || format!("{:#}\n{}", self.shim, self.peer.log());
        assert_eq!(
            self.counter("intercepted"),
            self.turns.len() as u64,
            "{}",
            ctx()
        );
        assert_eq!(self.counter("fallback"), 0, "{}", ctx());
        assert!(self.counter("folded") > 0, "{}", ctx());
        let last = self.turns.last().unwrap();
        let got = self.model.upstream.requests().last().unwrap().body.len();
        let seen = self.model.seen();
        let seen = seen.last().unwrap();
        assert!(seen.problems.is_empty(), "{:?}", seen.problems);
        assert!(
            got < last.sent_bytes && seen.chars < last.sent_chars,
            "the upstream got {got} bytes ({} chars), the agent sent {} ({}): {}",
            seen.chars,
            last.sent_bytes,
            last.sent_chars,
            ctx()
        );
    }

    /// The savings ledger's figures of the conversation, checked against
    /// what the provider counted (`answered`: the requests that answered
    /// the agent, the others being the proxy's own).
    async fn savings(&self, answered: impl Fn(&crate::support::model::Seen) -> bool) -> Value {
        let savings = self.gate.status().await["savings"].clone();
        let wire = if self.name == "qoder" {
            Wire::Qoder
        } else {
            Wire::Trae
        };
        check_real(
            self.peer.name,
            wire,
            &savings,
            &format!("conv-{}", self.peer.name),
            &self.model.seen(),
            answered,
            agent_tokens(wire, &self.turns),
        )
    }

    /// One line of figures for the README's table.
    fn figures(&self, extra: &str) {
        let last = self.turns.last().unwrap();
        let got = self.model.upstream.requests().last().unwrap().body.len();
        let chars = format!(
            " (content chars {} -> {}){extra}",
            last.sent_chars,
            self.model.seen().last().unwrap().chars
        );
        print_figures(
            self.peer.name,
            self.name,
            self.turns.len(),
            &self.shim,
            last.sent_bytes,
            got,
            &chars,
        );
    }
}

fn shim_name(wire: Wire) -> &'static str {
    if wire == Wire::Qoder {
        "qoder"
    } else {
        "trae"
    }
}

/// A build log as a tool prints it: a JSON array of 320 step records, one
/// a line, mostly alike (what Headroom's JSON crusher is for).
fn build_log(turn: usize) -> String {
    const STEPS: [&str; 4] = ["fetch", "compile", "link", "test"];
    let lines: Vec<String> = (0..320usize)
        .map(|i| {
            json!({
                "seq": i,
                "level": if i % 37 == 5 { "warning" } else { "info" },
                "crate": format!("shimgate-part-{}", i % 9),
                "step": STEPS[i % 4],
                "message": format!("{} shimgate-part-{} v0.{}.{} (build {turn})", STEPS[i % 4], i % 9, i % 5, i),
                "elapsed_ms": (i * 37 + turn * 11) % 2000,
            })
            .to_string()
        })
        .collect();
    format!("[\n{}\n]", lines.join(",\n"))
}

/// awecompress: past its threshold it replaces the oldest whole turns by
/// one summary, asking the request's model for it with one `stream: false`
/// call to its upstream. That call comes back to shimgate on the fixed
/// path with only `Authorization` (the rid of the turn is found by that
/// identity), is sent upstream on the turn's native request, and counts in
/// `sideRequests` (never in `compacted`/`folded`); `forwarded` counts
/// every return-leg request sent upstream, so it is intercepted + side.
async fn awecompress_summarises(wire: Wire) {
    let Some(py) = python_with("awecompress") else {
        return;
    };
    let run = Run::play(
        wire,
        |up| async move { awecompress(&py, &up).await },
        Content::Prose,
        5,
    )
    .await;
    run.assert_compressed();
    let status = client::get(&run.peer.url()).await.json();
    let calls = status["stats"]["calls"].as_u64().unwrap();
    let side = run.counter("sideRequests");
    assert!(
        calls > 0,
        "awecompress made no summary: {status}\n{}",
        run.peer.log()
    );
    assert_eq!(
        side,
        calls,
        "each summary call is one side request: {:#}\n{}",
        run.shim,
        run.peer.log()
    );
    assert_eq!(
        run.counter("forwarded"),
        run.counter("intercepted") + side,
        "{:#}",
        run.shim
    );
    let summaries = run
        .peer
        .log()
        .lines()
        .filter(|l| l.contains("summarized messages"))
        .count();
    assert_eq!(summaries as u64, calls, "{}", run.peer.log());
    run.figures(&format!(
        "; awecompress summary calls {calls}, saved_tokens {}",
        status["stats"]["saved_tokens"]
    ));
    // The savings ledger: each summary (`stream: false`, its own system
    // prompt) is awecompress's own call, charged with what the provider
    // counted for it.
    let conv = run
        .savings(|s| {
            !s.first
                .starts_with("You compress a coding agent's conversation")
        })
        .await;
    assert_eq!(conv["sideCalls"], calls, "{conv:#}");
    run.gate.stop(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn awecompress_summarises_old_qoder_turns_through_the_return_leg() {
    awecompress_summarises(Wire::Qoder).await;
}

#[tokio::test]
async fn awecompress_summarises_old_trae_turns_through_the_return_leg() {
    awecompress_summarises(Wire::Trae).await;
}

/// Headroom: compresses tool outputs (here a JSON build log per turn);
/// it makes no call of its own, so `forwarded` = `intercepted` and
/// `sideRequests` stays 0.
async fn headroom_compresses_tool_outputs(wire: Wire) {
    let Some(py) = python_with("headroom, fastapi, uvicorn") else {
        return;
    };
    let run = Run::play(
        wire,
        |up| async move { headroom(&py, &up).await },
        Content::BuildLogs,
        4,
    )
    .await;
    run.assert_compressed();
    assert_eq!(run.counter("sideRequests"), 0, "{:#}", run.shim);
    assert_eq!(
        run.counter("forwarded"),
        run.counter("intercepted"),
        "{:#}",
        run.shim
    );
    let stats = client::get(&format!("{}/stats", run.peer.url()))
        .await
        .json();
    run.figures(&format!(
        "; headroom tokens saved {}",
        stats["tokens"]["saved"]
    ));
    let conv = run.savings(|_| true).await;
    assert_eq!(conv["sideCalls"], 0, "{conv:#}");
    assert!(conv["savedTokens"].as_i64().unwrap() > 0, "{conv:#}");
    run.gate.stop(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn headroom_compresses_qoder_tool_outputs() {
    headroom_compresses_tool_outputs(Wire::Qoder).await;
}

#[tokio::test]
async fn headroom_compresses_trae_tool_outputs() {
    headroom_compresses_tool_outputs(Wire::Trae).await;
}

//! The savings ledger end to end (`/status` `savings`, `/metrics`
//! `shimgate_tokens_*`): agents on both wires, the test compressor, and a
//! scripted provider that reports usage from what it really received
//! (`support::model`). The ledger's sent tokens are the provider's own
//! counts; its agent tokens are estimated from them and match what the
//! provider would have counted for the agent's own requests; the
//! compressor's extra rounds are found and charged; a compressor that only
//! makes requests longer shows a negative net; a missing or malformed
//! usage report gives an estimate, named so; the book survives a restart
//! of the real binary. The real compressors are in `bili.rs` and
//! `pypi_proxies.rs`.

use serde_json::{json, Value};

use crate::support::bin::{tempdir, Served};
use crate::support::conversation::Conversation;
use crate::support::model::{prompt_tokens, Model, Seen, Wire};
use crate::support::proxy::{Options, TestProxy};
use crate::support::upstream::Reply;
use crate::support::{client, Gate};

fn shim_of(wire: Wire) -> &'static str {
    if wire == Wire::Qoder {
        "qoder"
    } else {
        "trae"
    }
}

/// The completion tokens the model reports on `wire` (`support::model`).
fn completion(wire: Wire) -> u64 {
    if wire == Wire::Trae {
        12
    } else {
        5
    }
}

fn routes(wire: Wire, model: &Model) -> String {
    format!(
        "[retry]\ninitial_delay_ms = 10\n[[shims.{}.routes]]\nname = \"r1\"\nurl = \"{}\"\n",
        shim_of(wire),
        model.url()
    )
}

/// `turns` turns of one conversation through the test compressor.
async fn converse(wire: Wire, options: Options, turns: usize) -> (Gate, Model, TestProxy) {
    let model = Model::start(wire).await;
    let (gate, proxy) = Gate::behind_proxy(&routes(wire, &model), shim_of(wire), options).await;
    let base = if wire == Wire::Qoder {
        gate.qoder.clone()
    } else {
        gate.trae.clone()
    };
    let mut c = Conversation::new(wire, "conv-s", "cred-1");
    for n in 1..=turns {
        let t = c.turn(&base).await;
        assert!(
            t.error.is_none() && t.problems.is_empty(),
            "turn {n}: {t:?}"
        );
    }
    (gate, model, proxy)
}

/// The figures of `key` (`today`, `totals`) or of the conversation `id`.
fn figures<'a>(savings: &'a Value, id: &str) -> &'a Value {
    savings["conversations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no conversation {id}: {savings:#}"))
}

fn n(v: &Value, key: &str) -> i64 {
    v[key].as_i64().unwrap_or_else(|| panic!("{key} in {v:#}"))
}

/// What the provider counted: for the requests that answered, and for the
/// others (the compressor's), prompt and completion.
fn provider_counts(seen: &[Seen], answered: impl Fn(usize) -> bool, wire: Wire) -> (u64, u64, u64) {
    let (mut sent, mut cached, mut side) = (0, 0, 0);
    for (i, s) in seen.iter().enumerate() {
        if answered(i) {
            sent += s.prompt_tokens;
            cached += s.cached_tokens;
        } else {
            side += s.prompt_tokens + completion(wire);
        }
    }
    (sent, cached, side)
}

/// The compressor posts each request twice (its own round first, then the
/// one that answers): the ledger's sent tokens are the provider's counts of
/// the answering rounds, the first rounds are side calls with their tokens,
/// and the agent's tokens are what the provider would have counted for the
/// agent's own requests, within 3 % (the ledger measures the requests' JSON,
/// the provider their text).
async fn counts_what_the_provider_counted(wire: Wire) {
    let options = Options {
        threshold: 6_000,
        keep_recent: 2,
        extra_posts: 1,
        ..Options::default()
    };
    let turns = 6;
    let (gate, model, proxy) = converse(wire, options, turns).await;
    let savings = gate.status().await["savings"].clone();
    let today = &savings["today"];
    let seen = model.seen();
    assert_eq!(seen.len(), 2 * turns);
    let (sent, cached, side) = provider_counts(&seen, |i| i % 2 == 1, wire);
    let agent: u64 = proxy
        .received
        .lock()
        .unwrap()
        .iter()
        .map(prompt_tokens)
        .sum();
    assert_eq!(n(today, "calls"), turns as i64, "{savings:#}");
    assert_eq!(n(today, "sentTokens"), sent as i64, "{savings:#}");
    assert_eq!(n(today, "cachedTokens"), cached as i64, "{savings:#}");
    if wire == Wire::Qoder {
        assert!(cached > 0, "the repeated round hits the provider's cache");
    }
    assert_eq!(n(today, "sideCalls"), turns as i64);
    assert_eq!(n(today, "sideTokens"), side as i64, "{savings:#}");
    assert_eq!(n(today, "estimatedCalls"), 0);
    let estimated = n(today, "agentTokens");
    let off = (estimated - agent as i64).abs() as f64 / agent as f64;
    assert!(
        off < 0.03,
        "agent tokens {estimated}, the provider would have counted {agent}"
    );
    assert_eq!(n(today, "savedTokens"), estimated - sent as i64);
    assert_eq!(n(today, "netTokens"), estimated - sent as i64 - side as i64);
    assert!(n(today, "savedTokens") > 0, "{savings:#}");
    let conv = figures(&savings, "conv-s");
    assert_eq!(
        (conv["shim"].clone(), n(conv, "sentTokens")),
        (json!(shim_of(wire)), sent as i64)
    );
    assert_eq!(savings["method"], "provider-ratio");
    eprintln!(
        "FIGURES savings {} (test compressor, {turns} turns, one extra round each): agent {estimated} (provider would count {agent}), sent {sent}, saved {}, side {} calls {side} tokens, cached {cached}, net {}",
        shim_of(wire),
        n(today, "savedTokens"),
        turns,
        n(today, "netTokens")
    );
}

#[tokio::test]
async fn the_qoder_ledger_counts_what_the_provider_counted_and_charges_the_compressor_s_rounds() {
    counts_what_the_provider_counted(Wire::Qoder).await;
}

#[tokio::test]
async fn the_trae_ledger_counts_what_the_provider_counted_and_charges_the_compressor_s_rounds() {
    counts_what_the_provider_counted(Wire::Trae).await;
}

/// A compressor that never shortens (its threshold is never reached) but
/// adds its preamble to every request: the conversation shows a negative
/// saving and net, as the provider counted.
#[tokio::test]
async fn a_conversation_the_compressor_made_longer_shows_a_negative_net() {
    for wire in [Wire::Qoder, Wire::Trae] {
        let options = Options {
            threshold: usize::MAX,
            ..Options::default()
        };
        let (gate, model, proxy) = converse(wire, options, 3).await;
        let savings = gate.status().await["savings"].clone();
        let conv = figures(&savings, "conv-s");
        let sent: u64 = model.seen().iter().map(|s| s.prompt_tokens).sum();
        let agent: u64 = proxy
            .received
            .lock()
            .unwrap()
            .iter()
            .map(prompt_tokens)
            .sum();
        assert!(sent > agent, "the preamble makes every request longer");
        assert_eq!(n(conv, "sentTokens"), sent as i64);
        assert!(n(conv, "savedTokens") < 0, "{conv:#}");
        assert_eq!(n(conv, "netTokens"), n(conv, "savedTokens"));
        assert!(n(&savings["today"], "netTokens") < 0);
    }
}

/// The provider's usage report missing, or not numbers: the call is
/// estimated at the shim's tokens per character (one in four before any
/// report), counted in `estimatedCalls`, with the right sign; nothing
/// panics.
#[tokio::test]
async fn a_missing_or_malformed_usage_report_is_estimated_with_its_method() {
    let wire = Wire::Trae;
    let model = Model::start(wire).await;
    let (gate, _proxy) =
        Gate::behind_proxy(&routes(wire, &model), "trae", Options::default()).await;
    let mut c = Conversation::new(wire, "conv-m", "cred-1");
    let bad = [
        "event: output\ndata: {\"response\":\"Noted, reply 1.\",\"reasoning_content\":null,\"tool_calls\":null}\n\n\
         event: token_usage\ndata: {\"prompt_tokens\":\"many\",\"completion_tokens\":-1}\n\n\
         event: done\ndata: {\"finish_reason\":\"stop\"}\n\n",
        "event: output\ndata: {\"response\":\"Noted, reply 2.\",\"reasoning_content\":null,\"tool_calls\":null}\n\n\
         event: done\ndata: {\"finish_reason\":\"stop\"}\n\n",
    ];
    for (i, body) in bad.iter().enumerate() {
        model.answer_next_with(Reply::sse().chunk(*body).end());
        let t = c.turn(&gate.trae).await;
        assert!(t.error.is_none(), "turn {i}: {t:?}");
    }
    let savings = gate.status().await["savings"].clone();
    let today = &savings["today"];
    assert_eq!(
        (n(today, "calls"), n(today, "estimatedCalls")),
        (2, 2),
        "{savings:#}"
    );
    // The test compressor adds its preamble and shortens nothing here:
    // the estimate says longer, as the characters do.
    assert!(
        n(today, "sentTokens") > 0 && n(today, "savedTokens") < 0,
        "{savings:#}"
    );
    assert_eq!(savings["method"], "provider-ratio");
}

/// Without a compressor every call goes as the agent sent it: what it
/// cost is what was sent, nothing saved.
#[tokio::test]
async fn a_direct_call_saves_nothing_and_costs_what_the_provider_counted() {
    let model = Model::start(Wire::Qoder).await;
    let gate = Gate::start(&routes(Wire::Qoder, &model)).await;
    let mut c = Conversation::new(Wire::Qoder, "conv-d", "cred-1");
    for _ in 0..2 {
        assert!(c.turn(&gate.qoder).await.error.is_none());
    }
    let today = gate.status().await["savings"]["today"].clone();
    let sent: u64 = model.seen().iter().map(|s| s.prompt_tokens).sum();
    assert_eq!(n(&today, "sentTokens"), sent as i64);
    assert_eq!(n(&today, "agentTokens"), sent as i64);
    assert_eq!((n(&today, "savedTokens"), n(&today, "sideCalls")), (0, 0));
}

/// The real binary books into its savings file in the state dir and reads
/// it back after a restart; `/metrics` counts since start.
#[tokio::test]
async fn the_figures_survive_a_restart_of_the_real_binary() {
    let model = Model::start(Wire::Trae).await;
    let dir = tempdir();
    let port = crate::support::external::free_port();
    let proxy = TestProxy::start(format!("http://127.0.0.1:{port}"), Options::default()).await;
    let config = dir.join("shimgate.toml");
    std::fs::write(
        &config,
        format!(
            "[compressor]\nurl = \"{}\"\n[savings]\ndays = 30\n[shims.qoder]\nenabled = false\n\
             [shims.trae]\nlisten = \"127.0.0.1:{port}\"\n[[shims.trae.routes]]\nname = \"t\"\nurl = \"{}\"\n",
            proxy.url(),
            model.url()
        ),
    )
    .unwrap();
    let served = Served::start_with(&config, &["trae".to_owned()], &[]);
    let mut c = Conversation::new(Wire::Trae, "conv-r", "cred-1");
    for _ in 0..3 {
        let t = c.turn(&served.trae).await;
        assert!(t.error.is_none(), "{t:?}");
    }
    let before = client::get(&format!("{}/status", served.trae)).await.json()["savings"].clone();
    assert_eq!(before["keep"]["days"], 30);
    assert_eq!(n(&before["today"], "calls"), 3);
    let metrics = client::get(&format!("{}/metrics", served.trae))
        .await
        .text();
    let sent_line = format!(
        "shimgate_tokens_sent_total{{shim=\"trae\"}} {}",
        n(&before["today"], "sentTokens")
    );
    assert!(
        metrics.lines().any(|l| l == sent_line),
        "{sent_line}\n{metrics}"
    );
    let trae = served.trae.clone();
    tokio::task::spawn_blocking(move || served.stop())
        .await
        .unwrap();
    let file = before["file"]["path"].as_str().unwrap().to_owned();
    assert!(std::path::Path::new(&file).is_file(), "{file}");
    let again = Served::start_with(&config, &["trae".to_owned()], &[]);
    assert_eq!(again.trae, trae);
    let after = client::get(&format!("{}/status", again.trae)).await.json()["savings"].clone();
    assert_eq!(after["file"]["atStart"], "loaded", "{after:#}");
    for key in ["today", "days", "conversations", "totals"] {
        assert_eq!(after[key], before[key], "{key}");
    }
    let metrics = client::get(&format!("{}/metrics", again.trae)).await.text();
    assert!(
        metrics
            .lines()
            .any(|l| l == "shimgate_tokens_sent_total{shim=\"trae\"} 0"),
        "counters start at zero: {metrics}"
    );
    tokio::task::spawn_blocking(move || again.stop())
        .await
        .unwrap();
}

/// What a real compressor's conversation shows in the ledger, checked
/// against what the scripted provider counted: `answered(s)` tells the
/// requests that answered the agent from the compressor's own, and
/// `agent` is what the provider would have counted for the agent's own
/// requests. Prints one `FIGURES` line; returns the conversation's figures.
pub fn check_real(
    who: &str,
    wire: Wire,
    savings: &Value,
    conversation: &str,
    seen: &[Seen],
    answered: impl Fn(&Seen) -> bool,
    agent: u64,
) -> Value {
    let conv = figures(savings, conversation).clone();
    let (sent, cached, side) = provider_counts(seen, |i| answered(&seen[i]), wire);
    let side_calls = seen.iter().filter(|s| !answered(s)).count() as i64;
    let ctx = || format!("{who} {}: {conv:#}", shim_of(wire));
    assert_eq!(n(&conv, "sentTokens"), sent as i64, "{}", ctx());
    assert_eq!(n(&conv, "cachedTokens"), cached as i64, "{}", ctx());
    assert_eq!(n(&conv, "sideCalls"), side_calls, "{}", ctx());
    assert_eq!(n(&conv, "sideTokens"), side as i64, "{}", ctx());
    assert_eq!(n(&conv, "estimatedCalls"), 0, "{}", ctx());
    let estimated = n(&conv, "agentTokens");
    let off = (estimated - agent as i64).abs() as f64 / agent as f64;
    assert!(
        off < 0.05,
        "agent tokens {estimated}, the provider would have counted {agent}: {}",
        ctx()
    );
    eprintln!(
        "FIGURES savings {who} {}: {} calls; agent {estimated} tokens (the provider would have counted {agent}, {:+.1} %), sent {sent}, saved {}, cached {cached}, side {side_calls} calls {side} tokens, net {}",
        shim_of(wire),
        n(&conv, "calls"),
        (estimated as f64 / agent as f64 - 1.0) * 100.0,
        n(&conv, "savedTokens"),
        n(&conv, "netTokens"),
    );
    conv
}

/// What the provider would have counted for the agent's own requests of
/// `turns` on `wire`: their message content and the agent's one tool.
pub fn agent_tokens(wire: Wire, turns: &[crate::support::conversation::Turn]) -> u64 {
    let tools = match wire {
        Wire::Qoder => crate::support::model::tools_chars(&crate::support::qoder::ask(&[])),
        _ => crate::support::model::tools_chars(&crate::support::trae::body(&[])),
    };
    turns
        .iter()
        .map(|t| ((t.sent_chars + tools) / 4) as u64)
        .sum()
}

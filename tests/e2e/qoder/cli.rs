//! The real Qoder CLI through shimgate (`support::qoder_gate`): started by
//! `shimgate launch`, it prints the scripted answer, and a resumed session
//! (`--continue`) is folded by the reference compressor on its way to the
//! model server; the token appears nowhere in shimgate's log, `/status`
//! or `/metrics`; without shimgate's CA it refuses shimgate as it refuses
//! any server it does not trust, and `/status` counts the refusal. Under
//! `qoder::` so `.ci/windows` runs them against `shimgate.exe` (the CLI
//! then gets the variables `shimgate env` printed). The answer forms the
//! CLI acts on (errors, quota) are in `qoder_cli::gate`, on Linux only:
//! each CLI run costs 12-40 s.

use serde_json::Value;

use crate::support::qoder_cli::{self, assert_run, SAYS_NOT_COMPLETED, TOKEN};
use crate::support::qoder_gate::{GateStack, THRESHOLD_CHARS, TIMEOUT};
use crate::support::qoder_model_server::{self as model_server, PATH};
use crate::support::{client, eventually};

const ANSWER: &str = "Hi from the scripted model server, through shimgate.";

/// Characters of message content in a model-server request body.
fn content_chars(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| shimgate::compressor::rewrite::content_chars(m))
        .unwrap_or_default()
}

#[tokio::test]
async fn through_shimgate_the_cli_prints_the_answer_and_a_resumed_session_folds() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = GateStack::start(|_, n| match n {
        // Held open after `[DONE]`: the answer must reach the CLI then.
        0 => model_server::openai_answer_held(ANSWER),
        _ => model_server::envelope_answer("Still here."),
    })
    .await;
    let mut env = stack.cli_env();
    let first = stack.run(&cli, &mut env, &["-p", "say hi"]).await;
    assert_run(&first, &format!("{ANSWER}\n"), 0, &stack.world);
    let once = stack.status().await["qoderModelShim"]["lastExchange"].clone();
    let second = stack
        .run(&cli, &mut env, &["--continue", "-p", "say more"])
        .await;
    assert_run(&second, "Still here.\n", 0, &stack.world);

    let calls = stack.model.calls();
    assert_eq!(calls.len(), 2, "one request per run");
    assert_eq!(
        stack.model.problems(),
        vec![Vec::<String>::new(); 2],
        "the model server took both (the token, a fresh X-Request-ID, qoder's metadata)"
    );
    let status = stack.status().await;
    let m = &status["qoderModelShim"];
    assert_eq!(
        (&m["intercepted"], &m["forwarded"], &m["fallback"]),
        (&2.into(), &2.into(), &0.into()),
        "{m:#}"
    );
    // The first request is one turn (the compressor keeps the current
    // turn whole and adds its preamble); the resumed one folds the turn
    // before it.
    assert_eq!(
        (&m["compacted"], &m["folded"]),
        (&2.into(), &1.into()),
        "{m:#}"
    );
    let twice = &m["lastExchange"];
    let before = twice["beforeContent"].as_u64().unwrap();
    let after = twice["afterContent"].as_u64().unwrap();
    assert!(after < before, "{twice:#}");
    let bodies: Vec<Value> = calls.iter().map(|c| c.request.json()).collect();
    let sent = bodies[1].to_string();
    assert!(sent.contains("[summary of ") && sent.contains("say more"));
    assert!(!sent.contains(ANSWER), "the turn before was summarised");
    assert_eq!(calls[1].request.path, PATH);
    let handshakes = &status["tls"]["handshakes"];
    assert!(handshakes["ok"].as_u64() >= Some(2), "{handshakes:#}");
    assert_eq!(handshakes["refused"]["client_refused"], 0, "{handshakes:#}");
    eprintln!(
        "FIGURES qodercli through shimgate and the reference compressor (threshold {THRESHOLD_CHARS}): \
         run 1 content {} -> {} chars, model server got {} bytes; \
         run 2 (--continue) content {before} -> {after} chars, model server got {} bytes ({} chars of content); \
         folded {}; runs {:.1} s and {:.1} s",
        once["beforeContent"],
        once["afterContent"],
        calls[0].request.body.len(),
        calls[1].request.body.len(),
        content_chars(&bodies[1]),
        m["folded"],
        first.elapsed.as_secs_f64(),
        second.elapsed.as_secs_f64()
    );

    let metrics = client::get(&format!("{}/metrics", stack.gate.qoder))
        .await
        .text();
    let log = stack.gate.log();
    for (what, text) in [
        ("/status", &status.to_string()),
        ("/metrics", &metrics),
        ("log", &log),
    ] {
        assert!(!text.contains(TOKEN), "the token is in the {what}");
    }
}

/// Given only the world's root (not shimgate's), the CLI refuses the
/// qoder listener's certificate ("unable to get issuer certificate
/// locally": shimgate sends its intermediate, whose root the CLI lacks),
/// prints what it prints for a model server it does not trust, and sends
/// nothing; `/status` counts the refusal (one handshake: not retried).
#[tokio::test]
async fn without_shimgate_s_ca_the_cli_refuses_it_and_status_counts_it() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = GateStack::start(|_, _| model_server::openai_answer(ANSWER)).await;
    let mut env = stack.cli_env();
    env.model_server(stack.gate.qoder.trim_start_matches("http://"));
    let run = qoder_cli::run(&cli, &env, &["-p", "say hi"], TIMEOUT).await;
    eprintln!("qodercli without shimgate's CA: {}", run.describe());
    assert_run(&run, SAYS_NOT_COMPLETED, 1, &stack.world);
    assert!(
        run.log_errors
            .iter()
            .any(|l| l.contains("UNABLE_TO_GET_ISSUER_CERT_LOCALLY")),
        "{}",
        run.describe()
    );
    let refused =
        || async { stack.status().await["tls"]["handshakes"]["refused"]["client_refused"] != 0 };
    assert!(
        eventually(std::time::Duration::from_secs(5), refused).await,
        "{:#}",
        stack.status().await["tls"]
    );
    let tls = &stack.status().await["tls"]["handshakes"];
    assert_eq!(
        (&tls["refused"]["client_refused"], &tls["ok"]),
        (&1.into(), &0.into()),
        "{tls:#}"
    );
    assert!(stack.model.calls().is_empty(), "nothing got through");
    assert_eq!(stack.status().await["qoderModelShim"]["intercepted"], 0);
}

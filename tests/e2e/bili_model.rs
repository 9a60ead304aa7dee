//! The test proxy's model of billion-context's session rules (one session
//! per `Authorization` + conversation id; compress only after the same
//! session reported `prompt_tokens` in its band; learn from a 400 that says
//! the context overflowed), and shimgate passing through it. The real
//! proxy is in `bili.rs`; this model keeps the rules in the fast suite and
//! shows they catch the per-request identity that kept `folded` at 0.

use http::Method;
use serde_json::json;

use crate::support::client;
use crate::support::conversation::{filler, Conversation};
use crate::support::model::{offered_range, Model, Wire};
use crate::support::proxy::{Options, TestProxy};
use crate::support::Gate;

fn bili_like() -> Options {
    Options {
        window_tokens: 8_000,
        ..Options::bili()
    }
}

/// An OpenAI conversation sent straight to the test proxy, with the
/// `Authorization` of each turn from `auth(turn)`: how many turns it
/// compressed.
async fn compressions_with(auth: impl Fn(usize) -> String) -> (usize, usize) {
    let model = Model::start(Wire::OpenAi).await;
    let proxy = TestProxy::start(model.url(), bili_like()).await;
    let mut messages = vec![json!({"role": "system", "content": "agent"})];
    for n in 1..=12 {
        messages.push(json!({"role": "user", "content": filler(n, 4000)}));
        let resp = client::send(
            Method::POST,
            &format!("{}/v1/chat/completions", proxy.url()),
            &[
                ("content-type", "application/json"),
                ("authorization", &auth(n)),
                ("x-session-id", "conv-1"),
            ],
            serde_json::to_vec(&json!({"model": "m", "stream": true, "messages": messages}))
                .unwrap(),
        )
        .await;
        assert!(resp.status.is_success(), "{}", resp.text());
        messages.push(json!({"role": "assistant", "content": "ok"}));
    }
    let sessions = proxy.sessions();
    let compressed = sessions.iter().map(|s| s.compressed as usize).sum();
    (sessions.len(), compressed)
}

#[tokio::test]
async fn the_model_of_bili_never_compresses_a_per_request_authorization() {
    let (sessions, compressed) =
        compressions_with(|n| format!("Bearer shimgate-rid-{n:032x}")).await;
    assert_eq!(
        (sessions, compressed),
        (12, 0),
        "a new session every turn, never compressed"
    );
    let (sessions, compressed) = compressions_with(|_| "Bearer shimgate-trae-stable".into()).await;
    assert_eq!(sessions, 1);
    assert!(
        compressed > 0,
        "one stable identity: the session compresses"
    );
}

async fn through_shimgate(wire: Wire) {
    let model = Model::start(wire).await;
    let shim = if wire == Wire::Qoder { "qoder" } else { "trae" };
    let base = format!(
        "[retry]\ninitial_delay_ms = 10\n[[shims.{shim}.routes]]\nname = \"r1\"\nurl = \"{}\"\n",
        model.url()
    );
    let (gate, proxy) = Gate::behind_proxy(&base, shim, bili_like()).await;
    let listener = if wire == Wire::Qoder {
        &gate.qoder
    } else {
        &gate.trae
    };
    let mut a = Conversation::new(wire, "conv-a", "cred-1");
    let mut b = Conversation::new(wire, "conv-b", "cred-1");
    for n in 1..=10 {
        let t = a.turn(listener).await;
        assert!(
            t.error.is_none() && t.problems.is_empty(),
            "turn {n}: {t:?}"
        );
    }
    let t = b.turn(listener).await;
    assert!(t.error.is_none() && t.problems.is_empty(), "{t:?}");
    let st = gate.status().await;
    let s = &st[format!("{shim}Shim")];
    assert!(s["folded"].as_u64().unwrap() > 0, "{s:#}");
    let mut sessions: Vec<u32> = proxy.sessions().iter().map(|s| s.requests).collect();
    sessions.sort_unstable();
    assert_eq!(sessions, vec![1, 10], "one session per conversation");
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
}

#[tokio::test]
async fn a_trae_agent_keeps_one_proxy_session_per_conversation_and_gets_compressed() {
    through_shimgate(Wire::Trae).await;
}

#[tokio::test]
async fn a_qoder_agent_keeps_one_proxy_session_per_conversation_and_gets_compressed() {
    through_shimgate(Wire::Qoder).await;
}

#[tokio::test]
async fn an_overflow_teaches_the_model_of_bili_and_the_next_turn_compresses() {
    let model = Model::start(Wire::Trae).await;
    let base = format!(
        "[[shims.trae.routes]]\nname = \"r1\"\nurl = \"{}\"\n",
        model.url()
    );
    let options = Options {
        window_tokens: 1_000_000,
        ..Options::bili()
    };
    let (gate, proxy) = Gate::behind_proxy(&base, "trae", options).await;
    let mut c = Conversation::new(Wire::Trae, "conv-o", "cred-1");
    for _ in 0..4 {
        assert!(c.turn(&gate.trae).await.error.is_none());
    }
    model.overflow_next();
    let refused = c.turn(&gate.trae).await;
    assert!(
        format!("{:?}", refused.error).contains("4022"),
        "the agent reads its own SOLO error: {refused:?}"
    );
    assert_eq!(
        proxy.sessions()[0].overflows,
        1,
        "the proxy saw a 400 it understands"
    );
    assert_eq!(proxy.sessions()[0].learned_window, Some(16_000));
    let turn = c.turn(&gate.trae).await;
    assert!(turn.error.is_none(), "{turn:?}");
    assert_eq!(
        proxy.sessions()[0].compressed,
        1,
        "the next turn compressed"
    );
    assert!(model.seen().last().unwrap().chars < turn.sent_chars);
}

#[test]
fn the_model_takes_the_first_range_a_nudge_offers() {
    let t = "call compress now\nCompressible ranges (2, oldest first):\n  m00001\u{2013}m00021  21 msgs\n  m00030\u{2013}m00040";
    assert_eq!(offered_range(t), Some(("m00001".into(), "m00021".into())));
    let t2 = "anchors (`m00510\u{2013}m00520`)\nExample: compress({ content: [{ startId: \"b1\", endId: \"b2\", summary: \"...\" }] })";
    assert_eq!(offered_range(t2), Some(("b1".into(), "b2".into())));
}

#[tokio::test]
async fn the_real_binary_shows_the_proxy_one_identity_per_agent_and_keeps_it_across_a_restart() {
    use crate::support::bin::{tempdir, Served};
    use crate::support::external::free_port;
    let (qm, tm) = (
        Model::start(Wire::Qoder).await,
        Model::start(Wire::Trae).await,
    );
    let (qp, tp) = (free_port(), free_port());
    let proxy = TestProxy::start(format!("http://127.0.0.1:{tp}"), Options::default()).await;
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    std::fs::write(
        &config,
        format!(
            "[compressor]\nurl = \"{}\"\n[shims.qoder]\nlisten = \"127.0.0.1:{qp}\"\n[shims.trae]\nlisten = \"127.0.0.1:{tp}\"\n\
             [[shims.qoder.routes]]\nname = \"q\"\nurl = \"{}\"\n[[shims.trae.routes]]\nname = \"t\"\nurl = \"{}\"\n",
            proxy.url(),
            qm.url(),
            tm.url()
        ),
    )
    .unwrap();
    let turn = |served: &Served, wire: Wire, cred: &str| {
        let base = if wire == Wire::Qoder {
            served.qoder.clone()
        } else {
            served.trae.clone()
        };
        let mut c = Conversation::new(wire, "conv-1", cred);
        async move {
            let t = c.turn(&base).await;
            assert!(t.error.is_none() && t.problems.is_empty(), "{t:?}");
        }
    };
    let served = Served::start(&config, &[], &[]);
    turn(&served, Wire::Trae, "token-a-0123456789").await;
    turn(&served, Wire::Trae, "token-a-0123456789").await;
    turn(&served, Wire::Trae, "token-b-0123456789").await;
    turn(&served, Wire::Qoder, "user-a").await;
    drop(served);
    let served = Served::start(&config, &[], &[]);
    turn(&served, Wire::Trae, "token-a-0123456789").await;
    let seen = proxy.authorizations.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(seen[0].starts_with("Bearer shimgate-trae-"), "{seen:?}");
    assert_eq!(seen[0], seen[1], "one agent, one identity");
    assert_eq!(seen[0], seen[4], "and the same after a restart");
    assert_ne!(seen[0], seen[2], "another credential, another identity");
    assert!(seen[3].starts_with("Bearer shimgate-qoder-"), "{seen:?}");
    assert!(
        seen.iter()
            .all(|a| !a.contains("token-") && !a.contains("user-a")),
        "the credential never reaches the proxy: {seen:?}"
    );
    let key = config
        .with_extension("state")
        .join("shimgate/proxy-identity.key");
    assert!(
        key.is_file(),
        "the key lives in the state dir: {}",
        key.display()
    );
}

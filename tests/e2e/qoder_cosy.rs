//! The real qoder client's wire (`docs/clients.md`): an `Encode=1` body and a COSY
//! signature. The ingress decodes the body and folds it; every upstream
//! attempt is encoded and signed again by the published rule (fresh payload
//! `requestId`, current `Cosy-Date`) with a fresh ask `request_id`; the
//! scripted qoder upstream checks each request as qoder does (its own
//! implementation of the rule: `tests/support/cosy_check.rs`) and refuses
//! a bad signature with 101 and a reused id with 103.

use http::{Method, StatusCode};
use serde_json::json;

use crate::support::bin::{tempdir, Served};
use crate::support::client;
use crate::support::conversation::Conversation;
use crate::support::cosy_check;
use crate::support::model::{Model, Wire};
use crate::support::qoder;
use crate::support::upstream::{Reply, Upstream};
use crate::support::Gate;

fn routes(model_url: &str) -> String {
    format!(
        "[retry]\ninitial_delay_ms = 10\njitter_ratio = 0\n[[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{model_url}\"\n"
    )
}

/// shimgate behind the reference compressor (past 8,000 characters it
/// summarises all but the last two turns).
async fn behind_reference_compressor(base: &str) -> (Gate, shimgate::compressor::Compressor) {
    let gate = Gate::start(base).await;
    let compressor = shimgate::compressor::start(
        "127.0.0.1:0".parse().unwrap(),
        &gate.qoder,
        shimgate::compressor::Policy {
            threshold_chars: 8000,
            keep_turns: 2,
            pass_through: false,
        },
    )
    .await
    .unwrap();
    gate.use_compressor(&compressor.url(), base);
    (gate, compressor)
}

fn problems(model: &Model) -> Vec<String> {
    model.seen().into_iter().flat_map(|s| s.problems).collect()
}

#[tokio::test]
async fn thirty_signed_turns_are_compressed_and_every_upstream_request_verifies() {
    let model = Model::start(Wire::Qoder).await;
    let (gate, _c) = behind_reference_compressor(&routes(&model.url())).await;
    let mut c = Conversation::new(Wire::Qoder, "conv-1", "user-1").signed();
    for n in 1..=30 {
        let t = c.turn(&gate.qoder).await;
        assert!(
            t.error.is_none() && t.problems.is_empty(),
            "turn {n}: {t:?}"
        );
    }
    assert_eq!(
        problems(&model),
        Vec::<String>::new(),
        "qoder refused a request"
    );
    assert_eq!(model.seen().len(), 30);
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["intercepted"], 30, "{q:#}");
    assert_eq!(q["fallback"], 0, "{q:#}");
    assert!(q["folded"].as_u64().unwrap() > 0, "{q:#}");
    assert_eq!(q["codec"]["cosy"]["signed"], 30, "{q:#}");
    let last = model.seen().last().unwrap().chars;
    assert!(
        last < c.turns.last().unwrap().sent_chars,
        "the last turn went up shorter"
    );
}

#[tokio::test]
async fn a_502_then_success_sends_two_valid_requests_with_different_ids() {
    let model = Model::start(Wire::Qoder).await;
    model.answer_next_with(Reply::json(502, "bad gateway"));
    let gate = Gate::start(&routes(&model.url())).await;
    let mut c = Conversation::new(Wire::Qoder, "conv-1", "user-1").signed();
    let t = c.turn(&gate.qoder).await;
    assert!(t.error.is_none(), "{t:?}");
    assert_eq!(model.seen().len(), 2, "one retry");
    assert_eq!(
        problems(&model),
        Vec::<String>::new(),
        "both verified, no id reused"
    );
    let ids: Vec<_> = model
        .upstream
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_string())
        .collect();
    assert_ne!(ids[0], ids[1], "each attempt is signed anew");
}

#[tokio::test]
async fn a_retry_after_an_empty_answer_meets_no_103() {
    let model = Model::start(Wire::Qoder).await;
    model.answer_next_with(Reply::sse().chunk(qoder::envelope("[DONE]")).end());
    for signed in [false, true] {
        let gate = Gate::start(&routes(&model.url())).await;
        let mut c = Conversation::new(Wire::Qoder, "conv-1", "user-1");
        if signed {
            c = c.signed();
            model.answer_next_with(Reply::sse().chunk(qoder::envelope("[DONE]")).end());
        }
        let t = c.turn(&gate.qoder).await;
        assert!(t.error.is_none(), "signed={signed}: {t:?}");
    }
    assert_eq!(problems(&model), Vec::<String>::new(), "no 101, no 103");
    assert_eq!(model.seen().len(), 4);
}

#[tokio::test]
async fn info_cosy_key_and_the_client_s_headers_go_upstream_unchanged() {
    let model = Model::start(Wire::Qoder).await;
    let gate = Gate::start(&routes(&model.url())).await;
    let ask = serde_json::to_vec(&qoder::ask(&[json!({"role": "user", "content": "hi"})])).unwrap();
    let encoded = cosy_check::encode(&ask);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sent = cosy_check::client_headers("user-7", "req-7", &encoded, qoder::PATH, now);
    let pairs: Vec<(&str, &str)> = sent.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let resp = client::send(
        Method::POST,
        &format!("{}{}", gate.qoder, qoder::PATH),
        &pairs,
        encoded,
    )
    .await;
    let (text, done, errors) = qoder::read_answer(&resp.body);
    assert!(
        done && errors.is_empty() && !text.is_empty(),
        "{}",
        resp.text()
    );
    assert_eq!(problems(&model), Vec::<String>::new());
    let up = &model.upstream.requests()[0];
    assert_eq!(
        up.path,
        qoder::PATH,
        "the path and its query are the client's"
    );
    for (name, value) in &sent {
        match name.as_str() {
            "authorization" | "cosy-date" | "cosy-bodyhash" | "cosy-bodylength" => {}
            _ => assert_eq!(up.header(name), Some(value.as_str()), "{name}"),
        }
    }
    let payload = |auth: &str| auth.split('.').nth(1).unwrap().to_string();
    let info = |p: String| -> serde_json::Value {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
        serde_json::from_slice(&raw).unwrap()
    };
    let before = info(payload(
        &sent.iter().find(|(k, _)| k == "authorization").unwrap().1,
    ));
    let after = info(payload(up.header("authorization").unwrap()));
    assert_eq!(before["info"], after["info"]);
    assert_eq!(before["cosyVersion"], after["cosyVersion"]);
    assert_ne!(before["requestId"], after["requestId"]);
}

#[tokio::test]
async fn an_encode_1_body_that_does_not_decode_falls_back_with_the_upstream_s_answer() {
    let up = Upstream::always(Reply::json(400, r#"{"code":"400","message":"bad body"}"#)).await;
    let gate = Gate::start(&routes(&up.url())).await;
    let resp = client::send(
        Method::POST,
        &format!("{}{}", gate.qoder, qoder::PATH),
        &[("content-type", "application/json")],
        "this is <not> the qoder encoding",
    )
    .await;
    assert_eq!(
        resp.status,
        StatusCode::BAD_REQUEST,
        "the upstream's own answer"
    );
    assert_eq!(resp.text(), r#"{"code":"400","message":"bad body"}"#);
    assert_eq!(up.hits(), 1, "passed through once, untouched");
    assert_eq!(up.requests()[0].body, b"this is <not> the qoder encoding");
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["fallback"], 1, "{q:#}");
    assert!(
        q["lastError"].as_str().unwrap().contains("does not decode"),
        "{q:#}"
    );
}

#[tokio::test]
async fn the_cosy_token_never_shows_in_status_metrics_or_logs() {
    let model = Model::start(Wire::Qoder).await;
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    std::fs::write(
        &config,
        format!(
            "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n{}",
            routes(&model.url())
        ),
    )
    .unwrap();
    let served = Served::start(&config, &["--log-format", "json"], &[("RUST_LOG", "debug")]);
    model.answer_next_with(Reply::json(502, "bad gateway"));
    let mut c = Conversation::new(Wire::Qoder, "conv-1", "user-1").signed();
    let t = c.turn(&served.qoder).await;
    assert!(t.error.is_none(), "{t:?}");
    let status = client::get(&format!("{}/status", served.qoder))
        .await
        .text();
    let metrics = client::get(&format!("{}/metrics", served.qoder))
        .await
        .text();
    let logs = served.stderr();
    for auth in model
        .upstream
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap().to_string())
    {
        let token = auth.trim_start_matches("Bearer ");
        let signature = token.rsplit('.').next().unwrap();
        for (what, text) in [("status", &status), ("metrics", &metrics), ("logs", &logs)] {
            assert!(
                !text.contains(token) && !text.contains(signature),
                "the COSY token is in the {what}"
            );
        }
    }
    assert!(!logs.contains("COSY."), "{logs}");
}

//! qoder's model-server wire end to end (`POST /model/v1/chat/completions`
//! on the qoder listener): the Qoder CLI's requests, as it sends them,
//! through shimgate (direct, the reference compressor, a proxy that
//! behaves as billion-context, the real billion-context) to a scripted
//! model server that checks what the real one checks (a Bearer token, an
//! `X-Request-ID` it has not seen, an OpenAI body with `metadata`), and
//! the answer read back as the CLI reads it. Under `qoder::` so
//! `.ci/windows` runs it against `shimgate.exe`.

use std::collections::HashSet;

use http::{Method, StatusCode};
use serde_json::json;
use shimgate_testkit::qoder_model::{self as qm, read_answer, CliRead};

use crate::support::bili::{self, Bili};
use crate::support::client;
use crate::support::conversation::{Conversation, Turn};
use crate::support::model::{Model, Wire};
use crate::support::proxy::{Options, TestProxy};
use crate::support::upstream::{Recorded, Reply, Upstream};
use crate::support::{print_figures, Gate};

/// The CLI's token in these tests (never in a log, `/status` or `/metrics`).
const TOKEN: &str = "qoder-jt-7c1e5a90b2d44f18";

/// `[[shims.qoder.model_routes]]` at `models`, fast retries.
fn routes(models: &[&Model]) -> String {
    let mut t =
        String::from("[retry]\ninitial_delay_ms = 10\nmax_delay_ms = 1000\njitter_ratio = 0\n");
    for (i, m) in models.iter().enumerate() {
        t.push_str(&format!(
            "[[shims.qoder.model_routes]]\nname = \"m{}\"\nurl = \"{}\"\n",
            i + 1,
            m.url()
        ));
    }
    t
}

/// One request as the CLI sends it, with `id` as its `X-Request-ID`.
async fn cli_send(base: &str, id: &str, text: &str) -> client::Resp {
    let body = qm::request(&[json!({"role": "user", "content": text})], id, "conv-1");
    let headers = qm::headers(TOKEN, id, "conv-1");
    let pairs: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    client::send(
        Method::POST,
        &format!("{base}{}", qm::PATH),
        &pairs,
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

fn request_ids(requests: &[Recorded]) -> Vec<String> {
    requests
        .iter()
        .map(|r| r.header("x-request-id").unwrap_or_default().to_owned())
        .collect()
}

fn assert_clean(turn: &Turn, what: &str) {
    assert!(
        turn.status.is_success() && turn.error.is_none() && turn.problems.is_empty(),
        "{what}: {turn:?}"
    );
}

fn problems(model: &Model) -> Vec<String> {
    model.seen().into_iter().flat_map(|s| s.problems).collect()
}

#[tokio::test]
async fn direct_mode_sends_each_attempt_with_a_fresh_request_id_and_the_token_untouched() {
    let model = Model::start(Wire::QoderModel).await;
    let gate = Gate::start(&routes(&[&model])).await;
    let resp = cli_send(&gate.qoder, "cli-id-1", "hi").await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let read = read_answer(&resp.body);
    assert!(read.done && read.error.is_none(), "{read:?}");
    assert_eq!(read.text, "Noted, reply 0.");
    let mut c = Conversation::new(Wire::QoderModel, "conv-2", TOKEN);
    for n in 1..=3 {
        assert_clean(&c.turn(&gate.qoder).await, &format!("turn {n}"));
    }
    let seen = model.upstream.requests();
    assert_eq!(seen.len(), 4);
    for r in &seen {
        assert_eq!(r.path, qm::PATH);
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {TOKEN}").as_str())
        );
        assert!(r.header("x-session-id").is_some());
    }
    let ids = request_ids(&seen);
    assert!(
        !ids.contains(&"cli-id-1".to_owned()),
        "shimgate's own id, not the CLI's"
    );
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 4, "{ids:?}");
    assert!(problems(&model).is_empty(), "{:?}", problems(&model));
    let st = gate.status().await;
    let m = &st["qoderModelShim"];
    assert_eq!(m["intercepted"], 4, "{m:#}");
    assert_eq!(m["fallback"], 4, "direct mode: {m:#}");
    assert_eq!(st["qoderShim"]["intercepted"], 0);
    assert_eq!(
        st["chain"]["routes"]["qoderModel"][0]["name"], "m1",
        "{:#}",
        st["chain"]
    );
}

#[tokio::test]
async fn through_the_reference_compressor_a_growing_conversation_folds() {
    let model = Model::start(Wire::QoderModel).await;
    let base = routes(&[&model]);
    let gate = Gate::start(&base).await;
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
    gate.use_compressor(&compressor.url(), &base);
    let mut c = Conversation::new(Wire::QoderModel, "conv-1", TOKEN);
    for n in 1..=8 {
        assert_clean(&c.turn(&gate.qoder).await, &format!("turn {n}"));
    }
    let st = gate.status().await;
    let m = &st["qoderModelShim"];
    assert_eq!(m["intercepted"], 8, "{m:#}");
    assert_eq!(m["fallback"], 0, "{m:#}");
    assert!(m["folded"].as_u64().unwrap() > 0, "{m:#}");
    let last = model.seen().last().unwrap().chars;
    assert!(
        last < c.turns.last().unwrap().sent_chars,
        "the model saw less"
    );
    assert!(problems(&model).is_empty(), "{:?}", problems(&model));
}

#[tokio::test]
async fn a_proxy_s_own_re_posts_each_get_a_fresh_request_id() {
    let model = Model::start(Wire::QoderModel).await;
    let options = Options {
        extra_posts: 2,
        ..Options::bili()
    };
    let (gate, proxy) = Gate::behind_proxy(&routes(&[&model]), "qoder", options).await;
    let mut c = Conversation::new(Wire::QoderModel, "conv-1", TOKEN);
    assert_clean(&c.turn(&gate.qoder).await, "turn 1");
    let ids = request_ids(&model.upstream.requests());
    assert_eq!(ids.len(), 3, "the proxy posted three times");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 3, "{ids:?}");
    assert!(problems(&model).is_empty(), "{:?}", problems(&model));
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
}

#[tokio::test]
async fn failover_between_two_model_routes_rests_the_quota_wall() {
    let (m1, m2) = (
        Model::start(Wire::QoderModel).await,
        Model::start(Wire::QoderModel).await,
    );
    m1.answer_next_with(
        Reply::sse()
            .chunk(qm::data("[EXCEED_QUOTA]"))
            .chunk(qm::ending(10))
            .end(),
    );
    let gate = Gate::start(&routes(&[&m1, &m2])).await;
    let first = cli_send(&gate.qoder, "cli-1", "one").await;
    let read = read_answer(&first.body);
    assert!(
        read.done && read.error.is_none() && read.text == "Noted, reply 0.",
        "{read:?}"
    );
    assert_eq!(first.headers["x-shimgate-route"], "m2");
    let second = cli_send(&gate.qoder, "cli-2", "two").await;
    assert!(read_answer(&second.body).done);
    assert_eq!(m1.upstream.hits(), 1, "m1 rests after its quota wall");
    assert_eq!(m2.upstream.hits(), 2);
    let ids = [
        request_ids(&m1.upstream.requests()),
        request_ids(&m2.upstream.requests()),
    ]
    .concat();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        3,
        "a fresh id per attempt: {ids:?}"
    );
    let st = gate.status().await;
    let effective = &st["chain"]["ordering"]["effective"]["qoderModel"];
    assert_eq!(effective[1]["route"], "m1", "{effective:#}");
    assert_eq!(effective[1]["reason"], "cooling", "{effective:#}");
    let metrics = client::get(&format!("{}/metrics", gate.qoder)).await.text();
    assert!(
        metrics.contains("shim=\"qoderModel\""),
        "the wire has its own metric labels"
    );
}

/// The gate on `base`, straight or behind a proxy that behaves as
/// billion-context (kept running while the pair lives).
async fn gate_on(base: &str, behind_proxy: bool) -> (Gate, Option<TestProxy>) {
    if behind_proxy {
        let (gate, proxy) = Gate::behind_proxy(base, "qoder", Options::bili()).await;
        (gate, Some(proxy))
    } else {
        (Gate::start(base).await, None)
    }
}

/// Every route failed and the last one answered with an HTTP error: the
/// client gets that answer as the model server sent it (its status,
/// content type, `Retry-After` and body), directly and through a proxy,
/// not shimgate's `502 AUTO_ROUTES_EXHAUSTED`: the CLI fetches a fresh
/// token on a 401 and waits out a 429. shimgate's own record keeps the
/// route list.
#[tokio::test]
async fn the_last_route_s_http_error_reaches_the_cli_as_the_model_server_sent_it() {
    let expired = r#"{"code":"105","message":"login expired"}"#;
    let queued = r#"{"code":"10605","message":"queued"}"#;
    for behind_proxy in [false, true] {
        let down = Upstream::start(|_, _| Reply::json(500, r#"{"message":"down"}"#)).await;
        let auth = Upstream::start(move |_, _| Reply::json(401, expired)).await;
        let busy =
            Upstream::start(move |_, _| Reply::json_with(429, &[("retry-after", "7")], queued))
                .await;
        let base = format!(
            "[retry]\nmax_retries = 0\n\
             [[shims.qoder.model_routes]]\nname = \"down\"\nurl = \"{}\"\n\
             [[shims.qoder.model_routes]]\nname = \"auth\"\nurl = \"{}\"\n",
            down.url(),
            auth.url()
        );
        let (gate, _proxy) = gate_on(&base, behind_proxy).await;
        let resp = cli_send(&gate.qoder, "cli-1", "hi").await;
        let path = if behind_proxy {
            "behind the proxy"
        } else {
            "direct"
        };
        assert_eq!(
            resp.status,
            StatusCode::UNAUTHORIZED,
            "{path}: {}",
            resp.text()
        );
        assert_eq!(resp.text(), expired, "{path}");
        assert!(
            resp.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{path}"
        );
        let st = gate.status().await;
        let call = &st["chain"]["calls"][0];
        assert_eq!(call["code"], "AUTO_ROUTES_EXHAUSTED", "{path}: {call:#}");
        assert_eq!(
            call["routes"].as_array().unwrap().len(),
            2,
            "{path}: {call:#}"
        );

        let base = format!(
            "[retry]\nmax_retries = 0\n\
             [[shims.qoder.model_routes]]\nname = \"busy\"\nurl = \"{}\"\n",
            busy.url()
        );
        let (gate, _proxy) = gate_on(&base, behind_proxy).await;
        let resp = cli_send(&gate.qoder, "cli-2", "hi").await;
        assert_eq!(
            resp.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{path}: {}",
            resp.text()
        );
        assert_eq!(resp.headers["retry-after"], "7", "{path}");
        assert_eq!(resp.text(), queued, "{path}");
        assert_eq!((down.hits(), auth.hits(), busy.hits()), (1, 1, 1), "{path}");
    }
}

/// `[EXCEED_QUOTA]` and then the end of the body (no `[DONE]`, no
/// content) is the quota wall: the route rests and the next one answers;
/// with no other route the client reads the sentinel as the model server
/// sent it (the CLI then asks again, as it does directly).
#[tokio::test]
async fn exceed_quota_then_the_body_s_end_rests_the_route() {
    let wall = qm::data("[EXCEED_QUOTA]{\"message\":\"quota exceeded\"}");
    for behind_proxy in [false, true] {
        let (m1, m2) = (
            Model::start(Wire::QoderModel).await,
            Model::start(Wire::QoderModel).await,
        );
        m1.answer_next_with(Reply::sse().chunk(wall.clone()).end());
        let (gate, _proxy) = gate_on(&routes(&[&m1, &m2]), behind_proxy).await;
        let read = read_answer(&cli_send(&gate.qoder, "cli-1", "one").await.body);
        assert!(read.done && read.text == "Noted, reply 0.", "{read:?}");
        let st = gate.status().await;
        let effective = &st["chain"]["ordering"]["effective"]["qoderModel"];
        assert_eq!(effective[1]["reason"], "cooling", "{effective:#}");

        let alone = Upstream::start({
            let wall = wall.clone();
            move |_, _| Reply::sse().chunk(wall.clone()).end()
        })
        .await;
        let base = format!(
            "[[shims.qoder.model_routes]]\nname = \"alone\"\nurl = \"{}\"\n",
            alone.url()
        );
        let (gate, _proxy) = gate_on(&base, behind_proxy).await;
        let resp = cli_send(&gate.qoder, "cli-2", "two").await;
        assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
        assert_eq!(resp.text(), wall, "the model server's own bytes");
        assert_eq!(alone.hits(), 1, "a quota wall is not retried");
    }
}

/// What the CLI reads of `reply` straight from the model server, and
/// through shimgate: directly, and behind a proxy that behaves as
/// billion-context.
async fn through_each_path(reply: &str) -> (CliRead, Vec<CliRead>) {
    let native = read_answer(reply.as_bytes());
    let mut reads = Vec::new();
    for behind_proxy in [false, true] {
        let model = Model::start(Wire::QoderModel).await;
        model.answer_next_with(Reply::sse().chunk(reply).end());
        let base = routes(&[&model]);
        let (gate, proxy) = if behind_proxy {
            let (g, p) = Gate::behind_proxy(&base, "qoder", Options::bili()).await;
            (g, Some(p))
        } else {
            (Gate::start(&base).await, None)
        };
        let resp = cli_send(&gate.qoder, "cli-1", "hi").await;
        assert!(resp.status.is_success(), "{}: {}", resp.status, resp.text());
        reads.push(read_answer(&resp.body));
        let st = gate.status().await;
        let fallback = st["qoderModelShim"]["fallback"].as_u64().unwrap();
        assert_eq!(fallback, u64::from(!behind_proxy), "the path taken: {st:#}");
        if let Some(p) = proxy {
            assert!(p.violations().is_empty(), "{:?}", p.violations());
        }
    }
    (native, reads)
}

#[tokio::test]
async fn each_envelope_error_reaches_the_cli_as_the_model_server_sent_it() {
    let queued = qm::queued_data(30);
    let cases = [
        ("duplicate before content", qm::data(&qm::duplicate_data())),
        (
            "login expired before content",
            qm::data(&qm::login_expired_data()),
        ),
        ("queued before content", qm::data(&queued)),
        (
            "error event before content",
            "event: error\ndata: {\"code\":\"105\",\"message\":\"login expired\"}\n\n".to_owned(),
        ),
        (
            "duplicate after content",
            format!(
                "{}{}",
                qm::first_content("half"),
                qm::data(&qm::duplicate_data())
            ),
        ),
        (
            "error event after content",
            format!(
                "{}event: error\ndata: {{\"code\":\"500\",\"message\":\"model crashed\"}}\n\n",
                qm::first_content("half")
            ),
        ),
        (
            "error chunk after content",
            format!(
                "{}{}",
                qm::first_content("half"),
                qm::data(r#"{"error":{"code":"500","message":"model crashed"}}"#)
            ),
        ),
    ];
    for (what, reply) in cases {
        let (native, reads) = through_each_path(&reply).await;
        assert!(native.error.is_some(), "{what}: {native:?}");
        for (path, read) in ["direct", "behind the proxy"].iter().zip(reads) {
            assert_eq!(read.error, native.error, "{what}, {path}");
            assert_eq!(read.text, native.text, "{what}, {path}");
        }
    }
}

#[tokio::test]
async fn each_sentinel_reaches_the_cli_in_its_place() {
    let reply = [
        qm::data(qm::NOTIFICATIONS),
        qm::first_content("hi"),
        qm::data("[EXCEED_QUOTA]{\"resetAt\":\"2026-12-07 00:00:00\"}"),
        qm::envelope(qm::NOT_EXCEED_QUOTA),
        qm::ending(50),
    ]
    .concat();
    let (native, reads) = through_each_path(&reply).await;
    assert_eq!(native.notifications.len(), 1);
    assert_eq!(native.sentinels.len(), 2);
    for (path, read) in ["direct", "behind the proxy"].iter().zip(reads) {
        assert_eq!(read.notifications, native.notifications, "{path}");
        assert_eq!(read.sentinels, native.sentinels, "{path}");
        assert_eq!(read.text, "hi", "{path}");
        assert!(
            read.done && read.finish.is_some() && read.error.is_none(),
            "{path}: {read:?}"
        );
    }
}

#[tokio::test]
async fn the_token_never_reaches_the_log_status_or_metrics() {
    use crate::support::bin::{tempdir, Served};
    let model = Model::start(Wire::QoderModel).await;
    model.answer_next_with(Reply::json(
        401,
        &json!({"code": "105", "message": format!("token {TOKEN} is not valid")}).to_string(),
    ));
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    std::fs::write(
        &config,
        format!(
            "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n{}",
            routes(&[&model])
        ),
    )
    .unwrap();
    let served = Served::start(&config, &["--log-format", "json"], &[("RUST_LOG", "debug")]);
    let refused = cli_send(&served.qoder, "cli-1", "hi").await;
    assert!(!refused.status.is_success(), "{}", refused.text());
    let ok = cli_send(&served.qoder, "cli-2", "hi").await;
    assert!(read_answer(&ok.body).done, "{}", ok.text());
    let status = client::get(&format!("{}/status", served.qoder))
        .await
        .text();
    let metrics = client::get(&format!("{}/metrics", served.qoder))
        .await
        .text();
    let logs = served.stderr();
    assert!(status.contains("qoderModelShim"), "{status}");
    assert!(
        status.contains("***"),
        "the echoed token is there, masked: {status}"
    );
    for (what, text) in [("status", &status), ("metrics", &metrics), ("logs", &logs)] {
        assert!(!text.contains(TOKEN), "the token is in the {what}: {text}");
    }
}

#[tokio::test]
async fn the_real_billion_context_compresses_the_model_server_wire() {
    let Some(dir) = bili::bundle() else { return };
    let model = Model::start(Wire::QoderModel).await;
    let base = routes(&[&model]);
    let gate = Gate::start(&base).await;
    let bili = Bili::start(&dir, &gate.qoder, 16_000).await;
    gate.use_compressor(&bili.url(), &base);
    let mut c = Conversation::new(Wire::QoderModel, "conv-m", TOKEN);
    for n in 1..=18 {
        let t = c.turn(&gate.qoder).await;
        assert!(
            t.status.is_success() && t.error.is_none() && t.problems.is_empty(),
            "turn {n}: {t:?}\n{}",
            bili.log()
                .lines()
                .rev()
                .take(30)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let st = gate.status().await;
    let m = &st["qoderModelShim"];
    print_figures(
        "billion-context",
        "qoderModel",
        c.turns.len(),
        m,
        c.turns.last().unwrap().sent_bytes,
        model.upstream.requests().last().unwrap().body.len(),
        "",
    );
    assert!(m["folded"].as_u64().unwrap() > 0, "{m:#}");
    assert_eq!(m["fallback"], 0, "{m:#}");
    let last_seen = model.seen().last().unwrap().chars;
    assert!(
        last_seen < c.turns.last().unwrap().sent_chars,
        "the model saw less"
    );
    assert!(problems(&model).is_empty(), "{:?}", problems(&model));
    let ids = request_ids(&model.upstream.requests());
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        ids.len(),
        "bili's own re-posts got fresh ids too"
    );
}

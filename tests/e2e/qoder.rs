//! The qoder shim end to end: agent → ingress → test compression proxy →
//! return leg → scripted envelope upstream, and back.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::client::{self, next_chunk};
use crate::support::proxy::{Options, TestProxy};
use crate::support::qoder::{
    self, answer, ask, envelope, error_envelope, read_answer, role_chunk, text_chunk, PATH,
};
use crate::support::upstream::{Recorded, Reply, Upstream};
use crate::support::{eventually, Gate};

mod cli;
mod model_server;

fn routes(ups: &[&Upstream]) -> String {
    let mut t =
        String::from("[retry]\ninitial_delay_ms = 10\nmax_delay_ms = 1000\njitter_ratio = 0\n");
    for (i, up) in ups.iter().enumerate() {
        t.push_str(&format!(
            "\n[[shims.qoder.routes]]\nname = \"q{}\"\nurl = \"{}\"\n",
            i + 1,
            up.url()
        ));
    }
    t
}

/// shimgate routed to `ups`, behind a test proxy on the qoder listener.
async fn with_proxy(ups: &[&Upstream], options: Options, extra: &str) -> (Gate, TestProxy) {
    Gate::behind_proxy(&format!("{}{extra}", routes(ups)), "qoder", options).await
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("shimgate-test-{:016x}", fastrand::u64(..)));
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn send_ask(gate: &Gate, body: &Value) -> client::Resp {
    client::send(
        Method::POST,
        &format!("{}{PATH}", gate.qoder),
        &[
            ("content-type", "application/json"),
            ("authorization", "Bearer agent-secret"),
        ],
        serde_json::to_vec(body).unwrap(),
    )
    .await
}

fn upstream_ask(r: &Recorded) -> Value {
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, PATH, "the original path and query are kept");
    r.json()
}

#[tokio::test]
async fn thirty_growing_turns_fold_through_the_proxy() {
    let up = Upstream::start(|_, n| {
        answer(&format!("answer number {n} is here"), 1000 + n as u64 * 300)
    })
    .await;
    let (gate, proxy) = with_proxy(&[&up], Options::default(), "").await;
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    for turn in 0..30 {
        messages.push(json!({"role": "user", "content": format!("turn {turn}: {}", "please look at this code ".repeat(25))}));
        let resp = send_ask(&gate, &ask(&messages)).await;
        assert_eq!(resp.status, StatusCode::OK);
        let (text, done, errors) = read_answer(&resp.body);
        assert_eq!(text, format!("answer number {turn} is here"), "turn {turn}");
        assert!(done && errors.is_empty(), "turn {turn}: {}", resp.text());
        messages.push(json!({"role": "assistant", "content": text}));
    }
    assert!(proxy.violations().is_empty(), "{:#?}", proxy.violations());
    let st = gate.status().await;
    let q = &st["qoderShim"];
    assert_eq!(q["intercepted"], 30);
    assert_eq!(q["forwarded"], 30);
    assert_eq!(q["fallback"], 0);
    assert_eq!(q["compacted"], 30, "the preamble alone counts as compacted");
    let folded = q["folded"].as_u64().unwrap();
    assert!(folded > 20 && folded < 30, "folded = {folded}");
    assert_eq!(q["effective"], true);
    assert!(q["recentExchanges"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["shrank"] == true));
    assert_eq!(q["lastExchange"]["contentShrank"], true);
    assert!(q["lastExchange"]["diff"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["kind"] == "removed"));
    // Upstream: every rebuilt ask has a fresh request_id and the compressed messages.
    let asks: Vec<Value> = up.requests().iter().map(upstream_ask).collect();
    let ids: HashSet<&str> = asks
        .iter()
        .map(|a| a["request_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 30);
    let last = asks.last().unwrap();
    assert!(last["messages"].as_array().unwrap().len() < messages.len());
    assert_eq!(last["messages"][0]["role"], "system");
    assert_eq!(
        last["model_config"]["key"], "qmodel_38max",
        "other fields come from the original"
    );
    assert_eq!(last["business"]["type"], "agent");
    assert!(last["tools"].is_array());
    assert_eq!(
        up.requests()[0].header("authorization"),
        Some("Bearer agent-secret")
    );
}

#[tokio::test]
async fn proxy_down_falls_back_and_the_agent_still_gets_its_answer() {
    let up = Upstream::always(answer("direct answer", 10)).await;
    let gate = Gate::start(&format!(
        "[compressor]\nurl = \"http://127.0.0.1:9\"\n{}",
        routes(&[&up])
    ))
    .await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    let (text, done, _) = read_answer(&resp.body);
    assert_eq!((text.as_str(), done), ("direct answer", true));
    let q = &gate.status().await["qoderShim"];
    assert_eq!(
        (
            q["intercepted"].as_u64(),
            q["fallback"].as_u64(),
            q["forwarded"].as_u64()
        ),
        (Some(1), Some(1), Some(0))
    );
    assert_eq!(q["effective"], false);
    assert!(
        q["lastError"].as_str().unwrap().contains("unreachable"),
        "{q}"
    );
    assert_eq!(up.hits(), 1);
}

#[tokio::test]
async fn proxy_failing_before_the_return_leg_falls_back() {
    let up = Upstream::always(answer("direct answer", 10)).await;
    let (gate, proxy) = with_proxy(
        &[&up],
        Options {
            fail_with: Some(502),
            ..Options::default()
        },
        "",
    )
    .await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "direct answer");
    assert_eq!(proxy.requests.load(Ordering::SeqCst), 1);
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["fallback"], 1);
    assert!(q["lastError"].as_str().unwrap().contains("502"), "{q}");
}

#[tokio::test]
async fn direct_mode_without_a_compressor_still_answers() {
    let up = Upstream::always(answer("no proxy here", 10)).await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "no proxy here");
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["fallback"], 1);
    assert!(q["lastError"].is_null(), "direct mode is not an error");
}

#[tokio::test]
async fn a_repeated_return_leg_post_is_served_again_with_a_fresh_request_id() {
    let up = Upstream::always(answer("again", 10)).await;
    let (gate, _proxy) = with_proxy(
        &[&up],
        Options {
            extra_posts: 1,
            ..Options::default()
        },
        "",
    )
    .await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "again");
    assert_eq!(up.hits(), 2);
    let ids: HashSet<String> = up
        .requests()
        .iter()
        .map(|r| r.json()["request_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2, "each rebuilt request gets its own request_id");
    assert_eq!(gate.status().await["qoderShim"]["forwarded"], 2);
}

#[tokio::test]
async fn a_return_leg_post_after_the_answer_is_still_accounted() {
    let up = Upstream::always(answer("late", 10)).await;
    let (gate, proxy) = with_proxy(&[&up], Options::default(), "").await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "late");
    // The agent has its answer: the ingress, and its copy of what it sent
    // the proxy, are gone. The return leg folds the native body again.
    let path = proxy.paths.lock().unwrap()[0].clone();
    let sent = proxy.received.lock().unwrap()[0].clone();
    let late = client::post_json(&format!("{}{path}", gate.qoder), &sent).await;
    assert_eq!(late.status, StatusCode::OK);
    assert_eq!(read_answer(&late.body).0, "late");
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["forwarded"], 2);
    let recent = q["recentExchanges"].as_array().unwrap();
    assert_eq!(recent.len(), 2, "both posts are accounted: {q}");
    assert_eq!(recent[0]["beforeCount"], recent[1]["beforeCount"]);
    assert_eq!(recent[0]["beforeContent"], recent[1]["beforeContent"]);
    assert_eq!(recent[0]["changed"], false);
}

#[tokio::test]
async fn unknown_rid_is_410_gone() {
    let gate = Gate::start("").await;
    let resp = client::post_json(
        &format!("{}/qoder/0123abcd/chat/completions", gate.qoder),
        &json!({"messages": []}),
    )
    .await;
    assert_eq!(resp.status, StatusCode::GONE);
    assert_eq!(resp.json()["error"]["code"], "RID_GONE");
}

#[tokio::test]
async fn malformed_json_on_the_return_leg_is_400_with_the_reason() {
    let up = Upstream::always(answer("x", 10)).await;
    let (gate, proxy) = with_proxy(&[&up], Options::default(), "").await;
    // Learn a live rid by letting one call through, then reuse it.
    send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(proxy.requests.load(Ordering::SeqCst), 1);
    let st = gate.status().await;
    let rid = st["qoderShim"]["lastExchange"]["rid"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = client::send(
        Method::POST,
        &format!("{}/qoder/{rid}/chat/completions", gate.qoder),
        &[],
        "{not json",
    )
    .await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST);
    assert!(resp.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not JSON"));
}

#[tokio::test]
async fn upstream_502_on_route_one_is_answered_by_route_two() {
    let r1 = Upstream::always(Reply::json(502, "bad gateway")).await;
    let r2 = Upstream::always(answer("from route two", 10)).await;
    let (gate, proxy) = with_proxy(&[&r1, &r2], Options::default(), "").await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "from route two");
    assert!(r1.hits() >= 1);
    assert_eq!(r2.hits(), 1);
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
}

#[tokio::test]
async fn side_request_with_stream_false_gets_one_completion() {
    let up = Upstream::always(answer("a short summary", 10)).await;
    let (gate, _proxy) = with_proxy(&[&up], Options::default(), "").await;
    send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    let rid = gate.status().await["qoderShim"]["lastExchange"]["rid"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = client::post_json(
        &format!("{}/qoder/{rid}/chat/completions", gate.qoder),
        &json!({"model": "qmodel_38max", "stream": false, "messages": [{"role": "user", "content": "summarise"}]}),
    )
    .await;
    assert_eq!(resp.status, StatusCode::OK);
    let v = resp.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], "a short summary");
    assert_eq!(v["usage"]["prompt_tokens"], 10);
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["sideRequests"], 1);
    assert_eq!(
        q["compacted"], 1,
        "the side request is not counted as a compaction"
    );
}

#[tokio::test]
async fn reset_after_content_ends_with_an_error_frame_and_no_duplicated_text() {
    let up = Upstream::always(
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope(&text_chunk("Hel")))
            .chunk(envelope(&text_chunk("lo")))
            .sleep(20)
            .reset(),
    )
    .await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    let (text, done, errors) = read_answer(&resp.body);
    assert_eq!(text, "Hello", "no retry after content");
    assert!(done, "{}", resp.text());
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["code"], "TRANSPORT");
    assert_eq!(up.hits(), 1);
}

#[tokio::test]
async fn reset_before_content_is_retried_and_the_text_arrives_once() {
    let up = Upstream::sequence(vec![
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope("null"))
            .reset(),
        answer("whole answer", 10),
    ])
    .await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(
        read_answer(&resp.body),
        ("whole answer".to_string(), true, vec![])
    );
    assert_eq!(up.hits(), 2);
}

#[tokio::test]
async fn an_empty_stream_is_retried() {
    let up = Upstream::sequence(vec![
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope("[DONE]"))
            .hold(),
        answer("second time", 10),
    ])
    .await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "second time");
    assert_eq!(up.hits(), 2);
    let log = gate.status().await["chain"]["log"].clone();
    assert_eq!(log[0]["code"], "EMPTY_RESPONSE");
}

#[tokio::test]
async fn queue_throttle_10605_waits_its_retry_after_then_retries() {
    let throttle = json!({"code": "403", "message": json!({"code": "10605", "message": json!({"isQueued": false, "retryAfterSeconds": 0}).to_string()}).to_string()}).to_string();
    let up = Upstream::sequence(vec![
        Reply::sse().chunk(error_envelope(403, &throttle)).hold(),
        answer("after the queue", 10),
    ])
    .await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "after the queue");
    let log = gate.status().await["chain"]["log"].clone();
    assert_eq!(log[0]["code"], "RATE_LIMIT");
}

#[tokio::test]
async fn daily_limit_110_cools_the_route_and_switches() {
    let limit = json!({"code": "110", "message": "Billing daily count exceeded"}).to_string();
    let r1 = Upstream::always(Reply::sse().chunk(error_envelope(200, &limit)).hold()).await;
    let r2 = Upstream::always(answer("route two", 10)).await;
    let gate = Gate::start(&routes(&[&r1, &r2])).await;
    for _ in 0..2 {
        let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
        assert_eq!(read_answer(&resp.body).0, "route two");
    }
    assert_eq!(r1.hits(), 1, "the cooling route is skipped the second time");
    assert_eq!(
        gate.status().await["chain"]["ordering"]["cooldown"][0]["route"],
        "q1"
    );
}

#[tokio::test]
async fn an_unreadable_body_passes_through_untouched_as_a_fallback() {
    let up = Upstream::always(Reply::json(200, r#"{"encrypted":true}"#)).await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = client::send(
        Method::POST,
        &format!("{}{PATH}", gate.qoder),
        &[],
        "Q2lwaGVydGV4dA==",
    )
    .await;
    assert_eq!(resp.text(), r#"{"encrypted":true}"#);
    assert_eq!(up.requests()[0].body, b"Q2lwaGVydGV4dA==");
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["fallback"], 1);
    assert!(q["lastError"]
        .as_str()
        .unwrap()
        .contains("passed through untouched"));
}

#[tokio::test]
async fn shutdown_ends_a_running_stream_with_a_final_error_frame() {
    if crate::support::bin::skip_for_external("stops with a grace period of its own (200 ms)") {
        return;
    }
    let up = Upstream::always(
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope(&text_chunk("partial")))
            .sleep(10_000)
            .end(),
    )
    .await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = client::open(
        Method::POST,
        &format!("{}{PATH}", gate.qoder),
        &[],
        serde_json::to_vec(&ask(&[json!({"role": "user", "content": "hi"})])).unwrap(),
    )
    .await;
    let mut body = resp.into_body();
    let first = next_chunk(&mut body).await.unwrap();
    assert!(String::from_utf8_lossy(&first).contains("partial"));
    let stop = tokio::spawn(gate.stop(Duration::from_millis(200)));
    let mut rest = Vec::new();
    while let Some(c) = next_chunk(&mut body).await {
        rest.extend_from_slice(&c);
    }
    stop.await.unwrap();
    let (_, done, errors) = read_answer(&rest);
    assert!(done, "{}", String::from_utf8_lossy(&rest));
    assert_eq!(errors.len(), 1);
    assert!(errors[0]["message"].as_str().unwrap().contains("shut down"));
}

#[tokio::test]
async fn client_leaving_stops_the_upstream_stream() {
    let up = Upstream::always(
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope(&text_chunk("a")))
            .hold(),
    )
    .await;
    let gate = Gate::start(&routes(&[&up])).await;
    let resp = client::open(
        Method::POST,
        &format!("{}{PATH}", gate.qoder),
        &[],
        serde_json::to_vec(&ask(&[json!({"role": "user", "content": "hi"})])).unwrap(),
    )
    .await;
    let mut body = resp.into_body();
    next_chunk(&mut body).await.unwrap();
    drop(body);
    assert!(
        eventually(Duration::from_secs(3), || async {
            up.peer_gone.load(Ordering::SeqCst) == 1
        })
        .await
    );
    assert!(
        eventually(Duration::from_secs(3), || async {
            gate.status().await["chain"]["calls"][0]["outcome"] == "aborted"
        })
        .await
    );
}

#[tokio::test]
async fn bili_mode_proxy_still_gives_the_agent_its_text() {
    let up = Upstream::always(answer("through bili", 1234)).await;
    let (gate, proxy) = with_proxy(&[&up], Options::bili(), "").await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    let (text, done, errors) = read_answer(&resp.body);
    assert_eq!(
        (text.as_str(), done, errors.len()),
        ("through bili", true, 0)
    );
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
    assert!(
        resp.text().contains("\"prompt_tokens\":1234"),
        "bili's finish carries the usage we reported"
    );
    let _ = qoder::PATH;
}

#[tokio::test]
async fn the_exec_codec_signs_every_attempt_anew() {
    if crate::support::bin::skip_for_windows_binary("the exec codec runs python3, a Linux program")
    {
        return;
    }
    use shimgate_shim_qoder::codec::{decode_body, test_secret, verify_test_signature};
    let up = Upstream::sequence(vec![Reply::json(502, "try again"), answer("signed", 10)]).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/qoder_codec.py");
    let toml = format!(
        "[shims.qoder]\ncodec = \"exec\"\ncodec_command = [\"python3\", \"{script}\"]\n{}",
        routes(&[&up])
    );
    let gate = Gate::start(&toml).await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    assert_eq!(read_answer(&resp.body).0, "signed", "{}", resp.text());
    let reqs = up.requests();
    assert_eq!(reqs.len(), 2);
    let mut signatures = HashSet::new();
    let mut request_ids = HashSet::new();
    for r in &reqs {
        let auth = r.header("authorization").unwrap();
        let sig = verify_test_signature(
            &test_secret(),
            auth,
            r.header("cosy-date").unwrap(),
            &r.body,
            &r.path,
        )
        .unwrap_or_else(|e| panic!("bad signature: {e:?}"));
        signatures.insert(auth.to_string());
        let ask: Value = serde_json::from_slice(&decode_body(&r.body).unwrap()).unwrap();
        request_ids.insert(ask["request_id"].as_str().unwrap().to_string());
        let _ = sig;
    }
    assert_eq!(signatures.len(), 2, "each attempt is signed afresh");
    assert_eq!(
        request_ids.len(),
        2,
        "every attempt carries a fresh ask request_id (qoder refuses a reused one with 103)"
    );
    let codec = &gate.status().await["qoderShim"]["codec"];
    assert_eq!(codec["kind"], "exec");
    assert_eq!(codec["starts"], 1, "one co-process serves every call");
    assert_eq!(codec["calls"], 2);
}

/// Direct mode sends a body as it came before reading it; one the `exec`
/// codec would hand to its co-process is read first. An ask the shim
/// cannot read then never reaches the co-process: it goes up untouched.
#[tokio::test]
async fn an_unreadable_ask_passes_the_exec_codec_by_untouched() {
    let up = Upstream::always(Reply::json(200, r#"{"passed":true}"#)).await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/qoder_codec.py");
    let toml = format!(
        "[shims.qoder]\ncodec = \"exec\"\ncodec_command = [\"python3\", \"{script}\"]\n{}",
        routes(&[&up])
    );
    let gate = Gate::start(&toml).await;
    let unreadable = r#"{"model":"m"}"#;
    let resp = client::send(
        Method::POST,
        &format!("{}{PATH}", gate.qoder),
        &[("content-type", "application/json")],
        unreadable,
    )
    .await;
    assert_eq!(resp.text(), r#"{"passed":true}"#);
    assert_eq!(
        up.requests()[0].body,
        unreadable.as_bytes(),
        "as the agent sent it"
    );
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["fallback"], 1);
    assert!(q["lastError"]
        .as_str()
        .unwrap()
        .contains("passed through untouched"));
    assert_eq!(q["codec"]["calls"], 0, "the co-process never saw it");
}

#[tokio::test]
async fn a_codec_that_dies_is_restarted() {
    if crate::support::bin::skip_for_windows_binary("the exec codec runs python3, a Linux program")
    {
        return;
    }
    let up = Upstream::always(answer("alive", 10)).await;
    let dir = tempdir();
    let script = dir.join("die_after_one.py");
    std::fs::write(
        &script,
        "import sys, json, base64\nline = sys.stdin.readline()\nreq = json.loads(line)\nprint(json.dumps({'url': req['route']['url'] + req['path'], 'headers': {'content-type': 'application/json'}, 'body': base64.b64encode(json.dumps(req['ask']).encode()).decode()}), flush=True)\n",
    )
    .unwrap();
    let toml = format!(
        "[shims.qoder]\ncodec = \"exec\"\ncodec_command = [\"python3\", \"{}\"]\n{}",
        script.display(),
        routes(&[&up])
    );
    let gate = Gate::start(&toml).await;
    for _ in 0..2 {
        let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
        assert_eq!(read_answer(&resp.body).0, "alive", "{}", resp.text());
    }
    assert_eq!(gate.status().await["qoderShim"]["codec"]["starts"], 2);
}

#[tokio::test]
async fn a_small_max_tokens_call_still_works_and_counts_as_a_side_request() {
    let up = Upstream::always(answer("A short title", 10)).await;
    let (gate, _proxy) = with_proxy(&[&up], Options::default(), "").await;
    let mut body = ask(&[json!({"role": "user", "content": "name this session"})]);
    body["parameters"]["max_tokens"] = json!(150);
    let resp = send_ask(&gate, &body).await;
    assert_eq!(read_answer(&resp.body).0, "A short title");
    let q = &gate.status().await["qoderShim"];
    assert_eq!(q["sideRequests"], 1);
    assert_eq!(q["compacted"], 0);
    assert_eq!(q["forwarded"], 1);
    assert_eq!(up.requests()[0].json()["parameters"]["max_tokens"], 150);
}

#[tokio::test]
async fn an_error_after_content_still_reaches_the_agent_through_a_bili_like_proxy() {
    let up = Upstream::always(
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope(&text_chunk("half an ")))
            .sleep(20)
            .reset(),
    )
    .await;
    let (gate, proxy) = with_proxy(&[&up], Options::bili(), "").await;
    let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
    let (text, done, errors) = read_answer(&resp.body);
    assert_eq!(text, "half an ");
    assert!(done);
    assert_eq!(
        errors.len(),
        1,
        "the proxy dropped the error frame:\n{}",
        resp.text()
    );
    assert_eq!(errors[0]["code"], "TRANSPORT");
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
}

/// An answer whose second envelope's `body` is not JSON: content first,
/// then the unreadable frame, then more content and the end.
fn answer_with_a_non_json_body() -> Reply {
    let frames = [
        envelope(&role_chunk()),
        envelope(&text_chunk("Hel")),
        envelope("this is not json <script>"),
        envelope(&text_chunk("lo")),
    ];
    let reply = frames.iter().fold(Reply::sse(), |r, f| r.chunk(f));
    let (finish, usage) = qoder::finish_and_usage(5);
    reply
        .chunk(envelope(&finish))
        .chunk(envelope(&usage))
        .chunk(envelope("[DONE]"))
        .hold()
}

#[tokio::test]
async fn an_envelope_whose_body_is_not_json_reaches_neither_the_proxy_nor_the_agent() {
    for proxied in [false, true] {
        let up = Upstream::always(answer_with_a_non_json_body()).await;
        let (gate, proxy) = if proxied {
            let (gate, proxy) = with_proxy(&[&up], Options::default(), "").await;
            (gate, Some(proxy))
        } else {
            (Gate::start(&routes(&[&up])).await, None)
        };
        let resp = send_ask(&gate, &ask(&[json!({"role": "user", "content": "hi"})])).await;
        let text = resp.text();
        assert!(
            !text.contains("not json") && !text.contains("script"),
            "proxied {proxied}: the agent read {text}"
        );
        assert_eq!(
            read_answer(&resp.body),
            ("Hello".to_string(), true, vec![]),
            "proxied {proxied}: the answer goes on past the dropped frame"
        );
        if let Some(proxy) = proxy {
            let seen = proxy.violations();
            assert!(
                seen.is_empty(),
                "the proxy read a frame it could not parse: {seen:?}"
            );
        }
        let route = &gate.status().await["chain"]["routes"]["qoder"][0];
        assert_eq!(
            route["today"]["unreadableFrames"], 1,
            "proxied {proxied}: counted on its route: {route}"
        );
        assert_eq!(up.hits(), 1, "proxied {proxied}: not retried");
    }
}

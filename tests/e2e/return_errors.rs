//! Errors on the return leg as an OpenAI client expects them:
//! before the first content a failure is an HTTP status with an OpenAI error
//! body the proxy can act on, carrying in `error.native` what the agent
//! would have got directly, which the ingress hands the agent in its own
//! wire. After the first content nothing changes (one in-band final error).

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shimgate_testkit::trae::{digest, End};

use crate::support::client;
use crate::support::proxy::{Options, TestProxy};
use crate::support::qoder;
use crate::support::trae;
use crate::support::upstream::{Reply, Upstream};
use crate::support::Gate;

async fn trae_behind_proxy(ups: &[&Upstream], route_extra: &str) -> (Gate, TestProxy) {
    let mut base =
        "[retry]\ninitial_delay_ms = 10\nmax_delay_ms = 1000\nmax_retries = 1\n".to_string();
    for (i, up) in ups.iter().enumerate() {
        base.push_str(&format!(
            "[[shims.trae.routes]]\nname = \"t{}\"\nurl = \"{}\"\n{route_extra}\n",
            i + 1,
            up.url()
        ));
    }
    Gate::behind_proxy(&base, "trae", Options::default()).await
}

async fn send_trae(gate: &Gate, token: &str) -> client::Resp {
    client::send(
        Method::POST,
        &format!("{}{}", gate.trae, trae::PATH),
        &[
            ("content-type", "application/json"),
            ("x-ide-token", token),
            ("authorization", &format!("Cloud-IDE-JWT {token}")),
        ],
        serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
    )
    .await
}

#[tokio::test]
async fn a_trae_prompt_too_long_is_a_400_for_the_proxy_and_solo_4022_for_the_agent() {
    let up = Upstream::always(trae::reply(&trae::error_answer(
        4022,
        "The prompt is too long. token tok-secret-123456 was used",
    )))
    .await;
    let (gate, proxy) = trae_behind_proxy(&[&up], "context_tokens = 200000").await;
    let resp = send_trae(&gate, "tok-secret-123456").await;
    assert_eq!(resp.status, StatusCode::OK);
    let d = digest(&resp.body);
    let End::Error(seen) = &d.end else {
        panic!("the agent got no SOLO error: {}", resp.text())
    };
    let data = format!("{:?}", seen.data);
    assert!(
        data.contains("4022") && data.contains("prompt is too long"),
        "{data}"
    );
    assert_eq!(up.hits(), 1, "a context overflow never switches or retries");
    let errors = proxy.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!(e.status, 400);
    assert_eq!(e.body["error"]["code"], "context_length_exceeded");
    assert_eq!(e.body["error"]["type"], "invalid_request_error");
    assert_eq!(e.body["error"]["param"], "messages");
    let message = e.body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("The prompt is too long.")
            && message.ends_with("; maximum context length is 200000 tokens"),
        "{message}"
    );
    let seen_by_proxy = e.body.to_string();
    assert!(
        !seen_by_proxy.contains("tok-secret-123456"),
        "the agent's token reached the proxy: {seen_by_proxy}"
    );
    assert_eq!(e.body["error"]["upstreamCode"], "4022");
}

/// The SOLO error a TRAE agent read, `(code, message)` as text.
fn solo_error(resp: &client::Resp) -> Option<String> {
    match digest(&resp.body).end {
        End::Error(seen) => Some(format!("{:?}", seen.data)),
        _ => None,
    }
}

#[tokio::test]
async fn a_trae_agent_reads_its_own_solo_error_of_every_class_through_a_proxy_and_directly() {
    // (class, SOLO code, message, what the proxy gets)
    let cases = [
        ("auth", 1002, "token expired", 502),
        ("quota", 4008, "Your requests have exceeded the quota.", 502),
        (
            "context window",
            4022,
            "prompt tokens exceed the limit of 1000000.",
            400,
        ),
        ("server", 3003, "all models failed", 502),
    ];
    let mut failed = Vec::new();
    for (class, code, message, proxy_status) in cases {
        let up = Upstream::always(trae::reply(&trae::error_answer(code, message))).await;
        let (gate, proxy) = trae_behind_proxy(&[&up], "").await;
        let through = send_trae(&gate, "tok-1").await;
        let direct_gate = Gate::start(&format!(
            "[retry]\ninitial_delay_ms = 10\nmax_retries = 1\n[[shims.trae.routes]]\nname = \"t1\"\nurl = \"{}\"\n",
            up.url()
        ))
        .await;
        let direct = send_trae(&direct_gate, "tok-1").await;
        for (how, resp) in [("through the proxy", &through), ("directly", &direct)] {
            let seen = solo_error(resp);
            let ok = resp.status == StatusCode::OK
                && seen
                    .as_deref()
                    .is_some_and(|d| d.contains(&code.to_string()) && d.contains(message));
            if !ok {
                failed.push(format!(
                    "{class} {how}: want a 200 SOLO error {code} {message:?}, got {} {}",
                    resp.status,
                    resp.text().chars().take(300).collect::<String>()
                ));
            }
        }
        let errors = proxy.errors();
        match errors.first() {
            Some(e) if e.status == proxy_status => {
                if e.status == 502 {
                    assert_eq!(e.body["error"]["code"], "AUTO_ROUTES_EXHAUSTED", "{class}");
                    assert!(
                        e.body["error"]["routes"][0]["reason"]
                            .as_str()
                            .unwrap()
                            .contains(message),
                        "{class}: {e:?}"
                    );
                }
            }
            other => failed.push(format!(
                "{class}: the proxy should get {proxy_status}, got {other:?}"
            )),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[tokio::test]
async fn the_last_try_decides_what_the_agent_reads_when_every_route_failed() {
    let in_band = Upstream::always(trae::reply(&trae::error_answer(1002, "token expired"))).await;
    let http = Upstream::always(Reply::json(500, "boom")).await;
    // In-band last: the agent's own SOLO error.
    let (gate, _proxy) = trae_behind_proxy(&[&http, &in_band], "").await;
    let resp = send_trae(&gate, "tok-1").await;
    assert!(
        solo_error(&resp).is_some_and(|d| d.contains("1002")),
        "{}",
        resp.text()
    );
    // An HTTP failure last: the JSON 502 with the route list.
    let (gate, _proxy) = trae_behind_proxy(&[&in_band, &http], "").await;
    let resp = send_trae(&gate, "tok-1").await;
    assert_eq!(resp.status, StatusCode::BAD_GATEWAY, "{}", resp.text());
    assert_eq!(resp.json()["error"]["code"], "AUTO_ROUTES_EXHAUSTED");
    assert_eq!(resp.json()["error"]["routes"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_qoder_agent_reads_its_own_error_frame_when_every_route_failed_in_band() {
    let up = Upstream::always(
        Reply::sse()
            .chunk(qoder::error_envelope(
                401,
                r#"{"code":"101","message":"Signature invalid"}"#,
            ))
            .end(),
    )
    .await;
    let base = format!(
        "[[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{}\"\n",
        up.url()
    );
    let (gate, proxy) = Gate::behind_proxy(&base, "qoder", Options::default()).await;
    let resp = qoder::send_hi(&gate.qoder).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    let (text, done, errors) = qoder::read_answer(&resp.body);
    assert_eq!((text.as_str(), done, errors.len()), ("", true, 1));
    assert!(
        errors[0]["message"]
            .as_str()
            .unwrap()
            .contains("Signature invalid"),
        "{errors:?}"
    );
    let e = &proxy.errors()[0];
    assert_eq!(
        (e.status, &e.body["error"]["code"]),
        (502, &json!("AUTO_ROUTES_EXHAUSTED"))
    );
}

#[tokio::test]
async fn a_rate_limited_route_is_a_429_with_retry_after_for_the_proxy() {
    let up = Upstream::always(Reply::json_with(
        429,
        &[("retry-after", "30")],
        r#"{"error":{"message":"slow down"}}"#,
    ))
    .await;
    let (gate, proxy) = trae_behind_proxy(&[&up], "").await;
    let resp = send_trae(&gate, "tok-1").await;
    // A Retry-After beyond the backoff cap leaves the route at once.
    assert_eq!(up.hits(), 1);
    let errors = proxy.errors();
    let e = &errors[0];
    assert_eq!(e.status, 429, "{e:?}");
    assert_eq!(e.retry_after.as_deref(), Some("30"));
    assert_eq!(e.body["error"]["type"], "rate_limit_error");
    // The agent gets what it would have got directly: the exhausted 502.
    assert_eq!(resp.status, StatusCode::BAD_GATEWAY);
    assert_eq!(resp.json()["error"]["code"], "AUTO_ROUTES_EXHAUSTED");
}

#[tokio::test]
async fn every_route_failing_is_a_502_with_the_route_list_for_proxy_and_agent() {
    let r1 = Upstream::always(Reply::json(500, "boom one")).await;
    let r2 = Upstream::always(Reply::json(503, "boom two")).await;
    let (gate, proxy) = trae_behind_proxy(&[&r1, &r2], "").await;
    let resp = send_trae(&gate, "tok-1").await;
    assert_eq!(resp.status, StatusCode::BAD_GATEWAY);
    let agent = resp.json();
    assert_eq!(agent["error"]["code"], "AUTO_ROUTES_EXHAUSTED");
    assert_eq!(agent["error"]["routes"].as_array().unwrap().len(), 2);
    let e = &proxy.errors()[0];
    assert_eq!(e.status, 502);
    assert_eq!(e.body["error"]["code"], "AUTO_ROUTES_EXHAUSTED");
    assert_eq!(e.body["error"]["routes"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn a_qoder_http_400_too_long_is_passed_to_the_agent_as_the_upstream_sent_it() {
    let body = r#"{"code":"400","message":"prompt is too long: the limit of 128000 tokens"}"#;
    let up = Upstream::always(Reply::json(400, body)).await;
    let base = format!(
        "[[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{}\"\n",
        up.url()
    );
    let (gate, proxy) = Gate::behind_proxy(&base, "qoder", Options::default()).await;
    let resp = qoder::send_hi(&gate.qoder).await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        resp.text(),
        body,
        "the agent reads the upstream's own answer"
    );
    let e = &proxy.errors()[0];
    assert_eq!(e.status, 400);
    assert_eq!(e.body["error"]["code"], "context_length_exceeded");
    assert_eq!(
        e.body["error"]["message"],
        "prompt is too long: the limit of 128000 tokens; maximum context length is 128000 tokens",
        "the window restated in bili's words (it reads only those)"
    );
}

#[tokio::test]
async fn a_qoder_in_band_error_reaches_the_agent_as_its_error_frame() {
    let up = Upstream::always(
        Reply::sse()
            .chunk(qoder::error_envelope(
                400,
                r#"{"code":"400","message":"The prompt is too long"}"#,
            ))
            .end(),
    )
    .await;
    let base = format!(
        "[[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{}\"\ncontext_tokens = 64000\n",
        up.url()
    );
    let (gate, proxy) = Gate::behind_proxy(&base, "qoder", Options::default()).await;
    let resp = qoder::send_hi(&gate.qoder).await;
    assert_eq!(resp.status, StatusCode::OK);
    let (text, done, errors) = qoder::read_answer(&resp.body);
    assert_eq!(
        (text.as_str(), done, errors.len()),
        ("", true, 1),
        "{}",
        resp.text()
    );
    assert!(errors[0]["message"].as_str().unwrap().contains("too long"));
    let e = &proxy.errors()[0];
    assert_eq!(e.status, 400);
    let message = e.body["error"]["message"].as_str().unwrap();
    assert!(
        message.ends_with("maximum context length is 64000 tokens"),
        "{message}"
    );
}

#[tokio::test]
async fn a_side_request_that_overflows_is_a_400_too() {
    let up = Upstream::always(trae::reply(&trae::error_answer(4006, "prompt too long"))).await;
    let (gate, _proxy) = trae_behind_proxy(&[&up], "").await;
    // A first call leaves a live rid behind.
    send_trae(&gate, "tok-1").await;
    let rid = gate.status().await["traeShim"]["lastExchange"]["rid"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = client::post_json(
        &format!("{}/trae/{rid}/chat/completions", gate.trae),
        &json!({"model": "m", "stream": false, "messages": [{"role": "user", "content": "sum up"}]}),
    )
    .await;
    assert_eq!(resp.status, StatusCode::BAD_REQUEST, "{}", resp.text());
    let v: Value = resp.json();
    assert_eq!(v["error"]["code"], "context_length_exceeded");
}

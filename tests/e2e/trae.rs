//! The trae shim end to end: a TRAE agent speaking SOLO → ingress → test
//! compression proxy → return leg → scripted SOLO upstream, and back; the
//! agent must see only SOLO events, carrying what the upstream sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::Value;
use shimgate_testkit::trae::{compare, digest, Proxy};

use crate::support::client;
use crate::support::proxy::{Mode, Options, TestProxy};
use crate::support::trae::{
    self, answer, body, check_request, error_answer, reply, text, tool_turn, Problems, PATH,
};
use crate::support::upstream::{Reply, Upstream};
use crate::support::Gate;

fn routes(ups: &[&Upstream], extra: &str) -> String {
    let mut t =
        format!("[retry]\ninitial_delay_ms = 10\nmax_delay_ms = 1000\njitter_ratio = 0\n{extra}");
    for (i, up) in ups.iter().enumerate() {
        t.push_str(&format!(
            "\n[[shims.trae.routes]]\nname = \"t{}\"\nurl = \"{}\"\n",
            i + 1,
            up.url()
        ));
    }
    t
}

/// An upstream that checks every SOLO request and answers with `script`.
async fn checked_upstream(
    problems: &Problems,
    script: impl Fn(&Value, usize) -> String + Send + Sync + 'static,
) -> Upstream {
    let p = problems.clone();
    Upstream::start(move |r, n| {
        p.lock().unwrap().extend(check_request(r));
        reply(&script(&r.json(), n))
    })
    .await
}

/// shimgate routed to `ups`, behind a test proxy on the trae listener.
async fn with_proxy(ups: &[&Upstream], options: Options, extra: &str) -> (Gate, TestProxy) {
    Gate::behind_proxy(&routes(ups, extra), "trae", options).await
}

async fn send(gate: &Gate, b: &Value) -> client::Resp {
    client::send(
        Method::POST,
        &format!("{}{PATH}", gate.trae),
        &[
            ("content-type", "application/json"),
            ("authorization", "Cloud-IDE-JWT agent-token"),
            ("x-ide-token", "agent-token"),
        ],
        serde_json::to_vec(b).unwrap(),
    )
    .await
}

/// Asserts the agent got SOLO events only, equal in substance to `upstream`.
fn assert_solo(agent: &[u8], upstream: &str, proxy: Proxy) {
    let unnamed = |b: &[u8]| trae::event_names(b).iter().filter(|n| n.is_none()).count();
    assert!(
        unnamed(agent) <= unnamed(upstream.as_bytes()),
        "an unnamed (OpenAI) frame reached the agent:\n{}",
        String::from_utf8_lossy(agent)
    );
    assert!(
        !String::from_utf8_lossy(agent).contains("chat.completion.chunk"),
        "an OpenAI chunk reached the agent"
    );
    if let Err(e) = compare(&digest(upstream.as_bytes()), &digest(agent), proxy) {
        panic!("{e}\nagent got:\n{}", String::from_utf8_lossy(agent));
    }
}

#[tokio::test]
async fn thirty_growing_turns_fold_and_the_agent_sees_only_solo() {
    let problems = Problems::default();
    let script = |_: &Value, n: usize| {
        let tool = (n % 3 == 1).then_some(("call_1", "glob", "{\"pattern\":\"**/*.rs\"}"));
        answer(&format!("turn {n} answer"), tool, 2000 + n as u64 * 400)
    };
    let up = checked_upstream(&problems, script).await;
    let (gate, proxy) = with_proxy(&[&up], Options::default(), "").await;
    let mut messages = vec![text("system", "You are TRAE.")];
    for turn in 0..30 {
        messages.push(text(
            "user",
            &format!("turn {turn}: {}", "refactor the parser please ".repeat(25)),
        ));
        let resp = send(&gate, &body(&messages)).await;
        assert_eq!(resp.status, StatusCode::OK);
        assert_eq!(resp.headers["content-type"], "text/event-stream");
        let tool = (turn % 3 == 1).then_some(("call_1", "glob", "{\"pattern\":\"**/*.rs\"}"));
        assert_solo(
            &resp.body,
            &answer(
                &format!("turn {turn} answer"),
                tool,
                2000 + turn as u64 * 400,
            ),
            Proxy::PassThrough,
        );
        if tool.is_some() {
            messages.extend(tool_turn(
                "call_1",
                "glob",
                "{\"pattern\":\"**/*.rs\"}",
                "src/lib.rs",
            ));
        } else {
            messages.push(text("assistant", &format!("turn {turn} answer")));
        }
    }
    assert!(
        problems.lock().unwrap().is_empty(),
        "{:#?}",
        problems.lock().unwrap()
    );
    assert!(proxy.violations().is_empty(), "{:#?}", proxy.violations());
    let st = gate.status().await;
    let t = &st["traeShim"];
    assert_eq!(t["intercepted"], 30);
    assert_eq!(t["forwarded"], 30);
    assert_eq!(t["fallback"], 0);
    assert!(t["folded"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["effective"], true);
    assert!(t["returnLeg"]["soloFrames"].as_u64().unwrap() > 0);
    assert_eq!(t["returnLeg"]["emptyRebuilds"], 0);
    assert_eq!(t["returnLeg"]["rebuildErrors"], 0);
    // What the upstream got: Max-mode fields and unknown keys as the agent sent them,
    // the agent's own headers, and the compressed history.
    let reqs = up.requests();
    let last = reqs.last().unwrap();
    let got = last.json();
    for key in [
        "config_name",
        "function",
        "model_auto_selection",
        "model_selection_strategy",
        "mode_type",
        "context_window_size",
        "prompt_max_tokens",
        "x_unknown_client_field",
    ] {
        assert_eq!(got[key], body(&[])[key], "{key}");
    }
    assert_eq!(last.header("x-ide-token"), Some("agent-token"));
    assert!(got["messages"].as_array().unwrap().len() < messages.len());
    let names: Vec<&str> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        names[0], "system",
        "the proxy's preamble arrives in SOLO form"
    );
}

#[tokio::test]
async fn the_fixture_corpus_survives_the_full_path_through_each_proxy_kind() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shims/trae/fixtures");
    let mut fixtures: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sse"))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() >= 10);
    // Direct mode first: the agent gets the upstream's own events.
    for path in &fixtures {
        let solo = std::fs::read_to_string(path).unwrap();
        let up = Upstream::always(Reply::sse().split(solo.as_bytes(), 7).end()).await;
        let gate = Gate::start(&routes(&[&up], "max_retries = 1\n")).await;
        let resp = send(&gate, &body(&[text("user", "hi")])).await;
        let name = path.file_name().unwrap().to_string_lossy();
        if resp.status == StatusCode::OK && !name.contains("cut") && !name.contains("empty") {
            assert_solo(&resp.body, &solo, Proxy::Direct);
        }
    }
    for (mode, proxy_kind) in [(Mode::Pass, Proxy::PassThrough), (Mode::Bili, Proxy::Bili)] {
        for path in &fixtures {
            let solo = std::fs::read_to_string(path).unwrap();
            let s2 = solo.clone();
            let up = Upstream::always(Reply::sse().split(s2.as_bytes(), 7).end()).await;
            let (gate, proxy) = with_proxy(
                &[&up],
                Options {
                    mode,
                    ..Options::default()
                },
                "max_retries = 1\n",
            )
            .await;
            let resp = send(&gate, &body(&[text("user", "hi")])).await;
            let name = path.file_name().unwrap().to_string_lossy();
            if resp.status != StatusCode::OK {
                // A stream that fails before content on its only route ends as a 502.
                assert!(
                    name.contains("error") || name.contains("empty") || name.contains("cut"),
                    "{name}: {}",
                    resp.text()
                );
                continue;
            }
            if name.contains("cut") || name.contains("empty") {
                continue;
            }
            assert_solo(&resp.body, &solo, proxy_kind);
            assert!(
                proxy.violations().is_empty(),
                "{name} {mode:?}: {:?}",
                proxy.violations()
            );
        }
    }
}

#[tokio::test]
async fn billion_context_swallowing_finish_and_usage_still_gives_a_correct_done() {
    let problems = Problems::default();
    let up = checked_upstream(&problems, |_, _| {
        answer(
            "calling a tool",
            Some(("call_9", "glob", "{\"pattern\":\"*.md\"}")),
            4321,
        )
    })
    .await;
    let (gate, proxy) = with_proxy(&[&up], Options::bili(), "").await;
    let resp = send(&gate, &body(&[text("user", "find the docs")])).await;
    let d = digest(&resp.body);
    match &d.end {
        shimgate_testkit::trae::End::Done(seen) => {
            assert!(
                format!("{:?}", seen.data).contains("tool_calls"),
                "{seen:?}"
            );
        }
        other => panic!("no done: {other:?}"),
    }
    let usage = format!("{:?}", d.usage.expect("token_usage"));
    assert!(usage.contains("4321"), "{usage}");
    assert_solo(
        &resp.body,
        &answer(
            "calling a tool",
            Some(("call_9", "glob", "{\"pattern\":\"*.md\"}")),
            4321,
        ),
        Proxy::Bili,
    );
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
}

#[tokio::test]
async fn proxy_down_falls_back_and_the_agent_gets_solo() {
    let problems = Problems::default();
    let up = checked_upstream(&problems, |_, _| answer("direct", None, 10)).await;
    let gate = Gate::start(&format!(
        "[compressor]\nurl = \"http://127.0.0.1:9\"\n{}",
        routes(&[&up], "")
    ))
    .await;
    let resp = send(&gate, &body(&[text("user", "hi")])).await;
    assert_solo(&resp.body, &answer("direct", None, 10), Proxy::Direct);
    let t = &gate.status().await["traeShim"];
    assert_eq!(t["fallback"], 1);
    assert_eq!(t["effective"], false);
    assert_eq!(
        up.requests()[0].json()["config_name"],
        "glm-5.3",
        "the original body goes upstream"
    );
}

#[tokio::test]
async fn quota_4008_on_route_one_switches_to_route_two_and_the_route_cools() {
    let r1 = Upstream::always(reply(&error_answer(
        4008,
        "Your requests have exceeded the quota.",
    )))
    .await;
    let r2 = Upstream::always(reply(&answer("from t2", None, 10))).await;
    let (gate, _proxy) = with_proxy(&[&r1, &r2], Options::default(), "").await;
    for _ in 0..2 {
        let resp = send(&gate, &body(&[text("user", "hi")])).await;
        assert_solo(&resp.body, &answer("from t2", None, 10), Proxy::PassThrough);
    }
    assert_eq!(r1.hits(), 1, "cooling route skipped on the next call");
    let st = gate.status().await;
    assert_eq!(st["chain"]["ordering"]["cooldown"][0]["route"], "t1");
    assert_eq!(st["chain"]["calls"][1]["routes"][0]["code"], "QUOTA");
}

#[tokio::test]
async fn prompt_too_long_4022_reaches_the_agent_as_its_own_error_without_switching() {
    let r1 = Upstream::always(reply(&error_answer(4022, "prompt tokens exceed the limit"))).await;
    let r2 = Upstream::always(reply(&answer("never", None, 10))).await;
    let (gate, _proxy) = with_proxy(&[&r1, &r2], Options::default(), "").await;
    let resp = send(&gate, &body(&[text("user", "hi")])).await;
    assert_eq!(resp.status, StatusCode::OK);
    let d = digest(&resp.body);
    let err = format!("{:?}", d.end);
    assert!(err.contains("4022"), "{err}\n{}", resp.text());
    assert_eq!(r2.hits(), 0, "context window failures never switch");
}

#[tokio::test]
async fn a_trae_port_in_use_shows_start_error_while_qoder_serves() {
    if crate::support::bin::skip_for_external("builds its config in code") {
        return;
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = shimgate::config::Config::default();
    cfg.shim_mut("trae").unwrap().listen = taken.local_addr().unwrap();
    cfg.shim_mut("qoder").unwrap().listen = "127.0.0.1:0".parse().unwrap();
    let gate = Gate::start_config(cfg).await;
    let st = gate.status().await;
    assert!(st["traeShim"]["startError"]
        .as_str()
        .unwrap()
        .contains("cannot listen"));
    assert_eq!(st["qoderShim"]["listening"], true);
}

#[tokio::test]
async fn both_return_legs_are_served_on_either_listener() {
    let up = Upstream::always(reply(&answer("crossed", None, 10))).await;
    // One proxy pointed at the *qoder* listener serves the trae shim too.
    let (gate, _proxy) = Gate::behind_proxy(&routes(&[&up], ""), "qoder", Options::default()).await;
    let resp = send(&gate, &body(&[text("user", "hi")])).await;
    assert_solo(&resp.body, &answer("crossed", None, 10), Proxy::PassThrough);
    assert_eq!(gate.status().await["traeShim"]["forwarded"], 1);
}

#[tokio::test]
async fn other_paths_and_methods_pass_through_unchanged() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let up = Upstream::start(move |r, _| {
        s.lock().unwrap().push((r.method.clone(), r.path.clone()));
        Reply::json(200, "{\"config_info_list\":[]}")
    })
    .await;
    let gate = Gate::start(&format!(
        "[compressor]\nurl = \"http://127.0.0.1:9\"\n{}",
        routes(&[&up], "")
    ))
    .await;
    let r = client::send(
        Method::POST,
        &format!("{}/api/ide/v1/get_detail_param", gate.trae),
        &[],
        "{\"function\":\"solo_work_lite\"}",
    )
    .await;
    assert_eq!(r.text(), "{\"config_info_list\":[]}");
    let r = client::send(Method::GET, &format!("{}{PATH}", gate.trae), &[], "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(seen.lock().unwrap().len(), 2);
    assert_eq!(gate.status().await["traeShim"]["intercepted"], 0);
}

#[tokio::test]
async fn slow_turns_keep_the_rid_alive_for_the_proxy_tool_loop() {
    let up = Upstream::always(reply(&answer("looped", None, 10))).await;
    let (gate, proxy) = with_proxy(
        &[&up],
        Options {
            extra_posts: 2,
            ..Options::default()
        },
        "",
    )
    .await;
    let resp = send(&gate, &body(&[text("user", "hi")])).await;
    assert_solo(&resp.body, &answer("looped", None, 10), Proxy::PassThrough);
    assert_eq!(up.hits(), 3);
    assert_eq!(proxy.requests.load(std::sync::atomic::Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(1)).await;
}

//! What an operator uses: `/metrics` (checked with a real Prometheus
//! parser), live reload (`POST /reload` and SIGHUP), logs without secrets,
//! `shimgate translate` and `check-config` on the real binary.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::bin::{tempdir, Served};
use crate::support::client::{self, next_chunk};
use crate::support::external::python_with;
use crate::support::qoder::{self, answer, ask, envelope, read_answer, role_chunk, text_chunk};
use crate::support::upstream::{Reply, Upstream};
use crate::support::{eventually, Gate};

fn routes(shim: &str, ups: &[&Upstream]) -> String {
    let mut t = String::from("[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n[retry]\ninitial_delay_ms = 10\njitter_ratio = 0\n");
    for (i, up) in ups.iter().enumerate() {
        t.push_str(&format!(
            "\n[[shims.{shim}.routes]]\nname = \"r{}\"\nurl = \"{}\"\n",
            i + 1,
            up.url()
        ));
    }
    t
}

async fn qoder_call(base: &str, headers: &[(&str, &str)]) -> client::Resp {
    let body = serde_json::to_vec(&ask(&[json!({"role": "user", "content": "hi"})])).unwrap();
    client::send(
        Method::POST,
        &format!("{base}{}", qoder::PATH),
        headers,
        body,
    )
    .await
}

#[tokio::test]
async fn metrics_parse_with_the_prometheus_client_parser() {
    let Some(py) = python_with("prometheus_client") else {
        return;
    };
    let up = Upstream::sequence(vec![Reply::json(502, "down"), answer("ok", 10)]).await;
    let gate = Gate::start(&routes("qoder", &[&up])).await;
    assert_eq!(
        read_answer(&qoder_call(&gate.qoder, &[]).await.body).0,
        "ok"
    );
    let resp = client::get(&format!("{}/metrics", gate.qoder)).await;
    assert_eq!(resp.status, StatusCode::OK);
    assert!(resp.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let mut child = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/prom_parse.py"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&resp.body).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "parser refused /metrics: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        resp.text()
    );
    let families: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sample = |family: &str, name: &str, labels: Value| -> f64 {
        families[family]["samples"]
            .as_array()
            .unwrap_or_else(|| panic!("no family {family}"))
            .iter()
            .find(|s| {
                s[0] == name
                    && labels
                        .as_object()
                        .unwrap()
                        .iter()
                        .all(|(k, v)| &s[1][k] == v)
            })
            .unwrap_or_else(|| panic!("no sample {name} {labels}"))[2]
            .as_f64()
            .unwrap()
    };
    assert_eq!(
        sample(
            "shimgate_intercepted",
            "shimgate_intercepted_total",
            json!({"shim": "qoder"})
        ),
        1.0
    );
    assert_eq!(
        sample(
            "shimgate_fallback",
            "shimgate_fallback_total",
            json!({"shim": "qoder"})
        ),
        1.0
    );
    assert_eq!(
        sample(
            "shimgate_route_attempts",
            "shimgate_route_attempts_total",
            json!({"route": "r1", "code": "SERVER"})
        ),
        1.0
    );
    assert_eq!(
        sample(
            "shimgate_route_attempts",
            "shimgate_route_attempts_total",
            json!({"route": "r1", "code": "OK"})
        ),
        1.0
    );
    assert_eq!(
        sample(
            "shimgate_route_retries",
            "shimgate_route_retries_total",
            json!({"route": "r1"})
        ),
        1.0
    );
    assert_eq!(
        families["shimgate_upstream_first_byte_seconds"]["type"],
        "histogram"
    );
    assert_eq!(
        sample(
            "shimgate_upstream_first_byte_seconds",
            "shimgate_upstream_first_byte_seconds_count",
            json!({"shim": "qoder"})
        ),
        2.0
    );
    assert_eq!(families["shimgate_overhead_seconds"]["type"], "histogram");
    for (family, kind) in [
        ("shimgate_route_breaker_state", "gauge"),
        ("shimgate_route_cooldown_seconds", "gauge"),
        ("shimgate_route_breaker_opens", "counter"),
        ("shimgate_retry_budget_exhausted", "counter"),
        ("shimgate_chars_saved", "counter"),
        ("shimgate_admin_refused", "counter"),
    ] {
        assert_eq!(families[family]["type"], kind, "{family}");
    }
    assert_eq!(
        sample(
            "shimgate_streams_in_flight",
            "shimgate_streams_in_flight",
            json!({})
        ),
        0.0
    );
    assert_eq!(
        sample(
            "shimgate_listening",
            "shimgate_listening",
            json!({"shim": "trae"})
        ),
        1.0
    );
}

#[tokio::test]
async fn post_reload_changes_routes_for_the_next_request_and_keeps_streams_in_flight() {
    let old = Upstream::always(
        Reply::sse()
            .chunk(envelope(&role_chunk()))
            .chunk(envelope(&text_chunk("slow ")))
            .sleep(400)
            .chunk(envelope(&text_chunk("old")))
            .chunk(envelope("[DONE]"))
            .hold(),
    )
    .await;
    let new = Upstream::always(answer("new route", 10)).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    std::fs::write(&file, routes("qoder", &[&old])).unwrap();
    let gate = Gate::start_config(shimgate::config::Config::load(&file).unwrap()).await;
    let body = serde_json::to_vec(&ask(&[json!({"role": "user", "content": "hi"})])).unwrap();
    let in_flight = client::open(
        Method::POST,
        &format!("{}{}", gate.qoder, qoder::PATH),
        &[],
        body,
    )
    .await;
    let mut stream = in_flight.into_body();
    next_chunk(&mut stream).await.unwrap();

    std::fs::write(&file, routes("qoder", &[&new])).unwrap();
    let r = client::send(Method::POST, &format!("{}/reload", gate.qoder), &[], "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        read_answer(&qoder_call(&gate.qoder, &[]).await.body).0,
        "new route"
    );

    let mut rest = Vec::new();
    while let Some(c) = next_chunk(&mut stream).await {
        rest.extend_from_slice(&c);
    }
    assert!(
        String::from_utf8_lossy(&rest).contains("old"),
        "the stream in flight kept its route"
    );

    std::fs::write(
        &file,
        "[[shims.qoder.routes]]\nname = \"x\"\nurl = \"not a url\"\n",
    )
    .unwrap();
    let r = client::send(Method::POST, &format!("{}/reload", gate.qoder), &[], "").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("shims.qoder.routes[0].url:"), "{msg}");
    let st = gate.status().await;
    assert_eq!(st["config"]["lastReloadError"], msg);
    assert_eq!(st["config"]["reloads"], 1);
    assert_eq!(
        read_answer(&qoder_call(&gate.qoder, &[]).await.body).0,
        "new route",
        "the old config stays"
    );
}

#[tokio::test]
async fn sighup_reloads_the_config_of_the_real_binary() {
    let a = Upstream::always(answer("from a", 10)).await;
    let b = Upstream::always(answer("from b", 10)).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    std::fs::write(&file, routes("qoder", &[&a])).unwrap();
    let served = Served::start(&file, &[], &[]);
    assert_eq!(
        read_answer(&qoder_call(&served.qoder, &[]).await.body).0,
        "from a"
    );
    std::fs::write(&file, routes("qoder", &[&b])).unwrap();
    served.signal("HUP");
    let url = format!("{}/status", served.qoder);
    assert!(
        eventually(Duration::from_secs(5), || async {
            client::get(&url).await.json()["config"]["reloads"] == 1
        })
        .await
    );
    assert_eq!(
        read_answer(&qoder_call(&served.qoder, &[]).await.body).0,
        "from b"
    );
}

#[tokio::test]
async fn logs_are_json_lines_and_never_carry_a_secret() {
    let up = Upstream::sequence(vec![
        Reply::json(401, r#"{"error":"bad token Bearer sk-agent-secret-123"}"#),
        Reply::json(502, "down"),
        answer("fine", 10),
    ])
    .await;
    let up2 = Upstream::always(answer("fine", 10)).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    // The headers table belongs to the last route (r2).
    let toml = format!(
        "[compressor]\nurl = \"http://127.0.0.1:9\"\n{}\n[shims.qoder.routes.headers]\nX-Route-Key = \"route-secret-456\"\n",
        routes("qoder", &[&up, &up2])
    );
    std::fs::write(&file, toml).unwrap();
    let served = Served::start(
        &file,
        &["--log-format", "json"],
        &[("RUST_LOG", "shimgate=trace,info")],
    );
    let secret_headers = [
        ("authorization", "Bearer sk-agent-secret-123"),
        ("cookie", "session=cookie-secret-789"),
        ("x-ide-token", "ide-secret-000"),
    ];
    let resp = qoder_call(&served.qoder, &secret_headers).await;
    assert_eq!(read_answer(&resp.body).0, "fine");
    let _ = client::get(&format!("{}/status", served.qoder)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let logs = served.stderr();
    assert!(
        logs.contains("switching") || logs.contains("fallback") || logs.contains("directly"),
        "{logs}"
    );
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(v.get("level").is_some(), "{line}");
    }
    for secret in [
        "sk-agent-secret-123",
        "cookie-secret-789",
        "ide-secret-000",
        "route-secret-456",
    ] {
        assert!(
            !logs.contains(secret),
            "{secret} leaked into the logs:\n{logs}"
        );
    }
    let status = client::get(&format!("{}/status", served.qoder))
        .await
        .text();
    for secret in [
        "sk-agent-secret-123",
        "cookie-secret-789",
        "ide-secret-000",
        "route-secret-456",
    ] {
        assert!(!status.contains(secret), "{secret} leaked into /status");
    }
}

#[tokio::test]
async fn a_normal_request_logs_nothing() {
    let up = Upstream::always(answer("quiet", 10)).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    std::fs::write(&file, routes("qoder", &[&up])).unwrap();
    let served = Served::start(&file, &[], &[]);
    let before = served.stderr().lines().count();
    for _ in 0..3 {
        assert_eq!(
            read_answer(&qoder_call(&served.qoder, &[]).await.body).0,
            "quiet"
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = served.stderr();
    assert_eq!(
        after.lines().count(),
        before,
        "unexpected log lines:\n{after}"
    );
}

fn run_translate(args: &[&str], input: &[u8]) -> (bool, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .arg("translate")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn translate_unwraps_a_captured_qoder_stream() {
    let capture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/shims/qoder/fixtures/text_event_finish.sse"
    ))
    .unwrap();
    let (ok, out) = run_translate(&["--shim", "qoder", "--leg", "return"], &capture);
    assert!(ok);
    let (text, done, errors) = read_answer(out.as_bytes());
    assert!(
        text.starts_with("Hello! Here is a \"quoted\" word,"),
        "{text}"
    );
    assert!(done && errors.is_empty());
    assert!(!out.contains("statusCodeValue"));
}

#[test]
fn translate_check_names_the_frame_problems_of_a_capture() {
    let broken = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n";
    let (ok, out) = run_translate(&["--shim", "qoder", "--leg", "ingress", "--check"], broken);
    assert!(!ok, "{out}");
    assert!(out.contains("single \\n"), "{out}");
    assert!(out.contains("no data: [DONE]"), "{out}");
    let capture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/shims/qoder/fixtures/text_event_finish.sse"
    ))
    .unwrap();
    let (ok, out) = run_translate(&["--shim", "qoder", "--leg", "return", "--check"], &capture);
    assert!(ok, "{out}");
    assert!(out.contains("envelope keys left"), "{out}");
    assert!(out.contains("after the qoder return leg: clean"), "{out}");
}

#[test]
fn translate_trae_legs_round_trip_a_solo_capture() {
    let capture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/shims/trae/fixtures/captured.sse"
    ))
    .unwrap();
    let (ok, openai) = run_translate(&["--shim", "trae", "--leg", "return"], &capture);
    assert!(ok);
    let (ok, solo) = run_translate(&["--shim", "trae", "--leg", "ingress"], openai.as_bytes());
    assert!(ok);
    let d = shimgate_testkit::trae::digest;
    shimgate_testkit::trae::compare(
        &d(&capture),
        &d(solo.as_bytes()),
        shimgate_testkit::trae::Proxy::Direct,
    )
    .unwrap();
}

#[test]
fn check_config_names_the_key_path_and_exits_2() {
    let dir = tempdir();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[[shims.trae.routes]]\nname = \"a\"\nurl = \"https://ok\"\n[[shims.trae.routes]]\nname = \"b\"\nurl = \"trae.example/api\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(["check-config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shims.trae.routes[1].url: relative URL without a base"),
        "{err}"
    );
    std::fs::write(
        &file,
        "[[shims.trae.routes]]\nname = \"a\"\nurl = \"https://ok\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(["check-config"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn serve_refuses_a_bad_config_before_binding() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    drop(taken);
    let dir = tempdir();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        format!("[shims.qoder]\nlisten = \"{addr}\"\n[retry]\njitter_ratio = 7\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("retry.jitter_ratio"));
    assert!(
        std::net::TcpListener::bind(addr).is_ok(),
        "nothing was bound"
    );
}

//! Third-party peers in place of our test proxy: the official openai Python
//! SDK reading the return leg, and context-guardian compressing for real.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shimgate_testkit::trae::{compare, digest, Proxy};

use crate::support::client;
use crate::support::external::{guardian, python_with, sdk_proxy};
use crate::support::qoder::{self, read_answer};
use crate::support::trae;
use crate::support::upstream::{Reply, Upstream};
use crate::support::{print_figures, Gate};

fn config(shim: &str, compressor: &str, up: &Upstream) -> shimgate::config::Config {
    let mut cfg = shimgate::config::Config::from_toml(&format!(
        "[compressor]\nurl = \"{compressor}\"\n[retry]\ninitial_delay_ms = 10\n[[shims.{shim}.routes]]\nname = \"r1\"\nurl = \"{}\"\n",
        up.url()
    ))
    .unwrap();
    cfg.shim_mut("qoder").unwrap().listen = "127.0.0.1:0".parse().unwrap();
    cfg.shim_mut("trae").unwrap().listen = "127.0.0.1:0".parse().unwrap();
    cfg
}

/// Starts shimgate, then `proxy(listener base)`, then points shimgate at it.
async fn gate_behind<P>(shim: &str, up: &Upstream, proxy: impl FnOnce(String) -> P) -> (Gate, P)
where
    P: ProxyUrl,
{
    let gate = Gate::start_config(config(shim, "http://127.0.0.1:9", up)).await;
    let base = if shim == "qoder" {
        gate.qoder.clone()
    } else {
        gate.trae.clone()
    };
    let p = proxy(base);
    gate.running
        .as_ref()
        .unwrap()
        .app
        .replace_config(config(shim, &p.compressor_url(), up));
    (gate, p)
}

trait ProxyUrl {
    fn compressor_url(&self) -> String;
}

struct Sdk(crate::support::external::Proc);
impl ProxyUrl for Sdk {
    fn compressor_url(&self) -> String {
        self.0.url()
    }
}

struct Guardian(crate::support::external::Proc);
impl ProxyUrl for Guardian {
    fn compressor_url(&self) -> String {
        // context-guardian compresses exactly /v1/chat/completions.
        format!("{}/v1/chat/completions", self.0.url())
    }
}

async fn sdk_errors(p: &Sdk) -> (Vec<Value>, u64) {
    let v = client::get(&format!("{}/errors", p.0.url())).await.json();
    (
        v["errors"].as_array().unwrap().clone(),
        v["chunks"].as_u64().unwrap(),
    )
}

#[tokio::test]
async fn the_openai_python_sdk_reads_every_qoder_return_leg_frame() {
    let Some(py) = python_with("openai") else {
        return;
    };
    let fixture = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/shims/qoder/fixtures/reasoning_tool_call.sse"
    ))
    .unwrap();
    let up = Upstream::sequence(vec![
        qoder::answer("plain \"quoted\" text — ✓ 你好 with a\nnewline", 100),
        Reply::sse().split(&fixture, 5).end(),
        Reply::sse()
            .chunk(
                std::fs::read(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/shims/qoder/fixtures/text_event_finish.sse"
                ))
                .unwrap(),
            )
            .end(),
    ])
    .await;
    let (gate, proxy) = gate_behind("qoder", &up, |base| Sdk(sdk_proxy(&py, &base))).await;
    for turn in 0..3 {
        let body = serde_json::to_vec(&qoder::ask(&[
            json!({"role": "user", "content": format!("turn {turn}")}),
        ]))
        .unwrap();
        let resp = client::send(
            Method::POST,
            &format!("{}{}", gate.qoder, qoder::PATH),
            &[],
            body,
        )
        .await;
        assert_eq!(resp.status, StatusCode::OK);
        let (text, done, errors) = read_answer(&resp.body);
        assert!(done && errors.is_empty(), "turn {turn}: {}", resp.text());
        if turn == 0 {
            assert_eq!(text, "plain \"quoted\" text — ✓ 你好 with a\nnewline");
        }
    }
    let (errors, chunks) = sdk_errors(&proxy).await;
    assert!(errors.is_empty(), "the SDK failed: {errors:?}");
    assert!(chunks > 10, "{chunks}");
    assert_eq!(gate.status().await["qoderShim"]["forwarded"], 3);
}

#[tokio::test]
async fn the_openai_python_sdk_reads_every_trae_return_leg_frame() {
    let Some(py) = python_with("openai") else {
        return;
    };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shims/trae/fixtures");
    let names = [
        "captured.sse",
        "text_and_tool_call.sse",
        "multi_fragment_tool_call.sse",
        "parallel_tool_calls.sse",
        "ids_retry_extras.sse",
    ];
    let streams: Vec<String> = names
        .iter()
        .map(|n| std::fs::read_to_string(format!("{dir}/{n}")).unwrap())
        .collect();
    let replies = streams.iter().map(|s| trae::reply(s)).collect();
    let up = Upstream::sequence(replies).await;
    let (gate, proxy) = gate_behind("trae", &up, |base| Sdk(sdk_proxy(&py, &base))).await;
    for (name, solo) in names.iter().zip(&streams) {
        let body = serde_json::to_vec(&trae::body(&[trae::text("user", name)])).unwrap();
        let resp = client::send(
            Method::POST,
            &format!("{}{}", gate.trae, trae::PATH),
            &[],
            body,
        )
        .await;
        assert_eq!(resp.status, StatusCode::OK, "{name}");
        if let Err(e) = compare(
            &digest(solo.as_bytes()),
            &digest(&resp.body),
            Proxy::PassThrough,
        ) {
            panic!("{name}: {e}\n{}", resp.text());
        }
    }
    let (errors, _) = sdk_errors(&proxy).await;
    assert!(errors.is_empty(), "the SDK failed: {errors:?}");
}

#[tokio::test]
async fn context_guardian_compresses_thirty_qoder_turns() {
    let Some(py) = python_with("context_guardian") else {
        return;
    };
    let up = Upstream::start(|_, n| {
        qoder::answer(
            &format!("answer {n}: the refactor is going well, continuing with the next file now."),
            900 + n as u64 * 200,
        )
    })
    .await;
    let (gate, _g) = gate_behind("qoder", &up, |_| ()).await;
    let g = Guardian(guardian(&py, &gate.qoder).await);
    gate.running
        .as_ref()
        .unwrap()
        .app
        .replace_config(config("qoder", &g.compressor_url(), &up));
    let mut messages = vec![json!({"role": "system", "content": "You are a coding agent."})];
    let mut sent = 0;
    for turn in 0..30 {
        messages.push(json!({"role": "user", "content": format!("turn {turn}: {}", "please keep refactoring the module ".repeat(12))}));
        let body = serde_json::to_vec(&qoder::ask(&messages)).unwrap();
        sent = body.len();
        let resp = client::send(
            Method::POST,
            &format!("{}{}", gate.qoder, qoder::PATH),
            &[],
            body,
        )
        .await;
        let (text, done, errors) = read_answer(&resp.body);
        assert!(done && errors.is_empty(), "turn {turn}: {}", resp.text());
        messages.push(json!({"role": "assistant", "content": text}));
    }
    let q = &gate.status().await["qoderShim"];
    let got = up.requests().last().unwrap().body.len();
    print_figures("context-guardian", "qoder", 30, q, sent, got, "");
    assert!(q["folded"].as_u64().unwrap() > 0, "{q:#}");
    assert_eq!(q["fallback"], 0, "{q:#}");
    assert!(
        q["recentExchanges"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["shrank"] == true),
        "{q:#}"
    );
    assert!(
        q["sideRequests"].as_u64().unwrap() > 0,
        "guardian's summary calls come back as side requests"
    );
}

#[tokio::test]
async fn context_guardian_compresses_thirty_trae_turns() {
    let Some(py) = python_with("context_guardian") else {
        return;
    };
    let up = Upstream::start(|_, n| {
        trae::reply(&trae::answer(
            &format!("answer {n}: the refactor is going well, continuing with the next file now."),
            None,
            900 + n as u64 * 200,
        ))
    })
    .await;
    let (gate, _g) = gate_behind("trae", &up, |_| ()).await;
    let g = Guardian(guardian(&py, &gate.trae).await);
    gate.running
        .as_ref()
        .unwrap()
        .app
        .replace_config(config("trae", &g.compressor_url(), &up));
    let mut messages = vec![trae::text("system", "You are TRAE.")];
    let mut sent = 0;
    for turn in 0..30 {
        messages.push(trae::text(
            "user",
            &format!(
                "turn {turn}: {}",
                "please keep refactoring the module ".repeat(12)
            ),
        ));
        let body = serde_json::to_vec(&trae::body(&messages)).unwrap();
        sent = body.len();
        let resp = client::send(
            Method::POST,
            &format!("{}{}", gate.trae, trae::PATH),
            &[],
            body,
        )
        .await;
        assert_eq!(resp.status, StatusCode::OK);
        let d = digest(&resp.body);
        assert!(
            d.text.starts_with(&format!("answer {turn}:")) || d.text.starts_with("answer "),
            "turn {turn}: {}",
            resp.text()
        );
        assert!(!String::from_utf8_lossy(&resp.body).contains("chat.completion.chunk"));
        messages.push(trae::text("assistant", &d.text));
    }
    let t = &gate.status().await["traeShim"];
    let got = up.requests().last().unwrap().body.len();
    print_figures("context-guardian", "trae", 30, t, sent, got, "");
    assert!(t["folded"].as_u64().unwrap() > 0, "{t:#}");
    assert_eq!(t["fallback"], 0, "{t:#}");
}

impl ProxyUrl for () {
    fn compressor_url(&self) -> String {
        "http://127.0.0.1:9".into()
    }
}

//! The test-only third shim (`shims/openai`, a plain OpenAI pass-through),
//! added as a crate plus one line in `src/registry.rs`: it gets a config
//! section, a listener, a `/status` section, `/metrics` series and the
//! whole proxy path without any other change to the runtime.
//!
//! Built only with the `test-shims` feature (`required-features` in
//! Cargo.toml; the test command passes `--all-features`). The feature is
//! no dev-dependency of the package: Cargo unifies a dev-dependency's
//! features into every build that has them, benches included, and the
//! binary of a `cargo bench` (`target/release/shimgate`, where README
//! sends users) would then offer `--shim openai`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/mod.rs"]
mod support;

use http::Method;
use serde_json::json;

use support::client;
use support::conversation::filler;
use support::model::{Model, Wire};
use support::proxy::Options;
use support::Gate;

#[tokio::test]
async fn a_third_shim_added_with_one_line_serves_the_whole_path() {
    let model = Model::start(Wire::OpenAi).await;
    let base = format!(
        "[shims.openai]\nenabled = true\n[[shims.openai.routes]]\nname = \"o1\"\nurl = \"{}\"\n",
        model.url()
    );
    let (gate, proxy) = Gate::behind_proxy(&base, "openai", Options::default()).await;
    assert!(!gate.openai.is_empty(), "the openai listener is up");
    let mut messages = vec![json!({"role": "system", "content": "agent"})];
    for n in 1..=4 {
        messages.push(json!({"role": "user", "content": filler(n, 3000)}));
        let resp = client::send(
            Method::POST,
            &format!("{}/v1/chat/completions", gate.openai),
            &[("content-type", "application/json")],
            serde_json::to_vec(&json!({"model": "m", "stream": true, "messages": messages}))
                .unwrap(),
        )
        .await;
        assert!(resp.status.is_success(), "{}", resp.text());
        let frames = crate::support::sse_data(&resp.body);
        assert_eq!(
            frames.last().map(String::as_str),
            Some("[DONE]"),
            "{frames:?}"
        );
        messages.push(json!({"role": "assistant", "content": format!("reply {n}")}));
    }
    let st = gate.status().await;
    let o = &st["openaiShim"];
    assert_eq!(o["intercepted"], 4, "{o:#}");
    assert_eq!(o["forwarded"], 4, "{o:#}");
    assert!(o["folded"].as_u64().unwrap() > 0, "{o:#}");
    assert!(
        st["chain"]["routes"]["openai"].is_array(),
        "{:#}",
        st["chain"]
    );
    assert!(proxy.violations().is_empty(), "{:?}", proxy.violations());
    let metrics = client::get(&format!("{}/metrics", gate.openai))
        .await
        .text();
    assert!(
        metrics.contains("shimgate_folded_total{shim=\"openai\"}"),
        "{metrics}"
    );
}

//! shimgate in a real browser (headless Chromium, `support::browser`):
//! what a web page the user opens can do to it (DESIGN §7).

use serde_json::json;

use crate::support::bin::tempdir;
use crate::support::browser::Browser;
use crate::support::upstream::{Reply, Upstream};

use super::trust::{gate_with_file, port_of, steerable, CONTROLS};

const REBIND_NAME: &str = "rebind.attacker.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacks_from_web_pages_change_and_read_nothing() {
    let Some(browser) = Browser::find() else {
        return;
    };
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let (gate, _) = gate_with_file(&dir, &[&up]).await;
    let before = gate.status().await;
    let reads = ["/status", "/metrics", "/switches", "/ui"];
    let params = json!({
        "targets": [gate.qoder, gate.trae],
        "controls": CONTROLS,
        "reads": reads,
        "rebind": {"name": REBIND_NAME, "port": port_of(&gate.qoder)},
        "extraFlags": [format!("--host-resolver-rules=MAP {REBIND_NAME} 127.0.0.1")],
    });
    let found = browser.run("attack", &params).await;

    let cross = &found["cross"];
    for read in cross["reads"].as_array().unwrap() {
        assert!(
            read["blocked"].is_string(),
            "a page on another port read {read}"
        );
    }
    let top = found["top"].as_str().unwrap();
    assert!(
        top.contains("FORBIDDEN_ORIGIN"),
        "the top-level form post: {top}"
    );
    let rebound = found["rebound"].as_array().unwrap();
    assert_eq!(rebound.len(), reads.len() + CONTROLS.len());
    for r in rebound {
        assert_eq!(r["status"], 403, "the rebinding page got {r}");
        let text = r["text"].as_str().unwrap();
        assert!(text.contains("FORBIDDEN_HOST"), "{text}");
        for secret in ["q-first", "q-second", "t-only", "shimgate.toml"] {
            assert!(
                !text.contains(secret),
                "the rebinding page read {secret}: {text}"
            );
        }
    }

    let after = gate.status().await;
    assert_eq!(
        steerable(&after),
        steerable(&before),
        "no control took effect"
    );
    let refused = &after["admin"]["refused"];
    let attempts = |k: &str| cross[k].as_u64().unwrap();
    let writes = attempts("posts") + attempts("forms") + 1;
    assert_eq!(
        refused["forbiddenOrigin"], writes,
        "every write reached shimgate and was refused"
    );
    assert_eq!(refused["forbiddenHost"], rebound.len() as u64);
    // Only what a browser fetches by itself (`/favicon.ico`) passes through.
    for r in up.requests() {
        assert!(
            !shimgate::admin::is_admin_path(&r.path),
            "{} {} reached an upstream",
            r.method,
            r.path
        );
    }
    eprintln!(
        "FIGURES browser attacks: {writes} cross-origin writes refused (FORBIDDEN_ORIGIN), {} cross-origin reads blocked, {} rebinding requests refused (FORBIDDEN_HOST)",
        cross["reads"].as_array().map_or(0, Vec::len),
        rebound.len()
    );
}

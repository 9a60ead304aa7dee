//! Secrets an upstream echoes back (`docs/security.md`): the exact values of the
//! request's own credential headers are masked in every reason shown
//! (`/status` `lastError`, `chain.log[].reason`, `chain.calls[].routes[].reason`)
//! or logged, whatever shape the token has.

use http::Method;

use crate::support::bin::{tempdir, Served};
use crate::support::client;
use crate::support::trae;
use crate::support::upstream::{Reply, Upstream};

const TOKEN: &str = "tok_4f9a0c2e7b51";
const COOKIE: &str = "sid0d15ea5e";

async fn call(base: &str) {
    let resp = client::send(
        Method::POST,
        &format!("{base}{}", trae::PATH),
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Cloud-IDE-JWT {TOKEN}")),
            ("x-ide-token", TOKEN),
            ("cookie", &format!("sid={COOKIE}; lang=en")),
        ],
        serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
    )
    .await;
    assert!(!resp.body.is_empty());
}

#[tokio::test]
async fn a_token_and_cookie_echoed_by_the_upstream_never_reach_status_or_logs() {
    let up = Upstream::sequence(vec![
        Reply::json(
            401,
            &format!("invalid token {TOKEN} for cookie sid={COOKIE}"),
        ),
        trae::reply(&trae::error_answer(1002, &format!("token {TOKEN} expired"))),
    ])
    .await;
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    std::fs::write(
        &config,
        format!(
            "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n[retry]\ninitial_delay_ms = 10\n[[shims.trae.routes]]\nname = \"t1\"\nurl = \"{}\"\n",
            up.url()
        ),
    )
    .unwrap();
    let served = Served::start(&config, &["--log-format", "json"], &[("RUST_LOG", "debug")]);
    call(&served.trae).await;
    call(&served.trae).await;
    let status = client::get(&format!("{}/status", served.trae)).await.text();
    let metrics = client::get(&format!("{}/metrics", served.trae))
        .await
        .text();
    let logs = served.stderr();
    assert!(
        status.contains("***"),
        "the reasons are there, masked: {status}"
    );
    for (what, text) in [("status", &status), ("metrics", &metrics), ("logs", &logs)] {
        assert!(!text.contains(TOKEN), "the token is in the {what}: {text}");
        assert!(
            !text.contains(COOKIE),
            "the cookie is in the {what}: {text}"
        );
    }
}

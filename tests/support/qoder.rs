//! The qoder wire for tests: the agent's plaintext ask, envelope answers
//! byte for byte as the provider sends them, and what the agent reads back
//! (`shimgate_testkit::qoder`).

pub use shimgate_testkit::qoder::*;

/// A plaintext ask saying "hi", POSTed to the qoder listener at `base`.
pub async fn send_hi(base: &str) -> super::client::Resp {
    super::client::send(
        http::Method::POST,
        &format!("{base}{PATH}"),
        &[("content-type", "application/json")],
        serde_json::to_vec(&ask(&[
            serde_json::json!({"role": "user", "content": "hi"}),
        ]))
        .unwrap_or_default(),
    )
    .await
}

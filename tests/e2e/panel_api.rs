//! The endpoints behind the panel (`docs/panel.md`), through the real
//! listeners: the config writes (`POST /routes/{shim}/order`, `POST
//! /ordering`) keep the user's file and refuse cleanly, restore never
//! undoes a hand disable, a switch is logged under its conversation and
//! named in the agent's answer head (also through a proxy), and route
//! windows end in `503 NO_ACTIVE_ROUTE`.

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::bin::tempdir;
use crate::support::client::{self, post_json};
use crate::support::proxy::Options;
use crate::support::qoder;
use crate::support::trae;
use crate::support::upstream::{Reply, Upstream};
use crate::support::Gate;

use super::trust::gate_with_file;

fn routes_of(status: &Value, shim: &str) -> Vec<String> {
    status["chain"]["routes"][shim]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_route_order_is_written_into_the_config_file_keeping_the_rest() {
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let (gate, file) = gate_with_file(&dir, &[&up]).await;
    let before = std::fs::read_to_string(&file).unwrap();
    let order = format!("{}/routes/qoder/order", gate.qoder);
    let r = post_json(&order, &json!({"routes": ["q-second", "q-first"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["configured"], json!(["q-second", "q-first"]));
    assert_eq!(r.json()["effective"][0]["route"], "q-second");
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(
        after.starts_with(
            "# the user's own comment\n[retry]\ninitial_delay_ms = 10\njitter_ratio = 0\n"
        ),
        "{after}"
    );
    assert!(
        after.find("name = \"q-second\"") < after.find("name = \"q-first\""),
        "{after}"
    );
    assert_eq!(after.len(), before.len(), "only the order changed");
    let status = gate.status().await;
    assert_eq!(routes_of(&status, "qoder"), ["q-second", "q-first"]);
    assert_eq!(status["config"]["reloads"], 1);

    // Refusals leave the file byte-identical.
    let kept = std::fs::read(&file).unwrap();
    for (body, why) in [
        (json!({"routes": ["q-first"]}), "a name missing"),
        (
            json!({"routes": ["q-first", "q-second", "q-third"]}),
            "a name too many",
        ),
        (json!({"routes": ["q-first", "q-first"]}), "a name twice"),
        (json!({"routes": ["q-first", 7]}), "not a name"),
        (json!({"order": []}), "no routes key"),
    ] {
        let r = post_json(&order, &body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{why}: {}", r.text());
        assert_eq!(std::fs::read(&file).unwrap(), kept, "{why}");
    }
    let r = client::send(Method::POST, &order, &[], "{not json").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = post_json(
        &format!("{}/routes/nope/order", gate.qoder),
        &json!({"routes": []}),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.json()["error"]["code"], "UNKNOWN_SHIM");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o444)).unwrap();
        let r = post_json(&order, &json!({"routes": ["q-first", "q-second"]})).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
        assert!(r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("read-only"));
        assert_eq!(std::fs::read(&file).unwrap(), kept);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    // The file changed under shimgate: it does not write over that.
    let edited = String::from_utf8(kept.clone())
        .unwrap()
        .replace("q-first", "q-renamed");
    std::fs::write(&file, &edited).unwrap();
    let r = post_json(&order, &json!({"routes": ["q-first", "q-second"]})).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text());
    assert!(r.text().contains("reload first"), "{}", r.text());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), edited);
}

#[tokio::test]
async fn the_ordering_mode_is_written_and_an_unknown_one_refused() {
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let (gate, file) = gate_with_file(&dir, &[&up]).await;
    let url = format!("{}/ordering", gate.trae);
    let kept = std::fs::read(&file).unwrap();
    for bad in [json!({"mode": "fastest"}), json!({"mode": 3}), json!({})] {
        let r = post_json(&url, &bad).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(std::fs::read(&file).unwrap(), kept);
    }
    let r = post_json(&url, &json!({"mode": "measured"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["mode"], "measured");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("[ordering]\nmode = \"measured\"\n"), "{text}");
    assert!(text.starts_with("# the user's own comment\n"));
    assert_eq!(gate.status().await["chain"]["ordering"]["mode"], "measured");
}

#[tokio::test]
async fn writes_without_a_config_file_are_refused_with_409() {
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let gate = Gate::start(&format!(
        "[[shims.trae.routes]]\nname = \"a\"\nurl = \"{}\"\n",
        up.url()
    ))
    .await;
    for (path, body) in [
        ("/ordering", json!({"mode": "manual"})),
        ("/routes/trae/order", json!({"routes": ["a"]})),
    ] {
        let r = post_json(&format!("{}{path}", gate.trae), &body).await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{path}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "CONFIG_CONFLICT");
        assert!(r.text().contains("built-in defaults"), "{}", r.text());
    }
}

#[tokio::test]
async fn restore_clears_a_cooldown_but_never_a_hand_disable() {
    let quota = Reply::json_with(
        402,
        &[("retry-after", "3600")],
        r#"{"error":{"message":"insufficient balance"}}"#,
    );
    let first = Upstream::always(quota).await;
    let second = Upstream::always(qoder::answer("ok", 10)).await;
    let dir = tempdir();
    let (gate, _) = gate_with_file(&dir, &[&first, &second]).await;
    assert_eq!(
        qoder::read_answer(&qoder::send_hi(&gate.qoder).await.body).0,
        "ok"
    );
    let row = |s: &Value| s["chain"]["routes"]["qoder"][0].clone();
    let status = gate.status().await;
    assert!(row(&status)["cooldownUntil"].is_string(), "q-first cools");
    let failed = &status["chain"]["failedToday"];
    assert_eq!(failed[0]["route"], "q-first", "{failed}");
    assert_eq!(failed[0]["lastFailure"]["code"], "QUOTA");
    let cooled = &row(&status)["changes"][0];
    assert_eq!(cooled["change"], "cooled");
    assert_eq!(cooled["source"], "Retry-After / x-ratelimit-reset");
    assert!(cooled["until"].is_string());

    let base = &gate.qoder;
    let r = client::send(
        Method::POST,
        &format!("{base}/routes/qoder/q-first/disable"),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = client::send(
        Method::POST,
        &format!("{base}/routes/qoder/q-first/restore"),
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let status = gate.status().await;
    let q = row(&status);
    assert!(q["cooldownUntil"].is_null(), "the cooldown is gone");
    assert_eq!(q["disabled"], true, "the hand disable stays");
    let kinds: Vec<&str> = q["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["change"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["restored", "disabled", "cooled"], "newest first");
    let r = client::send(Method::POST, &format!("{base}/routes/reset"), &[], "").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        row(&gate.status().await)["disabled"],
        true,
        "a reset keeps it too"
    );
}

#[tokio::test]
async fn a_switch_through_a_proxy_is_logged_under_its_conversation_and_named_in_the_answer_head() {
    let quota = trae::reply(&trae::error_answer(
        4008,
        "Your requests have exceeded the quota.",
    ));
    let first = Upstream::always(quota).await;
    let second = Upstream::always(trae::reply(&trae::answer("hi", None, 20))).await;
    let base = format!(
        "[retry]\nmax_retries = 0\n[[shims.trae.routes]]\nname = \"t1\"\nurl = \"{}\"\n[[shims.trae.routes]]\nname = \"t2\"\nurl = \"{}\"\n",
        first.url(),
        second.url()
    );
    let (gate, _proxy) = Gate::behind_proxy(&base, "trae", Options::default()).await;
    let body = serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap();
    let url = format!("{}{}", gate.trae, trae::PATH);
    let r = client::send(
        Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("x-session-id", "conv-7"),
        ],
        body.clone(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.headers["x-shimgate-route"], "t2");
    assert_eq!(r.headers["x-shimgate-switched-from"], "t1");
    let all = client::get(&format!("{}/switches", gate.trae)).await.json();
    let mine = client::get(&format!("{}/switches?session=conv-7", gate.trae))
        .await
        .json();
    let other = client::get(&format!("{}/switches?session=conv-8", gate.trae))
        .await
        .json();
    assert_eq!(mine["switches"].as_array().unwrap().len(), 1, "{all}");
    let s = &mine["switches"][0];
    assert_eq!(
        (&s["shim"], &s["from"], &s["to"], &s["class"]),
        (&json!("trae"), &json!("t1"), &json!("t2"), &json!("QUOTA"))
    );
    assert_eq!(other["switches"], json!([]));
    // Now t1 cools: the next call goes to t2 first, no switch, no
    // switched-from.
    let r = client::send(
        Method::POST,
        &url,
        &[
            ("content-type", "application/json"),
            ("x-session-id", "conv-7"),
        ],
        body,
    )
    .await;
    assert_eq!(r.headers["x-shimgate-route"], "t2");
    assert!(r.headers.get("x-shimgate-switched-from").is_none());
    assert_eq!(
        client::get(&format!("{}/switches", gate.trae)).await.json()["switches"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn every_route_out_of_its_window_is_503_with_each_route_and_the_next_opening() {
    let up = Upstream::always(trae::reply(&trae::answer("hi", None, 20))).await;
    let now = chrono::Local::now()
        .format("%H")
        .to_string()
        .parse::<u32>()
        .unwrap();
    let toml = format!(
        "[[shims.trae.routes]]\nname = \"night\"\nurl = \"{u}\"\nactive_hours = [\"{a}-{b}\"]\n\
         [[shims.trae.routes]]\nname = \"old\"\nurl = \"{u}\"\nuntil = \"2020-01-31\"\n",
        u = up.url(),
        a = (now + 3) % 24,
        b = (now + 4) % 24,
    );
    let gate = Gate::start(&toml).await;
    let body = serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap();
    let r = client::send(
        Method::POST,
        &format!("{}{}", gate.trae, trae::PATH),
        &[("content-type", "application/json")],
        body,
    )
    .await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(e["code"], "NO_ACTIVE_ROUTE");
    assert!(e["nextOpening"].is_string(), "{e}");
    let reasons: Vec<&str> = e["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["reason"].as_str().unwrap())
        .collect();
    assert!(reasons[0].starts_with("off-hours"), "{reasons:?}");
    assert!(reasons[1].starts_with("expired"), "{reasons:?}");
    assert_eq!(up.hits(), 0, "never sent to an excluded route");
    let effective = &gate.status().await["chain"]["ordering"]["effective"]["trae"];
    assert_eq!(effective[0]["reason"], "off-hours");
    assert_eq!(effective[0]["until"], e["nextOpening"]);
    assert_eq!(effective[1]["reason"], "expired");
    let ended = effective[1]["until"].as_str().unwrap();
    assert!(
        ended.starts_with("2020-01-31") || ended.starts_with("2020-02-01"),
        "{ended}"
    );
}

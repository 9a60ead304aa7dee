//! Failover that learns (`docs/failover.md`), through the real binary, on TRAE
//! inference calls in direct mode (the calls whose answers the chain
//! judges): the route state file across restarts, measured ordering, the
//! breaker, the retry budget and the hand controls. The rules themselves are table tests on
//! the pure core (`src/chain/{rank,breaker,budget,rest,decide}.rs`); these
//! show them reaching a real upstream and surviving a real restart. Times
//! are tens of milliseconds, and every wait polls.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::bin::{tempdir, Served};
use crate::support::client;
use crate::support::eventually;
use crate::support::trae;
use crate::support::upstream::{Reply, Step, Upstream};

/// A config with trae routes on `routes`, fast backoff, and `extra`.
fn config(routes: &[(&str, &Upstream)], extra: &str) -> String {
    let mut t = String::from(
        "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n",
    );
    t.push_str(extra);
    for (name, up) in routes {
        t.push_str(&format!(
            "\n[[shims.trae.routes]]\nname = \"{name}\"\nurl = \"{}\"\n",
            up.url()
        ));
    }
    t
}

/// The config file in `dir`, written.
fn write(dir: &Path, toml: &str) -> PathBuf {
    let file = dir.join("shimgate.toml");
    std::fs::write(&file, toml).unwrap();
    file
}

/// Where `Served` keeps the route state of `file` (`XDG_STATE_HOME`
/// beside it, the file named for the config: one per config file).
fn routes_json(file: &Path) -> PathBuf {
    state_file_in(&file.with_extension("state"), file)
}

/// The route state file of `config` under `XDG_STATE_HOME` = `home`.
fn state_file_in(home: &Path, config: &Path) -> PathBuf {
    let canonical = std::path::absolute(config).unwrap();
    home.join("shimgate")
        .join(shimgate::app::route_store::file_name(Some(&canonical)))
}

/// A TRAE agent's inference call.
async fn call(served: &Served) -> client::Resp {
    client::send(
        Method::POST,
        &format!("{}{}", served.trae, trae::PATH),
        &[("content-type", "application/json")],
        serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
    )
    .await
}

/// The text the agent read.
fn said(resp: &client::Resp) -> String {
    shimgate_testkit::trae::digest(&resp.body).text
}

async fn status(served: &Served) -> Value {
    client::get(&format!("{}/status", served.trae)).await.json()
}

async fn control(served: &Served, path: &str, body: Value) -> client::Resp {
    client::post_json(&format!("{}{path}", served.trae), &body).await
}

/// `(route, reason)` of the trae shim's effective order.
fn order(v: &Value) -> Vec<(String, String)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["route"].as_str().unwrap().to_string(),
                e["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

async fn effective(served: &Served) -> Vec<(String, String)> {
    order(&status(served).await["chain"]["ordering"]["effective"]["trae"])
}

/// Waits until the state file says `check` (the writer saves within a second).
async fn file_says(file: &Path, check: impl Fn(&Value) -> bool) -> bool {
    let path = routes_json(file);
    eventually(Duration::from_secs(5), || {
        let ok = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| check(&v));
        async move { ok }
    })
    .await
}

/// A SOLO answer saying `r{n}`.
fn ok_reply(n: u32) -> Reply {
    trae::reply(&trae::answer(&format!("r{n}"), None, 10))
}

#[tokio::test]
async fn a_quota_cooldown_survives_a_restart_with_the_same_until() {
    let r1 = Upstream::always(Reply::json(402, "payment required")).await;
    let r2 = Upstream::always(ok_reply(2)).await;
    let dir = tempdir();
    let file = write(
        &dir,
        &config(
            &[("r1", &r1), ("r2", &r2)],
            "[ordering]\nquota_cooldown_ms = 600000\n",
        ),
    );
    let served = Served::start(&file, &[], &[]);
    assert_eq!(said(&call(&served).await), "r2");
    let st = status(&served).await;
    let eff = &st["chain"]["ordering"]["effective"]["trae"];
    assert_eq!(
        order(eff),
        pairs(&[("r2", "configured"), ("r1", "cooling")])
    );
    let until = eff[1]["until"].as_str().unwrap().to_string();
    assert_eq!(
        st["chain"]["routes"]["trae"][0]["lastFailure"]["code"],
        "QUOTA"
    );
    assert!(
        file_says(&file, |v| {
            let r1 = &v["shims"]["trae"]["routes"]["r1"];
            r1["cooldown"]["until"] == until.as_str() && r1["attempts"] == 1
        })
        .await
    );
    // A kill, not a clean stop: what the writer saved within the second is
    // what the next start reads.
    drop(served);

    let served = Served::start(&file, &[], &[]);
    let st = status(&served).await;
    let eff = &st["chain"]["ordering"]["effective"]["trae"];
    assert_eq!(
        order(eff),
        pairs(&[("r2", "configured"), ("r1", "cooling")])
    );
    assert_eq!(eff[1]["until"], until.as_str(), "the same absolute end");
    assert_eq!(st["chain"]["stateFile"]["atStart"], "loaded");
    assert_eq!(
        st["chain"]["routes"]["trae"][0]["attempts"], 1,
        "counters kept"
    );
    assert_eq!(said(&call(&served).await), "r2");
    assert_eq!(
        r1.hits(),
        1,
        "the cooling route is not hit again after the restart"
    );
}

/// Disables `route` on `served` and waits until `served`'s own state file
/// has it.
async fn disable(served: &Served, state_file: &Path, route: &str) {
    let r = control(served, &format!("/routes/trae/{route}/disable"), json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let saved = eventually(Duration::from_secs(5), || {
        let ok = std::fs::read(state_file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|v| v["shims"]["trae"]["routes"][route]["disabled"] == true);
        async move { ok }
    })
    .await;
    assert!(
        saved,
        "{route} disabled never reached {}",
        state_file.display()
    );
}

/// The routes `/status` says are disabled by hand.
async fn disabled(served: &Served) -> Vec<String> {
    let mut out: Vec<String> =
        order(&status(served).await["chain"]["ordering"]["effective"]["trae"])
            .into_iter()
            .filter(|(_, reason)| reason == "disabled")
            .map(|(route, _)| route)
            .collect();
    out.sort();
    out
}

#[tokio::test]
async fn two_instances_on_one_state_dir_keep_each_other_s_route_state() {
    // Two `serve`s with different configs and the same (per user, by
    // default) state dir; both have a route called `shared`.
    let up = Upstream::always(ok_reply(1)).await;
    let dir = tempdir();
    let home = dir.join("xdg-state");
    let env = [("XDG_STATE_HOME", home.to_str().unwrap())];
    let a = dir.join("a.toml");
    std::fs::write(&a, config(&[("a1", &up), ("a2", &up), ("shared", &up)], "")).unwrap();
    let b = dir.join("b.toml");
    std::fs::write(&b, config(&[("b1", &up), ("shared", &up)], "")).unwrap();
    let (a_file, b_file) = (state_file_in(&home, &a), state_file_in(&home, &b));
    assert_ne!(a_file, b_file);

    let served_a = Served::start(&a, &[], &env);
    disable(&served_a, &a_file, "a1").await;
    let served_b = Served::start(&b, &[], &env);
    disable(&served_b, &b_file, "b1").await;
    disable(&served_a, &a_file, "a2").await;
    disable(&served_a, &a_file, "shared").await;
    let st = status(&served_a).await;
    assert_eq!(
        st["chain"]["stateFile"]["path"],
        a_file.display().to_string(),
        "/status names the instance's own file"
    );
    assert_eq!(
        st["chain"]["stateFile"]["config"],
        std::path::absolute(&a).unwrap().display().to_string()
    );
    // A stops first: B's last write comes after A's.
    served_a.stop();
    served_b.stop();

    let served_a = Served::start(&a, &[], &env);
    assert_eq!(disabled(&served_a).await, ["a1", "a2", "shared"]);
    let served_b = Served::start(&b, &[], &env);
    assert_eq!(
        disabled(&served_b).await,
        ["b1"],
        "B's `shared` is its own route: A's disable is not B's"
    );
    served_a.stop();
    served_b.stop();
}

#[tokio::test]
async fn ttl_zero_keeps_no_route_state_file() {
    let r1 = Upstream::always(Reply::json(402, "payment required")).await;
    let r2 = Upstream::always(ok_reply(2)).await;
    let dir = tempdir();
    let file = write(
        &dir,
        &config(&[("r1", &r1), ("r2", &r2)], "[state]\nttl_ms = 0\n"),
    );
    let served = Served::start(&file, &[], &[]);
    assert_eq!(said(&call(&served).await), "r2");
    assert_eq!(
        status(&served).await["chain"]["stateFile"]["atStart"],
        "off"
    );
    served.stop();
    assert!(
        !routes_json(&file).exists(),
        "no routes.json with ttl_ms = 0"
    );
}

#[tokio::test]
async fn a_corrupt_state_file_is_a_warning_and_serve_starts() {
    let r1 = Upstream::always(ok_reply(1)).await;
    let dir = tempdir();
    let file = write(&dir, &config(&[("r1", &r1)], ""));
    let path = routes_json(&file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, "{\"version\": 1, \"savedAtMs\": \"yesterday\"").unwrap();
    let served = Served::start(&file, &[], &[]);
    assert_eq!(said(&call(&served).await), "r1");
    let st = status(&served).await;
    assert_eq!(st["chain"]["stateFile"]["atStart"], "unreadable");
    let log = served.stderr();
    assert!(
        log.contains("WARN") && log.contains("cannot use the route state file"),
        "{log}"
    );
    // The next save replaces it with a good one.
    assert!(file_says(&file, |v| v["shims"]["trae"]["routes"]["r1"]["ok"] == 1).await);
}

/// r1: 40 ms to its head and two failures in three tries until `healthy`,
/// then fast and sound.
async fn flaky_then_healthy(healthy: Arc<AtomicBool>) -> Upstream {
    Upstream::start(move |_, n| {
        if healthy.load(Ordering::SeqCst) {
            return ok_reply(1);
        }
        let mut reply = if n % 3 == 1 {
            ok_reply(1)
        } else {
            Reply::json(502, "flaky")
        };
        reply
            .steps
            .insert(0, Step::Sleep(Duration::from_millis(40)));
        reply
    })
    .await
}

#[tokio::test]
async fn measured_mode_moves_a_slow_flaky_first_route_behind_a_fast_one_and_back() {
    let healthy = Arc::new(AtomicBool::new(false));
    let r1 = flaky_then_healthy(healthy.clone()).await;
    let r2 = Upstream::always(ok_reply(2)).await;
    let dir = tempdir();
    let extra = "[retry]\nmax_retries = 0\n[breaker]\nfailures = 0\n\
                 [ordering]\nmode = \"measured\"\nmeasure_window_ms = 1500\n";
    let file = write(&dir, &config(&[("r1", &r1), ("r2", &r2)], extra));
    let served = Served::start(&file, &[], &[]);
    assert_eq!(
        effective(&served).await,
        pairs(&[("r1", "configured"), ("r2", "configured")]),
        "no record yet: the configured order"
    );
    let mut demoted_after = None;
    for n in 1..=20 {
        assert!(
            !said(&call(&served).await).is_empty(),
            "every call is answered"
        );
        if effective(&served).await[0].0 == "r2" {
            demoted_after = Some(n);
            break;
        }
    }
    let n = demoted_after.expect("r1 still first after 20 calls");
    let st = status(&served).await;
    let eff = &st["chain"]["ordering"]["effective"]["trae"];
    assert_eq!(order(eff), pairs(&[("r2", "ranked"), ("r1", "ranked")]));
    assert!(eff[0]["score"].as_f64() > eff[1]["score"].as_f64());
    let row = &st["chain"]["routes"]["trae"][0];
    assert!(row["successRate"].as_f64().unwrap() < 0.6, "{row}");
    assert!(row["ttftMedianMs"].as_u64().unwrap() >= 40, "{row}");
    assert!(row["samples"].as_u64().unwrap() >= 3, "{row}");
    let hits = r1.hits();
    for _ in 0..3 {
        assert_eq!(said(&call(&served).await), "r2");
    }
    assert_eq!(r1.hits(), hits, "demoted after {n} calls: r2 answers first");

    // r1 recovers. Once its old record ages out it is tried first again
    // (probation), proves itself, and leads on its score.
    healthy.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let back = eventually(Duration::from_secs(6), || async {
        let _ = call(&served).await;
        effective(&served).await == pairs(&[("r1", "ranked"), ("r2", "ranked")])
    })
    .await;
    assert!(back, "r1 did not come back: {:?}", effective(&served).await);
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "not before its record aged out"
    );
    assert_eq!(said(&call(&served).await), "r1");
}

#[tokio::test]
async fn the_breaker_opens_lets_one_call_through_and_doubles_on_failure() {
    let r1 = Upstream::always(Reply::json(502, "down")).await;
    let r2 = Upstream::always(ok_reply(2)).await;
    let dir = tempdir();
    let extra =
        "[retry]\nmax_retries = 0\n[breaker]\nfailures = 3\nopen_ms = 300\nmax_open_ms = 5000\n";
    let file = write(&dir, &config(&[("r1", &r1), ("r2", &r2)], extra));
    let served = Served::start(&file, &[], &[]);
    for _ in 0..3 {
        assert_eq!(said(&call(&served).await), "r2");
    }
    assert_eq!(r1.hits(), 3);
    let breaker = |st: &Value| st["chain"]["routes"]["trae"][0]["breaker"].clone();
    let st = status(&served).await;
    assert_eq!(breaker(&st)["state"], "open");
    assert_eq!(breaker(&st)["openMs"], 300);
    assert_eq!(
        order(&st["chain"]["ordering"]["effective"]["trae"]),
        pairs(&[("r2", "configured"), ("r1", "breaker-open")])
    );
    for _ in 0..3 {
        assert_eq!(said(&call(&served).await), "r2");
    }
    assert_eq!(r1.hits(), 3, "skipped while open");
    let metrics = client::get(&format!("{}/metrics", served.trae))
        .await
        .text();
    assert!(
        metrics.contains("shimgate_route_breaker_state{shim=\"trae\",route=\"r1\"} 2"),
        "{metrics}"
    );

    // After open_ms: half-open, exactly one of several calls reaches r1.
    assert!(
        eventually(Duration::from_secs(3), || async {
            breaker(&status(&served).await)["state"] == "half-open"
        })
        .await
    );
    let calls: Vec<_> = (0..4).map(|_| call(&served)).collect();
    for resp in futures_util::future::join_all(calls).await {
        assert_eq!(said(&resp), "r2");
    }
    assert_eq!(r1.hits(), 4, "one probe");
    let st = status(&served).await;
    assert_eq!(breaker(&st)["state"], "open");
    assert_eq!(
        breaker(&st)["openMs"],
        600,
        "a failed probe doubles the period"
    );
    let reopened = Instant::now();
    assert!(
        eventually(Duration::from_secs(3), || async {
            breaker(&status(&served).await)["state"] == "half-open"
        })
        .await
    );
    assert!(
        reopened.elapsed() >= Duration::from_millis(500),
        "{:?}",
        reopened.elapsed()
    );
    assert_eq!(said(&call(&served).await), "r2");
    assert_eq!(r1.hits(), 5);
    assert_eq!(breaker(&status(&served).await)["openMs"], 1200);
}

#[tokio::test]
async fn a_route_that_always_fails_gets_about_1_2_times_the_calls_not_6() {
    let r1 = Upstream::always(Reply::json(502, "down")).await;
    let dir = tempdir();
    // Five retries a call without a budget: 6 tries per call. The floor
    // is 1 retry a second, 10 over the budget's window.
    let extra =
        "[retry]\nmax_retries = 5\ninitial_delay_ms = 1\nmax_delay_ms = 2\njitter_ratio = 0\n\
                 budget_ratio = 0.2\nbudget_min_per_s = 1\n[breaker]\nfailures = 0\n";
    let file = write(&dir, &config(&[("r1", &r1)], extra));
    let served = Served::start(&file, &[], &[]);
    let calls = 40;
    for _ in 0..calls {
        assert_eq!(call(&served).await.status, StatusCode::BAD_GATEWAY);
    }
    let hits = r1.hits();
    let ceiling = calls + calls / 5 + 10 + 1;
    assert!(
        hits >= calls && hits <= ceiling,
        "{hits} upstream requests for {calls} calls (at most {ceiling})"
    );
    let metrics = client::get(&format!("{}/metrics", served.trae))
        .await
        .text();
    let exhausted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("shimgate_retry_budget_exhausted_total{shim=\"trae\"} "))
        .unwrap_or_else(|| panic!("{metrics}"))
        .parse()
        .unwrap();
    // All but the first two calls (whose retries the floor paid for) ended
    // on the spent budget.
    assert!(exhausted as usize >= calls - 3, "{exhausted}");
    let st = status(&served).await;
    assert_eq!(
        st["chain"]["budget"]["shims"]["trae"]["exhausted"],
        exhausted as u64
    );
}

#[tokio::test]
async fn pin_disable_enable_unpin_and_reset_work_and_survive_a_restart() {
    let q = Upstream::always(Reply::json(402, "payment required")).await;
    let r2 = Upstream::always(ok_reply(2)).await;
    let r3 = Upstream::always(ok_reply(3)).await;
    let dir = tempdir();
    let file = write(&dir, &config(&[("q", &q), ("r2", &r2), ("r3", &r3)], ""));
    let served = Served::start(&file, &[], &[]);
    assert_eq!(
        said(&call(&served).await),
        "r2",
        "q cools on its quota wall"
    );

    let r = control(&served, "/routes/trae/pin", json!({"route": "r3"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["shim"], "trae");
    assert_eq!(
        order(&r.json()["effective"]),
        pairs(&[("r3", "pinned"), ("r2", "configured"), ("q", "cooling")])
    );
    let r = control(&served, "/routes/trae/r2/disable", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    let pinned_disabled = pairs(&[("r3", "pinned"), ("q", "cooling"), ("r2", "disabled")]);
    assert_eq!(order(&r.json()["effective"]), pinned_disabled);
    assert_eq!(said(&call(&served).await), "r3");

    for (path, body, named) in [
        ("/routes/nosuch/pin", json!({"route": "r2"}), "nosuch"),
        ("/routes/trae/pin", json!({"route": "nope"}), "nope"),
        ("/routes/trae/nope/disable", json!({}), "nope"),
        ("/routes/nosuch/r2/enable", json!({}), "nosuch"),
    ] {
        let r = control(&served, path, body).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        let msg = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(msg.contains(named), "{path}: {msg}");
    }
    let r = control(&served, "/routes/trae/pin", json!({"route": 7})).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);

    assert!(
        file_says(&file, |v| {
            let t = &v["shims"]["trae"];
            t["pinned"] == "r3" && t["routes"]["r2"]["disabled"] == true
        })
        .await
    );
    served.stop();

    let served = Served::start(&file, &[], &[]);
    assert_eq!(
        effective(&served).await,
        pinned_disabled,
        "kept across the restart"
    );
    assert_eq!(said(&call(&served).await), "r3");
    let r = control(&served, "/routes/reset", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        order(&r.json()["effective"]["trae"]),
        pairs(&[("r3", "pinned"), ("q", "configured"), ("r2", "disabled")]),
        "the cooldown is gone, the pin and the disable stay"
    );
    let r = control(&served, "/routes/trae/r2/enable", json!({})).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = control(&served, "/routes/trae/pin", json!({"route": null})).await;
    let configured = pairs(&[
        ("q", "configured"),
        ("r2", "configured"),
        ("r3", "configured"),
    ]);
    assert_eq!(order(&r.json()["effective"]), configured);
    served.stop();

    let served = Served::start(&file, &[], &[]);
    assert_eq!(
        effective(&served).await,
        configured,
        "reset, enable and unpin kept too"
    );
    assert_eq!(
        status(&served).await["chain"]["ordering"]["pinned"]["trae"],
        Value::Null
    );
}

#[tokio::test]
async fn a_reset_an_upstream_states_is_honoured_but_capped_at_26_hours() {
    let week = (std::time::SystemTime::now() + Duration::from_secs(7 * 86_400))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let body = format!("{{\"error\":{{\"message\":\"insufficient quota\",\"reset_at\":{week}}}}}");
    let in_body = Upstream::always(Reply::json(429, &body)).await;
    let in_header = Upstream::always(Reply::json_with(
        402,
        &[("retry-after", "90")],
        "payment required",
    ))
    .await;
    let ok = Upstream::always(ok_reply(3)).await;
    let dir = tempdir();
    let file = write(
        &dir,
        &config(
            &[("body", &in_body), ("header", &in_header), ("ok", &ok)],
            "",
        ),
    );
    let served = Served::start(&file, &[], &[]);
    let before = std::time::SystemTime::now();
    assert_eq!(said(&call(&served).await), "r3");
    let st = status(&served).await;
    let until = |i: usize| {
        let text = st["chain"]["routes"]["trae"][i]["cooldownUntil"]
            .as_str()
            .unwrap();
        humantime::parse_rfc3339(text)
            .unwrap()
            .duration_since(before)
            .unwrap()
    };
    let capped = until(0);
    assert!(
        capped > Duration::from_secs(26 * 3600 - 60)
            && capped <= Duration::from_secs(26 * 3600 + 5),
        "a week in the body rests 26 h: {capped:?}"
    );
    let asked = until(1);
    assert!(
        asked >= Duration::from_secs(89) && asked <= Duration::from_secs(95),
        "Retry-After 90 on a quota failure: {asked:?}"
    );
}

#[tokio::test]
async fn an_http_error_s_business_code_classifies_it_first_and_a_quota_rests_the_route() {
    // TRAE's 4008 on an HTTP 429 (its quota code): the shim's own
    // table says QUOTA, so the stated reset rests the route (not a rate
    // limit that is retried or left for a moment).
    let message = "Your requests have exceeded the quota. Please try again later.";
    let body = json!({"code": 4008, "message": message}).to_string();
    let hour = Upstream::always(Reply::json_with(429, &[("retry-after", "3600")], &body)).await;
    let days = Upstream::always(Reply::json_with(429, &[("retry-after", "360000")], &body)).await;
    // A code the table knows decides over the status: 1002 (token
    // expired) on a 500 is AUTH, left at once, not a server error retried.
    let expired = json!({"code": 1002, "message": "token expired"}).to_string();
    let auth = Upstream::always(Reply::json(500, &expired)).await;
    let ok = Upstream::always(ok_reply(4)).await;
    let dir = tempdir();
    let extra = "[retry]\nmax_retries = 2\ninitial_delay_ms = 1\nmax_delay_ms = 5\n";
    let file = write(
        &dir,
        &config(
            &[
                ("hour", &hour),
                ("days", &days),
                ("auth", &auth),
                ("ok", &ok),
            ],
            extra,
        ),
    );
    let served = Served::start(&file, &[], &[]);
    let before = std::time::SystemTime::now();
    assert_eq!(said(&call(&served).await), "r4");
    let st = status(&served).await;
    let routes = &st["chain"]["calls"][0]["routes"];
    let codes: Vec<&str> = (0..4)
        .map(|i| routes[i]["code"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(codes, ["QUOTA", "QUOTA", "AUTH", "ok"], "{routes:#}");
    assert_eq!(
        (hour.hits(), days.hits(), auth.hits()),
        (1, 1, 1),
        "none retried in place"
    );
    let until = |i: usize| {
        let text = st["chain"]["routes"]["trae"][i]["cooldownUntil"]
            .as_str()
            .unwrap_or_else(|| panic!("route {i} is not resting: {st:#}"));
        humantime::parse_rfc3339(text)
            .unwrap()
            .duration_since(before)
            .unwrap()
    };
    let rest = until(0);
    assert!(
        rest >= Duration::from_secs(3599) && rest <= Duration::from_secs(3605),
        "Retry-After 3600 on a 4008: {rest:?}"
    );
    let capped = until(1);
    assert!(
        capped > Duration::from_secs(26 * 3600 - 60)
            && capped <= Duration::from_secs(26 * 3600 + 5),
        "100 h stated rests 26 h: {capped:?}"
    );
    assert!(
        st["chain"]["routes"]["trae"][2]["cooldownUntil"].is_null(),
        "AUTH does not rest a route"
    );
    // The resting routes are skipped on the next call.
    assert_eq!(said(&call(&served).await), "r4");
    assert_eq!((hour.hits(), days.hits()), (1, 1));
}

#[tokio::test]
async fn a_quota_rest_ends_at_the_local_hour_tz_names() {
    let wall = Upstream::always(Reply::json(402, "payment required")).await;
    let ok = Upstream::always(ok_reply(2)).await;
    let dir = tempdir();
    // A one-second rest, so the hour decides: 06:00 at UTC+8 is 22:00Z.
    let extra = "[ordering]\nquota_cooldown_ms = 1000\nquota_cooldown_hour = 6\n";
    let file = write(&dir, &config(&[("wall", &wall), ("ok", &ok)], extra));
    // POSIX: "XYZ-8" is eight hours east of UTC.
    let served = Served::start(&file, &[], &[("TZ", "XYZ-8")]);
    assert_eq!(said(&call(&served).await), "r2");
    let st = status(&served).await;
    let until = st["chain"]["routes"]["trae"][0]["cooldownUntil"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(until.ends_with("T22:00:00.000Z"), "{until}");
    let left = humantime::parse_rfc3339(&until)
        .unwrap()
        .duration_since(std::time::SystemTime::now())
        .unwrap();
    assert!(
        left <= Duration::from_secs(24 * 3600),
        "the next 06:00, not a later one: {left:?}"
    );
    assert_eq!(st["chain"]["ordering"]["quotaCooldownHour"], 6);
}

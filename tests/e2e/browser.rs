//! shimgate in a real browser (headless Chromium, `support::browser`):
//! what a web page the user opens can do to it (`docs/security.md`), and
//! the panel (`docs/panel.md`) shown and steered as a user would.

use serde_json::json;

use crate::support::bin::tempdir;
use crate::support::browser::Browser;
use crate::support::client;
use crate::support::upstream::{Reply, Upstream};
use crate::support::{qoder, trae, Gate};

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

/// Where the browser tests leave their pictures: under the build's own
/// `target/` (`CARGO_TARGET_TMPDIR`), never in the tree, so a test run
/// leaves `git status` clean.
fn shots_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("panel-shots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// README's picture (`docs/panel.png`) is remade only on purpose:
/// `SHIMGATE_WRITE_DOCS_SHOT=1 cargo test --test e2e the_panel_shows`.
fn write_docs_shot(english: &std::path::Path) {
    if std::env::var("SHIMGATE_WRITE_DOCS_SHOT").is_ok_and(|v| v == "1") {
        let docs = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/panel.png");
        std::fs::copy(english, docs).unwrap();
        eprintln!("wrote {docs} (SHIMGATE_WRITE_DOCS_SHOT=1)");
    }
}

/// The config the panel test edits: comments the writes must keep.
fn panel_config(q_first: &Upstream, q_second: &Upstream, trae: &Upstream) -> String {
    let hour = chrono::Utc::now()
        .format("%H")
        .to_string()
        .parse::<u32>()
        .unwrap();
    // An hour range that does not hold now (the test process runs in UTC
    // or whatever TZ says; shimgate reads the same zone).
    let local_hour = chrono::Local::now()
        .format("%H")
        .to_string()
        .parse::<u32>()
        .unwrap_or(hour);
    let night = format!("{}-{}", (local_hour + 2) % 24, (local_hour + 3) % 24);
    format!(
        "# shimgate for the panel test: these comments must survive every write\n\
         [retry]\nmax_retries = 0          # switch at once\ninitial_delay_ms = 10\njitter_ratio = 0\n\n\
         [ordering]\nmode = \"auto\"            # the panel switches this\n\n\
         # the cheap channel first\n[[shims.qoder.routes]]\nname = \"q-first\"\nurl = \"{a}\"\n\n\
         # the backup\n[[shims.qoder.routes]]\nname = \"q-second\"\nurl = \"{b}\"\n\n\
         [[shims.trae.routes]]\nname = \"t-night\"\nurl = \"{c}\"\nactive_hours = [\"{night}\"]   # only at night\n\n\
         [[shims.trae.routes]]\nname = \"t-day\"\nurl = \"{c}\"\n",
        a = q_first.url(),
        b = q_second.url(),
        c = trae.url(),
    )
}

/// A qoder answer that takes its time, so the route's output speed is
/// measured (one piece at once says nothing of speed).
fn slow_qoder_answer() -> Reply {
    let frames = qoder::answer_frames("hello from the backup route", 40);
    let (last, rest) = frames.split_last().unwrap();
    let reply = rest.iter().fold(Reply::sse(), |r, f| r.chunk(f)).sleep(60);
    reply.chunk(last).hold()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_shows_and_steers_what_status_says() {
    let Some(browser) = Browser::find() else {
        return;
    };
    let quota = Reply::json_with(
        402,
        &[("retry-after", "7200")],
        r#"{"error":{"message":"insufficient balance"}}"#,
    );
    let down = Reply::json(500, r#"{"error":{"message":"upstream down"}}"#);
    let q_first = Upstream::sequence(vec![
        quota,
        down.clone(),
        down.clone(),
        down,
        slow_qoder_answer(),
    ])
    .await;
    let q_second = Upstream::always(slow_qoder_answer()).await;
    let t_day = Upstream::always(trae::reply(&trae::answer("hi from trae", None, 30))).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    let mut text = panel_config(&q_first, &q_second, &t_day);
    if cfg!(feature = "test-shims") {
        // The test-only third shim stays out of the panel (and its picture).
        text.push_str("\n[shims.openai]\nenabled = false\n");
    }
    std::fs::write(&file, text).unwrap();
    let mut config = shimgate::config::Config::load(&file).unwrap();
    config.listen_on_free_ports();
    let gate = Gate::start_config(config).await;
    let ask =
        serde_json::to_string(&qoder::ask(&[json!({"role": "user", "content": "hi"})])).unwrap();
    let trae_body = serde_json::to_string(&trae::body(&[trae::text("user", "hi")])).unwrap();
    let shots = shots_dir();
    let params = json!({
        "base": gate.qoder,
        "qoder": gate.qoder,
        "trae": gate.trae,
        "qoderPath": qoder::PATH,
        "qoderAsk": ask,
        "traePath": trae::PATH,
        "traeBody": trae_body,
        "configFile": std::fs::canonicalize(&file).unwrap(),
        "shots": shots,
    });
    let found = browser.run("panel", &params).await;
    assert_eq!(found["console"], json!([]), "no console error or warning");
    assert_eq!(found["foreign"], json!([]), "no request to another origin");
    assert_eq!(
        found["answerHead"],
        json!({"x-shimgate-route": "q-second", "x-shimgate-switched-from": "q-first"})
    );
    assert_eq!(found["noActive"], json!([503, "NO_ACTIVE_ROUTE"]));
    assert_eq!(found["adopted"], json!(["q-second", "q-first"]));
    let switches = client::get(&format!("{}/switches?session=conv-42", gate.trae))
        .await
        .json();
    let list = switches["switches"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{switches}");
    assert_eq!(
        (&list[0]["from"], &list[0]["to"], &list[0]["class"]),
        (&json!("q-first"), &json!("q-second"), &json!("QUOTA"))
    );
    eprintln!(
        "FIGURES panel: cooling {:?}; off-hours {:?}; refused write {:?}; live counter values {}; speed row {:?}; success {}; chart {}; redrawn from the POST's answer in {} ms; zh {} {}; pictures in {}",
        found["cooling"], found["offHours"], found["refused"], found["liveValues"], found["speedRow"],
        found["success"], found["chart"], found["redrawMs"], found["zh"], found["zhWords"], shots.display()
    );
    write_docs_shot(&shots.join("panel-en.png"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_panel_reads_at_400_routes_and_says_when_a_shim_has_none() {
    let Some(browser) = Browser::find() else {
        return;
    };
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    // 400 routes on qoder (users who rotate many keys run hundreds), none on trae.
    // A provider zone that is not the browser's (Asia/Shanghai): the page
    // names it.
    let mut text =
        String::from("[retry]\nmax_retries = 0\n\n[ordering]\nzone = \"Europe/Berlin\"\n");
    for i in 0..400 {
        text.push_str(&format!(
            "\n[[shims.qoder.routes]]\nname = \"r-{i:03}\"\nurl = \"{}\"\n",
            up.url()
        ));
    }
    if cfg!(feature = "test-shims") {
        text.push_str("\n[shims.openai]\nenabled = false\n");
    }
    std::fs::write(&file, text).unwrap();
    let mut config = shimgate::config::Config::load(&file).unwrap();
    config.listen_on_free_ports();
    let gate = Gate::start_config(config).await;
    let shots = shots_dir();
    let params = json!({"base": gate.qoder, "shots": shots});
    let found = browser.run("many", &params).await;
    assert_eq!(found["console"], json!([]), "no console error or warning");
    assert_eq!(found["routes"], 400);
    eprintln!(
        "FIGURES panel at 400 routes: {:?}; zone note {:?}; pictures in {}",
        found["more"],
        found["zoneNote"],
        shots.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_says_where_each_panel_is() {
    use std::io::{BufRead, BufReader};
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    std::fs::write(
        &file,
        "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_shimgate"))
        .args(["serve", "--config"])
        .arg(&file)
        .env("XDG_STATE_HOME", dir.join("state"))
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut listening, mut panels) = (Vec::new(), Vec::new());
    for line in lines.map_while(Result::ok) {
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        match words.as_slice() {
            [first, _, addr] if first == "listening" => listening.push(addr.clone()),
            [first, url] if first == "panel" => panels.push(url.clone()),
            _ => {}
        }
        if panels.len() == 2 {
            break;
        }
    }
    let addrs: Vec<String> = panels
        .iter()
        .map(|u| {
            u.trim_start_matches("http://")
                .trim_end_matches("/ui")
                .to_owned()
        })
        .collect();
    assert_eq!(
        addrs, listening,
        "one panel line per listener, its real address"
    );
    for url in &panels {
        let page = client::get(url).await;
        assert_eq!(page.status, http::StatusCode::OK, "{url}");
        assert!(page.text().contains("<title>shimgate</title>"), "{url}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A savings file with the ten days before `today` (in the config's zone):
/// a net saving most days, a net cost every fourth.
fn savings_history(today: chrono::NaiveDate) -> serde_json::Value {
    let mut days = serde_json::Map::new();
    for i in 1..=10u64 {
        let date = today - chrono::Days::new(i);
        let (agent, sent) = if i % 4 == 0 {
            (9_000, 8_000)
        } else {
            (40_000 + i * 1_000, 15_000)
        };
        days.insert(
            date.to_string(),
            json!({"calls": 6, "agentTokens": agent, "sentTokens": sent, "sideCalls": 1, "sideTokens": 3_000}),
        );
    }
    json!({"version": 1, "savedAtMs": 1, "days": days})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_savings_card_shows_today_fourteen_days_and_the_conversations_in_both_languages() {
    use crate::support::conversation::Conversation;
    use crate::support::model::{Model, Wire};
    use crate::support::proxy::{Options, TestProxy};
    let Some(browser) = Browser::find() else {
        return;
    };
    let model = Model::start(Wire::Trae).await;
    let dir = tempdir();
    let file = dir.join("shimgate.toml");
    let mut base = format!(
        "[ordering]\nzone = \"Asia/Shanghai\"\n[retry]\ninitial_delay_ms = 10\n\
         [[shims.trae.routes]]\nname = \"t1\"\nurl = \"{}\"\n",
        model.url()
    );
    if cfg!(feature = "test-shims") {
        base.push_str("\n[shims.openai]\nenabled = false\n");
    }
    std::fs::write(
        &file,
        format!("[state]\ndir = \"{}\"\n{base}", dir.join("state").display()),
    )
    .unwrap();
    let mut config = shimgate::config::Config::load(&file).unwrap();
    config.listen_on_free_ports();
    let today = chrono::Utc::now()
        .with_timezone(&chrono_tz::Asia::Shanghai)
        .date_naive();
    let name = shimgate::app::ledger::store::file_name(config.source.as_deref());
    std::fs::create_dir_all(&config.state_dir).unwrap();
    std::fs::write(
        config.state_dir.join(name),
        savings_history(today).to_string(),
    )
    .unwrap();
    let gate = Gate::start_config(config).await;
    let options = Options {
        threshold: 6_000,
        keep_recent: 2,
        ..Options::default()
    };
    let proxy = TestProxy::start(gate.trae.clone(), options).await;
    gate.use_compressor(&proxy.url(), &base);
    // One long conversation the compressor shortens, one short one it
    // only makes longer (its preamble).
    let mut long = Conversation::new(Wire::Trae, "conv-long", "cred-1");
    for _ in 0..5 {
        assert!(long.turn(&gate.trae).await.error.is_none());
    }
    let mut short = Conversation::new(Wire::Trae, "conv-short", "cred-1");
    assert!(short.turn(&gate.trae).await.error.is_none());
    let shots = shots_dir();
    let found = browser
        .run("savings", &json!({"base": gate.trae, "shots": shots}))
        .await;
    assert_eq!(found["console"], json!([]), "no console error or warning");
    eprintln!(
        "FIGURES savings card: today {}; bars {}; best {:?}; worst {:?}; zh {:?}; pictures {} and {}",
        found["today"],
        found["bars"],
        found["best"],
        found["worst"],
        found["zh"],
        shots.join("savings-en.png").display(),
        shots.join("savings-zh.png").display()
    );
}

/// The panel's capture card (en and zh) against a capture listener that
/// decrypted a call and tunnelled a host after three refusals, and a web
/// page that tries to use the capture listener: it reads nothing, and
/// every attempt is refused as not a proxy request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capture_card_shows_the_listener_and_a_web_page_cannot_use_it() {
    use crate::support::capture as through;
    let Some(browser) = Browser::find() else {
        return;
    };
    let s = super::capture::Stack0::start().await;
    let gate = Gate::start(&s.toml("")).await;
    let (body, headers) = super::capture::solo("hi");
    let r = through::send(
        &gate.capture,
        "trae-api-cn.mchost.guru",
        s.trusting(&[&s.root]),
        (http::Method::POST, trae::PATH),
        &super::capture::pairs(&headers),
        body,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    for _ in 0..3 {
        let refused = through::tls(
            &gate.capture,
            "api2.qoder.sh",
            443,
            s.trusting(&[&s.world_root]),
        )
        .await;
        assert!(refused.is_err());
    }
    let tunnelled = crate::support::eventually(std::time::Duration::from_secs(10), || async {
        gate.status().await["capture"]["hosts"][0]["mode"] == "tunnel"
    })
    .await;
    assert!(tunnelled);
    let world_calls = s.world.calls().len();
    let shots = shots_dir();
    let found = browser
        .run(
            "capture",
            &json!({"base": gate.trae, "capture": gate.capture, "shots": shots}),
        )
        .await;
    assert_eq!(found["en"]["title"], "Capture proxy");
    assert_eq!(found["zh"]["title"], "捕获代理");
    assert_eq!(found["en"]["modes"]["api2.qoder.sh"], "tunnel");
    assert_eq!(found["zh"]["modes"]["api2.qoder.sh"], "隧道");
    assert_eq!(found["en"]["modes"]["trae-api-cn.mchost.guru"], "decrypt");
    assert_eq!(found["zh"]["modes"]["trae-api-cn.mchost.guru"], "解密");
    let page = &found["page"];
    for read in page["reads"].as_array().unwrap() {
        assert!(
            read["blocked"].is_string(),
            "a page read the capture listener: {read}"
        );
    }
    let attempts = page["reads"].as_array().unwrap().len() as u64
        + page["posts"].as_u64().unwrap()
        + page["forms"].as_u64().unwrap();
    let refused = crate::support::eventually(std::time::Duration::from_secs(10), || async {
        gate.status().await["capture"]["requests"]["notProxyRequests"] == attempts
    })
    .await;
    assert!(refused, "{:#}", gate.status().await["capture"]);
    assert_eq!(s.world.calls().len(), world_calls, "nothing reached a host");
    eprintln!(
        "FIGURES browser capture: {attempts} attempts from a web page refused (NOT_A_PROXY_REQUEST), none read; cards in {}",
        shots.display()
    );
    gate.stop(std::time::Duration::from_secs(5)).await;
}

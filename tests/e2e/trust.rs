//! Loopback trust (`docs/security.md`) through the real listeners: a foreign `Host`
//! (DNS rebinding) gets no data from any admin path, a state-changing
//! request from another origin changes nothing, admin paths never reach an
//! upstream whatever the method, inference takes any `Host`, and a remote
//! listener needs the admin token. The browser's view of the same attacks
//! is `browser::attacks_from_web_pages_change_and_read_nothing`.

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::bin::{tempdir, Served};
use crate::support::client::{self, Resp};
use crate::support::qoder;
use crate::support::upstream::{Reply, Upstream};
use crate::support::Gate;

/// Two qoder routes and one trae route, loaded from a file (so `/reload`
/// has something to re-read).
pub async fn gate_with_file(
    dir: &std::path::Path,
    ups: &[&Upstream],
) -> (Gate, std::path::PathBuf) {
    let file = dir.join("shimgate.toml");
    let toml = format!(
        "# the user's own comment\n[retry]\ninitial_delay_ms = 10\njitter_ratio = 0\n\n\
         [[shims.qoder.routes]]\nname = \"q-first\"\nurl = \"{a}\"\n\n\
         [[shims.qoder.routes]]\nname = \"q-second\"\nurl = \"{b}\"\n\n\
         [[shims.trae.routes]]\nname = \"t-only\"\nurl = \"{c}\"\n",
        a = ups[0].url(),
        b = ups[1 % ups.len()].url(),
        c = ups[2 % ups.len()].url(),
    );
    std::fs::write(&file, toml).unwrap();
    let mut config = shimgate::config::Config::load(&file).unwrap();
    config.listen_on_free_ports();
    (Gate::start_config(config).await, file)
}

pub fn port_of(base: &str) -> &str {
    base.rsplit(':').next().unwrap()
}

/// What a page could change: every hand-set state, the reload count, the
/// config file's path.
pub fn steerable(status: &Value) -> Value {
    json!({
        "effective": status["chain"]["ordering"]["effective"],
        "pinned": status["chain"]["ordering"]["pinned"],
        "reloads": status["config"]["reloads"],
        "mode": status["chain"]["ordering"]["mode"],
    })
}

/// Every state-changing admin request, as (path, body).
pub const CONTROLS: [(&str, &str); 8] = [
    ("/routes/qoder/q-first/disable", ""),
    ("/routes/qoder/pin", r#"{"route":"q-second"}"#),
    ("/routes/reset", ""),
    ("/reload", ""),
    ("/routes/qoder/q-first/restore", ""),
    ("/routes/trae/t-only/disable", ""),
    (
        "/routes/qoder/order",
        r#"{"routes":["q-second","q-first"]}"#,
    ),
    ("/ordering", r#"{"mode":"manual"}"#),
];

async fn send(method: Method, url: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    client::send(method, url, headers, body.to_string()).await
}

#[tokio::test]
async fn a_foreign_host_gets_403_and_no_data_on_every_admin_path() {
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let (gate, _) = gate_with_file(&dir, &[&up]).await;
    let before = steerable(&gate.status().await);
    let port = port_of(&gate.qoder).to_string();
    let hosts = [
        "rebind.attacker.test".to_string(),
        format!("rebind.attacker.test:{port}"),
        "127.0.0.1.evil.test".to_string(),
        format!("127.0.0.1.evil.test:{port}"),
        format!("localhost.evil.test:{port}"),
    ];
    let mut asked = 0;
    let reads = [
        "/status",
        "/metrics",
        "/switches",
        "/ui",
        "/routes",
        "/status/x",
    ];
    for host in &hosts {
        for path in reads {
            for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
                let r = send(
                    method.clone(),
                    &format!("{}{path}", gate.qoder),
                    &[("host", host)],
                    "",
                )
                .await;
                asked += 1;
                assert_eq!(
                    r.status,
                    StatusCode::FORBIDDEN,
                    "{method} {path} Host {host}"
                );
                assert!(r.headers.get("access-control-allow-origin").is_none());
                let text = r.text();
                for secret in ["q-first", "t-only", up.url().as_str(), "shimgate.toml"] {
                    assert!(
                        !text.contains(secret),
                        "{path} Host {host} shows {secret}: {text}"
                    );
                }
                if method == Method::GET {
                    assert_eq!(r.json()["error"]["code"], "FORBIDDEN_HOST");
                }
            }
        }
        for (path, body) in CONTROLS {
            let r = send(
                Method::POST,
                &format!("{}{path}", gate.trae),
                &[("host", host)],
                body,
            )
            .await;
            asked += 1;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "POST {path} Host {host}");
            assert_eq!(r.json()["error"]["code"], "FORBIDDEN_HOST");
        }
    }
    let after = gate.status().await;
    assert_eq!(steerable(&after), before, "nothing changed");
    assert_eq!(after["admin"]["refused"]["forbiddenHost"], asked);
    assert_eq!(up.hits(), 0, "nothing reached an upstream");

    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_string(),
        "127.0.0.1".to_string(),
    ] {
        let r = send(
            Method::GET,
            &format!("{}/status", gate.qoder),
            &[("host", &host)],
            "",
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "Host {host}");
        assert!(r.text().contains("q-first"));
    }
    let (status, body) = raw(&gate.qoder, "GET /status HTTP/1.0\r\n\r\n").await;
    assert_eq!(status, 200, "an HTTP/1.0 tool sends no Host: {body}");
}

/// A raw request on a fresh connection: the status and the body text.
async fn raw(base: &str, request: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    let _ = tokio::time::timeout(Duration::from_secs(10), read).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn state_changes_from_another_origin_are_refused_and_change_nothing() {
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let (gate, _) = gate_with_file(&dir, &[&up]).await;
    let before = steerable(&gate.status().await);
    let host = gate.qoder.trim_start_matches("http://").to_string();
    let other_port = format!("http://127.0.0.1:{}", up.url().rsplit(':').next().unwrap());
    let foreign: [(&str, &str); 8] = [
        ("origin", other_port.as_str()),
        ("origin", "http://localhost:5173"),
        ("origin", "null"),
        ("origin", "https://evil.example"),
        ("origin", "http://rebind.attacker.test"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("sec-fetch-site", "weird"),
    ];
    let mut refused = 0;
    for (path, body) in CONTROLS {
        for (name, value) in foreign {
            let url = format!("{}{path}", gate.qoder);
            let r = send(
                Method::POST,
                &url,
                &[
                    ("host", &host),
                    (name, value),
                    ("content-type", "text/plain"),
                ],
                body,
            )
            .await;
            refused += 1;
            assert_eq!(
                r.status,
                StatusCode::FORBIDDEN,
                "POST {path} with {name}: {value}"
            );
            assert_eq!(r.json()["error"]["code"], "FORBIDDEN_ORIGIN");
            assert!(r.headers.get("access-control-allow-origin").is_none());
        }
    }
    let after = gate.status().await;
    assert_eq!(steerable(&after), before, "nothing changed");
    assert_eq!(after["admin"]["refused"]["forbiddenOrigin"], refused);

    // No Origin (curl, scripts) and the listener's own origin are served.
    let own = format!("http://{host}");
    let disable = format!("{}/routes/qoder/q-first/disable", gate.qoder);
    let r = send(Method::POST, &disable, &[], "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["effective"][1]["reason"], "disabled");
    let enable = format!("{}/routes/qoder/q-first/enable", gate.qoder);
    let r = send(
        Method::POST,
        &enable,
        &[("origin", &own), ("sec-fetch-site", "same-origin")],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let reload = format!("{}/reload", gate.qoder);
    let r = send(Method::POST, &reload, &[("origin", &own)], "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(gate.status().await["config"]["reloads"], 1);
}

#[tokio::test]
async fn admin_paths_are_answered_locally_whatever_the_method() {
    let up = Upstream::always(Reply::json(200, "{}")).await;
    let dir = tempdir();
    let (gate, _) = gate_with_file(&dir, &[&up]).await;
    let base = &gate.qoder;
    let preflight = [
        ("origin", "http://127.0.0.1:5173"),
        ("access-control-request-method", "POST"),
        ("access-control-request-headers", "content-type"),
    ];
    let r = send(
        Method::OPTIONS,
        &format!("{base}/routes/qoder/q-first/disable"),
        &preflight,
        "",
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "a foreign preflight gets no grant"
    );
    assert!(r.headers.get("access-control-allow-origin").is_none());
    assert!(r.headers.get("access-control-allow-methods").is_none());
    let r = send(Method::OPTIONS, &format!("{base}/status"), &[], "").await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(r.headers["allow"], "GET, HEAD, OPTIONS");
    assert!(r.headers.get("access-control-allow-origin").is_none());

    for (method, path, status) in [
        (Method::GET, "/status/x", StatusCode::NOT_FOUND),
        (Method::GET, "/routes", StatusCode::NOT_FOUND),
        (
            Method::POST,
            "/routes/qoder/q-first/explode",
            StatusCode::NOT_FOUND,
        ),
        (Method::GET, "/ui/nothing-here", StatusCode::NOT_FOUND),
        (Method::PUT, "/status", StatusCode::METHOD_NOT_ALLOWED),
        (Method::DELETE, "/reload", StatusCode::METHOD_NOT_ALLOWED),
        (Method::GET, "/routes/reset", StatusCode::METHOD_NOT_ALLOWED),
        (Method::PATCH, "/metrics", StatusCode::METHOD_NOT_ALLOWED),
    ] {
        let r = send(method.clone(), &format!("{base}{path}"), &[], "").await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.text());
        if status == StatusCode::NOT_FOUND {
            assert_eq!(r.json()["error"]["code"], "NOT_FOUND");
            assert!(r.text().contains(path), "the 404 names the path");
        }
        assert_eq!(r.headers["cache-control"], "no-store");
    }
    assert_eq!(
        up.hits(),
        0,
        "nothing under the admin prefixes reached an upstream"
    );
}

#[tokio::test]
async fn inference_and_passthrough_take_any_host() {
    let up = Upstream::always(qoder::answer("hello", 10)).await;
    let models = Upstream::always(Reply::json(200, r#"{"data":[]}"#)).await;
    let dir = tempdir();
    let (gate, _) = gate_with_file(&dir, &[&up, &up, &models]).await;
    let body =
        serde_json::to_vec(&qoder::ask(&[json!({"role": "user", "content": "hi"})])).unwrap();
    let r = client::send(
        Method::POST,
        &format!("{}{}", gate.qoder, qoder::PATH),
        &[
            ("host", "api2.qoder.sh"),
            ("content-type", "application/json"),
        ],
        body,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(qoder::read_answer(&r.body).0, "hello");
    assert_eq!(up.hits(), 1);
    let url = format!("{}/api/v1/models", gate.trae);
    let r = send(
        Method::GET,
        &url,
        &[("host", "trae-api-cn.mchost.guru")],
        "",
    )
    .await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "pass-through answered by the upstream"
    );
    assert_eq!(r.text(), r#"{"data":[]}"#);
    assert_eq!(models.hits(), 1);
}

#[tokio::test]
async fn a_remote_listener_needs_the_admin_token_and_never_shows_it() {
    let up = Upstream::always(qoder::answer("hello", 10)).await;
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    let token_file = dir.join("secrets/admin.token");
    std::fs::write(
        &config,
        format!(
            "[admin]\ntoken_file = \"{}\"\n\
             [shims.qoder]\nlisten = \"0.0.0.0:0\"\nallow_remote = true\n\
             [[shims.qoder.routes]]\nname = \"q1\"\nurl = \"{u}\"\n\
             [shims.trae]\nlisten = \"127.0.0.1:0\"\n\
             [[shims.trae.routes]]\nname = \"t1\"\nurl = \"{u}\"\n",
            token_file.display(),
            u = up.url()
        ),
    )
    .unwrap();
    let served = Served::start(&config, &[], &[]);
    let remote = served.qoder.replace("0.0.0.0", "127.0.0.1");
    let token = std::fs::read_to_string(&token_file)
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(token.len(), 64, "32 random bytes as hex");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "created for its owner only");
    }
    let status = format!("{remote}/status");
    // Inference needs no token.
    let r = client::send(
        Method::POST,
        &format!("{remote}{}", qoder::PATH),
        &[("content-type", "application/json")],
        serde_json::to_vec(&qoder::ask(&[json!({"role": "user", "content": "hi"})])).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(Method::GET, &status, &[], "").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json()["error"]["code"], "UNAUTHORIZED");
    assert!(r.headers["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Bearer"));
    assert!(!r.text().contains("q1"));
    let wrong = format!("Bearer {}", "0".repeat(64));
    let r = send(Method::GET, &status, &[("authorization", &wrong)], "").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(
        Method::POST,
        &format!("{remote}/routes/qoder/q1/disable"),
        &[("authorization", &wrong)],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let right = format!("Bearer {token}");
    let r = send(Method::GET, &status, &[("authorization", &right)], "").await;
    assert_eq!(r.status, StatusCode::OK);
    let doc = r.text();
    assert!(!doc.contains(&token), "/status never shows the token");
    assert_eq!(r.json()["admin"]["refused"]["unauthorized"], 3);
    let r = send(
        Method::POST,
        &format!("{remote}/routes/qoder/q1/disable"),
        &[("authorization", &right)],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());

    // The panel: `?token=` once, then an HttpOnly, SameSite=Strict cookie.
    let r = send(Method::GET, &format!("{remote}/ui?token={token}"), &[], "").await;
    assert_eq!(r.status, StatusCode::OK);
    let cookie = r.headers["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let r = send(Method::GET, &status, &[("cookie", &pair)], "").await;
    assert_eq!(r.status, StatusCode::OK, "the cookie stands for the token");
    let r = send(Method::GET, &format!("{remote}/ui?token=wrong"), &[], "").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.headers.get("set-cookie").is_none());
    // The loopback listener needs none.
    assert_eq!(
        client::get(&format!("{}/status", served.trae)).await.status,
        StatusCode::OK
    );
    let log = served.stderr();
    assert!(
        !log.contains(&token),
        "the log never shows the token:\n{log}"
    );
    assert!(
        log.contains("admin token"),
        "the log names the token's file:\n{log}"
    );

    // Rotated: the file rewritten and the config reloaded, the old token
    // is refused at once and the new one taken, with no restart.
    let rotated = "rotated-token-0123456789abcdef";
    std::fs::write(&token_file, format!("{rotated}\n")).unwrap();
    let r = send(
        Method::POST,
        &format!("{remote}/reload"),
        &[("authorization", &right)],
        "",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = send(Method::GET, &status, &[("authorization", &right)], "").await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "the old token is gone");
    let new = format!("Bearer {rotated}");
    let r = send(Method::GET, &status, &[("authorization", &new)], "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(!r.text().contains(rotated), "/status never shows the token");
    assert!(!served.stderr().contains(rotated), "nor the log");
    served.stop();
}

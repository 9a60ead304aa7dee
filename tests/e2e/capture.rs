//! The capture listener (`[capture] listen`, `docs/capture.md`): a client
//! that follows `HTTPS_PROXY` and trusts the local CA (curl, Python's
//! httpx and requests, Node's https, a Rust client) gets through it what
//! the shims give a direct call; a host off the list is a byte tunnel
//! with its own certificate; a request on a decrypted host that is not an
//! inference call reaches that host unchanged, a WebSocket included;
//! refusals of the certificate are counted and tunnel the host after
//! three; shimgate with `HTTPS_PROXY` naming its own capture port still
//! reaches its upstreams; no password or token reaches the log,
//! `/status` or `/metrics`.
//!
//! Nothing leaves loopback: shimgate's onward connections go through an
//! `[upstream] proxy` that is the loopback world (`qoder_world.rs`), which
//! answers every call itself as the host it was for, with certificates of
//! a test CA that shimgate trusts through `[upstream] ca_file`.
//!
//! These drive `shimgate.exe` under Wine too (`.ci/windows` runs
//! `capture::`): the CA is made by the test in the state dir it names.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use http::{Method, StatusCode};
use serde_json::json;
use shimgate::config::Config;

use crate::support::bin::{tempdir, Served, TempDir};
use crate::support::capture::{self, Stack};
use crate::support::cosy_check;
use crate::support::qoder_world::{self, World};
use crate::support::scripted_https::{Call, Reply};
use crate::support::test_ca::TestCa;
use crate::support::{client, external, qoder, tls, trae, Gate};

/// What the world's qoder says, and TRAE.
const QODER_TEXT: &str = "hello through the capture listener";
const TRAE_TEXT: &str = "solo through the capture listener";
/// The user the asks are signed for.
const USER: &str = "user-capture-test";

/// The world (shimgate's `[upstream] proxy`), its CA, and shimgate's CA,
/// made in the state dir before shimgate starts.
pub struct Stack0 {
    pub world: World,
    pub dir: TempDir,
    pub state: PathBuf,
    /// shimgate's root.
    pub root: PathBuf,
    /// The world's root.
    pub world_root: PathBuf,
    /// Both roots: what a client trusts.
    pub bundle: PathBuf,
    /// What the world's scripted providers refused, as they would.
    pub problems: Arc<Mutex<Vec<String>>>,
}

impl Stack0 {
    pub async fn start() -> Stack0 {
        let dir = tempdir();
        let state = dir.join("state");
        let c = Config {
            state_dir: state.clone(),
            ..Default::default()
        };
        let root = shimgate::tls::ensure_ca(&c).unwrap().root_pem;
        let world_ca = TestCa::new();
        let world = World::start(world_ca.clone()).await;
        let world_root = dir.join("world-root.pem");
        world_ca.write_bundle(&world_root, &[]);
        let bundle = dir.join("bundle.pem");
        world_ca.write_bundle(&bundle, &[&std::fs::read_to_string(&root).unwrap()]);
        let problems: Arc<Mutex<Vec<String>>> = Arc::default();
        let p = problems.clone();
        world.route(
            qoder_world::is_legacy_ask,
            move |call, _| match verify_ask(call) {
                Ok(()) => qoder_world::legacy_answer(QODER_TEXT),
                Err(why) => {
                    p.lock().unwrap().push(why.clone());
                    Reply::json_sized(
                        403,
                        &[],
                        &json!({"code": "101", "message": why}).to_string(),
                    )
                }
            },
        );
        world.route(
            |c| c.path().starts_with(trae::PATH),
            |_, _| trae::reply(&trae::answer(TRAE_TEXT, None, 9)),
        );
        Stack0 {
            world,
            dir,
            state,
            root,
            world_root,
            bundle,
            problems,
        }
    }

    /// shimgate's config: its state dir, the world as `[upstream] proxy`
    /// (trusted through `ca_file`), the capture listener on a free port,
    /// then `extra`.
    pub fn toml(&self, extra: &str) -> String {
        let path = |p: &Path| p.display().to_string().replace('\\', "/");
        format!(
            "[state]\ndir = \"{}\"\nttl_ms = 0\n[savings]\nfile = false\n\
             [upstream]\nproxy = \"{}\"\nca_file = \"{}\"\n\
             [retry]\ninitial_delay_ms = 10\nmax_retries = 1\n\
             [capture]\nlisten = \"127.0.0.1:0\"\n{extra}",
            path(&self.state),
            self.world.proxy_url(),
            path(&self.world_root),
        )
    }

    /// A client config trusting shimgate's root only, the world's only, or both.
    pub fn trusting(&self, which: &[&Path]) -> Arc<tokio_rustls::rustls::ClientConfig> {
        let file = self.dir.join(format!("trust-{:x}.pem", fastrand::u64(..)));
        let text: String = which
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        std::fs::write(&file, text).unwrap();
        tls::client_config(Some(&file))
    }
}

/// The legacy ask as qoder checks it: signature, date, body.
fn verify_ask(call: &Call) -> Result<(), String> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &call.request.headers {
        headers.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    let now = now();
    cosy_check::verify(&headers, &call.request.body, call.path(), now, 600)?;
    cosy_check::decode(&call.request.body).ok_or("the body is not Encode=1")?;
    Ok(())
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A signed `Encode=1` ask saying `text`, as the Qoder CLI sends it: its
/// body and headers.
pub fn signed_ask(text: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let ask = serde_json::to_vec(&qoder::ask(&[json!({"role": "user", "content": text})])).unwrap();
    let encoded = cosy_check::encode(&ask);
    let id = format!("{:032x}", fastrand::u128(..));
    let headers = cosy_check::client_headers(USER, &id, &encoded, qoder::PATH, now());
    (encoded, headers)
}

/// A SOLO body saying `text`, and TRAE's headers.
pub fn solo(text: &str) -> (Vec<u8>, Vec<(String, String)>) {
    let body = serde_json::to_vec(&trae::body(&[trae::text("user", text)])).unwrap();
    let headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), "text/event-stream".to_owned()),
        (
            "authorization".to_owned(),
            "Cloud-IDE-JWT jwt-capture-test".to_owned(),
        ),
        ("x-ide-token".to_owned(), "jwt-capture-test".to_owned()),
    ];
    (body, headers)
}

pub fn pairs(h: &[(String, String)]) -> Vec<(&str, &str)> {
    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// The text an answer says: qoder's bare frames or TRAE's SOLO events.
fn said(wire: &str, body: &[u8]) -> String {
    match wire {
        "qoder" => qoder::read_answer(body).0,
        _ => trae::digest(body).text,
    }
}

/// The stacks that are installed (each missing one noted, or a failure
/// under `SHIMGATE_REQUIRE_EXTERNAL=1`).
fn installed() -> (Vec<Stack>, Option<PathBuf>) {
    let mut stacks = Vec::new();
    if external::program("curl", "apt-get install curl").is_some() {
        stacks.push(Stack::Curl);
    }
    let python = external::python_with("httpx, requests");
    if python.is_some() {
        stacks.extend([Stack::Httpx, Stack::Requests]);
    }
    if crate::support::qoder_cli::node_available() {
        stacks.push(Stack::Node);
    }
    (stacks, python)
}

/// shimgate behind the reference compressor (which rewrites every chat
/// request it forwards: its counters show it saw the call).
async fn with_compressor(base: &str) -> (Gate, shimgate::compressor::Compressor) {
    let gate = Gate::start(base).await;
    let compressor = shimgate::compressor::start(
        "127.0.0.1:0".parse().unwrap(),
        &gate.qoder,
        shimgate::compressor::Policy {
            threshold_chars: 8000,
            keep_turns: 2,
            pass_through: false,
        },
    )
    .await
    .unwrap();
    gate.use_compressor(&compressor.url(), base);
    (gate, compressor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_follow_a_proxy_get_what_the_shims_give_a_direct_call() {
    let s = Stack0::start().await;
    // Written routes to the providers' own hosts: a direct call and a
    // captured one take the same route (through the world).
    let base = s.toml(
        "[[shims.qoder.routes]]\nname = \"qoder-intl\"\nurl = \"https://api2.qoder.sh\"\n\
         [[shims.trae.routes]]\nname = \"trae-cn\"\nurl = \"https://trae-api-cn.mchost.guru\"\n",
    );
    let (gate, compressor) = with_compressor(&base).await;
    assert!(!gate.capture.is_empty(), "the capture listener listens");
    let files = s.dir.join("bodies");
    std::fs::create_dir_all(&files).unwrap();
    let (stacks, python) = installed();
    let python = python.unwrap_or_default();
    let calls = [
        ("qoder", "api2.qoder.sh", qoder::PATH),
        ("trae", "trae-api-cn.mchost.guru", trae::PATH),
    ];
    let mut captured = 0;
    for (wire, host, path) in calls {
        let (body, headers) = match wire {
            "qoder" => signed_ask("say hi"),
            _ => solo("say hi"),
        };
        let listener = if wire == "qoder" {
            &gate.qoder
        } else {
            &gate.trae
        };
        let direct = client::send(
            Method::POST,
            &format!("{listener}{path}"),
            &pairs(&headers),
            body.clone(),
        )
        .await;
        assert_eq!(
            direct.status,
            StatusCode::OK,
            "{wire} direct: {}",
            direct.text()
        );
        let expected = said(wire, &direct.body);
        assert_eq!(
            expected,
            if wire == "qoder" {
                QODER_TEXT
            } else {
                TRAE_TEXT
            }
        );
        // A Rust client: CONNECT, rustls trusting shimgate's root only.
        let r = capture::send(
            &gate.capture,
            host,
            s.trusting(&[&s.root]),
            (Method::POST, path),
            &pairs(&headers),
            body.clone(),
        )
        .await
        .unwrap();
        assert_eq!(
            (r.status, said(wire, &r.body)),
            (StatusCode::OK, expected.clone()),
            "{wire} rust"
        );
        captured += 1;
        for stack in &stacks {
            // Each stack signs its own ask (a fresh id and date).
            let (body, headers) = match wire {
                "qoder" => signed_ask("say hi"),
                _ => solo("say hi"),
            };
            let file = files.join(format!("{wire}-{}.body", stack.name().replace(' ', "-")));
            std::fs::write(&file, &body).unwrap();
            let url = format!("https://{host}{path}");
            let got = capture::external(
                *stack,
                (&gate.capture, &s.bundle, &python),
                ("POST", &url),
                &pairs(&headers),
                Some(&file),
            )
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{wire} through {}: {e}\nthe world saw:\n{}",
                    stack.name(),
                    s.world.summary()
                )
            });
            assert_eq!(
                got.status,
                StatusCode::OK,
                "{wire} {}: {}",
                stack.name(),
                String::from_utf8_lossy(&got.body)
            );
            assert_eq!(
                said(wire, &got.body),
                expected,
                "{wire} through {}",
                stack.name()
            );
            captured += 1;
        }
    }
    let per_wire = captured / 2;
    assert_eq!(
        *s.problems.lock().unwrap(),
        Vec::<String>::new(),
        "qoder refused an ask"
    );
    let st = gate.status().await;
    for (shim, host) in [
        ("qoder", "api2.qoder.sh"),
        ("trae", "trae-api-cn.mchost.guru"),
    ] {
        let section = &st[format!("{shim}Shim")];
        assert_eq!(section["intercepted"], per_wire + 1, "{shim}: {section:#}");
        assert_eq!(
            section["fallback"], 0,
            "{shim}: the compressor path took every call"
        );
        assert_eq!(
            st["capture"]["handed"][shim], per_wire,
            "{:#}",
            st["capture"]
        );
        let row = st["capture"]["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["host"] == host)
            .unwrap()
            .clone();
        assert_eq!(row["handed"], per_wire, "{row:#}");
        assert_eq!(row["mode"], "intercept");
        assert_eq!(row["clientRefusals"], 0);
    }
    assert_eq!(
        st["capture"]["implicitRoutes"],
        json!({}),
        "written routes were used"
    );
    let seen = compressor.counters();
    assert_eq!(
        seen.requests as usize,
        2 * (per_wire + 1),
        "the compressor saw every call: {seen:?}"
    );
    let asks = s.world.legacy_asks();
    assert_eq!(asks.len(), per_wire + 1, "{}", s.world.summary());
    assert!(asks.iter().all(|a| a.host == "api2.qoder.sh"));
    eprintln!(
        "FIGURES capture clients: {} per wire through the capture listener ({}), the same answers as a direct call",
        per_wire,
        std::iter::once("rust")
            .chain(stacks.iter().map(|s| s.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    gate.stop(std::time::Duration::from_secs(5)).await;
}

/// The host's row in `/status` `capture.hosts`.
fn row(status: &serde_json::Value, host: &str) -> serde_json::Value {
    status["capture"]["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == host)
        .cloned()
        .unwrap_or_else(|| panic!("no row for {host}: {:#}", status["capture"]))
}

#[tokio::test]
async fn a_wire_without_written_routes_goes_to_the_host_its_client_asked_for() {
    let s = Stack0::start().await;
    let gate = Gate::start(&s.toml("")).await;
    let (body, headers) = solo("hi");
    // Called directly, a shim without routes has nowhere to send it.
    let direct = client::send(
        Method::POST,
        &format!("{}{}", gate.trae, trae::PATH),
        &pairs(&headers),
        body.clone(),
    )
    .await;
    assert_eq!(direct.status, StatusCode::BAD_GATEWAY, "{}", direct.text());
    assert_eq!(direct.json()["error"]["code"], "NO_ROUTES");
    // Captured, it goes where its client sent it.
    let trust = s.trusting(&[&s.root]);
    let r = capture::send(
        &gate.capture,
        "trae-api-sg.mchost.guru",
        trust.clone(),
        (Method::POST, trae::PATH),
        &pairs(&headers),
        body,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, said("trae", &r.body)),
        (StatusCode::OK, TRAE_TEXT.to_owned())
    );
    let (ask, headers) = signed_ask("hi");
    let r = capture::send(
        &gate.capture,
        "api2.qoder.sh",
        trust,
        (Method::POST, qoder::PATH),
        &pairs(&headers),
        ask,
    )
    .await
    .unwrap();
    assert_eq!(
        (r.status, said("qoder", &r.body)),
        (StatusCode::OK, QODER_TEXT.to_owned())
    );
    assert_eq!(*s.problems.lock().unwrap(), Vec::<String>::new());
    let solo_call = s
        .world
        .calls()
        .into_iter()
        .find(|c| c.path().starts_with(trae::PATH))
        .unwrap();
    assert_eq!(solo_call.host, "trae-api-sg.mchost.guru");
    assert_eq!(
        solo_call.request.header("authorization"),
        Some("Cloud-IDE-JWT jwt-capture-test")
    );
    let st = gate.status().await;
    assert_eq!(
        st["capture"]["implicitRoutes"],
        json!({"qoder": ["capture:api2.qoder.sh"], "trae": ["capture:trae-api-sg.mchost.guru"]})
    );
    let routes: Vec<&str> = st["chain"]["calls"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["routes"].as_array().unwrap())
        .filter_map(|r| r["route"].as_str())
        .collect();
    assert!(
        routes.contains(&"capture:trae-api-sg.mchost.guru"),
        "{routes:?}"
    );
    assert!(routes.contains(&"capture:api2.qoder.sh"), "{routes:?}");
    assert_eq!(
        st["traeShim"]["intercepted"], 2,
        "the direct call and the captured one"
    );
    gate.stop(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_host_off_the_list_is_a_byte_tunnel_with_its_own_certificate() {
    let s = Stack0::start().await;
    let gate = Gate::start(&s.toml("")).await;
    // shimgate does not decrypt it: a client that trusts shimgate's root
    // only refuses the host's own certificate, one that trusts the
    // host's CA (the world's) gets its answer.
    let refused = capture::tls(
        &gate.capture,
        "openapi.qoder.sh",
        443,
        s.trusting(&[&s.root]),
    )
    .await;
    assert!(refused.is_err(), "shimgate's leaf was presented");
    let r = capture::send(
        &gate.capture,
        "openapi.qoder.sh",
        s.trusting(&[&s.world_root]),
        (Method::GET, "/api/v1/userinfo"),
        &[("authorization", "Bearer jt-tunnel")],
        "",
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["id"], qoder_world::USER_ID);
    let userinfo = s
        .world
        .calls()
        .into_iter()
        .find(|c| c.path() == "/api/v1/userinfo")
        .unwrap();
    assert_eq!(
        (userinfo.host.as_str(), userinfo.via),
        ("openapi.qoder.sh", "tunnel")
    );
    assert!(
        s.world
            .connects()
            .iter()
            .all(|c| c == "openapi.qoder.sh:443"),
        "{:?}",
        s.world.connects()
    );
    // A loopback target: a direct tunnel, never through the upstream proxy.
    let up =
        crate::support::upstream::Upstream::always(Reply::json(200, r#"{"loopback":true}"#)).await;
    let target = up.url().trim_start_matches("http://").to_owned();
    let mut tcp = capture::connect(&gate.capture, &target).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tcp.write_all(
        format!("GET /x HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&answer).contains(r#"{"loopback":true}"#) {
            let n = tcp.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
            answer.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "{}", String::from_utf8_lossy(&answer));
    assert!(!s
        .world
        .connects()
        .iter()
        .any(|c| c.starts_with("127.0.0.1")));
    let st = gate.status().await;
    let host = row(&st, "openapi.qoder.sh");
    assert_eq!(
        (
            host["mode"].as_str(),
            host["listed"].as_bool(),
            host["tunnelled"].as_u64()
        ),
        (Some("tunnel"), Some(false), Some(2)),
        "{host:#}"
    );
    assert_eq!(st["capture"]["connections"]["loopback"], 1);
    assert_eq!(st["capture"]["connections"]["intercepted"], 0);
    gate.stop(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_request_on_a_decrypted_host_that_is_no_inference_call_reaches_the_host_unchanged() {
    let s = Stack0::start().await;
    s.world.route(
        |c| c.path().starts_with("/algo/api/v2/model/list"),
        |_, _| {
            Reply::json_sized(
                201,
                &[("x-world", "model list"), ("set-cookie", "w=1")],
                r#"{"models":[]}"#,
            )
        },
    );
    s.world.route(
        |c| c.path().starts_with("/algo/api/v2/held"),
        |_, _| Reply::sse().chunk("data: first\n\n").hold(),
    );
    let gate = Gate::start(&s.toml("")).await;
    let trust = s.trusting(&[&s.root]);
    let body = b"{\"page\":1,\"raw\":\"\\u00e9\xc3\xa9\"}".to_vec();
    let r = capture::send(
        &gate.capture,
        "api2.qoder.sh",
        trust.clone(),
        (Method::POST, "/algo/api/v2/model/list?Encode=0&x=%2F"),
        &[
            ("authorization", "Bearer COSY.payload.sig"),
            ("cookie", "sid=abc; lang=en"),
            ("x-custom", "kept"),
            ("content-type", "application/json"),
        ],
        body.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text());
    assert_eq!(r.headers["x-world"], "model list");
    assert_eq!(r.headers["set-cookie"], "w=1");
    assert_eq!(r.text(), r#"{"models":[]}"#);
    let call = s
        .world
        .calls()
        .into_iter()
        .find(|c| c.path().starts_with("/algo/api/v2/model/list"))
        .unwrap();
    assert_eq!(
        (call.host.as_str(), call.request.method.as_str()),
        ("api2.qoder.sh", "POST")
    );
    assert_eq!(call.path(), "/algo/api/v2/model/list?Encode=0&x=%2F");
    for (k, v) in [
        ("authorization", "Bearer COSY.payload.sig"),
        ("cookie", "sid=abc; lang=en"),
        ("x-custom", "kept"),
        ("host", "api2.qoder.sh"),
    ] {
        assert_eq!(call.request.header(k), Some(v), "{k}");
    }
    assert_eq!(call.request.body, body, "the body byte for byte");
    // An answer held open streams: its first event arrives while it is open.
    let stream = capture::tls(&gate.capture, "api2.qoder.sh", 443, trust)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("/algo/api/v2/held")
        .header("host", "api2.qoder.sh")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let mut resp = sender.send_request(req).await.unwrap();
    let first = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client::next_chunk(resp.body_mut()),
    )
    .await
    .expect("the first event before the answer ends")
    .unwrap();
    assert_eq!(&first[..], b"data: first\n\n");
    let st = gate.status().await;
    let host = row(&st, "api2.qoder.sh");
    assert_eq!(
        (host["forwarded"].as_u64(), host["handed"].as_u64()),
        (Some(2), Some(0)),
        "{host:#}"
    );
    assert_eq!(st["qoderShim"]["intercepted"], 0);
    drop(resp);
    gate.stop(std::time::Duration::from_secs(5)).await;
}

#[tokio::test]
async fn an_origin_form_request_is_refused_without_cors() {
    let s = Stack0::start().await;
    let gate = Gate::start(&s.toml("")).await;
    for (method, headers) in [
        (Method::GET, vec![]),
        (Method::GET, vec![("origin", "http://attacker.test")]),
        (
            Method::POST,
            vec![
                ("origin", "http://127.0.0.1:9"),
                ("content-type", "text/plain"),
            ],
        ),
        (
            Method::OPTIONS,
            vec![
                ("origin", "http://attacker.test"),
                ("access-control-request-method", "POST"),
            ],
        ),
    ] {
        let r = client::send(
            method.clone(),
            &format!("{}/status", gate.capture),
            &headers,
            "x",
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{method} {}", r.text());
        assert_eq!(r.json()["error"]["code"], "NOT_A_PROXY_REQUEST");
        assert!(
            !r.headers
                .keys()
                .any(|k| k.as_str().starts_with("access-control")),
            "no CORS: {:?}",
            r.headers
        );
        assert!(!r.text().contains("qoderShim"), "no data");
    }
    let st = gate.status().await;
    assert_eq!(st["capture"]["requests"]["notProxyRequests"], 4);
    assert!(s.world.calls().is_empty() && s.world.connects().is_empty());
    gate.stop(std::time::Duration::from_secs(5)).await;
}

/// `shimgate serve` (the binary: its log is read) on `toml`, both shims
/// and the capture listener on free ports unless `toml` names one.
fn served(dir: &Path, toml: &str, env: &[(&str, &str)]) -> Served {
    let file = dir.join(format!("shimgate-{:x}.toml", fastrand::u64(..)));
    std::fs::write(
        &file,
        format!("[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n{toml}"),
    )
    .unwrap();
    Served::start(&file, &["--log-format", "json"], env)
}

async fn status_of(served: &Served) -> serde_json::Value {
    client::get(&format!("{}/status", served.qoder))
        .await
        .json()
}

#[tokio::test]
async fn a_client_that_refuses_the_certificate_gets_a_tunnel_after_three_refusals() {
    let s = Stack0::start().await;
    let gate = tokio::task::spawn_blocking({
        let (dir, toml) = (s.dir.to_path_buf(), s.toml(""));
        move || served(&dir, &toml, &[])
    })
    .await
    .unwrap();
    // A client that trusts the world's CA but not shimgate's.
    let world_only = s.trusting(&[&s.world_root]);
    for n in 1..=3u64 {
        let e = capture::tls(&gate.capture, "api2.qoder.sh", 443, world_only.clone()).await;
        assert!(e.is_err(), "refusal {n}");
        let counted = crate::support::eventually(std::time::Duration::from_secs(10), || async {
            row(&status_of(&gate).await, "api2.qoder.sh")["clientRefusals"] == n
        })
        .await;
        assert!(
            counted,
            "refusal {n} counted: {:#}",
            status_of(&gate).await["capture"]
        );
    }
    let st = status_of(&gate).await;
    let host = row(&st, "api2.qoder.sh");
    assert_eq!(host["mode"], "tunnel", "{host:#}");
    assert_eq!(host["refusalsInARow"], 3);
    assert!(host["tunnelledSince"].is_string());
    assert!(
        host["why"].as_str().unwrap().contains("3 times in a row"),
        "{host:#}"
    );
    let reason = host["lastRefusal"]["reason"].as_str().unwrap().to_owned();
    assert!(!reason.is_empty(), "{host:#}");
    assert_eq!(st["tls"]["handshakes"]["refused"]["client_refused"], 3);
    // Now the host's own certificate reaches the client, untouched.
    let r = capture::send(
        &gate.capture,
        "api2.qoder.sh",
        world_only.clone(),
        (Method::GET, "/algo/api/v2/model/list"),
        &[],
        "",
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(s.world.connects().contains(&"api2.qoder.sh:443".to_owned()));
    let metrics = client::get(&format!("{}/metrics", gate.qoder)).await.text();
    for line in [
        "shimgate_capture_client_refusals_total{host=\"api2.qoder.sh\"} 3",
        "shimgate_capture_tunnelled_hosts 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }
    let log = gate.stderr();
    assert!(
        log.contains("tunnelled untouched until a reload or restart"),
        "{log}"
    );
    // A reload decrypts it again.
    let r = client::send(Method::POST, &format!("{}/reload", gate.qoder), &[], "").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        row(&status_of(&gate).await, "api2.qoder.sh")["mode"],
        "intercept"
    );
    assert!(
        capture::tls(&gate.capture, "api2.qoder.sh", 443, s.trusting(&[&s.root]))
            .await
            .is_ok()
    );
    eprintln!("FIGURES capture refusals: tunnelled after 3 in a row; the last said {reason:?}");
    gate.stop();
}

#[tokio::test]
async fn shimgate_with_https_proxy_naming_its_capture_port_still_reaches_its_upstreams() {
    let dir = tempdir();
    let port = external::free_port();
    let up = crate::support::upstream::Upstream::always(trae::reply(&trae::answer(
        "straight there",
        None,
        3,
    )))
    .await;
    let upstream_port = up.url().rsplit(':').next().unwrap().to_owned();
    // `127.1` is 127.0.0.1 to the resolver, but not a loopback host as
    // written: the environment's proxy setting applies to it.
    let toml = format!(
        "[capture]\nlisten = \"127.0.0.1:{port}\"\n\
         [[shims.trae.routes]]\nname = \"t\"\nurl = \"http://127.1:{upstream_port}\"\n"
    );
    let own = format!("http://127.0.0.1:{port}");
    let gate = tokio::task::spawn_blocking({
        let (d, own) = (dir.to_path_buf(), own.clone());
        move || {
            served(
                &d,
                &toml,
                &[
                    ("HTTPS_PROXY", &own),
                    ("HTTP_PROXY", &own),
                    ("ALL_PROXY", &own),
                    ("NO_PROXY", ""),
                ],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(gate.capture, own);
    let (body, headers) = solo("hi");
    let r = client::send(
        Method::POST,
        &format!("{}{}", gate.trae, trae::PATH),
        &pairs(&headers),
        body,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(said("trae", &r.body), "straight there");
    assert_eq!(up.requests().len(), 1);
    let st = status_of(&gate).await;
    assert_eq!(
        st["capture"]["ignoredProxySetting"], "env",
        "{:#}",
        st["capture"]
    );
    assert_eq!(
        st["capture"]["connections"],
        json!({"intercepted": 0, "tunnelled": 0, "loopback": 0}),
        "nothing of shimgate's own went through its capture listener"
    );
    let route = &st["chain"]["routes"]["trae"][0];
    assert_eq!(route["proxy"], "none", "{route:#}");
    let log = gate.stderr();
    assert!(
        log.contains("names shimgate's own capture listener"),
        "{log}"
    );
    gate.stop();
}

#[tokio::test]
async fn no_proxy_password_or_token_reaches_the_log_status_or_metrics() {
    const PASSWORD: &str = "pw-7c1e0b9d2a";
    const TOKEN: &str = "jwt-5d8e2f71c0";
    const COOKIE: &str = "sid-0a9b8c7d6e";
    let s = Stack0::start().await;
    // The upstream proxy refuses connections: every onward way fails
    // with a reason naming it.
    let closed = external::free_port();
    let toml = s.toml("").replace(
        &s.world.proxy_url(),
        &format!("http://alice:{PASSWORD}@127.0.0.1:{closed}"),
    );
    let gate = tokio::task::spawn_blocking({
        let d = s.dir.to_path_buf();
        move || served(&d, &toml, &[("RUST_LOG", "debug")])
    })
    .await
    .unwrap();
    let trust = s.trusting(&[&s.root]);
    let auth = format!("Cloud-IDE-JWT {TOKEN}");
    let cookie = format!("sid={COOKIE}");
    let (body, _) = solo("hi");
    let headers = [
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
        ("x-ide-token", TOKEN),
        ("cookie", cookie.as_str()),
    ];
    // An inference call (its implicit route goes through the proxy) ...
    let r = capture::send(
        &gate.capture,
        "trae-api-cn.mchost.guru",
        trust.clone(),
        (Method::POST, trae::PATH),
        &headers,
        body,
    )
    .await
    .unwrap();
    assert!(!r.status.is_success(), "{}", r.text());
    // ... a request forwarded unchanged ...
    let r = capture::send(
        &gate.capture,
        "api2.qoder.sh",
        trust,
        (Method::GET, "/algo/api/v2/model/list"),
        &headers,
        "",
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::BAD_GATEWAY, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "HOST_UNREACHABLE");
    // ... and a tunnel.
    let e = capture::connect(&gate.capture, "openapi.qoder.sh:443")
        .await
        .unwrap_err();
    assert!(e.contains("502") && e.contains("HOST_UNREACHABLE"), "{e}");
    let status = client::get(&format!("{}/status", gate.qoder)).await.text();
    let metrics = client::get(&format!("{}/metrics", gate.qoder)).await.text();
    let log = gate.stderr();
    assert!(
        status.contains(&format!("127.0.0.1:{closed}")),
        "the reasons name the proxy: {status}"
    );
    for (what, text) in [
        ("status", &status),
        ("metrics", &metrics),
        ("log", &log),
        ("answers", &e),
    ] {
        for secret in [PASSWORD, TOKEN, COOKIE, "alice"] {
            assert!(!text.contains(secret), "{secret} is in the {what}: {text}");
        }
    }
    gate.stop();
}

/// The real Qoder CLI with `HTTPS_PROXY` pointed at the capture listener
/// and no `QODER_MODEL_SERVER_HOST`: its default transport, the legacy
/// ask to `api2.qoder.sh`, is decrypted and handed to the qoder shim
/// (through the compressor, on the implicit route `capture:api2.qoder.sh`),
/// which re-signs it as qoder checks; its other calls reach the world
/// unchanged, through tunnels, forwards and absolute-form requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_qoder_cli_behind_the_capture_listener_gets_its_answer_through_the_qoder_shim() {
    use crate::support::qoder_cli::{self, CliEnv};
    let Some(cli) = qoder_cli::find() else { return };
    let s = Stack0::start().await;
    let (gate, compressor) = with_compressor(&s.toml("")).await;
    let env = CliEnv::new(&gate.capture, &s.bundle);
    let run = qoder_cli::run(
        &cli,
        &env,
        &["-p", "say hi"],
        std::time::Duration::from_secs(240),
    )
    .await;
    eprintln!("qodercli through the capture listener: {}", run.describe());
    assert!(
        run.leaks().is_empty(),
        "{}\n{}",
        run.describe(),
        s.world.summary()
    );
    assert_eq!(
        (run.stdout.as_str(), run.code),
        (format!("{QODER_TEXT}\n").as_str(), Some(0)),
        "{}\nthe world saw:\n{}",
        run.describe(),
        s.world.summary()
    );
    assert_eq!(
        *s.problems.lock().unwrap(),
        Vec::<String>::new(),
        "qoder refused the ask"
    );
    let asks = s.world.legacy_asks();
    assert_eq!(asks.len(), 1, "{}", s.world.summary());
    assert_eq!(
        (asks[0].host.as_str(), asks[0].via),
        ("api2.qoder.sh", "tunnel")
    );
    let plain = cosy_check::decode(&asks[0].request.body).unwrap();
    assert!(String::from_utf8_lossy(&plain).contains("say hi"));
    let st = gate.status().await;
    let c = &st["capture"];
    assert_eq!(st["qoderShim"]["intercepted"], 1, "{:#}", st["qoderShim"]);
    assert_eq!(st["qoderShim"]["fallback"], 0, "through the compressor");
    assert_eq!(c["handed"]["qoder"], 1, "{c:#}");
    assert_eq!(
        c["implicitRoutes"]["qoder"],
        json!(["capture:api2.qoder.sh"])
    );
    assert!(compressor.counters().requests >= 1);
    assert_eq!(row(&st, "openapi.qoder.sh")["mode"], "tunnel");
    assert_eq!(c["clientRefusals"], 0, "{c:#}");
    eprintln!(
        "FIGURES qodercli through the capture listener: run {:.1} s; {} CONNECTs intercepted, {} tunnelled, {} forwarded, {} absolute-form; world calls:\n{}",
        run.elapsed.as_secs_f64(),
        c["connections"]["intercepted"],
        c["connections"]["tunnelled"],
        c["requests"]["forwarded"],
        c["requests"]["absolute"],
        s.world.summary()
    );
    gate.stop(std::time::Duration::from_secs(5)).await;
}

/// A proxy standing in for the world that switches protocols: `CONNECT`
/// is answered with TLS for the host (from `ca`), then a request asking
/// for an upgrade gets `101` and its bytes echoed back. It records the
/// upgrade requests' headers.
async fn echo_world(ca: Arc<TestCa>) -> (String, Arc<Mutex<Vec<http::HeaderMap>>>) {
    use http_body_util::Empty;
    use hyper::body::Incoming;
    use hyper_util::rt::TokioIo;
    type Resp = http::Response<Empty<bytes::Bytes>>;
    let seen: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (ca, seen) = (ca.clone(), s.clone());
            tokio::spawn(async move {
                let outer = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
                    let (ca, seen) = (ca.clone(), seen.clone());
                    async move {
                        let host = req.uri().host().unwrap_or_default().to_owned();
                        let upgrade = hyper::upgrade::on(&mut req);
                        tokio::spawn(async move {
                            let Ok(io) = upgrade.await else { return };
                            let Ok(tls) = ca.acceptor(&[&host]).accept(TokioIo::new(io)).await
                            else {
                                return;
                            };
                            let inner = hyper::service::service_fn(
                                move |mut req: http::Request<Incoming>| {
                                    seen.lock().unwrap().push(req.headers().clone());
                                    let upgrade = hyper::upgrade::on(&mut req);
                                    tokio::spawn(async move {
                                        if let Ok(io) = upgrade.await {
                                            let (mut r, mut w) = tokio::io::split(TokioIo::new(io));
                                            let _ = tokio::io::copy(&mut r, &mut w).await;
                                        }
                                    });
                                    async move {
                                        let resp: Resp = http::Response::builder()
                                            .status(101)
                                            .header("upgrade", "websocket")
                                            .header("connection", "Upgrade")
                                            .header(
                                                "sec-websocket-accept",
                                                "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
                                            )
                                            .body(Empty::new())
                                            .unwrap();
                                        Ok::<_, std::convert::Infallible>(resp)
                                    }
                                },
                            );
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(tls), inner)
                                .with_upgrades()
                                .await;
                        });
                        Ok::<_, std::convert::Infallible>(Resp::new(Empty::new()))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), outer)
                    .with_upgrades()
                    .await;
            });
        }
    });
    (format!("http://{addr}"), seen)
}

#[tokio::test]
async fn a_websocket_on_a_decrypted_host_passes_through() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = Stack0::start().await;
    let ca = TestCa::new();
    let ca_root = s.dir.join("echo-root.pem");
    ca.write_bundle(&ca_root, &[]);
    let (proxy, seen) = echo_world(ca).await;
    let toml = s.toml("").replace(&s.world.proxy_url(), &proxy).replace(
        &s.world_root.display().to_string().replace('\\', "/"),
        &ca_root.display().to_string().replace('\\', "/"),
    );
    let gate = Gate::start(&toml).await;
    let mut tls = capture::tls(&gate.capture, "api2.qoder.sh", 443, s.trusting(&[&s.root]))
        .await
        .unwrap();
    tls.write_all(
        b"GET /algo/ws HTTP/1.1\r\nHost: api2.qoder.sh\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: sid=ws\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    let read_head = async {
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                tls.read(&mut byte).await.unwrap(),
                1,
                "{}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
    };
    let in_time = tokio::time::timeout(std::time::Duration::from_secs(20), read_head).await;
    assert!(
        in_time.is_ok(),
        "no 101 within 20 s; shimgate's log:\n{}",
        gate.log()
    );
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("upgrade: websocket") && head.contains("sec-websocket-accept"),
        "{head}"
    );
    // Bytes both ways, after the switch.
    for frame in [&b"\x81\x05hello"[..], b"\x81\x05again"] {
        tls.write_all(frame).await.unwrap();
        let mut back = vec![0u8; frame.len()];
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            tls.read_exact(&mut back),
        )
        .await
        .unwrap_or_else(|_| panic!("no echo within 10 s; shimgate's log:\n{}", gate.log()))
        .unwrap();
        assert_eq!(back, frame);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0]["upgrade"], "websocket");
    assert_eq!(seen[0]["sec-websocket-key"], "dGhlIHNhbXBsZSBub25jZQ==");
    assert_eq!(seen[0]["cookie"], "sid=ws");
    assert_eq!(row(&gate.status().await, "api2.qoder.sh")["forwarded"], 1);
    gate.stop(std::time::Duration::from_secs(5)).await;
}

/// `shimgate launch --proxy` (the binary Cargo built, a program of this
/// host) runs `program args…` with the variables of `shimgate env proxy`
/// and the user's own roots in `SSL_CERT_FILE` (the world's root, standing
/// in for the system's): exit code, stdout, stderr.
async fn launched(
    config: &Path,
    user_roots: &Path,
    program: &Path,
    args: &[&str],
) -> (Option<i32>, String, String) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_shimgate"));
    cmd.args(["launch", "--proxy", "--config"])
        .arg(config)
        .arg("--")
        .arg(program)
        .args(args)
        .env("SSL_CERT_FILE", user_roots)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    for v in [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
        "NODE_EXTRA_CA_CERTS",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "SSL_CERT_DIR",
    ] {
        cmd.env_remove(v);
    }
    let out = cmd.output().await.unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `shimgate launch --proxy -- CLIENT` with no proxy or CA option of the
/// client's own: curl, httpx and requests (which read `SSL_CERT_FILE` or
/// `REQUESTS_CA_BUNDLE`) get a TRAE SOLO answer through the capture
/// listener (trusting shimgate's leaf), and a tunnelled host's own
/// certificate verifies too: the bundle keeps the roots they trusted
/// before.
#[tokio::test]
async fn launch_proxy_runs_clients_through_the_capture_listener_with_their_roots_kept() {
    let s = Stack0::start().await;
    let port = external::free_port();
    let toml = s.toml("").replace(
        "[capture]\nlisten = \"127.0.0.1:0\"",
        &format!("[capture]\nlisten = \"127.0.0.1:{port}\""),
    );
    let file = s.dir.join("launch.toml");
    std::fs::write(
        &file,
        format!("[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n{toml}"),
    )
    .unwrap();
    let gate = tokio::task::spawn_blocking({
        let file = file.clone();
        move || Served::start(&file, &[], &[])
    })
    .await
    .unwrap();
    assert_eq!(gate.capture, format!("http://127.0.0.1:{port}"));
    let (body, headers) = solo("say hi");
    let body_file = s.dir.join("solo.body");
    std::fs::write(&body_file, &body).unwrap();
    let solo_url = format!("https://trae-api-cn.mchost.guru{}", trae::PATH);
    let tunnelled = "https://openapi.qoder.sh/api/v1/userinfo";
    let mut ran = Vec::new();
    if let Some(curl) = external::program("curl", "apt-get install curl") {
        let mut args = vec!["-sS", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"];
        let hs: Vec<String> = headers.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        for h in &hs {
            args.extend(["-H", h.as_str()]);
        }
        let at = format!("@{}", body_file.display());
        args.extend(["--data-binary", &at, &solo_url]);
        let (code, out, err) = launched(&file, &s.world_root, &curl, &args).await;
        assert_eq!(code, Some(0), "curl: {err}");
        let (answer, status) = out.rsplit_once('\n').unwrap();
        assert_eq!(
            (status, said("trae", answer.as_bytes()).as_str()),
            ("200", TRAE_TEXT),
            "{err}"
        );
        let (code, out, err) = launched(
            &file,
            &s.world_root,
            &curl,
            &["-sS", "-w", "\n%{http_code}", tunnelled],
        )
        .await;
        // Any answer: the host's own certificate verified.
        assert_eq!(code, Some(0), "curl, tunnelled: {out}{err}");
        ran.push("curl");
    }
    if let Some(python) = external::python_with("httpx, requests") {
        let script = capture::support("capture_client.py");
        let headers_json =
            serde_json::Value::Object(headers.iter().map(|(k, v)| (k.clone(), json!(v))).collect())
                .to_string();
        for lib in ["httpx", "requests"] {
            let args = [
                script.to_str().unwrap(),
                lib,
                &solo_url,
                "POST",
                &headers_json,
                body_file.to_str().unwrap(),
            ];
            let (code, out, err) = launched(&file, &s.world_root, &python, &args).await;
            assert_eq!(code, Some(0), "{lib}: {out}{err}");
            let got: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
            assert_eq!(got["status"], 200, "{lib}: {got}");
            let answer = base64::Engine::decode(
                &base64::engine::general_purpose::STANDARD,
                got["body"].as_str().unwrap(),
            )
            .unwrap();
            assert_eq!(said("trae", &answer), TRAE_TEXT, "{lib}");
            let args = [script.to_str().unwrap(), lib, tunnelled, "GET", "{}"];
            let (code, out, err) = launched(&file, &s.world_root, &python, &args).await;
            assert_eq!(code, Some(0), "{lib}, tunnelled: {out}{err}");
            ran.push(lib);
        }
    }
    let st = status_of(&gate).await;
    assert_eq!(
        st["capture"]["handed"]["trae"],
        ran.len(),
        "{:#}",
        st["capture"]
    );
    assert_eq!(row(&st, "openapi.qoder.sh")["mode"], "tunnel");
    assert_eq!(st["capture"]["clientRefusals"], 0, "{:#}", st["capture"]);
    // The bundle: the user's roots, then shimgate's.
    let bundle = std::fs::read_to_string(s.state.join("ca-bundle.pem")).unwrap();
    let (theirs, mine) = (
        std::fs::read_to_string(&s.world_root).unwrap(),
        std::fs::read_to_string(&s.root).unwrap(),
    );
    assert_eq!(bundle, format!("{}\n{}", theirs.trim_end(), mine));
    eprintln!(
        "FIGURES launch --proxy: {} through the capture listener, roots kept",
        ran.join(", ")
    );
    gate.stop();
}

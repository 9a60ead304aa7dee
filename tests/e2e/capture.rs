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

use crate::support::bin::{tempdir, TempDir};
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
fn solo(text: &str) -> (Vec<u8>, Vec<(String, String)>) {
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

fn pairs(h: &[(String, String)]) -> Vec<(&str, &str)> {
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

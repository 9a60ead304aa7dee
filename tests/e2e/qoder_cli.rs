//! The real Qoder CLI (`@qoder-ai/qodercli` 1.1.52 from npm, unmodified,
//! `-p` print mode) against scripted servers, with nothing past loopback:
//! its account, configuration and HTTP-DNS calls answered by the loopback
//! world (its `HTTPS_PROXY`), its model calls by a scripted model server
//! over TLS (`QODER_MODEL_TRANSPORT=http`) or, on the `legacy` transport,
//! by the world as `api2.qoder.sh`; the no-egress preload refuses any
//! other socket or DNS lookup and a refusal fails the test. What the CLI
//! prints and its exit code for each answer form are asserted here: they
//! are what shimgate must keep when it stands between the CLI and qoder.
//!
//! Each CLI run takes 12-40 s on two cores (loading its 33 MB bundle is
//! most of it; over 100 s when other builds share the cores); at most two
//! run at once (`qoder_cli::run`).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::support::cosy_check;
use crate::support::qoder_cli::{
    self, assert_run, Cli, CliEnv, Run, SAYS_LOGIN_EXPIRED, SAYS_NOT_COMPLETED, SAYS_USAGE_LIMIT,
    TOKEN,
};
use crate::support::qoder_model_server::{self as model_server, envelope, ModelServer};
use crate::support::qoder_world::{self, World};
use crate::support::scripted_https::{Call, Reply};
use crate::support::test_ca::TestCa;

/// The hard limit of one CLI run (it retries some failures without end,
/// and a run took 110 s on two cores under a load of 13).
const TIMEOUT: Duration = Duration::from_secs(240);

/// What the scripted model answers.
const ANSWER: &str = "Hi from the scripted model server.";

/// The loopback world, a model server and the CA bundle that trusts both.
struct Stack {
    world: World,
    model: ModelServer,
    /// The world's and the model server's roots.
    bundle: PathBuf,
    /// The world's root only (the model server's certificate untrusted).
    world_only: PathBuf,
    _dir: tempfile::TempDir,
}

impl Stack {
    /// The world and a model server answering with `script`; each has its
    /// own CA (the bundle holds both, as it will hold shimgate's).
    async fn start(script: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static) -> Stack {
        let (world_ca, model_ca) = (TestCa::new(), TestCa::new());
        let world = World::start(world_ca.clone()).await;
        let model = ModelServer::start(model_ca.clone(), TOKEN, script).await;
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("roots.pem");
        world_ca.write_bundle(&bundle, &[model_ca.root_pem()]);
        let world_only = dir.path().join("world-root.pem");
        world_ca.write_bundle(&world_only, &[]);
        Stack {
            world,
            model,
            bundle,
            world_only,
            _dir: dir,
        }
    }

    /// The CLI's environment on the model-server wire.
    fn http_env(&self) -> CliEnv {
        let mut env = CliEnv::new(&self.world.proxy_url(), &self.bundle);
        env.model_server(&self.model.host());
        env
    }
}

/// Runs the CLI (at most two runs at once) and prints what it did.
async fn run(cli: &Cli, env: &CliEnv, args: &[&str]) -> Run {
    let run = qoder_cli::run(cli, env, args, TIMEOUT).await;
    eprintln!("qodercli {args:?}: {}", run.describe());
    run
}

/// The CLI signed in through the world (so it trusted the world's CA)
/// with the test token.
fn assert_signed_in(world: &World) {
    let calls = world.calls();
    let userinfo = calls
        .iter()
        .find(|c| c.host == "openapi.qoder.sh" && c.path().starts_with("/api/v1/userinfo"))
        .unwrap_or_else(|| panic!("no userinfo call:\n{}", world.summary()));
    assert_eq!(
        userinfo.request.header("authorization"),
        Some(format!("Bearer {TOKEN}").as_str())
    );
}

#[tokio::test]
async fn the_no_egress_preload_refuses_and_records_every_way_out() {
    if !qoder_cli::node_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (log, reached) = (
        dir.path().join("refused.jsonl"),
        dir.path().join("reached.jsonl"),
    );
    let probe = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/no_egress_probe.cjs");
    // The probe's stand-ins load first: whatever the preload lets through
    // reaches them, never the network.
    let out = tokio::process::Command::new(qoder_cli::node())
        .arg("--require")
        .arg(&probe)
        .arg("--require")
        .arg(qoder_cli::preload())
        .args(["-e", "require(process.argv[1]).main()"])
        .arg(&probe)
        .env("SHIMGATE_NO_EGRESS_LOG", &log)
        .env("SHIMGATE_PROBE_REACHED", &reached)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = |text: &str| -> Vec<Value> {
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let outcomes = lines(&stdout);
    assert_eq!(outcomes.len(), 13, "{stdout}");
    for o in &outcomes {
        let expected = match o["attempt"].as_str().unwrap() {
            "loopback" => "loopback ok",
            a if a.contains("dns.") => "ENOTFOUND",
            _ => "ECONNREFUSED",
        };
        assert_eq!(o["outcome"], expected, "{o}");
    }
    let refused = lines(&std::fs::read_to_string(&log).unwrap());
    let kinds: Vec<(&str, &str)> = refused
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["host"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("connect", "192.0.2.1"),
            ("connect", "egress.invalid"),
            ("connect", "192.0.2.2"),
            ("connect", "192.0.2.3"),
            ("connect", "egress.invalid"),
            ("connect", "192.0.2.4"),
            ("udp-send", "192.0.2.5"),
            ("dns-lookup", "egress.invalid"),
            ("dns-lookup", "egress.invalid"),
            ("dns-resolve4", "egress.invalid"),
            ("dns-resolveTxt", "egress.invalid"),
            ("dns-resolve6", "egress.invalid"),
        ]
    );
    assert!(
        refused
            .iter()
            .all(|r| r["stack"].as_array().is_some_and(|s| !s.is_empty())),
        "each refusal names where it came from: {refused:?}"
    );
    // Only the loopback attempt got past the preload.
    let through = lines(&std::fs::read_to_string(&reached).unwrap());
    assert!(
        through.iter().all(|r| r["host"] == "127.0.0.1"),
        "{through:?}"
    );
}

/// Installed without its install script, the CLI runs; `--version` makes
/// no call at all.
#[tokio::test]
async fn the_cli_installed_without_its_script_prints_its_version() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = Stack::start(|_, _| model_server::openai_answer(ANSWER)).await;
    let env = stack.http_env();
    let run = run(&cli, &env, &["--version"]).await;
    assert!(run.leaks().is_empty(), "{}", run.describe());
    assert_eq!(run.code, Some(0), "{}", run.describe());
    assert_eq!(
        run.stdout,
        format!("{}\n", qoder_cli::VERSION),
        "{}",
        run.describe()
    );
    assert!(stack.world.calls().is_empty(), "{}", stack.world.summary());
}

/// The model-server wire: the CLI prints the scripted answer, the server
/// saw one valid request (about 80 KB); `--continue` sends a longer one.
/// The first answer's body stays open after `data: [DONE]` (the CLI stops
/// reading there); the second comes in qoder envelopes, with the sentinels
/// the CLI reads past (`[NOT_EXCEED_QUOTA]`, `[NOTIFICATIONS]#…`), and
/// ends with the body (after an envelope of `[DONE]` the CLI reads on
/// until the body ends: measured, it waits out a 150 s test limit).
#[tokio::test]
async fn over_the_model_server_wire_the_cli_prints_the_answer_and_continue_sends_more() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = Stack::start(|_, n| match n {
        0 => model_server::openai_answer_held(ANSWER),
        _ => {
            let mut frames = vec![
                "[NOT_EXCEED_QUOTA]".to_owned(),
                format!(
                    "[NOTIFICATIONS]#{}",
                    serde_json::json!({"notifications": [{"type": "credit", "level": "warning", "title": "Credits low", "message": "You have used 90% of your credits"}]})
                ),
            ];
            frames.extend(
                model_server::answer_chunks("Still here.")
                    .iter()
                    .map(|c| envelope(200, "OK", c)),
            );
            frames.push(envelope(200, "OK", "[DONE]"));
            model_server::sse(&frames)
        }
    })
    .await;
    let env = stack.http_env();
    let first = run(&cli, &env, &["-p", "say hi"]).await;
    assert_run(&first, &format!("{ANSWER}\n"), 0, &stack.world);
    assert_signed_in(&stack.world);
    let second = run(&cli, &env, &["--continue", "-p", "say more"]).await;
    assert_run(&second, "Still here.\n", 0, &stack.world);

    let calls = stack.model.calls();
    assert_eq!(calls.len(), 2, "one request per run");
    assert_eq!(
        stack.model.problems(),
        vec![Vec::<String>::new(); 2],
        "the model server refused nothing"
    );
    let sizes: Vec<usize> = calls.iter().map(|c| c.request.body.len()).collect();
    eprintln!(
        "FIGURES qodercli model-server wire: request bodies {sizes:?} bytes; runs {:.1} s and {:.1} s",
        first.elapsed.as_secs_f64(),
        second.elapsed.as_secs_f64()
    );
    assert!(
        sizes[0] > 40_000,
        "the first request is tens of KB: {sizes:?}"
    );
    assert!(sizes[1] > sizes[0], "--continue sends more: {sizes:?}");
    let body = calls[1].request.json();
    let texts = body.to_string();
    assert!(texts.contains("say hi") && texts.contains(ANSWER) && texts.contains("say more"));
    assert_eq!(
        body["metadata"]["business"]["product"], "cli",
        "{:#}",
        body["metadata"]
    );
    let ids: Vec<&str> = calls
        .iter()
        .map(|c| c.request.header("x-session-id").unwrap_or_default())
        .collect();
    assert_eq!(ids[0], ids[1], "--continue keeps the session: {ids:?}");
    eprintln!("the CLI's calls (two runs):\n{}", stack.world.summary());
}

/// Without the model server's root in NODE_EXTRA_CA_CERTS the CLI refuses
/// its certificate ("unable to verify the first certificate"), closing the
/// handshake without an alert; it does not retry that, and ends the run.
#[tokio::test]
async fn without_the_ca_the_cli_refuses_the_model_server() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = Stack::start(|_, _| model_server::openai_answer(ANSWER)).await;
    let mut env = CliEnv::new(&stack.world.proxy_url(), &stack.world_only);
    env.model_server(&stack.model.host());
    let run = run(&cli, &env, &["-p", "say hi"]).await;
    assert_run(&run, SAYS_NOT_COMPLETED, 1, &stack.world);
    assert!(stack.model.calls().is_empty(), "no request got through");
    let failures = stack.model.tls_failures();
    eprintln!("the model server saw: {failures:?}");
    assert_eq!(failures.len(), 1, "one handshake, not retried");
    assert!(
        run.log_errors
            .iter()
            .any(|l| l.contains("UNABLE_TO_VERIFY_LEAF_SIGNATURE")),
        "{}",
        run.describe()
    );
}

/// The default (`legacy`) transport: the COSY-signed `Encode=1` ask to
/// `api2.qoder.sh` through the proxy, checked as qoder checks it, answered
/// with qoder envelopes.
#[tokio::test]
async fn on_the_legacy_transport_the_cli_sends_a_signed_ask_through_the_proxy() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = Stack::start(|_, _| model_server::openai_answer(ANSWER)).await;
    stack.world.route(qoder_world::is_legacy_ask, |_, _| {
        qoder_world::legacy_answer(qoder_world::LEGACY_TEXT)
    });
    let env = CliEnv::new(&stack.world.proxy_url(), &stack.bundle);
    let run = run(&cli, &env, &["-p", "say hi"]).await;
    assert_run(
        &run,
        &format!("{}\n", qoder_world::LEGACY_TEXT),
        0,
        &stack.world,
    );
    assert_signed_in(&stack.world);
    let asks = stack.world.legacy_asks();
    assert_eq!(asks.len(), 1, "{}", stack.world.summary());
    let ask = &asks[0];
    assert_eq!(ask.host, "api2.qoder.sh");
    assert_eq!(ask.via, "tunnel");
    assert_eq!(ask.path(), shimgate_testkit::qoder::PATH);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let headers = header_map(ask);
    let verified = cosy_check::verify(&headers, &ask.request.body, ask.path(), now, 600);
    assert!(verified.is_ok(), "qoder would refuse it: {verified:?}");
    assert_eq!(ask.request.header("cosy-user"), Some(qoder_world::USER_ID));
    let plain = cosy_check::decode(&ask.request.body).expect("an Encode=1 body");
    let decoded: Value = serde_json::from_slice(&plain).unwrap();
    assert!(decoded["messages"].to_string().contains("say hi"));
    assert_eq!(decoded["session_type"], "qodercli");
    eprintln!(
        "FIGURES qodercli legacy ask: {} bytes encoded, {} bytes of JSON; run {:.1} s",
        ask.request.body.len(),
        plain.len(),
        run.elapsed.as_secs_f64()
    );
    assert!(
        stack.model.calls().is_empty(),
        "nothing on the http transport"
    );
}

fn header_map(call: &Call) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (k, v) in &call.request.headers {
        map.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    map
}

/// One answer form on the model-server wire and what the CLI did with it.
async fn reaction(answer: Reply) -> (Run, Stack) {
    let cli = qoder_cli::find().unwrap();
    let stack = Stack::start(move |_, _| answer.clone()).await;
    let env = stack.http_env();
    let run = run(&cli, &env, &["-p", "say hi"]).await;
    assert!(run.leaks().is_empty(), "{}", run.describe());
    assert_eq!(
        stack.model.problems().concat(),
        Vec::<String>::new(),
        "the model server refused a request"
    );
    (run, stack)
}

fn error_answer(status: u16, status_code: &str, body: &Value) -> Reply {
    model_server::error_envelope(status, status_code, body)
}

#[tokio::test]
async fn an_envelope_saying_login_expired_ends_the_run_asking_to_sign_in() {
    if qoder_cli::find().is_none() {
        return;
    }
    let (run, stack) = reaction(model_server::login_expired_envelope()).await;
    assert_run(&run, SAYS_LOGIN_EXPIRED, 1, &stack.world);
    assert_eq!(stack.model.calls().len(), 1, "not retried");
}

/// An HTTP `401` whose body says the login expired: the CLI refreshes its
/// token and sends the request once more (with the same `X-Request-ID`,
/// which the real server may refuse as a duplicate), then says the login
/// expired and exits 1.
#[tokio::test]
async fn http_401_saying_login_expired_is_sent_once_more_then_ends_the_run() {
    let Some(cli) = qoder_cli::find() else { return };
    let stack = Stack::start(|_, _| model_server::login_expired_http()).await;
    let run = run(&cli, &stack.http_env(), &["-p", "say hi"]).await;
    assert_run(&run, SAYS_LOGIN_EXPIRED, 1, &stack.world);
    assert_eq!(
        stack.model.problems(),
        [vec![], vec!["X-Request-ID reused".to_owned()]],
        "sent once more, with the same id"
    );
}

#[tokio::test]
async fn an_envelope_saying_duplicate_request_ends_the_run() {
    if qoder_cli::find().is_none() {
        return;
    }
    let (run, stack) = reaction(error_answer(
        403,
        "FORBIDDEN",
        &serde_json::json!({"code": "103", "message": "Duplicate request"}),
    ))
    .await;
    assert_run(&run, SAYS_NOT_COMPLETED, 1, &stack.world);
    assert_eq!(stack.model.calls().len(), 1, "not retried");
}

/// A queued answer (`10605` with a retry-after, three JSON strings deep):
/// the CLI asks the queue status, then sends its request again (a fresh
/// `X-Request-ID`) and prints the answer.
#[tokio::test]
async fn a_queued_envelope_makes_the_cli_poll_the_queue_then_ask_again() {
    if qoder_cli::find().is_none() {
        return;
    }
    let queued = serde_json::json!({
        "code": "403",
        "message": serde_json::json!({
            "code": "10605",
            "message": serde_json::json!({"isQueued": false, "modelKey": "auto", "queueCount": 0, "queueType": "slow", "retryAfterSeconds": 1}).to_string(),
        }).to_string(),
    });
    let cli = qoder_cli::find().unwrap();
    let stack = Stack::start(move |_, n| match n {
        0 => error_answer(403, "FORBIDDEN", &queued),
        _ => model_server::openai_answer(ANSWER),
    })
    .await;
    let run = run(&cli, &stack.http_env(), &["-p", "say hi"]).await;
    assert_run(&run, &format!("{ANSWER}\n"), 0, &stack.world);
    assert_eq!(stack.model.calls().len(), 2, "asked again once");
    assert_eq!(
        stack.model.problems().concat(),
        Vec::<String>::new(),
        "a fresh X-Request-ID"
    );
    let polls = stack
        .world
        .calls()
        .into_iter()
        .filter(|c| c.path().contains("/service/ask/queue/status"))
        .count();
    assert!(polls >= 1, "{}", stack.world.summary());
}

/// The answers the CLI retries: each is sent again up to the retry limit
/// (`--max-model-request-retries 2` here: three requests; the default is
/// ten more), then the CLI says why and exits 1.
async fn retried(answer: Reply) -> (Run, Stack) {
    let cli = qoder_cli::find().unwrap();
    let stack = Stack::start(move |_, _| answer.clone()).await;
    let run = run(
        &cli,
        &stack.http_env(),
        &["--max-model-request-retries", "2", "-p", "say hi"],
    )
    .await;
    assert_eq!(
        stack.model.problems(),
        vec![Vec::<String>::new(); 3],
        "three requests, each with a fresh X-Request-ID"
    );
    (run, stack)
}

#[tokio::test]
async fn http_429_is_retried_then_reported_as_the_usage_limit() {
    if qoder_cli::find().is_none() {
        return;
    }
    let (run, stack) = retried(Reply::json_sized(
        429,
        &[("retry-after", "1")],
        r#"{"code":"429","message":"Too many requests"}"#,
    ))
    .await;
    assert_run(&run, SAYS_USAGE_LIMIT, 1, &stack.world);
}

#[tokio::test]
async fn http_500_is_retried_then_reported() {
    if qoder_cli::find().is_none() {
        return;
    }
    let (run, stack) = retried(Reply::json_sized(
        500,
        &[],
        r#"{"code":"500","message":"Internal error"}"#,
    ))
    .await;
    assert_run(&run, SAYS_NOT_COMPLETED, 1, &stack.world);
}

/// `[EXCEED_QUOTA]…` is read past like `[DONE]`'s neighbours: alone, the
/// answer has no content, which the CLI retries as an incomplete stream;
/// before a normal answer, the answer is printed.
#[tokio::test]
async fn exceed_quota_alone_is_an_incomplete_answer_the_cli_retries() {
    if qoder_cli::find().is_none() {
        return;
    }
    let (run, stack) = retried(model_server::exceed_quota_alone()).await;
    assert_run(&run, SAYS_NOT_COMPLETED, 1, &stack.world);
    assert!(
        run.log_errors
            .iter()
            .any(|l| l.contains(r#"error_code="incomplete_stream""#)),
        "{}",
        run.describe()
    );
}

#[tokio::test]
async fn exceed_quota_before_an_answer_is_read_past() {
    if qoder_cli::find().is_none() {
        return;
    }
    let mut frames = vec![r#"[EXCEED_QUOTA]{"message":"quota exceeded"}"#.to_owned()];
    frames.extend(model_server::answer_chunks(ANSWER));
    frames.push("[DONE]".to_owned());
    let (run, stack) = reaction(model_server::sse(&frames)).await;
    assert_run(&run, &format!("{ANSWER}\n"), 0, &stack.world);
}

mod gate;

/// The version `.ci/run` installs, the one the docs show and the one the
/// tests expect are the same.
#[test]
fn the_pinned_version_is_the_same_in_ci_the_docs_and_the_tests() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let pinned = format!("@qoder-ai/qodercli@{}", qoder_cli::VERSION);
    for file in [".ci/run", "docs/development.md"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        assert!(text.contains(&pinned), "{file} does not install {pinned}");
        assert!(text.contains("--ignore-scripts"), "{file}");
    }
}

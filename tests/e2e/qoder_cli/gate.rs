//! The answer forms the CLI acts on, through shimgate (`shimgate launch`,
//! the reference compressor, the scripted model server behind an https
//! route): each ends the CLI's run exactly as it does against the model
//! server directly (the same words on stdout, the same exit code, the
//! same number of requests sent). An error envelope saying the login
//! expired; `[EXCEED_QUOTA]` alone, which the CLI retries as an
//! incomplete answer while shimgate rests the route; an HTTP `401` saying
//! the login expired, which the CLI answers by sending the request once
//! more with a fresh token (shimgate passes the model server's own `401`
//! on, not its `502 AUTO_ROUTES_EXHAUSTED`).

use crate::support::qoder_cli::{self, assert_run, Run, SAYS_LOGIN_EXPIRED, SAYS_NOT_COMPLETED};
use crate::support::qoder_gate::GateStack;
use crate::support::qoder_model_server as model_server;
use crate::support::scripted_https::Reply;

/// One answer form, through shimgate: the run and the stack.
async fn through_shimgate(answer: Reply, args: &[&str]) -> Option<(Run, GateStack)> {
    let cli = qoder_cli::find()?;
    let stack = GateStack::start(move |_, _| answer.clone()).await;
    let mut env = stack.cli_env();
    let run = stack.run(&cli, &mut env, args).await;
    assert_eq!(
        stack.model.problems().concat(),
        Vec::<String>::new(),
        "every request shimgate sent was one the model server takes"
    );
    Some((run, stack))
}

#[tokio::test]
async fn an_envelope_saying_login_expired_ends_the_run_as_it_does_directly() {
    let answer = model_server::login_expired_envelope();
    let Some((run, stack)) = through_shimgate(answer, &["-p", "say hi"]).await else {
        return;
    };
    assert_run(&run, SAYS_LOGIN_EXPIRED, 1, &stack.world);
    assert_eq!(stack.model.calls().len(), 1, "not retried, by either");
}

#[tokio::test]
async fn exceed_quota_alone_is_retried_by_the_cli_as_it_is_directly() {
    let args = ["--max-model-request-retries", "2", "-p", "say hi"];
    let answer = model_server::exceed_quota_alone();
    let Some((run, stack)) = through_shimgate(answer, &args).await else {
        return;
    };
    assert_run(&run, SAYS_NOT_COMPLETED, 1, &stack.world);
    assert_eq!(stack.model.calls().len(), 3, "the CLI's three requests");
    assert!(
        run.log_errors
            .iter()
            .any(|l| l.contains(r#"error_code="incomplete_stream""#)),
        "{}",
        run.describe()
    );
    let status = stack.status().await;
    let failures = &status["chain"]["routes"]["qoderModel"][0]["failures"];
    assert_eq!(failures["QUOTA"], 3, "{failures:#}");
}

#[tokio::test]
async fn an_http_401_saying_login_expired_reaches_the_cli_as_the_model_server_sent_it() {
    let answer = model_server::login_expired_http();
    let Some((run, stack)) = through_shimgate(answer, &["-p", "say hi"]).await else {
        return;
    };
    assert_run(&run, SAYS_LOGIN_EXPIRED, 1, &stack.world);
    assert_eq!(
        stack.model.calls().len(),
        2,
        "the CLI sent it once more with a fresh token, as it does directly"
    );
    let status = stack.status().await;
    let calls = status["chain"]["calls"].as_array().unwrap();
    assert!(
        calls.iter().all(|c| c["code"] == "AUTO_ROUTES_EXHAUSTED"),
        "shimgate's own record keeps the route list: {calls:#?}"
    );
}

//! A scripted qoder model server (the `http` transport's
//! `POST https://<host>/model/v1/chat/completions`) on a loopback TLS port,
//! its certificate for `127.0.0.1` and `localhost` from the test's CA. It
//! checks each request as the real one would (the Bearer token it was
//! given, a fresh `X-Request-ID`, `Accept: text/event-stream`, an OpenAI
//! chat body with qoder's `metadata`), records it with what it found
//! wrong, and answers by script: plain OpenAI SSE, qoder envelopes, error
//! envelopes, sentinels, HTTP errors. A client that refuses the
//! certificate is recorded too ([`ModelServer::tls_failures`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::net::TcpListener;

use super::scripted_https::{self, Call, Log, Reply, Script};
use super::test_ca::TestCa;

/// The model-server path.
pub const PATH: &str = "/model/v1/chat/completions";

/// The running server.
#[derive(Clone)]
pub struct ModelServer {
    pub addr: std::net::SocketAddr,
    log: Log,
    problems: Arc<Mutex<Vec<Vec<String>>>>,
    tls_failures: Arc<Mutex<Vec<String>>>,
}

impl ModelServer {
    /// Starts the server; `token` is the Bearer token it accepts, `script`
    /// answers the n-th request (0-based).
    pub async fn start(
        ca: Arc<TestCa>,
        token: &str,
        script: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static,
    ) -> ModelServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = ModelServer {
            addr,
            log: Log::default(),
            problems: Arc::default(),
            tls_failures: Arc::default(),
        };
        let seen_ids = Arc::new(Mutex::new(HashSet::new()));
        let (s, token) = (server.clone(), token.to_owned());
        let script: Arc<Script> = Arc::new(move |call: &Call, n| {
            let found = check(call, &token, &mut seen_ids.lock().unwrap());
            s.problems.lock().unwrap().push(found);
            script(call, n)
        });
        let acceptor = ca.acceptor(&["127.0.0.1", "localhost"]);
        let s = server.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, s, script) = (acceptor.clone(), s.clone(), script.clone());
                tokio::spawn(async move {
                    match acceptor.accept(tcp).await {
                        Ok(tls) => {
                            scripted_https::serve(tls, addr.to_string(), "direct", s.log, script)
                                .await
                        }
                        Err(e) => s.tls_failures.lock().unwrap().push(e.to_string()),
                    }
                });
            }
        });
        server
    }

    /// `127.0.0.1:PORT`, for `QODER_MODEL_SERVER_HOST`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<Call> {
        self.log.calls()
    }

    /// What each request got wrong (one list per request, in order).
    pub fn problems(&self) -> Vec<Vec<String>> {
        self.problems.lock().unwrap().clone()
    }

    /// TLS handshakes that failed (the client's alert, as rustls says it).
    pub fn tls_failures(&self) -> Vec<String> {
        self.tls_failures.lock().unwrap().clone()
    }
}

/// What the real model server would refuse in `call`.
pub fn check(call: &Call, token: &str, seen_ids: &mut HashSet<String>) -> Vec<String> {
    let r = &call.request;
    let mut problems = Vec::new();
    let mut want = |ok: bool, what: &str| {
        if !ok {
            problems.push(what.to_owned());
        }
    };
    want(r.method == "POST", "not a POST");
    want(r.path == PATH, "not the model-server path");
    want(
        r.header("authorization") == Some(&format!("Bearer {token}")),
        "not the Bearer token the server knows",
    );
    want(
        r.header("accept") == Some("text/event-stream"),
        "no Accept: text/event-stream",
    );
    want(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "no JSON content type",
    );
    match r.header("x-request-id") {
        Some(id) if !id.is_empty() => want(seen_ids.insert(id.to_owned()), "X-Request-ID reused"),
        _ => want(false, "no X-Request-ID"),
    }
    let body = r.json();
    want(
        body["messages"].as_array().is_some_and(|m| !m.is_empty()),
        "no messages",
    );
    want(body["stream"] == json!(true), "not a stream");
    want(body["metadata"].is_object(), "no metadata");
    want(body["model"].is_string(), "no model");
    problems
}

/// A chunk of an answer (the model-server's id and model).
fn chunk(delta: Value, finish: Value) -> String {
    shimgate_testkit::openai::Chunks {
        id: "chatcmpl-model-server",
        created: 1,
        model: "auto",
    }
    .delta(delta, finish)
    .to_string()
}

/// The `data:` payloads of an answer saying `text`: role, text, finish
/// with usage, as plain OpenAI chunks (no `[DONE]`).
pub fn answer_chunks(text: &str) -> Vec<String> {
    let mut finish: Value = serde_json::from_str(&chunk(json!({}), json!("stop"))).unwrap();
    finish["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105});
    vec![
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": text}), Value::Null),
        finish.to_string(),
    ]
}

/// An SSE answer whose `data:` lines are `payloads`, then the body ends.
pub fn sse(payloads: &[String]) -> Reply {
    payloads
        .iter()
        .fold(Reply::sse(), |r, p| r.chunk(format!("data: {p}\n\n")))
        .end()
}

/// A plain OpenAI answer saying `text`, ending with `data: [DONE]`.
pub fn openai_answer(text: &str) -> Reply {
    let mut payloads = answer_chunks(text);
    payloads.push("[DONE]".to_owned());
    sse(&payloads)
}

/// An envelope (`{statusCodeValue, statusCode, headers, body}`) payload.
pub fn envelope(status: u16, status_code: &str, body: &str) -> String {
    json!({"statusCodeValue": status, "statusCode": status_code, "headers": {}, "body": body})
        .to_string()
}

/// [`openai_answer`] with the body kept open after `data: [DONE]` until
/// the client goes.
pub fn openai_answer_held(text: &str) -> Reply {
    let mut payloads = answer_chunks(text);
    payloads.push("[DONE]".to_owned());
    payloads
        .iter()
        .fold(Reply::sse(), |r, p| r.chunk(format!("data: {p}\n\n")))
        .hold()
}

/// The same answer as [`openai_answer`], each chunk in a 200 envelope,
/// ending with an envelope of `[DONE]`.
pub fn envelope_answer(text: &str) -> Reply {
    let mut payloads: Vec<String> = answer_chunks(text)
        .iter()
        .map(|c| envelope(200, "OK", c))
        .collect();
    payloads.push(envelope(200, "OK", "[DONE]"));
    sse(&payloads)
}

/// An answer of one error envelope: `statusCodeValue` `status`, and
/// `body` (qoder's `{code, message}`) as its body.
pub fn error_envelope(status: u16, status_code: &str, body: &Value) -> Reply {
    sse(&[envelope(status, status_code, &body.to_string())])
}

/// The envelope that says the login expired (`105`, inside a 200 stream).
pub fn login_expired_envelope() -> Reply {
    error_envelope(
        401,
        "UNAUTHORIZED",
        &json!({"code": "105", "message": "login expired"}),
    )
}

/// An HTTP `401` whose body says the login expired (`105`).
pub fn login_expired_http() -> Reply {
    Reply::json_sized(401, &[], r#"{"code":"105","message":"login expired"}"#)
}

/// `[EXCEED_QUOTA]…` alone: the answer has no content.
pub fn exceed_quota_alone() -> Reply {
    sse(&[r#"[EXCEED_QUOTA]{"message":"quota exceeded"}"#.to_owned()])
}

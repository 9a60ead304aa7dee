//! The Qoder CLI's outside world, on loopback: one HTTP proxy (the CLI
//! reaches it through `HTTPS_PROXY`/`HTTP_PROXY`) that answers every call
//! itself and never opens a connection of its own. `CONNECT host:port` is
//! answered `200`, then TLS is terminated with a leaf for `host` from the
//! test's CA and the requests inside are answered; absolute-form plain
//! requests (`GET http://203.107.1.1/…`, and the `https://` ones some HTTP
//! stacks send to a proxy in the clear) are answered too. Every call is
//! recorded (host, method, path, headers, body).
//!
//! What the CLI 1.1.52 needs answered, signed in with `QODER_JOB_TOKEN`
//! (any answer not listed is `200 {}` on qoder's and the HTTP-DNS hosts,
//! `404` elsewhere; a non-2xx answer from a qoder host makes the CLI look
//! the host up in DNS for its error report, which the no-egress preload
//! then refuses):
//! - `GET openapi.qoder.sh/api/v1/userinfo` → `{"id": …}` (the sign-in);
//! - `POST openapi.qoder.sh/api/v1/jobToken/exchange` → `{"token": …}`
//!   (only when signed in with `QODER_PERSONAL_ACCESS_TOKEN`);
//! - `POST openapi.qoder.sh/api/v1/qcs/config/resolve` → `{"configs":
//!   {"qodercli-feature-gates": {}}, "etag": …}` (no feature gate set:
//!   the default transport, `legacy`);
//! - `GET openapi.qoder.sh/api/v1/qcs/config/stream` → an SSE stream held
//!   open (it reconnects when it ends);
//! - `GET api2.qoder.sh/algo/api/v2/service/ask/queue/status` (polled
//!   after a model answer said "queued") → `{"isQueued": false,
//!   "serviceAvailable": true}`: the CLI sends its request again;
//! - the rest: `openapi.qoder.sh/api/v3/user/status`,
//!   `center.qoder.sh/algo/api/v{3,5}/service/region/endpoints` and
//!   `/algo/api/v1/tracking`, `api2.qoder.sh/algo/api/v2/model/list` (an
//!   empty list: the CLI asks for model `auto`) and
//!   `/algo/api/v2/service/business/finish`, Aliyun HTTP-DNS by address
//!   (`/183012/ss`, `/v2/d`): `{}`.
//!
//! The legacy model call (`api2.qoder.sh/algo/api/v2/service/pro/sse/
//! agent_chat_generation`) is answered by whatever [`World::route`] gives
//! it (by default a one-line envelope answer).

use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Empty};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::scripted_https::{self, Call, Log, Reply, Script};
use super::test_ca::TestCa;

/// The text the default legacy answer says.
pub const LEGACY_TEXT: &str = "hello from the loopback world";

/// The user id `userinfo` answers (it signs the legacy ask: `Cosy-User`).
pub const USER_ID: &str = "user-shimgate-test";

/// A matcher and a script for the calls it matches.
type Route = (Box<dyn Fn(&Call) -> bool + Send + Sync>, Arc<Script>);

/// The running world.
#[derive(Clone)]
pub struct World {
    pub addr: std::net::SocketAddr,
    log: Log,
    routes: Arc<Mutex<Vec<Route>>>,
    /// Hosts whose TLS handshake failed inside a `CONNECT`, with the error:
    /// a client that does not trust the test CA (Node closes without an
    /// alert: "tls handshake eof"), or one that gave up mid-handshake.
    tls_failures: Arc<Mutex<Vec<(String, String)>>>,
    /// `CONNECT` targets, in order.
    connects: Arc<Mutex<Vec<String>>>,
}

impl World {
    /// Starts the proxy on a free loopback port; leaves come from `ca`.
    pub async fn start(ca: Arc<TestCa>) -> World {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let world = World {
            addr: listener.local_addr().unwrap(),
            log: Log::default(),
            routes: Arc::default(),
            tls_failures: Arc::default(),
            connects: Arc::default(),
        };
        let w = world.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (w, ca) = (w.clone(), ca.clone());
                tokio::spawn(async move { w.proxy_connection(tcp, ca).await });
            }
        });
        world
    }

    /// `http://127.0.0.1:PORT`, for `HTTPS_PROXY` and `HTTP_PROXY`.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers the calls `matches` picks with `script` (the n given to it
    /// counts the calls this route answered); routes added later are
    /// tried first.
    pub fn route(
        &self,
        matches: impl Fn(&Call) -> bool + Send + Sync + 'static,
        script: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static,
    ) {
        let counted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let script = move |call: &Call, _: usize| {
            script(
                call,
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            )
        };
        self.routes
            .lock()
            .unwrap()
            .insert(0, (Box::new(matches), Arc::new(script)));
    }

    /// Every call so far, in arrival order.
    pub fn calls(&self) -> Vec<Call> {
        self.log.calls()
    }

    /// The legacy model calls so far.
    pub fn legacy_asks(&self) -> Vec<Call> {
        self.calls().into_iter().filter(is_legacy_ask).collect()
    }

    /// `CONNECT` targets so far.
    pub fn connects(&self) -> Vec<String> {
        self.connects.lock().unwrap().clone()
    }

    /// TLS handshakes that failed, `(host, error)`.
    pub fn tls_failures(&self) -> Vec<(String, String)> {
        self.tls_failures.lock().unwrap().clone()
    }

    /// `host method path` of every call, one a line, then the failed
    /// handshakes (for failure messages and the report of what the CLI
    /// called).
    pub fn summary(&self) -> String {
        let failed = self
            .tls_failures()
            .into_iter()
            .map(|(host, e)| format!("{host}: TLS failed: {e}"));
        self.calls()
            .iter()
            .map(|c| {
                format!(
                    "{} {} {} ({} bytes, {})",
                    c.host,
                    c.request.method,
                    c.path(),
                    c.request.body.len(),
                    c.via
                )
            })
            .chain(failed)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The script for one call: the first route that matches, else the
    /// default answers.
    fn answer(&self, call: &Call, n: usize) -> Reply {
        let script = self
            .routes
            .lock()
            .unwrap()
            .iter()
            .find(|(matches, _)| matches(call))
            .map(|(_, script)| script.clone());
        match script {
            Some(script) => script(call, n),
            None => default_answer(call),
        }
    }

    /// One client connection to the proxy: plain proxy requests answered
    /// here, `CONNECT` turned into a TLS session answered the same way.
    async fn proxy_connection(self, tcp: tokio::net::TcpStream, ca: Arc<TestCa>) {
        let world = self.clone();
        let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
            let (world, ca) = (world.clone(), ca.clone());
            async move { Ok::<_, std::convert::Infallible>(world.proxy_request(req, ca).await) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tcp), service)
            .with_upgrades()
            .await;
    }

    async fn proxy_request(
        &self,
        mut req: Request<hyper::body::Incoming>,
        ca: Arc<TestCa>,
    ) -> Response<http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, std::io::Error>> {
        if req.method() == Method::CONNECT {
            let target = req
                .uri()
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default();
            self.connects.lock().unwrap().push(target.clone());
            let upgrade = hyper::upgrade::on(&mut req);
            let world = self.clone();
            tokio::spawn(async move {
                if let Ok(upgraded) = upgrade.await {
                    world.tunnel(TokioIo::new(upgraded), &target, &ca).await;
                }
            });
            return Response::new(Empty::new().map_err(|e| match e {}).boxed_unsync());
        }
        let host = req
            .uri()
            .authority()
            .map(|a| a.to_string())
            .or_else(|| {
                req.headers()
                    .get(http::header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let call = scripted_https::record(req, strip_default_port(&host), "absolute").await;
        let n = self.log.push(call.clone());
        scripted_https::respond(self.answer(&call, n)).map(BodyExt::boxed_unsync)
    }

    /// TLS for `target` (`host:port`) inside a tunnel, then HTTP; plain
    /// HTTP when the first byte is not a TLS handshake (a proxy client
    /// such as shimgate tunnels `http://` targets too).
    async fn tunnel<I>(&self, mut io: I, target: &str, ca: &TestCa)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let mut first = [0u8; 1];
        if tokio::io::AsyncReadExt::read_exact(&mut io, &mut first)
            .await
            .is_err()
        {
            return;
        }
        let io = Prefixed {
            first: Some(first[0]),
            io,
        };
        if first[0] != 0x16 {
            let world = self.clone();
            let script: Arc<Script> = Arc::new(move |call: &Call, n| world.answer(call, n));
            scripted_https::serve(
                io,
                strip_default_port(target),
                "tunnel",
                self.log.clone(),
                script,
            )
            .await;
            return;
        }
        let host = target
            .rsplit_once(':')
            .map(|(h, _)| h)
            .unwrap_or(target)
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let tls = match ca.acceptor(&[&host]).accept(io).await {
            Ok(tls) => tls,
            Err(e) => {
                self.tls_failures
                    .lock()
                    .unwrap()
                    .push((host, e.to_string()));
                return;
            }
        };
        let world = self.clone();
        let script: Arc<Script> = Arc::new(move |call: &Call, n| world.answer(call, n));
        scripted_https::serve(
            tls,
            strip_default_port(target),
            "tunnel",
            self.log.clone(),
            script,
        )
        .await;
    }
}

/// A stream whose first byte was read already: it is read again first.
struct Prefixed<I> {
    first: Option<u8>,
    io: I,
}

impl<I: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Prefixed<I> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(b) = self.first.take() {
            buf.put_slice(&[b]);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Prefixed<I> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// `host:443` and `host:80` as `host`.
fn strip_default_port(host: &str) -> String {
    host.strip_suffix(":443")
        .or_else(|| host.strip_suffix(":80"))
        .unwrap_or(host)
        .to_owned()
}

/// The legacy model call (`agent_chat_generation`).
pub fn is_legacy_ask(call: &Call) -> bool {
    call.path()
        .contains("/service/pro/sse/agent_chat_generation")
}

/// Hosts whose unknown calls get `{}`: qoder's services and Aliyun's
/// HTTP-DNS (by address or by name).
fn is_service_host(host: &str) -> bool {
    let name = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
    name.ends_with("qoder.sh")
        || name.ends_with(".qoder.com")
        || name.ends_with("httpdns.aliyuncs.com")
        || name.parse::<std::net::IpAddr>().is_ok()
}

/// What the world answers when no route took the call.
pub fn default_answer(call: &Call) -> Reply {
    let path = call.path();
    let json = |body: String| Reply::json_sized(200, &[], &body);
    if is_legacy_ask(call) {
        return legacy_answer(LEGACY_TEXT);
    }
    if path.starts_with("/api/v1/userinfo") {
        return json(
            serde_json::json!({"id": USER_ID, "name": "shimgate test", "email": "test@example.invalid"})
                .to_string(),
        );
    }
    if path.starts_with("/api/v1/jobToken/exchange") {
        return json(serde_json::json!({"token": "jt-exchanged-by-the-world"}).to_string());
    }
    if path.starts_with("/api/v1/qcs/config/resolve") {
        return json(
            serde_json::json!({"configs": {"qodercli-feature-gates": {}}, "etag": "world-1"})
                .to_string(),
        );
    }
    if path.starts_with("/api/v1/qcs/config/stream") {
        return Reply::sse().hold();
    }
    if path.contains("/service/ask/queue/status") {
        return json(serde_json::json!({"isQueued": false, "serviceAvailable": true}).to_string());
    }
    if is_service_host(&call.host) {
        return json("{}".to_owned());
    }
    Reply::json_sized(404, &[], "{}")
}

/// A legacy answer saying `text`: qoder envelopes (role, text, finish,
/// usage, `body:"[DONE]"`), then the body ends. (The CLI reads on after
/// an envelope of `[DONE]` until the body ends: held open, as
/// `shimgate_testkit::qoder::answer` holds it, the run never finishes.)
pub fn legacy_answer(text: &str) -> Reply {
    shimgate_testkit::qoder::answer_frames(text, 100)
        .into_iter()
        .fold(Reply::sse(), |r, frame| r.chunk(frame))
        .end()
}

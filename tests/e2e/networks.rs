//! Reaching the upstreams through the user's network
//! (`docs/networks.md`): qoder and trae calls through Debian's tinyproxy (HTTP
//! CONNECT with BasicAuth) and microsocks (SOCKS5 with user/password),
//! both started here on free loopback ports, with the right and a wrong
//! password; `socks5h` sending the name unresolved; the environment's
//! `HTTP_PROXY` and `NO_PROXY`; a dead proxy and a 407 failing over with
//! the reason in `/status`; loopback (the compressor) direct with a
//! global proxy set; no password in the logs (at debug), `/status`,
//! `/metrics` or an error body; a private authority and mitmproxy (from
//! PyPI, the corporate TLS interceptor) refused until their root is in
//! `ca_file`.
//!
//! `.ci/run` installs tinyproxy and microsocks; elsewhere these tests skip
//! with a note, unless `SHIMGATE_REQUIRE_EXTERNAL=1`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::bin::{tempdir, Served, TempDir};
use crate::support::external::free_port;
use crate::support::upstream::Upstream;
use crate::support::{client, qoder, trae, Gate};

const RIGHT: &str = "s3cret-right";
const WRONG: &str = "wr0ng-guess";

/// A program on `PATH` (or Debian's `sbin`), or `None` with a note (a
/// failure under `SHIMGATE_REQUIRE_EXTERNAL=1`).
fn tool(name: &str) -> Option<PathBuf> {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&dirs)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    if found.is_none() {
        let why = format!("{name} is not installed (`apt-get install {name}`; .ci/run does)");
        if std::env::var("SHIMGATE_REQUIRE_EXTERNAL").is_ok_and(|v| v == "1") {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why}");
    }
    found
}

/// A proxy program started for one test, its output in `dir/log`.
struct ProxyProc {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl Drop for ProxyProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ProxyProc {
    fn log(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(self.dir.join("log")).unwrap_or_default())
            .into_owned()
    }

    /// `scheme://user:password@127.0.0.1:PORT`.
    fn url(&self, scheme: &str, user: &str, password: &str) -> String {
        format!("{scheme}://{user}:{password}@127.0.0.1:{}", self.port)
    }

    fn start(cmd: Command, port: u16, dir: TempDir) -> ProxyProc {
        ProxyProc::start_within(cmd, port, dir, Duration::from_secs(4))
    }

    /// Starts `cmd` and waits until `port` accepts (at most `patience`).
    fn start_within(mut cmd: Command, port: u16, dir: TempDir, patience: Duration) -> ProxyProc {
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut p = ProxyProc { child, port, dir };
        let started = std::time::Instant::now();
        while started.elapsed() < patience {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return p;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("the proxy on {port} exited ({status}):\n{}", p.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the proxy on {port} did not start:\n{}", p.log());
    }
}

/// tinyproxy with `BasicAuth alice RIGHT`, CONNECT allowed to `ports`.
fn tinyproxy(ports: &[u16]) -> Option<ProxyProc> {
    let bin = tool("tinyproxy")?;
    let dir = tempdir();
    let port = free_port();
    let mut conf = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 30\nLogLevel Connect\nMaxClients 50\nBasicAuth alice {RIGHT}\n"
    );
    for p in ports {
        conf.push_str(&format!("ConnectPort {p}\n"));
    }
    std::fs::write(dir.join("tinyproxy.conf"), conf).unwrap();
    let mut cmd = Command::new(bin);
    cmd.arg("-d").arg("-c").arg(dir.join("tinyproxy.conf"));
    Some(ProxyProc::start(cmd, port, dir))
}

/// microsocks with user `bob` and password RIGHT.
fn microsocks() -> Option<ProxyProc> {
    let bin = tool("microsocks")?;
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args([
        "-i",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-u",
        "bob",
        "-P",
        RIGHT,
    ]);
    Some(ProxyProc::start(cmd, port, tempdir()))
}

/// A proxy that answers every CONNECT `407 Proxy Authentication Required`.
async fn answers_407() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    port
}

/// This machine's name when it resolves to a loopback address (a route
/// host that is not *written* as loopback, so global and environment
/// proxies apply to it), or `None` with a note.
fn loopback_name() -> Option<String> {
    use std::net::ToSocketAddrs;
    let name = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty() && n != "localhost")?;
    let loopback = (name.as_str(), 1)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.all(|a| a.ip().is_loopback()));
    if !loopback {
        eprintln!("SKIPPED: the host name {name:?} does not resolve to loopback only");
        return None;
    }
    Some(name)
}

fn route(shim: &str, name: &str, url: &str, proxy: Option<&str>) -> String {
    let proxy = proxy.map_or(String::new(), |p| format!("proxy = \"{p}\"\n"));
    format!("[[shims.{shim}.routes]]\nname = \"{name}\"\nurl = \"{url}\"\n{proxy}")
}

/// No retries in place: a failing route switches at once.
const FAST: &str = "[retry]\nmax_retries = 0\n[breaker]\nfailures = 0\n";

async fn call_trae(gate: &str) -> client::Resp {
    client::send(
        Method::POST,
        &format!("{gate}{}", trae::PATH),
        &[("content-type", "application/json")],
        serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap(),
    )
    .await
}

fn assert_no_secret(what: &str, text: &str) {
    let b64 = |p: &str| base64::engine::general_purpose::STANDARD.encode(format!("alice:{p}"));
    for secret in [RIGHT.to_string(), WRONG.to_string(), b64(RIGHT), b64(WRONG)] {
        assert!(
            !text.contains(&secret),
            "{what} holds a proxy password:\n{text}"
        );
    }
}

fn last_reason(status: &serde_json::Value, shim: &str, i: usize) -> String {
    let row = &status["chain"]["routes"][shim][i];
    assert_eq!(row["lastFailure"]["code"], "TRANSPORT", "{row:#}");
    row["lastFailure"]["reason"].as_str().unwrap().to_string()
}

/// qoder and trae through tinyproxy (HTTP CONNECT): the wrong password
/// fails the first route with tinyproxy's answer named, the right one
/// carries the call, and tinyproxy's log shows both tunnels.
#[tokio::test]
async fn qoder_and_trae_through_tinyproxy_with_a_wrong_and_the_right_password() {
    let up_q = Upstream::always(qoder::answer("via tinyproxy", 5)).await;
    let up_t = Upstream::always(trae::reply(&trae::answer("via tinyproxy", None, 5))).await;
    let ports = [up_q.url(), up_t.url()].map(|u| u.rsplit(':').next().unwrap().parse().unwrap());
    let Some(tp) = tinyproxy(&ports) else { return };
    let (wrong, right) = (
        tp.url("http", "alice", WRONG),
        tp.url("http", "alice", RIGHT),
    );
    let toml = format!(
        "{FAST}{}{}{}{}",
        route("qoder", "wrong", &up_q.url(), Some(&wrong)),
        route("qoder", "right", &up_q.url(), Some(&right)),
        route("trae", "wrong", &up_t.url(), Some(&wrong)),
        route("trae", "right", &up_t.url(), Some(&right)),
    );
    let gate = Gate::start(&toml).await;
    let resp = qoder::send_hi(&gate.qoder).await;
    assert_eq!(qoder::read_answer(&resp.body).0, "via tinyproxy");
    let resp = call_trae(&gate.trae).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(
        shimgate_testkit::trae::digest(&resp.body).text,
        "via tinyproxy"
    );
    assert_eq!((up_q.hits(), up_t.hits()), (1, 1));

    let status = gate.status().await;
    for shim in ["qoder", "trae"] {
        let reason = last_reason(&status, shim, 0);
        let want = format!("proxy 127.0.0.1:{} answered 401", tp.port);
        assert!(reason.contains(&want), "{shim}: {reason}");
        let row = &status["chain"]["routes"][shim][1];
        assert_eq!(row["proxy"], format!("http://127.0.0.1:{}", tp.port));
        assert_eq!(row["proxySource"], "route");
        assert_eq!(row["ok"], 1);
    }
    assert_no_secret("/status", &status.to_string());
    let metrics = client::get(&format!("{}/metrics", gate.qoder)).await.text();
    assert_no_secret("/metrics", &metrics);
    let log = tp.log();
    for port in ports {
        let tunnels = log.matches(&format!("CONNECT 127.0.0.1:{port} ")).count();
        assert_eq!(tunnels, 2, "one refused, one carried, for {port}:\n{log}");
    }
    eprintln!(
        "tinyproxy said:\n{log}\n/status said: {}",
        last_reason(&status, "qoder", 0)
    );
}

/// The same through microsocks (SOCKS5, user/password): the wrong password
/// is refused in the handshake, the right one carries both calls.
#[tokio::test]
async fn qoder_and_trae_through_microsocks_with_a_wrong_and_the_right_password() {
    let Some(ms) = microsocks() else { return };
    let up_q = Upstream::always(qoder::answer("via microsocks", 5)).await;
    let up_t = Upstream::always(trae::reply(&trae::answer("via microsocks", None, 5))).await;
    let (wrong, right) = (
        ms.url("socks5", "bob", WRONG),
        ms.url("socks5", "bob", RIGHT),
    );
    let toml = format!(
        "{FAST}{}{}{}{}",
        route("qoder", "wrong", &up_q.url(), Some(&wrong)),
        route("qoder", "right", &up_q.url(), Some(&right)),
        route("trae", "wrong", &up_t.url(), Some(&wrong)),
        route("trae", "right", &up_t.url(), Some(&right)),
    );
    let gate = Gate::start(&toml).await;
    let resp = qoder::send_hi(&gate.qoder).await;
    assert_eq!(qoder::read_answer(&resp.body).0, "via microsocks");
    let resp = call_trae(&gate.trae).await;
    assert_eq!(
        shimgate_testkit::trae::digest(&resp.body).text,
        "via microsocks"
    );

    let status = gate.status().await;
    for shim in ["qoder", "trae"] {
        let reason = last_reason(&status, shim, 0);
        let want = format!("proxy 127.0.0.1:{} (socks5) failed", ms.port);
        assert!(reason.contains(&want), "{shim}: {reason}");
        assert_eq!(status["chain"]["routes"][shim][1]["ok"], 1);
        assert_eq!(
            status["chain"]["routes"][shim][1]["proxy"],
            format!("socks5://127.0.0.1:{}", ms.port)
        );
    }
    assert_no_secret("/status", &status.to_string());
    let log = ms.log();
    for up in [&up_q, &up_t] {
        let target = up.url().replace("http://", "");
        assert!(log.contains(&format!("connected to {target}")), "{log}");
    }
    eprintln!(
        "microsocks said:\n{log}\n/status said: {}",
        last_reason(&status, "trae", 0)
    );
}

/// `socks5h` sends the route's host name to the proxy unresolved;
/// `socks5` resolves it here and sends the address.
#[tokio::test]
async fn socks5h_sends_the_name_and_socks5_the_address() {
    let Some(name) = loopback_name() else { return };
    let Some(ms) = microsocks() else { return };
    let up = Upstream::always(trae::reply(&trae::answer("named", None, 5))).await;
    let port = up.url().rsplit(':').next().unwrap().to_string();
    let url = format!("http://{name}:{port}");
    for (scheme, seen) in [
        ("socks5h", format!("connected to {name}:{port}")),
        ("socks5", format!("connected to 127.0.0.1:{port}")),
    ] {
        let proxy = ms.url(scheme, "bob", RIGHT);
        let gate = Gate::start(&format!("{FAST}{}", route("trae", "t", &url, Some(&proxy)))).await;
        let resp = call_trae(&gate.trae).await;
        assert_eq!(
            shimgate_testkit::trae::digest(&resp.body).text,
            "named",
            "{scheme}"
        );
        assert!(ms.log().contains(&seen), "{scheme}: {}", ms.log());
    }
}

/// A dead proxy and one answering 407 fail their routes over to a direct
/// one, each reason naming the proxy and what happened; the global proxy
/// leaves a loopback route (and the compressor) direct.
#[tokio::test]
async fn a_dead_proxy_and_a_407_fail_over_with_the_reason_in_status() {
    let up = Upstream::always(trae::reply(&trae::answer("direct", None, 5))).await;
    let dead = free_port();
    let p407 = answers_407().await;
    let toml = format!(
        "{FAST}[upstream]\nproxy = \"http://alice:{RIGHT}@127.0.0.1:{dead}\"\n{}{}{}",
        route(
            "trae",
            "dead",
            &up.url(),
            Some(&format!("http://alice:{WRONG}@127.0.0.1:{dead}"))
        ),
        route(
            "trae",
            "auth",
            &up.url(),
            Some(&format!("http://alice:{WRONG}@127.0.0.1:{p407}"))
        ),
        route("trae", "direct", &up.url(), None),
    );
    let gate = Gate::start(&toml).await;
    let resp = call_trae(&gate.trae).await;
    assert_eq!(shimgate_testkit::trae::digest(&resp.body).text, "direct");
    let status = gate.status().await;
    let dead_reason = last_reason(&status, "trae", 0);
    assert!(
        dead_reason.contains(&format!("proxy 127.0.0.1:{dead} could not be reached")),
        "{dead_reason}"
    );
    let auth_reason = last_reason(&status, "trae", 1);
    assert!(
        auth_reason.contains(&format!(
            "proxy 127.0.0.1:{p407} answered 407 Proxy Authentication Required"
        )),
        "{auth_reason}"
    );
    let direct = &status["chain"]["routes"]["trae"][2];
    assert_eq!(
        (&direct["proxy"], &direct["proxySource"]),
        (&"none".into(), &"loopback".into())
    );
    assert_no_secret("/status", &status.to_string());
    eprintln!("/status said:\n  {dead_reason}\n  {auth_reason}");

    // Every route failing: the agent's error body names no password.
    let toml = format!(
        "{FAST}{}",
        route(
            "trae",
            "auth",
            &up.url(),
            Some(&format!("http://alice:{WRONG}@127.0.0.1:{p407}"))
        ),
    );
    let gate = Gate::start(&toml).await;
    let resp = call_trae(&gate.trae).await;
    assert_ne!(resp.status, StatusCode::OK);
    assert!(resp.text().contains("407"), "{}", resp.text());
    assert_no_secret("the error body", &resp.text());
}

/// The real binary with `HTTP_PROXY` (tinyproxy) and `RUST_LOG=debug`: a
/// route on a host name goes through it (`env`), one named in `NO_PROXY`
/// goes direct, a loopback-written one goes direct; no password in the log.
#[tokio::test]
async fn the_environment_proxy_and_no_proxy_with_no_password_in_the_debug_log() {
    let Some(name) = loopback_name() else { return };
    let up = Upstream::always(trae::reply(&trae::answer("from env", None, 5))).await;
    let port: u16 = up.url().rsplit(':').next().unwrap().parse().unwrap();
    let Some(tp) = tinyproxy(&[port]) else { return };
    let dir = tempdir();
    let config = dir.join("shimgate.toml");
    let named = format!("http://{name}:{port}");
    let wrong = tp.url("http", "alice", WRONG);
    let toml = format!(
        "{FAST}{}{}",
        route("trae", "wrong", &named, Some(&wrong)),
        route("trae", "env", &named, None),
    );
    std::fs::write(&config, &toml).unwrap();
    let proxy = tp.url("http", "alice", RIGHT);
    let env = [
        ("HTTP_PROXY", proxy.as_str()),
        ("HTTPS_PROXY", proxy.as_str()),
        ("NO_PROXY", "example.invalid"),
        ("RUST_LOG", "debug"),
    ];
    let served = Served::start(&config, &[], &env);
    let resp = call_trae(&served.trae).await;
    assert_eq!(shimgate_testkit::trae::digest(&resp.body).text, "from env");
    let status = client::get(&format!("{}/status", served.trae)).await.json();
    let row = &status["chain"]["routes"]["trae"][1];
    assert_eq!(
        row["proxy"],
        format!("http://127.0.0.1:{}", tp.port),
        "{row:#}"
    );
    assert_eq!(row["proxySource"], "env");
    assert_eq!(row["ok"], 1);
    let tunnel = format!("CONNECT {name}:{port} ");
    assert_eq!(tp.log().matches(&tunnel).count(), 2, "{}", tp.log());
    assert_no_secret("/status", &status.to_string());
    let metrics = client::get(&format!("{}/metrics", served.trae))
        .await
        .text();
    assert_no_secret("/metrics", &metrics);
    let stderr = served.stderr();
    assert!(
        stderr.contains("a tunnel through the proxy is open"),
        "RUST_LOG=debug took: {stderr}"
    );
    assert_no_secret("the debug log", &stderr);
    served.stop();

    // NO_PROXY names the host: direct, tinyproxy sees nothing new.
    std::fs::write(
        &config,
        format!("{FAST}{}", route("trae", "env", &named, None)),
    )
    .unwrap();
    let env = [("HTTP_PROXY", proxy.as_str()), ("NO_PROXY", name.as_str())];
    let served = Served::start(&config, &[], &env);
    let before = tp.log().matches(&tunnel).count();
    let resp = call_trae(&served.trae).await;
    assert_eq!(shimgate_testkit::trae::digest(&resp.body).text, "from env");
    let status = client::get(&format!("{}/status", served.trae)).await.json();
    assert_eq!(status["chain"]["routes"]["trae"][0]["proxy"], "none");
    assert_eq!(tp.log().matches(&tunnel).count(), before);
    served.stop();
}

/// A global proxy leaves the compressor (loopback) direct: the call goes
/// through the compression proxy and back with tinyproxy never asked.
#[tokio::test]
async fn the_compressor_and_loopback_routes_go_direct_with_a_global_proxy() {
    let up = Upstream::always(trae::reply(&trae::answer("compressed", None, 5))).await;
    let Some(tp) = tinyproxy(&[]) else { return };
    let base = format!(
        "{FAST}[upstream]\nproxy = \"{}\"\n{}",
        tp.url("http", "alice", RIGHT),
        route("trae", "t", &up.url(), None)
    );
    let (gate, _compressor) =
        Gate::behind_proxy(&base, "trae", crate::support::proxy::Options::default()).await;
    let resp = call_trae(&gate.trae).await;
    assert_eq!(
        shimgate_testkit::trae::digest(&resp.body).text,
        "compressed"
    );
    let status = gate.status().await;
    assert_eq!(
        status["traeShim"]["fallback"], 0,
        "{:#}",
        status["traeShim"]
    );
    assert_eq!(
        status["chain"]["routes"]["trae"][0]["proxySource"],
        "loopback"
    );
    assert!(
        !tp.log().contains("Request (file descriptor"),
        "{}",
        tp.log()
    );
}

/// A TLS front (a certificate for `localhost` from a private authority)
/// relaying to `plain`; returns its port and the authority's PEM.
async fn tls_front(plain: std::net::SocketAddr) -> (u16, String) {
    use std::sync::Arc;
    use tokio_rustls::rustls::{self, pki_types};
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(certified.cert.der());
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let pem = format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    );
    let key = pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut up) = tokio::net::TcpStream::connect(plain).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    (port, pem)
}

/// An https route whose certificate comes from an authority the OS does
/// not know fails naming the certificate problem; with that authority in
/// `[upstream] ca_file` it succeeds (with the system's verifier and with
/// the bundled roots alike).
#[tokio::test]
async fn a_private_authority_is_refused_until_it_is_in_ca_file() {
    let up = Upstream::always(trae::reply(&trae::answer("over tls", None, 5))).await;
    let (port, pem) = tls_front(up.addr).await;
    let dir = tempdir();
    std::fs::write(dir.join("corp-root.pem"), &pem).unwrap();
    let url = format!("https://localhost:{port}");
    let gate = Gate::start(&format!("{FAST}{}", route("trae", "t", &url, None))).await;
    let resp = call_trae(&gate.trae).await;
    assert_ne!(resp.status, StatusCode::OK);
    let reason = last_reason(&gate.status().await, "trae", 0);
    assert!(reason.contains("certificate"), "{reason}");
    eprintln!("without ca_file, /status said: {reason}");
    for roots in ["system", "bundled"] {
        let toml = format!(
            "{FAST}[upstream]\nroots = \"{roots}\"\nca_file = \"{}\"\n{}",
            dir.join("corp-root.pem").display(),
            route("trae", "t", &url, None)
        );
        let gate = Gate::start(&toml).await;
        let resp = call_trae(&gate.trae).await;
        assert_eq!(resp.status, StatusCode::OK, "{roots}: {}", resp.text());
        assert_eq!(shimgate_testkit::trae::digest(&resp.body).text, "over tls");
    }
    let missing = format!(
        "[upstream]\nca_file = \"{}\"\n",
        dir.join("none.pem").display()
    );
    let bad = shimgate::config::Config::from_toml(&missing)
        .unwrap_err()
        .to_string();
    assert!(bad.starts_with("upstream.ca_file: cannot read"), "{bad}");
}

/// `mitmdump` from `SHIMGATE_MITMDUMP`, `.venv-mitm` (`python3 -m venv
/// .venv-mitm && .venv-mitm/bin/pip install -r tests/requirements-mitm.txt`,
/// as `.ci/run` does) or `PATH`, or `None` with a note.
fn mitmdump() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let found = std::env::var_os("SHIMGATE_MITMDUMP")
        .map(PathBuf::from)
        .into_iter()
        .chain([root.join(".venv-mitm/bin/mitmdump")])
        .find(|p| p.is_file());
    if found.is_some() {
        return found;
    }
    tool("mitmdump")
}

/// mitmproxy as the corporate TLS interceptor: through it (a route's own
/// `http://` proxy) the provider's certificate is mitmproxy's, so the
/// route fails naming the certificate problem until mitmproxy's authority
/// is in `ca_file`; then the call succeeds and mitmproxy logged it.
#[tokio::test]
async fn mitmproxy_intercepts_and_only_its_root_in_ca_file_lets_the_call_through() {
    let Some(bin) = mitmdump() else { return };
    let up = Upstream::always(trae::reply(&trae::answer("intercepted", None, 5))).await;
    let (port, _) = tls_front(up.addr).await;
    let dir = tempdir();
    let mport = free_port();
    let mut cmd = Command::new(bin);
    cmd.args([
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        &mport.to_string(),
    ])
    .arg("--set")
    .arg(format!("confdir={}", dir.join("conf").display()))
    // mitmproxy's own leg to the test's private authority.
    .arg("--ssl-insecure")
    .env("HOME", dir.join("home"));
    let mitm = ProxyProc::start_within(cmd, mport, tempdir(), Duration::from_secs(60));
    let ca = dir.join("conf/mitmproxy-ca-cert.pem");
    assert!(ca.is_file(), "mitmproxy wrote no CA:\n{}", mitm.log());
    let url = format!("https://localhost:{port}");
    let via = format!("http://127.0.0.1:{mport}");
    let gate = Gate::start(&format!("{FAST}{}", route("trae", "t", &url, Some(&via)))).await;
    let resp = call_trae(&gate.trae).await;
    assert_ne!(resp.status, StatusCode::OK);
    let reason = last_reason(&gate.status().await, "trae", 0);
    assert!(reason.contains("certificate"), "{reason}");
    eprintln!("without its CA, /status said: {reason}");

    let toml = format!(
        "{FAST}[upstream]\nca_file = \"{}\"\n{}",
        ca.display(),
        route("trae", "t", &url, Some(&via))
    );
    let gate = Gate::start(&toml).await;
    let resp = call_trae(&gate.trae).await;
    assert_eq!(resp.status, StatusCode::OK, "{}", resp.text());
    assert_eq!(
        shimgate_testkit::trae::digest(&resp.body).text,
        "intercepted"
    );
    let saw = crate::support::eventually(Duration::from_secs(5), || {
        let log = mitm.log();
        async move { log.contains(&format!("POST https://localhost:{port}")) }
    })
    .await;
    assert!(saw, "mitmproxy did not log the call:\n{}", mitm.log());
    eprintln!("mitmproxy said:\n{}", mitm.log());
}

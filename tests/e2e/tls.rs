//! TLS on the shim listeners under the local CA: a client trusting only
//! the CA's root reaches `/status` and the inference paths of both
//! listeners over TLS, on the port that serves plain HTTP too; names
//! outside loopback and `[ca] names` are refused; the loopback trust
//! rules hold over TLS (its own origin is `https://`); Node (the Qoder
//! CLI's TLS stack) trusts a listener by IP through NODE_EXTRA_CA_CERTS;
//! a leaf outside the CA's name constraints, minted straight from the
//! intermediate, is refused by rustls/webpki, `openssl verify` and Node;
//! a leaf is renewed while shimgate runs; no key reaches the log,
//! `/status` or `/metrics`.
//!
//! These drive `shimgate.exe` under Wine too (`.ci/windows` runs `tls::`):
//! the CA's files are read from the state dir the test gives it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shimgate::config::Config;
use shimgate::tls::ca::{self, CaFiles};
use shimgate::tls::names::LeafName;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};

use crate::support::bin::{tempdir, Served};
use crate::support::upstream::Upstream;
use crate::support::{client, external, qoder, tls, trae, Gate};

/// A config naming `state` as its state dir and one route per shim.
fn config(state: &Path, qoder_up: &str, trae_up: &str) -> String {
    format!(
        "[state]\ndir = \"{}\"\nttl_ms = 0\n\
         [[shims.qoder.routes]]\nname = \"q\"\nurl = \"{qoder_up}\"\n\
         [[shims.trae.routes]]\nname = \"t\"\nurl = \"{trae_up}\"\n",
        state.display().to_string().replace('\\', "/")
    )
}

/// The CA made in `state` before the gate starts (as `shimgate ca path`
/// makes it), so the test's client can trust it.
fn make_ca(state: &Path) -> (PathBuf, String) {
    let c = Config {
        state_dir: state.to_path_buf(),
        ..Default::default()
    };
    let info = shimgate::tls::ensure_ca(&c).unwrap();
    assert!(info.created);
    (info.root_pem, info.fingerprint)
}

async fn upstreams() -> (Upstream, Upstream) {
    let q = Upstream::start(|_, _| qoder::answer("over tls", 7)).await;
    let t = Upstream::start(|_, _| trae::reply(&trae::answer("solo over tls", None, 9))).await;
    (q, t)
}

fn qoder_ask() -> Vec<u8> {
    serde_json::to_vec(&qoder::ask(&[json!({"role": "user", "content": "hi"})])).unwrap()
}

fn trae_body() -> Vec<u8> {
    serde_json::to_vec(&trae::body(&[trae::text("user", "hi")])).unwrap()
}

#[tokio::test]
async fn tls_and_plain_http_share_each_listener_under_the_local_ca() {
    let dir = tempdir();
    let state = dir.join("state");
    let (root, fingerprint) = make_ca(&state);
    let (q, t) = upstreams().await;
    let gate = Gate::start(&config(&state, &q.url(), &t.url())).await;
    let trusting = tls::client_config(Some(&root));
    for (url, shim) in [(&gate.qoder, "qoder"), (&gate.trae, "trae")] {
        let addr = tls::authority(url);
        let ip = addr.split(':').next().unwrap().to_owned();
        // By IP (no SNI: a leaf for 127.0.0.1) and by name.
        for name in [ip.as_str(), "localhost"] {
            let r = tls::get(&addr, name, trusting.clone(), "/status")
                .await
                .unwrap();
            assert_eq!(r.status, StatusCode::OK, "{shim} as {name}: {}", r.text());
            assert_eq!(r.json()["tls"]["ca"]["fingerprint"], fingerprint.as_str());
        }
        let plain = client::get(&format!("{url}/status")).await;
        assert_eq!(plain.status, StatusCode::OK, "plain HTTP on the same port");
    }
    // Inference over TLS on each listener, under the provider's name too.
    let qa = tls::authority(&gate.qoder);
    for name in ["127.0.0.1", "api2-v2.qoder.sh"] {
        let r = tls::send(
            &qa,
            name,
            trusting.clone(),
            Method::POST,
            qoder::PATH,
            &[("content-type", "application/json")],
            qoder_ask(),
        )
        .await
        .unwrap();
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        assert_eq!(qoder::read_answer(&r.body).0, "over tls", "qoder as {name}");
    }
    let r = tls::send(
        &tls::authority(&gate.trae),
        "trae-api-sg.mchost.guru",
        trusting.clone(),
        Method::POST,
        trae::PATH,
        &[
            ("content-type", "application/json"),
            ("authorization", "Cloud-IDE-JWT t"),
        ],
        trae_body(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(
        shimgate_testkit::trae::digest(&r.body).text,
        "solo over tls"
    );
    // Refused: a name outside loopback and [ca] names, and a client that
    // does not trust the CA.
    let e = tls::get(&qa, "example.com", trusting.clone(), "/status")
        .await
        .unwrap_err();
    assert!(e.contains("TLS"), "{e}");
    assert!(
        tls::get(&qa, "127.0.0.1", tls::client_config(None), "/status")
            .await
            .is_err()
    );
    let st = gate.status().await;
    let hs = &st["tls"]["handshakes"];
    assert!(hs["ok"].as_u64().unwrap() >= 7, "{hs}");
    assert_eq!(hs["refused"]["unknown_name"], 1, "{hs}");
    assert_eq!(hs["refused"]["client_refused"], 1, "{hs}");
    assert_eq!(st["tls"]["ca"]["namesMatch"], true);
    // A Windows binary vouches only for a key inside the user's profile
    // folder; the test's state dir is not one.
    if !crate::support::bin::windows_binary() {
        assert_eq!(st["tls"]["ca"]["keyOwnerOnly"], true);
    }
    let metrics = client::get(&format!("{}/metrics", gate.qoder)).await.text();
    assert!(
        metrics.contains("shimgate_tls_handshakes_total{outcome=\"unknown_name\"} 1"),
        "{metrics}"
    );
    gate.stop(Duration::from_secs(1)).await;
}

/// A client that opens a TLS handshake and stalls is closed within the
/// header-read timeout, and counted.
#[tokio::test]
async fn a_stalled_handshake_ends_within_the_header_read_timeout() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = tempdir();
    let state = dir.join("state");
    make_ca(&state);
    let (q, t) = upstreams().await;
    let toml = format!(
        "[limits]\nheader_read_timeout_ms = 300\n{}",
        config(&state, &q.url(), &t.url())
    );
    let gate = Gate::start(&toml).await;
    let mut tcp = tokio::net::TcpStream::connect(tls::authority(&gate.qoder))
        .await
        .unwrap();
    // The first bytes of a TLS record, and no more.
    tcp.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let counted = crate::support::eventually(Duration::from_secs(5), || async {
        gate.status().await["tls"]["handshakes"]["refused"]["timeout"] == 1
    })
    .await;
    assert!(counted);
    gate.stop(Duration::from_secs(1)).await;
}

/// The panel over TLS is its own origin (`https://` + Host): it may
/// change state; a page on the plain origin of the same port, or any
/// other, may not; the Host rule holds.
#[tokio::test]
async fn the_loopback_trust_rules_hold_over_tls() {
    let dir = tempdir();
    let state = dir.join("state");
    let (root, _) = make_ca(&state);
    let (q, t) = upstreams().await;
    let gate = Gate::start(&config(&state, &q.url(), &t.url())).await;
    let addr = tls::authority(&gate.qoder);
    let trusting = tls::client_config(Some(&root));
    let post = |origin: String| {
        let (addr, trusting) = (addr.clone(), trusting.clone());
        async move {
            tls::send(
                &addr,
                "127.0.0.1",
                trusting,
                Method::POST,
                "/routes/reset",
                &[("origin", &origin)],
                "",
            )
            .await
            .unwrap()
        }
    };
    let own = post(format!("https://{addr}")).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.text());
    for foreign in [
        format!("http://{addr}"),
        "https://evil.example".into(),
        "null".into(),
    ] {
        let r = post(foreign.clone()).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{foreign}: {}", r.text());
        assert_eq!(r.json()["error"]["code"], "FORBIDDEN_ORIGIN");
    }
    let rebound = tls::send(
        &addr,
        "localhost",
        trusting.clone(),
        Method::GET,
        "/status",
        &[("host", "rebind.attacker.test")],
        "",
    )
    .await
    .unwrap();
    assert_eq!(rebound.status, StatusCode::FORBIDDEN);
    assert!(rebound.headers.get("access-control-allow-origin").is_none());
    gate.stop(Duration::from_secs(1)).await;
}

/// The Qoder CLI's TLS stack: Node 20 with NODE_EXTRA_CA_CERTS trusts the
/// listener by IP; without it, it refuses.
#[tokio::test]
async fn node_trusts_the_listener_by_ip_through_node_extra_ca_certs() {
    let Some(node) = external::program("node", "install Node.js (Debian: nodejs)") else {
        return;
    };
    let dir = tempdir();
    let state = dir.join("state");
    let (root, _) = make_ca(&state);
    let (q, t) = upstreams().await;
    let gate = Gate::start(&config(&state, &q.url(), &t.url())).await;
    let addr: SocketAddr = tls::authority(&gate.qoder).parse().unwrap();
    let script = format!(
        "require('https').get({{host: '{}', port: {}, path: '/status'}}, r => {{ let b=''; r.on('data', d => b += d); r.on('end', () => {{ console.log('status', r.statusCode, JSON.parse(b).tls.ca.fingerprint.length); process.exit(0); }}); }}).on('error', e => {{ console.log('error', e.code); process.exit(3); }});",
        addr.ip(),
        addr.port()
    );
    let (n, s, r) = (node.clone(), script.clone(), root.clone());
    let (trusted, untrusted) =
        tokio::task::spawn_blocking(move || (node_get(&n, &s, Some(&r)), node_get(&n, &s, None)))
            .await
            .unwrap();
    assert_eq!(
        trusted,
        (Some(0), "status 200 95\n".into()),
        "with NODE_EXTRA_CA_CERTS"
    );
    assert_eq!(
        untrusted.0,
        Some(3),
        "without it Node refuses: {untrusted:?}"
    );
    assert!(untrusted.1.starts_with("error "), "{untrusted:?}");
    let st = gate.status().await;
    assert_eq!(
        st["tls"]["handshakes"]["refused"]["client_refused"], 1,
        "{}",
        st["tls"]
    );
    gate.stop(Duration::from_secs(1)).await;
}

/// Node running `script` (no proxy), with NODE_EXTRA_CA_CERTS = `extra`
/// when given: its exit code and what it printed.
fn node_get(node: &Path, script: &str, extra: Option<&Path>) -> (Option<i32>, String) {
    let mut cmd = Command::new(node);
    cmd.args(["-e", script])
        .env_remove("NODE_EXTRA_CA_CERTS")
        .stdin(Stdio::null());
    for var in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
        cmd.env_remove(var);
    }
    if let Some(pem) = extra {
        cmd.env("NODE_EXTRA_CA_CERTS", pem);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A leaf for `name` minted straight from the intermediate (what shimgate
/// itself would refuse to do outside the constraints): its DER.
fn forge(authority: &ca::Authority, name: &LeafName) -> (Vec<u8>, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let now = SystemTime::now();
    let der = authority
        .sign_leaf(
            name,
            &key,
            now - Duration::from_secs(60),
            now + Duration::from_secs(86_400),
        )
        .unwrap();
    (der.to_vec(), key)
}

/// What rustls/webpki (root only, the intermediate as sent) says of a leaf.
fn webpki_verdict(root: &Path, intermediate: &[u8], leaf: &[u8], name: &str) -> Result<(), String> {
    use tokio_rustls::rustls::client::danger::ServerCertVerifier as _;
    use tokio_rustls::rustls::client::WebPkiServerVerifier;
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for c in tls::certs(root) {
        roots.add(c).unwrap();
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    verifier
        .verify_server_cert(
            &CertificateDer::from(leaf.to_vec()),
            &[CertificateDer::from(intermediate.to_vec())],
            &ServerName::try_from(name.to_owned()).unwrap(),
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// What `openssl verify` says: `Ok` or its complaint.
fn openssl_verdict(
    openssl: &Path,
    files: &CaFiles,
    leaf: &[u8],
    scratch: &Path,
) -> Result<(), String> {
    let pem = scratch.join("leaf.pem");
    std::fs::write(&pem, ca::pem("CERTIFICATE", leaf)).unwrap();
    let out = Command::new(openssl)
        .args(["verify", "-purpose", "sslserver", "-CAfile"])
        .arg(files.root())
        .arg("-untrusted")
        .arg(files.intermediate())
        .arg(&pem)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(said)
    }
}

/// Serves TLS on loopback with `leaf` (and the intermediate) until dropped.
async fn serve_leaf(
    authority: &ca::Authority,
    leaf: Vec<u8>,
    key: &rcgen::KeyPair,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    use tokio_rustls::rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    let chain = vec![
        CertificateDer::from(leaf),
        authority.intermediate_der().clone(),
    ];
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let mut config = tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(mut s) = acceptor.accept(tcp).await {
                    use tokio::io::AsyncWriteExt as _;
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                    let _ = s.shutdown().await;
                }
            });
        }
    });
    (addr, task)
}

/// Node connecting to `addr` asking for `name`, trusting `root` by
/// NODE_EXTRA_CA_CERTS: `Ok` or the error it reports.
fn node_verdict(node: &Path, addr: SocketAddr, name: &str, root: &Path) -> Result<(), String> {
    let script = format!(
        "const s = require('tls').connect({{host: '127.0.0.1', port: {}, servername: '{name}'}}, () => {{ console.log('authorized', s.authorized); process.exit(0); }}); s.on('error', e => {{ console.log('error', e.code, e.message); process.exit(3); }});",
        addr.port()
    );
    let out = Command::new(node)
        .args(["-e", &script])
        .env("NODE_EXTRA_CA_CERTS", root)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && said == "authorized true" {
        Ok(())
    } else {
        Err(said)
    }
}

#[tokio::test]
async fn a_leaf_outside_the_name_constraints_is_refused_by_every_verifier() {
    let dir = tempdir();
    let files = CaFiles::in_state_dir(&dir);
    let (authority, _) = ca::ensure(
        &files,
        &["qoder.sh".into(), "trae.cn".into()],
        SystemTime::now(),
    )
    .unwrap();
    let inter = authority.intermediate.der.clone();
    let openssl = external::program("openssl", "install openssl (Debian: openssl)");
    let node = external::program("node", "install Node.js (Debian: nodejs)");
    let cases = [
        (
            "127.0.0.1",
            LeafName::Ip("127.0.0.1".parse().unwrap()),
            true,
        ),
        ("api2.qoder.sh", LeafName::Dns("api2.qoder.sh".into()), true),
        ("localhost", LeafName::Dns("localhost".into()), true),
        ("example.com", LeafName::Dns("example.com".into()), false),
        (
            "qoder.sh.example.com",
            LeafName::Dns("qoder.sh.example.com".into()),
            false,
        ),
        ("10.0.0.1", LeafName::Ip("10.0.0.1".parse().unwrap()), false),
    ];
    for (name, leaf_name, inside) in cases {
        assert_eq!(authority.permits(&leaf_name), inside, "{name}");
        let (leaf, key) = forge(&authority, &leaf_name);
        let verdict = webpki_verdict(&files.root(), &inter, &leaf, name);
        assert_eq!(
            verdict.is_ok(),
            inside,
            "rustls/webpki on {name}: {verdict:?}"
        );
        if !inside {
            let e = verdict.unwrap_err();
            assert!(
                e.to_lowercase().contains("name constraint") || e.contains("NameConstraint"),
                "{name}: {e}"
            );
        }
        if let Some(openssl) = &openssl {
            let verdict = openssl_verdict(openssl, &files, &leaf, &dir);
            assert_eq!(
                verdict.is_ok(),
                inside,
                "openssl verify on {name}: {verdict:?}"
            );
            if !inside {
                let e = verdict.unwrap_err();
                assert!(e.contains("permitted subtree violation"), "{name}: {e}");
            }
        }
        if let Some(node) = &node {
            let (addr, server) = serve_leaf(&authority, leaf, &key).await;
            let (node, root, n) = (node.clone(), files.root(), name.to_owned());
            let verdict = tokio::task::spawn_blocking(move || node_verdict(&node, addr, &n, &root))
                .await
                .unwrap();
            server.abort();
            assert_eq!(verdict.is_ok(), inside, "Node on {name}: {verdict:?}");
            if !inside {
                assert!(
                    verdict.unwrap_err().contains("permitted subtree violation"),
                    "{name}"
                );
            }
        }
    }
}

/// A leaf near its end is minted anew on the next connection, by the
/// same running listener: the clock is the test's, moved 25 days on.
/// The CA itself is made by the first handshake (no `ca path` before),
/// and a rotation is picked up without a restart.
#[tokio::test]
async fn a_leaf_is_renewed_while_shimgate_runs() {
    let dir = tempdir();
    let c = Config {
        state_dir: dir.to_path_buf(),
        ..Default::default()
    };
    // shimgate's clock starts 25 days back, so both leaves are valid on the
    // client's (real) clock: the first ends in 5 days, the second in 30.
    let real = SystemTime::now();
    let now = Arc::new(Mutex::new(real - Duration::from_secs(25 * 86_400)));
    let clock = now.clone();
    let t =
        Arc::new(shimgate::tls::Tls::new(&c).with_clock(Arc::new(move || *clock.lock().unwrap())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let served = t.clone();
    let server = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
            if let Some(mut s) = served.accept(tcp, deadline).await {
                use tokio::io::AsyncWriteExt as _;
                let _ = s.shutdown().await;
            }
        }
    });
    // No CA yet: the first TLS connection makes it (a client without the
    // root refuses, and is counted so).
    assert!(!CaFiles::in_state_dir(&dir).root().exists());
    assert!(tls::connect(&addr, "127.0.0.1", tls::client_config(None))
        .await
        .is_err());
    let root = CaFiles::in_state_dir(&dir).root();
    assert!(root.exists(), "the CA is made on first use");
    let first = tls::presented(&addr, "127.0.0.1", &root).await;
    let again = tls::presented(&addr, "127.0.0.1", &root).await;
    assert_eq!(first, again, "a fresh leaf is kept");
    *now.lock().unwrap() = real;
    let renewed = tls::presented(&addr, "127.0.0.1", &root).await;
    assert_ne!(first, renewed, "within 10 days of its end: a new leaf");
    let end = |der: &[u8]| ca::facts(der).unwrap().not_after;
    assert!(end(&renewed) > end(&first));
    let st = t.status();
    assert_eq!(st["leaves"]["renewed"], 1, "{st}");
    assert_eq!(st["handshakes"]["refused"]["client_refused"], 1, "{st}");
    // `shimgate ca rotate` while it runs: the next connections (the files
    // are looked at once a second) get leaves of the new CA.
    let old_root = dir.join("old-root.pem");
    std::fs::copy(&root, &old_root).unwrap();
    let rotated = ca::rotate(&CaFiles::in_state_dir(&dir), &c.ca.names, real).unwrap();
    let picked_up = crate::support::eventually(Duration::from_secs(5), || {
        let addr = addr.clone();
        let root = root.clone();
        async move {
            tls::connect(&addr, "127.0.0.1", tls::client_config(Some(&root)))
                .await
                .is_ok()
        }
    })
    .await;
    assert!(picked_up, "the rotated CA is used without a restart");
    assert!(
        tls::connect(&addr, "127.0.0.1", tls::client_config(Some(&old_root)))
            .await
            .is_err()
    );
    assert_eq!(
        t.status()["ca"]["fingerprint"],
        rotated.root.fingerprint.as_str()
    );
    server.abort();
}

/// Nothing secret in what shimgate writes or shows: the CA's key is in
/// its file only; no private key at all in the log (debug level),
/// `/status` or `/metrics`.
#[tokio::test]
async fn keys_never_reach_the_log_status_or_metrics() {
    let dir = tempdir();
    let state = dir.join("state");
    let (root, _) = make_ca(&state);
    let (q, t) = upstreams().await;
    let file = dir.join("shimgate.toml");
    std::fs::write(
        &file,
        format!(
            "[shims.qoder]\nlisten = \"127.0.0.1:0\"\n[shims.trae]\nlisten = \"127.0.0.1:0\"\n{}",
            config(&state, &q.url(), &t.url())
        ),
    )
    .unwrap();
    let served = Served::start(&file, &["--log-format", "json"], &[("RUST_LOG", "debug")]);
    let trusting = tls::client_config(Some(&root));
    let qa = tls::authority(&served.qoder);
    for name in ["127.0.0.1", "localhost", "api2.qoder.sh", "example.com"] {
        let _ = tls::send(
            &qa,
            name,
            trusting.clone(),
            Method::POST,
            qoder::PATH,
            &[("content-type", "application/json")],
            qoder_ask(),
        )
        .await;
    }
    let status = client::get(&format!("{}/status", served.qoder))
        .await
        .text();
    let metrics = client::get(&format!("{}/metrics", served.qoder))
        .await
        .text();
    let key = std::fs::read_to_string(CaFiles::in_state_dir(&state).key()).unwrap();
    let secret_lines: Vec<&str> = key.lines().filter(|l| !l.starts_with("-----")).collect();
    assert!(!secret_lines.is_empty());
    let logs = served.stderr();
    assert!(
        logs.contains("TLS refused"),
        "the refusal is logged:\n{logs}"
    );
    for (what, text) in [("log", &logs), ("/status", &status), ("/metrics", &metrics)] {
        assert!(!text.contains("PRIVATE KEY"), "{what} holds a PEM key");
        for line in &secret_lines {
            assert!(!text.contains(line), "{what} holds the intermediate's key");
        }
    }
    let st: Value = serde_json::from_str(&status).unwrap();
    assert!(
        st["tls"]["handshakes"]["ok"].as_u64().unwrap() >= 3,
        "{}",
        st["tls"]
    );
    served.stop();
}

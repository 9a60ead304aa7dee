//! Clients of the capture listener, as applications reach a proxy: a Rust
//! one (`CONNECT`, then rustls trusting only the roots it is given, then
//! HTTP/1.1), and the external stacks — curl, Python's `httpx` and
//! `requests`, Node's own `http`/`https`/`tls` — each run once per request
//! with `HTTPS_PROXY` naming the listener. Each gives back the status and
//! body, or what failed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;

use super::client::Resp;

/// `CONNECT target` through the proxy at `proxy` (`http://host:port`):
/// the open stream, or the proxy's status line and body.
pub async fn connect(proxy: &str, target: &str) -> Result<TcpStream, String> {
    let mut tcp = TcpStream::connect(proxy.trim_start_matches("http://"))
        .await
        .map_err(|e| e.to_string())?;
    tcp.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if tcp.read(&mut byte).await.map_err(|e| e.to_string())? == 0 {
            return Err(format!(
                "the proxy closed: {}",
                String::from_utf8_lossy(&head)
            ));
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).into_owned();
    if !text.starts_with("HTTP/1.1 200") {
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            tcp.read_to_end(&mut rest),
        )
        .await;
        return Err(format!("{text}{}", String::from_utf8_lossy(&rest)));
    }
    Ok(tcp)
}

/// TLS to `host` inside a `CONNECT` through `proxy`.
pub async fn tls(
    proxy: &str,
    host: &str,
    port: u16,
    config: Arc<ClientConfig>,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let tcp = connect(proxy, &format!("{host}:{port}")).await?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS to {host} through {proxy}: {e}"))
}

/// One request to `https://host{path}` through `proxy`, trusting
/// `config`'s roots.
pub async fn send(
    proxy: &str,
    host: &str,
    config: Arc<ClientConfig>,
    (method, path): (Method, &str),
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Resp, String> {
    let stream = tls(proxy, host, 443, config).await?;
    super::tls::request_over(stream, host, (method, path), headers, body.into()).await
}

/// Which external HTTP stack makes a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    Curl,
    Httpx,
    Requests,
    Node,
}

impl Stack {
    pub const ALL: [Stack; 4] = [Stack::Curl, Stack::Httpx, Stack::Requests, Stack::Node];

    pub fn name(self) -> &'static str {
        match self {
            Stack::Curl => "curl",
            Stack::Httpx => "python httpx",
            Stack::Requests => "python requests",
            Stack::Node => "node https",
        }
    }
}

/// What an external stack got.
#[derive(Debug, Clone)]
pub struct Got {
    pub status: StatusCode,
    pub body: Vec<u8>,
}

pub fn support(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/support")
        .join(file)
}

/// A request through `proxy` by `stack`, trusting the roots in `bundle`
/// (given as each stack takes it: `--cacert`, `SSL_CERT_FILE`,
/// `REQUESTS_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS`); `python` is the Python
/// with httpx and requests. `Err` with what failed.
pub async fn external(
    stack: Stack,
    (proxy, bundle, python): (&str, &Path, &Path),
    (method, url): (&str, &str),
    headers: &[(&str, &str)],
    body_file: Option<&Path>,
) -> Result<Got, String> {
    let headers_json = serde_json::Value::Object(
        headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
            .collect(),
    )
    .to_string();
    let mut cmd = match stack {
        Stack::Curl => {
            let mut c = tokio::process::Command::new("curl");
            c.args(["-sS", "--no-buffer", "-o", "-", "-w", "\n%{http_code}"])
                .args(["--proxy", proxy, "--cacert"])
                .arg(bundle)
                .args(["-X", method, url]);
            for (k, v) in headers {
                c.args(["-H", &format!("{k}: {v}")]);
            }
            if let Some(f) = body_file {
                c.arg("--data-binary").arg(format!("@{}", f.display()));
            }
            c
        }
        Stack::Httpx | Stack::Requests => {
            let mut c = tokio::process::Command::new(python);
            c.arg(support("capture_client.py"))
                .arg(if stack == Stack::Httpx {
                    "httpx"
                } else {
                    "requests"
                })
                .args([url, method, &headers_json]);
            if let Some(f) = body_file {
                c.arg(f);
            }
            c.env("SSL_CERT_FILE", bundle)
                .env("REQUESTS_CA_BUNDLE", bundle);
            c
        }
        Stack::Node => {
            let mut c = tokio::process::Command::new(super::qoder_cli::node());
            c.arg(support("capture_client.cjs"))
                .args([url, method, &headers_json]);
            if let Some(f) = body_file {
                c.arg(f);
            }
            // The preload refuses any socket or look-up past loopback.
            c.env("NODE_EXTRA_CA_CERTS", bundle).env(
                "NODE_OPTIONS",
                format!("--require {}", super::qoder_cli::preload().display()),
            );
            c
        }
    };
    for v in ["HTTPS_PROXY", "https_proxy"] {
        cmd.env(v, proxy);
    }
    for v in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
        cmd.env_remove(v);
    }
    cmd.env("NO_PROXY", "").env("no_proxy", "");
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("{}: {e}", stack.name()))?;
    let stdout = out.stdout;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if stack == Stack::Curl {
        let text = String::from_utf8_lossy(&stdout);
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
        let code: u16 = code.trim().parse().unwrap_or(0);
        if !out.status.success() || code == 0 {
            return Err(format!("curl: exit {:?}: {stderr}", out.status.code()));
        }
        return Ok(Got {
            status: StatusCode::from_u16(code).unwrap(),
            body: body.as_bytes().to_vec(),
        });
    }
    let line = String::from_utf8_lossy(&stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    let v: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| format!("{}: no JSON ({e}): {line}\n{stderr}", stack.name()))?;
    if let Some(e) = v.get("error").or(v.get("connect")) {
        return Err(format!("{}: {e}\n{stderr}", stack.name()));
    }
    Ok(Got {
        status: StatusCode::from_u16(v["status"].as_u64().unwrap() as u16).unwrap(),
        body: base64::engine::general_purpose::STANDARD
            .decode(v["body"].as_str().unwrap())
            .unwrap(),
    })
}

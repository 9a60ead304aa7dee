//! A TLS client for tests: rustls trusting only the roots it is given (the
//! local CA's PEM), HTTP/1.1 over it with hyper; and the external TLS
//! stacks the official clients use (Node, the openssl command).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::client::Resp;

/// The certificates of a PEM file.
pub fn certs(pem: &Path) -> Vec<CertificateDer<'static>> {
    CertificateDer::pem_file_iter(pem)
        .unwrap_or_else(|e| panic!("{}: {e:?}", pem.display()))
        .map(|c| c.unwrap())
        .collect()
}

/// A client config trusting exactly the roots in `root_pem` (none: the
/// public web's roots, which never include the local CA).
pub fn client_config(root_pem: Option<&Path>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    match root_pem {
        Some(pem) => {
            for c in certs(pem) {
                roots.add(c).unwrap();
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// `host:port` of a gate's `http://host:port` URL.
pub fn authority(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// Opens TLS to `addr` asking for `name` (an IP address sends no SNI).
pub async fn connect(
    addr: &str,
    name: &str,
    config: Arc<ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_owned()).unwrap();
    TlsConnector::from(config).connect(name, tcp).await
}

/// One request over a fresh TLS connection to `addr` for `name`; `Err`
/// when the handshake fails.
pub async fn send(
    addr: &str,
    name: &str,
    config: Arc<ClientConfig>,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Result<Resp, String> {
    let tls = connect(addr, name, config)
        .await
        .map_err(|e| format!("TLS to {addr} as {name}: {e}"))?;
    request_over(tls, addr, (method, path), headers, body.into()).await
}

/// One HTTP/1.1 request over an open stream (TLS, or a tunnel), with
/// `Host: host` unless `headers` name one; `Err` when the request or its
/// body fails.
pub async fn request_over<S>(
    stream: S,
    host: &str,
    (method, path): (Method, &str),
    headers: &[(&str, &str)],
    body: Bytes,
) -> Result<Resp, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = Request::builder().method(method).uri(path);
    let has_host = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host"));
    if !has_host {
        req = req.header("host", host);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(body)).unwrap())
        .await
        .map_err(|e| e.to_string())?;
    let (parts, body) = resp.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|e| format!("the body of the answer: {e}"))?;
    Ok(Resp {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

/// GET `path` over TLS.
pub async fn get(
    addr: &str,
    name: &str,
    config: Arc<ClientConfig>,
    path: &str,
) -> Result<Resp, String> {
    send(addr, name, config, Method::GET, path, &[], Bytes::new()).await
}

/// The leaf the server at `addr` presents for `name` (DER), read by a
/// client that trusts `root_pem`.
pub async fn presented(addr: &str, name: &str, root_pem: &Path) -> Vec<u8> {
    let tls = connect(addr, name, client_config(Some(root_pem)))
        .await
        .unwrap();
    let (_, conn) = tls.get_ref();
    conn.peer_certificates().unwrap()[0].to_vec()
}

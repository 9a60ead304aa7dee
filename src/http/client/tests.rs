//! The client against scripted loopback servers that write HTTP/1.1 byte
//! for byte: what goes out, what each framing gives back, when a
//! connection is reused and when it is not, TLS.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::pool::SWEEP_EVERY;
use super::*;

const TIMEOUT: Duration = Duration::from_secs(5);

/// A server that reads each request head (and its `content-length` body),
/// reports it, and writes the answer `answer` gives for it; `accepts`
/// counts its connections. The connection is closed after an answer when
/// `answer` says so; `closed` hears of each close.
struct Script {
    addr: std::net::SocketAddr,
    accepts: Arc<AtomicUsize>,
    requests: mpsc::UnboundedReceiver<Vec<u8>>,
    closed: mpsc::UnboundedReceiver<()>,
}

type Answer = fn(usize) -> (Vec<u8>, bool);

async fn script(answer: Answer) -> Script {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepts = Arc::new(AtomicUsize::new(0));
    let (tx, requests) = mpsc::unbounded_channel();
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let counter = accepts.clone();
    tokio::spawn(async move {
        let served = Arc::new(AtomicUsize::new(0));
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let (tx, served, closed) = (tx.clone(), served.clone(), closed_tx.clone());
            tokio::spawn(async move {
                serve(stream, tx, served, answer).await;
                let _ = closed.send(());
            });
        }
    });
    Script {
        addr,
        accepts,
        requests,
        closed,
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    served: Arc<AtomicUsize>,
    answer: Answer,
) {
    while let Some(request) = read_request(&mut stream).await {
        let _ = tx.send(request);
        let (bytes, close) = answer(served.fetch_add(1, Ordering::SeqCst));
        if stream.write_all(&bytes).await.is_err() || close {
            return;
        }
    }
}

/// One request, head and body, as it arrived; `None` at EOF.
async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    buf.extend_from_slice(&body);
    Some(buf)
}

fn post(addr: std::net::SocketAddr, path: &str, body: &'static str) -> Request<Bytes> {
    Request::post(format!("http://{addr}{path}"))
        .header("x-call", "1")
        .body(Bytes::from_static(body.as_bytes()))
        .expect("request")
}

async fn text(resp: http::Response<UpstreamBody>) -> Result<String, ClientError> {
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

fn sized(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello".to_vec(),
        false,
    )
}

#[tokio::test]
async fn the_request_goes_out_as_written_and_the_connection_is_reused() {
    let mut up = script(sized).await;
    let client = client(TIMEOUT);
    for _ in 0..3 {
        let resp = client
            .request(post(up.addr, "/v1/x?a=1", "{\"k\":1}"))
            .await
            .expect("answer");
        assert_eq!(resp.status(), 200);
        assert_eq!(text(resp).await.expect("body"), "hello");
    }
    let first = up.requests.recv().await.expect("request");
    assert_eq!(
        String::from_utf8(first).expect("utf-8"),
        format!(
            "POST /v1/x?a=1 HTTP/1.1\r\nhost: {}\r\nx-call: 1\r\ncontent-length: 7\r\n\r\n{{\"k\":1}}",
            up.addr
        )
    );
    assert_eq!(
        up.accepts.load(Ordering::SeqCst),
        1,
        "one connection for three calls"
    );
    assert_eq!(client.idle_connections(), 1);
}

fn chunked_then_wait(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata:1\r\n".to_vec(),
        false,
    )
}

#[tokio::test]
async fn a_chunk_is_given_out_as_soon_as_it_arrives() {
    let up = script(chunked_then_wait).await;
    let client = client(TIMEOUT);
    let resp = client
        .request(post(up.addr, "/s", ""))
        .await
        .expect("answer");
    let mut body = resp.into_body();
    let first = tokio::time::timeout(TIMEOUT, body.frame())
        .await
        .expect("the first chunk before the body's end")
        .expect("a frame")
        .expect("data");
    assert_eq!(first.into_data().expect("data"), "data:1");
    assert!(!http_body::Body::is_end_stream(&body));
}

fn two_chunks(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nx-t: 1\r\n\r\n".to_vec(),
        false,
    )
}

#[tokio::test]
async fn a_chunked_body_read_to_its_end_gives_the_connection_back() {
    let up = script(two_chunks).await;
    let client = client(TIMEOUT);
    for _ in 0..2 {
        let resp = client
            .request(post(up.addr, "/", ""))
            .await
            .expect("answer");
        assert_eq!(text(resp).await.expect("body"), "abcde");
    }
    assert_eq!(up.accepts.load(Ordering::SeqCst), 1);
}

fn until_close(_: usize) -> (Vec<u8>, bool) {
    (b"HTTP/1.1 200 OK\r\n\r\nall of it".to_vec(), true)
}

#[tokio::test]
async fn a_body_without_length_is_read_to_the_close_and_not_pooled() {
    let up = script(until_close).await;
    let client = client(TIMEOUT);
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    assert_eq!(text(resp).await.expect("body"), "all of it");
    assert_eq!(client.idle_connections(), 0);
}

fn cut_short(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf".to_vec(),
        true,
    )
}

fn cut_chunked(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab".to_vec(),
        true,
    )
}

fn bad_chunk(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n".to_vec(),
        false,
    )
}

#[tokio::test]
async fn a_cut_or_malformed_body_is_an_error_naming_the_upstream() {
    for answer in [cut_short as Answer, cut_chunked, bad_chunk] {
        let up = script(answer).await;
        let client = client(TIMEOUT);
        let resp = client
            .request(post(up.addr, "/", ""))
            .await
            .expect("answer");
        let err = text(resp).await.expect_err("a broken body");
        let chain = crate::http::error_chain(&err);
        assert!(
            chain.starts_with(&format!("the response body broke from http://{}", up.addr)),
            "{chain}"
        );
        assert!(!err.is_connect() && !err.never_sent());
        assert_eq!(client.idle_connections(), 0);
    }
}

fn close_after(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_vec(),
        true,
    )
}

#[tokio::test]
async fn a_pooled_connection_its_peer_closed_is_not_used() {
    let mut up = script(close_after).await;
    let client = client(TIMEOUT);
    for _ in 0..3 {
        let resp = client
            .request(post(up.addr, "/", ""))
            .await
            .expect("answer");
        assert_eq!(text(resp).await.expect("body"), "ok");
        up.closed.recv().await.expect("the server closed");
        assert_eq!(
            client.idle_connections(),
            1,
            "kept until it is next asked for"
        );
    }
    assert_eq!(up.accepts.load(Ordering::SeqCst), 3);
}

fn trailing_bytes(_: usize) -> (Vec<u8>, bool) {
    (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokEXTRA".to_vec(),
        false,
    )
}

#[tokio::test]
async fn bytes_past_the_body_keep_the_connection_out_of_the_pool() {
    let up = script(trailing_bytes).await;
    let client = client(TIMEOUT);
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    assert_eq!(text(resp).await.expect("body"), "ok");
    assert_eq!(client.idle_connections(), 0);
}

fn long_head(_: usize) -> (Vec<u8>, bool) {
    let head = format!("HTTP/1.1 200 OK\r\nx-long: {}\r\n", "v".repeat(70_000));
    (head.into_bytes(), false)
}

fn many_headers(_: usize) -> (Vec<u8>, bool) {
    let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
    for i in 0..200 {
        head.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    head.extend_from_slice(b"\r\n");
    (head, false)
}

fn status_204_then_sized(n: usize) -> (Vec<u8>, bool) {
    if n == 0 {
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n".to_vec(),
            false,
        )
    } else {
        sized(n)
    }
}

#[tokio::test]
async fn heads_long_informational_and_empty() {
    let client = client(TIMEOUT);
    for (answer, why) in [
        (long_head as Answer, "longer than 65536 bytes"),
        (many_headers, "too many headers"),
    ] {
        let up = script(answer).await;
        let err = client.request(post(up.addr, "/", "")).await.expect_err(why);
        let chain = crate::http::error_chain(&err);
        assert!(chain.contains(why), "{chain}");
    }

    let up = script(status_204_then_sized).await;
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    assert_eq!(resp.status(), 204);
    assert!(http_body::Body::is_end_stream(resp.body()));
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    assert_eq!(text(resp).await.expect("body"), "hello");
    assert_eq!(
        up.accepts.load(Ordering::SeqCst),
        1,
        "a 204 leaves the connection usable"
    );
}

#[tokio::test]
async fn a_refused_connect_is_a_connect_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let err = client(TIMEOUT)
        .request(post(addr, "/", ""))
        .await
        .expect_err("nobody listens");
    assert!(err.is_connect() && err.never_sent());
    let chain = crate::http::error_chain(&err);
    assert!(
        chain.starts_with(&format!("cannot connect to http://{addr}: ")),
        "{chain}"
    );
    let err = client(TIMEOUT)
        .request(
            Request::post("ftp://h/x")
                .body(Bytes::new())
                .expect("request"),
        )
        .await
        .expect_err("not http");
    assert!(err.is_connect());
}

#[tokio::test]
async fn a_dropped_body_closes_its_connection() {
    let up = script(chunked_then_wait).await;
    let client = client(TIMEOUT);
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    drop(resp);
    assert_eq!(client.idle_connections(), 0);
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    drop(resp);
    assert_eq!(up.accepts.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn idle_connections_expire() {
    let up = script(sized).await;
    let client = client(TIMEOUT);
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    assert_eq!(text(resp).await.expect("body"), "hello");
    assert_eq!(client.idle_connections(), 1);
    tokio::time::advance(POOL_IDLE_TIMEOUT + SWEEP_EVERY).await;
    // The sweep ran in the time that passed.
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    assert_eq!(client.idle_connections(), 0);
    let resp = client
        .request(post(up.addr, "/", ""))
        .await
        .expect("answer");
    assert_eq!(text(resp).await.expect("body"), "hello");
    assert_eq!(up.accepts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn https_with_the_client_s_roots_and_a_kept_connection() {
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio_rustls::rustls::{self, RootCertStore};

    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.clone()], key)
    .map(|mut config| {
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config
    })
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepts = Arc::new(AtomicUsize::new(0));
    let (tx, mut requests) = mpsc::unbounded_channel();
    let (alpn_tx, alpn_rx) = oneshot::channel();
    let counter = accepts.clone();
    tokio::spawn(async move {
        let mut alpn_tx = Some(alpn_tx);
        while let Ok((tcp, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let Ok(tls) = acceptor.accept(tcp).await else {
                continue;
            };
            if let Some(t) = alpn_tx.take() {
                let _ = t.send(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec));
            }
            tokio::spawn(serve(tls, tx.clone(), Arc::default(), sized));
        }
    });

    let mut roots = RootCertStore::empty();
    roots.add(cert).expect("root");
    let trusting = HttpClient::with_tls(TIMEOUT, Tls::with_roots(roots));
    for _ in 0..2 {
        let req = Request::post(format!("https://localhost:{port}/v1"))
            .body(Bytes::from_static(b"{}"))
            .expect("request");
        let resp = trusting.request(req).await.expect("answer over TLS");
        assert_eq!(text(resp).await.expect("body"), "hello");
    }
    assert_eq!(
        accepts.load(Ordering::SeqCst),
        1,
        "the TLS connection is kept"
    );
    assert_eq!(alpn_rx.await.expect("alpn"), Some(b"http/1.1".to_vec()));
    let first = requests.recv().await.expect("request");
    assert!(
        first.starts_with(format!("POST /v1 HTTP/1.1\r\nhost: localhost:{port}\r\n").as_bytes())
    );

    // The webpki roots do not know this authority.
    let stranger = client(TIMEOUT);
    let req = Request::post(format!("https://localhost:{port}/v1"))
        .body(Bytes::new())
        .expect("request");
    let err = stranger.request(req).await.expect_err("unknown issuer");
    assert!(err.is_connect());
    assert!(
        crate::http::error_chain(&err).contains("certificate"),
        "{err}"
    );
}

#[tokio::test]
async fn a_stream_of_a_megabyte_reads_whole() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        let _ = read_request(&mut stream).await;
        let body = vec![b'x'; 1 << 20];
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
        let _ = stream.write_all(head.as_bytes()).await;
        for piece in body.chunks(3000) {
            let _ = stream.write_all(piece).await;
        }
        let _ = read_request(&mut stream).await;
    });
    let client = client(TIMEOUT);
    let resp = client.request(post(addr, "/", "")).await.expect("answer");
    assert_eq!(
        http_body::Body::size_hint(resp.body()).exact(),
        Some(1 << 20)
    );
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(bytes.len(), 1 << 20);
    assert!(bytes.iter().all(|b| *b == b'x'));
    assert_eq!(client.idle_connections(), 1);
}

/// A CONNECT proxy for one test: answers `200` and splices the tunnel;
/// counts the tunnels it opened.
async fn connect_proxy() -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let tunnels = Arc::new(AtomicUsize::new(0));
    let counter = tunnels.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let Some(head) = read_request(&mut client).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&head).into_owned();
                let Some(target) = head
                    .strip_prefix("CONNECT ")
                    .and_then(|r| r.split(' ').next())
                else {
                    return;
                };
                let Ok(mut up) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                counter.fetch_add(1, Ordering::SeqCst);
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_ok()
                {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                }
            });
        }
    });
    (addr, tunnels)
}

#[tokio::test]
async fn connections_are_pooled_per_proxy_and_origin() {
    let up = script(sized).await;
    let (proxy_addr, tunnels) = connect_proxy().await;
    let proxy = Arc::new(proxy::ProxyUrl::parse(&format!("http://{proxy_addr}")).expect("url"));
    let client = client(TIMEOUT);
    let via = |mut req: Request<Bytes>| {
        req.extensions_mut().insert(Through(proxy.clone()));
        req
    };
    // Direct, then through the proxy: the idle direct connection is not
    // taken for the proxied call.
    text(
        client
            .request(post(up.addr, "/a", "x"))
            .await
            .expect("direct"),
    )
    .await
    .expect("body");
    assert_eq!(client.idle_connections(), 1);
    let resp = client
        .request(via(post(up.addr, "/b", "x")))
        .await
        .expect("proxied");
    text(resp).await.expect("body");
    assert_eq!(tunnels.load(Ordering::SeqCst), 1);
    assert_eq!(up.accepts.load(Ordering::SeqCst), 2);
    // Each again: each takes its own idle connection.
    let resp = client
        .request(via(post(up.addr, "/c", "x")))
        .await
        .expect("proxied again");
    text(resp).await.expect("body");
    text(
        client
            .request(post(up.addr, "/d", "x"))
            .await
            .expect("direct again"),
    )
    .await
    .expect("body");
    assert_eq!(tunnels.load(Ordering::SeqCst), 1);
    assert_eq!(up.accepts.load(Ordering::SeqCst), 2);
    assert_eq!(client.idle_connections(), 2);
}

//! HTTP/1.1 on the client's side of a connection: the request head as
//! bytes, and the response head parsed (`httparse`) into the status, the
//! headers and how the body is framed (RFC 9112 §6.3).

use bytes::{Buf, BytesMut};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Version};

use super::connect::Origin;

/// The most header fields a response head may have.
pub const MAX_HEADERS: usize = 128;

/// The largest response head read (a provider's head with its rate-limit
/// headers and cookies is a few KiB).
pub const MAX_HEAD: usize = 64 * 1024;

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (`HEAD`, 204, 304).
    Empty,
    /// `content-length` bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Until the peer closes (the connection is not reused).
    Close,
}

/// A parsed response head.
#[derive(Debug)]
pub struct Head {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub framing: Framing,
    /// The connection may carry another request once the body is read.
    pub keep_alive: bool,
}

/// Why a response head is unusable.
#[derive(Debug)]
pub struct HeadError(pub String);

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid response head: {}", self.0)
    }
}

impl std::error::Error for HeadError {}

/// The request head for `parts` with a body of `body_len` bytes: origin
/// form, `host` from the URI when the request has none, the length stated
/// by `content-length` (any `content-length` or `transfer-encoding` of the
/// request's own is replaced).
pub fn request_head(parts: &http::request::Parts, origin: &Origin, body_len: usize) -> Vec<u8> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let target = if target.is_empty() { "/" } else { target };
    let mut head = Vec::with_capacity(64 + target.len() + 48 * parts.headers.len());
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.1\r\n");
    if !parts.headers.contains_key(header::HOST) {
        head.extend_from_slice(b"host: ");
        push_host(&mut head, origin);
        head.extend_from_slice(b"\r\n");
    }
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH || name == header::TRANSFER_ENCODING {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    if body_len > 0 || body_expected(&parts.method) {
        head.extend_from_slice(b"content-length: ");
        head.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    head
}

/// Methods whose request states a length even when empty.
fn body_expected(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH)
}

fn push_host(head: &mut Vec<u8>, origin: &Origin) {
    let ipv6 = origin.host.contains(':');
    if ipv6 {
        head.push(b'[');
    }
    head.extend_from_slice(origin.host.as_bytes());
    if ipv6 {
        head.push(b']');
    }
    let default = if origin.tls { 443 } else { 80 };
    if origin.port != default {
        head.push(b':');
        head.extend_from_slice(itoa::Buffer::new().format(origin.port).as_bytes());
    }
}

/// Parses a response head from the front of `buf`, consuming it (and any
/// informational `1xx` heads before it). `None`: the head is not complete
/// yet.
pub fn parse_head(buf: &mut BytesMut, method: &Method) -> Result<Option<Head>, HeadError> {
    loop {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut fields);
        let len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(HeadError(format!("longer than {MAX_HEAD} bytes")))
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(HeadError(e.to_string())),
        };
        let code = resp.code.unwrap_or(0);
        let status = StatusCode::from_u16(code).map_err(|_| HeadError(format!("status {code}")))?;
        let version = if resp.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let mut headers = HeaderMap::with_capacity(resp.headers.len());
        for field in resp.headers.iter() {
            let name = HeaderName::from_bytes(field.name.as_bytes())
                .map_err(|_| HeadError(format!("header name {:?}", field.name)))?;
            let value = HeaderValue::from_bytes(field.value)
                .map_err(|_| HeadError(format!("value of {name}")))?;
            headers.append(name, value);
        }
        buf.advance(len);
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(HeadError(
                "101 Switching Protocols, which was not asked for".into(),
            ));
        }
        if status.is_informational() {
            continue;
        }
        let (framing, reusable) = framing(status, method, &headers)?;
        let keep_alive = reusable && keep_alive(version, &headers);
        return Ok(Some(Head {
            status,
            version,
            headers,
            framing,
            keep_alive,
        }));
    }
}

/// How the body is delimited, and whether that leaves the connection
/// reusable (RFC 9112 §6.3).
fn framing(
    status: StatusCode,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(Framing, bool), HeadError> {
    if *method == Method::HEAD
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return Ok((Framing::Empty, true));
    }
    let mut codings = headers.get_all(header::TRANSFER_ENCODING).iter().peekable();
    if codings.peek().is_some() {
        let last = codings
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .last();
        let chunked = last.is_some_and(|c| c.eq_ignore_ascii_case("chunked"));
        // A length beside a transfer coding is ignored, and such a
        // message must not leave the connection open (§6.3 point 3).
        let reusable = chunked && !headers.contains_key(header::CONTENT_LENGTH);
        let framing = if chunked {
            Framing::Chunked
        } else {
            Framing::Close
        };
        return Ok((framing, reusable));
    }
    let mut length: Option<u64> = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|b| *b == b',') {
            let text = std::str::from_utf8(part).unwrap_or("").trim();
            let n = text
                .parse::<u64>()
                .ok()
                .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| HeadError(format!("content-length {text:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(HeadError("two different content-lengths".into()));
            }
            length = Some(n);
        }
    }
    Ok(match length {
        Some(0) => (Framing::Empty, true),
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
}

/// Whether the peer keeps the connection open after this answer.
fn keep_alive(version: Version, headers: &HeaderMap) -> bool {
    let has = |token: &str| {
        headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if version == Version::HTTP_10 {
        has("keep-alive")
    } else {
        !has("close")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(tls: bool, host: &str, port: u16) -> Origin {
        Origin {
            tls,
            host: host.into(),
            port,
            proxy: None,
        }
    }

    fn parse(text: &str, method: Method) -> Result<Option<Head>, HeadError> {
        parse_head(&mut BytesMut::from(text), &method)
    }

    #[test]
    fn the_request_head_states_host_and_length() {
        let req = http::Request::post("http://127.0.0.1:8080/v1/x?a=1")
            .header("content-length", "999")
            .header("transfer-encoding", "chunked")
            .header("x-a", "b")
            .body(())
            .expect("request");
        let (parts, ()) = req.into_parts();
        let head = request_head(&parts, &origin(false, "127.0.0.1", 8080), 5);
        assert_eq!(
            String::from_utf8(head).expect("utf-8"),
            "POST /v1/x?a=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\nx-a: b\r\ncontent-length: 5\r\n\r\n"
        );
        let (parts, ()) = http::Request::get("https://[::1]/")
            .body(())
            .expect("request")
            .into_parts();
        let head = request_head(&parts, &origin(true, "::1", 443), 0);
        assert_eq!(head, b"GET / HTTP/1.1\r\nhost: [::1]\r\n\r\n");
        let (parts, ()) = http::Request::post("http://h/p")
            .header("host", "given")
            .body(())
            .expect("request")
            .into_parts();
        let head = request_head(&parts, &origin(false, "h", 80), 0);
        assert_eq!(
            head,
            b"POST /p HTTP/1.1\r\nhost: given\r\ncontent-length: 0\r\n\r\n"
        );
    }

    #[test]
    fn heads_give_their_framing() {
        let chunked = parse(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            Method::POST,
        )
        .expect("valid")
        .expect("complete");
        assert_eq!(
            (chunked.framing, chunked.keep_alive),
            (Framing::Chunked, true)
        );
        let sized = parse(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 12\r\n\r\n",
            Method::POST,
        )
        .expect("valid")
        .expect("complete");
        assert_eq!(
            (sized.status.as_u16(), sized.framing),
            (502, Framing::Length(12))
        );
        let closing = parse("HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n", Method::GET)
            .expect("valid")
            .expect("complete");
        assert_eq!(
            (closing.framing, closing.keep_alive),
            (Framing::Close, false)
        );
        let old = parse("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n", Method::GET)
            .expect("valid")
            .expect("complete");
        assert_eq!((old.version, old.keep_alive), (Version::HTTP_10, false));
        let head = parse(
            "HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\n",
            Method::HEAD,
        )
        .expect("valid")
        .expect("complete");
        assert_eq!(head.framing, Framing::Empty);
        let gzip = parse(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
            Method::GET,
        )
        .expect("valid")
        .expect("complete");
        assert_eq!((gzip.framing, gzip.keep_alive), (Framing::Close, false));
    }

    #[test]
    fn informational_heads_are_skipped_and_the_rest_stays() {
        let mut buf = BytesMut::from(
            "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: x\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi",
        );
        let head = parse_head(&mut buf, &Method::POST)
            .expect("valid")
            .expect("complete");
        assert_eq!(head.status, StatusCode::OK);
        assert_eq!(&buf[..], b"hi");
    }

    #[test]
    fn partial_and_bad_heads() {
        assert!(parse("HTTP/1.1 200 OK\r\ncontent-le", Method::GET)
            .expect("valid so far")
            .is_none());
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/2 200\r\n\r\n",
            "garbage\r\n\r\n",
        ] {
            assert!(parse(bad, Method::GET).is_err(), "{bad:?}");
        }
        let same_twice = parse(
            "HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 3\r\n\r\n",
            Method::GET,
        )
        .expect("valid")
        .expect("complete");
        assert_eq!(same_twice.framing, Framing::Length(3));
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD));
        assert!(parse(&huge, Method::GET).is_err());
    }
}

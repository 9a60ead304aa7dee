//! Whether a shimgate answers on a listener (`GET /status` over plain
//! HTTP, within a second; on the capture listener, its refusal of a
//! request that is not a proxy's): `autostart status` and `launch` ask, since an
//! entry installed or a config written says nothing about a process
//! running.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// `GET /status` on `addr`, within a second: the version of the shimgate
/// that answered, or `None`.
pub fn version_at(addr: SocketAddr) -> Option<String> {
    let text = get_status(addr)?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    if head.split(' ').nth(1) != Some("200") {
        return None;
    }
    let doc: serde_json::Value = serde_json::from_str(body).ok()?;
    doc.get("version")
        .and_then(|v| v.as_str())
        .map(str::to_owned)
}

/// Whether shimgate's capture listener answers on `addr`: it refuses an
/// origin-form `GET /status` with its own error code.
pub fn capture_at(addr: SocketAddr) -> bool {
    get_status(addr).is_some_and(|t| t.starts_with("HTTP/1.") && t.contains("NOT_A_PROXY_REQUEST"))
}

/// The whole answer to `GET /status` on `addr`, within a second.
fn get_status(addr: SocketAddr) -> Option<String> {
    let wait = Duration::from_secs(1);
    let mut stream = TcpStream::connect_timeout(&addr, wait).ok()?;
    stream.set_read_timeout(Some(wait)).ok()?;
    stream.set_write_timeout(Some(wait)).ok()?;
    let host = SocketAddr::from(([127, 0, 0, 1], addr.port()));
    // HTTP/1.0: the body comes whole, ended by the close, never chunked.
    write!(stream, "GET /status HTTP/1.0\r\nHost: {host}\r\n\r\n").ok()?;
    let mut text = String::new();
    let _ = stream.take(4 << 20).read_to_string(&mut text);
    Some(text)
}

//! Fuzz target: qoder's body encoding round-trips and the COSY re-signer
//! never panics and, when it answers, signs by the published rule.
//!
//! Invariants, for any bytes:
//! - `decode_body(encode_body(x)) == x`, and `decode_body(x)` returns
//!   (`Ok` or `Err`) without panicking;
//! - the input after its first (flags) byte, split on NUL into an
//!   `Authorization` (bare, or with flag bit 0 wrapped as `Bearer
//!   COSY.<base64>.sig`), `Cosy-Key`, `Cosy-Date`, body, path, request id
//!   and one more header value (flag bits pick which headers are present),
//!   goes through `cosy::resign` without panicking; when it succeeds its
//!   `Authorization` verifies under the published rule, re-implemented
//!   here (`lowerhex(MD5(payloadB64 LF Cosy-Key LF date LF body LF
//!   signedPath))`), the payload carries the given `requestId` and every
//!   other payload key unchanged and in order, `Cosy-Date` is the given
//!   time, `Cosy-Bodyhash`/`Cosy-Bodylength` are right where (and only
//!   where) the client sent them, and `Cosy-Key` and every other header
//!   are byte-identical.
//!
//! Run (from the repository root; stable needs `-s none`, and
//! `cargo install cargo-fuzz --locked` if it is missing):
//!
//! ```text
//! cargo fuzz run -s none qoder_cosy fuzz/corpus/qoder_cosy fuzz/seeds/qoder_cosy \
//!     -- -dict=fuzz/dict/qoder_cosy.dict -max_total_time=60
//! ```
#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use md5::{Digest, Md5};
use serde_json::{Map, Value};
use shimgate_shim_qoder::codec::{decode_body, encode_body};
use shimgate_shim_qoder::cosy::resign;

const CHANGED: [&str; 4] = [
    "authorization",
    "cosy-date",
    "cosy-bodyhash",
    "cosy-bodylength",
];

fn md5_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The signed path, derived here without the crate's helper.
fn signed_path(path_and_query: &str) -> &str {
    let path = path_and_query.split(['?', '#']).next().unwrap();
    match path.strip_prefix("/algo") {
        Some("") => "/",
        Some(rest) if rest.starts_with('/') => rest,
        _ => path,
    }
}

/// The payload JSON object inside a `… COSY.<b64>.<sig>` value, and the
/// `<b64>` and `<sig>` parts.
fn token(authorization: &HeaderValue) -> (Map<String, Value>, String, String) {
    // `resign` reads the client's value trimmed, as a server would.
    let text = authorization.to_str().unwrap().trim();
    let (scheme, rest) = text.split_at(12);
    assert!(scheme[..7].eq_ignore_ascii_case("Bearer "), "{text}");
    assert_eq!(&scheme[7..], "COSY.", "{text}");
    let (b64, signature) = rest.split_once('.').unwrap();
    let json = STANDARD.decode(b64).unwrap();
    let map = serde_json::from_slice(&json).unwrap();
    (map, b64.to_owned(), signature.to_owned())
}

fn put(headers: &mut HeaderMap, name: &'static str, value: &[u8]) {
    if let Ok(value) = HeaderValue::from_bytes(value) {
        headers.append(name, value);
    }
}

fuzz_target!(|data: &[u8]| {
    assert_eq!(decode_body(&encode_body(data)).unwrap(), data);
    let _ = decode_body(data);

    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut fields = rest.split(|&b| b == 0);
    let mut next = || fields.next().unwrap_or_default();
    let (auth, key, date, body, path, id, other) =
        (next(), next(), next(), next(), next(), next(), next());
    let authorization = if flags & 1 != 0 {
        format!("Bearer COSY.{}.sig", STANDARD.encode(auth)).into_bytes()
    } else {
        auth.to_vec()
    };
    let mut headers = HeaderMap::new();
    headers.append("accept", HeaderValue::from_static("text/event-stream"));
    if flags & 2 == 0 {
        put(&mut headers, "authorization", &authorization);
    }
    put(&mut headers, "x-other", other);
    if flags & 4 == 0 {
        put(&mut headers, "cosy-key", key);
    }
    if flags & 8 == 0 {
        put(&mut headers, "cosy-date", date);
    }
    if flags & 16 != 0 {
        put(&mut headers, "cosy-bodyhash", other);
    }
    if flags & 32 != 0 {
        put(&mut headers, "cosy-bodylength", other);
    }
    if flags & 64 != 0 {
        put(&mut headers, "x-other", key);
    }
    let path = String::from_utf8_lossy(path);
    let id = String::from_utf8_lossy(id);
    let now = date
        .iter()
        .fold(0u64, |n, &b| n.wrapping_mul(31).wrapping_add(u64::from(b)));

    let Ok(out) = resign(&headers, body, &path, now, &id) else {
        return;
    };

    let (client_payload, _, _) = token(&headers["authorization"]);
    let (mut payload, b64, signature) = token(&out["authorization"]);
    let date_text = now.to_string();
    assert_eq!(out["cosy-date"].as_bytes(), date_text.as_bytes());
    let cosy_key = out["cosy-key"].as_bytes();
    assert_eq!(cosy_key, headers["cosy-key"].as_bytes());
    let mut message = Vec::new();
    for (i, field) in [
        b64.as_bytes(),
        cosy_key,
        date_text.as_bytes(),
        body,
        signed_path(&path).as_bytes(),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            message.push(b'\n');
        }
        message.extend_from_slice(field);
    }
    assert_eq!(signature, md5_hex(&message), "signature");

    assert_eq!(payload["requestId"], Value::String(id.into_owned()));
    let keys = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&payload), keys(&client_payload), "payload key order");
    payload.insert("requestId".into(), client_payload["requestId"].clone());
    assert_eq!(payload, client_payload, "payload");

    assert_eq!(
        out.get("cosy-bodyhash").map(HeaderValue::as_bytes),
        headers
            .contains_key("cosy-bodyhash")
            .then(|| md5_hex(body))
            .as_deref()
            .map(str::as_bytes)
    );
    assert_eq!(
        out.get("cosy-bodylength").map(HeaderValue::as_bytes),
        headers
            .contains_key("cosy-bodylength")
            .then(|| body.len().to_string())
            .as_deref()
            .map(str::as_bytes)
    );
    let names = |h: &HeaderMap| h.keys().map(|k| k.as_str().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(&out), names(&headers), "header names and order");
    for name in headers.keys() {
        if CHANGED.contains(&name.as_str()) {
            continue;
        }
        let values = |h: &HeaderMap| {
            h.get_all(name)
                .iter()
                .map(|v| v.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(values(&out), values(&headers), "{name}");
    }
});

//! qoder's server-side checks, written from the published rule
//! (the published COSY rule, `docs/clients.md`) independently of the code under test:
//! the `Encode=1` body encoding, the COSY signature a real client makes,
//! and [`verify`], the check a scripted qoder upstream runs on every
//! request. Shared by the qoder crate's tests and the end-to-end tests, so
//! it uses only crates, nothing of shimgate.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::HeaderMap;
use md5::{Digest, Md5};
use serde_json::Value;

/// What a request signed by the published COSY rule carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCosy {
    /// The payload's `requestId`.
    pub payload_request_id: String,
    /// `Cosy-Date`, unix seconds.
    pub date: u64,
}

/// qoder's answer to a signature it does not accept.
pub const SIGNATURE_INVALID: &str = "101 Signature invalid";

/// Checks one request as qoder would: `Authorization: Bearer
/// COSY.<payloadB64>.<sig>` with `sig = lowerhex(MD5(payloadB64 LF
/// Cosy-Key LF Cosy-Date LF body LF path))`, the path without its query
/// and without a leading `/algo`; `Cosy-Date` within `max_skew_s` of
/// `now_unix`; `Cosy-Bodyhash`/`Cosy-Bodylength`, when sent, matching the
/// body; a payload that is base64 JSON with a string `requestId`.
pub fn verify(
    headers: &HeaderMap,
    body: &[u8],
    path_and_query: &str,
    now_unix: u64,
    max_skew_s: u64,
) -> Result<VerifiedCosy, String> {
    let invalid = |why: &str| format!("{SIGNATURE_INVALID}: {why}");
    let text = |name: &str| -> Result<&str, String> {
        headers
            .get(name)
            .ok_or_else(|| invalid(&format!("no {name}")))?
            .to_str()
            .map_err(|_| invalid(&format!("{name} is not text")))
    };
    let token = text("authorization")?
        .strip_prefix("Bearer COSY.")
        .ok_or_else(|| invalid("not a COSY bearer token"))?;
    let (payload_b64, signature) = token
        .split_once('.')
        .ok_or_else(|| invalid("no signature in the token"))?;
    let key = headers
        .get("cosy-key")
        .ok_or_else(|| invalid("no cosy-key"))?
        .as_bytes();
    let date_text = text("cosy-date")?;
    let date: u64 = date_text
        .parse()
        .map_err(|_| invalid("Cosy-Date is not unix seconds"))?;
    let skew = now_unix.abs_diff(date);
    if skew > max_skew_s {
        return Err(invalid(&format!(
            "Cosy-Date {date} is {skew} s off the server clock (more than {max_skew_s} s)"
        )));
    }

    let path = path_and_query.split('?').next().unwrap_or_default();
    let path = match path.strip_prefix("/algo") {
        Some("") => "/",
        Some(rest) if rest.starts_with('/') => rest,
        _ => path,
    };
    let mut message = Vec::new();
    for (i, field) in [
        payload_b64.as_bytes(),
        key,
        date_text.as_bytes(),
        body,
        path.as_bytes(),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            message.push(b'\n');
        }
        message.extend_from_slice(field);
    }
    let expected: String = Md5::digest(&message)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if signature != expected {
        return Err(invalid("signature does not match"));
    }

    if let Some(hash) = headers.get("cosy-bodyhash") {
        let body_md5: String = Md5::digest(body)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if hash.as_bytes() != body_md5.as_bytes() {
            return Err(invalid("Cosy-Bodyhash does not match the body"));
        }
    }
    if let Some(length) = headers.get("cosy-bodylength") {
        if length.as_bytes() != body.len().to_string().as_bytes() {
            return Err(invalid("Cosy-Bodylength does not match the body"));
        }
    }

    let payload = STANDARD
        .decode(payload_b64)
        .map_err(|_| invalid("payload is not base64"))?;
    let payload: Value =
        serde_json::from_slice(&payload).map_err(|_| invalid("payload is not JSON"))?;
    let payload_request_id = payload
        .get("requestId")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("payload has no requestId"))?
        .to_owned();
    Ok(VerifiedCosy {
        payload_request_id,
        date,
    })
}

const STANDARD_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const QODER_ALPHABET: &[u8; 64] =
    b"_doRTgHZBKcGVjlvpC,@aFSx#DPuNJme&i*MzLOEn)sUrthbf%Y^w.(kIQyXqWA!";

/// `last k + middle + first k`, `k = len / 3` (its own inverse).
fn rotate(text: &[u8]) -> Vec<u8> {
    let k = text.len() / 3;
    [
        &text[text.len() - k..],
        &text[k..text.len() - k],
        &text[..k],
    ]
    .concat()
}

fn swap(text: &[u8], from: &[u8; 64], to: &[u8; 64], pad: (u8, u8)) -> Option<Vec<u8>> {
    text.iter()
        .map(|b| {
            if *b == pad.0 {
                return Some(pad.1);
            }
            from.iter().position(|f| f == b).map(|i| to[i])
        })
        .collect()
}

/// The `Encode=1` body of `plain`, as the qoder client writes it.
pub fn encode(plain: &[u8]) -> Vec<u8> {
    let b64 = STANDARD.encode(plain);
    swap(
        &rotate(b64.as_bytes()),
        STANDARD_ALPHABET,
        QODER_ALPHABET,
        (b'=', b'$'),
    )
    .unwrap()
}

/// The ask inside an `Encode=1` body, as qoder's server reads it.
pub fn decode(body: &[u8]) -> Option<Vec<u8>> {
    let b64 = swap(body, QODER_ALPHABET, STANDARD_ALPHABET, (b'$', b'='))?;
    STANDARD.decode(rotate(&b64)).ok()
}

fn md5_hex(data: &[u8]) -> String {
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The headers a real qoder client sends with `encoded_body` on
/// `path_and_query` at `date` (payload `requestId` = `request_id`): the
/// COSY `Authorization` and the `Cosy-*` set, signed by the published rule.
pub fn client_headers(
    user: &str,
    request_id: &str,
    encoded_body: &[u8],
    path_and_query: &str,
    date: u64,
) -> Vec<(String, String)> {
    let payload = format!(
        r#"{{"version":"v1","requestId":"{request_id}","info":"aW5mby1vZi17dXNlcn0tb3BhcXVl","cosyVersion":"0.2.1","ideVersion":""}}"#
    );
    let payload_b64 = STANDARD.encode(payload);
    let key = "Q29zeUtleS1vcGFxdWUtYnl0ZXM=";
    let path = path_and_query.split('?').next().unwrap_or_default();
    let signed = path.strip_prefix("/algo").unwrap_or(path);
    let mut message = Vec::new();
    for (i, field) in [
        payload_b64.as_bytes(),
        key.as_bytes(),
        date.to_string().as_bytes(),
        encoded_body,
        signed.as_bytes(),
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            message.push(b'\n');
        }
        message.extend_from_slice(field);
    }
    let signature = md5_hex(&message);
    [
        ("accept", "text/event-stream".to_string()),
        (
            "authorization",
            format!("Bearer COSY.{payload_b64}.{signature}"),
        ),
        ("cache-control", "no-cache".into()),
        ("content-type", "application/json".into()),
        ("cosy-business-product", "cli".into()),
        ("cosy-clienttype", "5".into()),
        ("cosy-date", date.to_string()),
        ("cosy-key", key.into()),
        (
            "cosy-machineid",
            "0f6f3c2e-5b2d-4b7a-9d1e-6a0b8c9d1e2f".into(),
        ),
        (
            "cosy-machinetoken",
            "0f6f3c2e-5b2d-4b7a-9d1e-6a0b8c9d1e2f".into(),
        ),
        ("cosy-user", user.into()),
        ("cosy-version", "0.2.1".into()),
        ("cosy-bodyhash", md5_hex(encoded_body)),
        ("cosy-bodylength", encoded_body.len().to_string()),
        ("login-version", "v2".into()),
        ("x-model-key", "qmodel_38max".into()),
        ("x-model-source", "system".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

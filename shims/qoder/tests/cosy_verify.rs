//! An independent check of `cosy::resign`: [`verify`] re-implements the
//! published COSY rule (wires.md §2.2) from scratch, calling nothing of the
//! crate's signer, so a slip shared by the signer and its unit tests still
//! shows here. It is written to become the scripted upstream's checker.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::{HeaderMap, HeaderValue};
use md5::{Digest, Md5};
use serde_json::{Map, Value};

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

use shimgate_shim_qoder::ask::fresh_uuid;
use shimgate_shim_qoder::codec::encode_body;
use shimgate_shim_qoder::cosy::resign;

const PATH: &str =
    "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&AgentId=agent_common&Encode=1";
const CLIENT_ID: &str = "11111111-1111-4111-8111-111111111111";
const PAYLOAD: &str = r#"{"version":"v1","requestId":"11111111-1111-4111-8111-111111111111","info":"aW5mbw==","cosyVersion":"0.2.1","ideVersion":""}"#;
const NOW: u64 = 1_764_400_000;
const SKEW: u64 = 300;

fn client_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    let auth = format!("Bearer COSY.{}.0123abcd", STANDARD.encode(PAYLOAD));
    for (name, value) in [
        ("accept", "text/event-stream"),
        ("authorization", auth.as_str()),
        ("cosy-date", "1764300000"),
        ("cosy-key", "Q29zeUtleQ=="),
        ("cosy-user", "u-42"),
        ("cosy-bodyhash", "stale"),
        ("cosy-bodylength", "1"),
    ] {
        h.append(name, HeaderValue::from_str(value).unwrap());
    }
    h
}

fn body() -> Vec<u8> {
    encode_body(br#"{"request_id":"r","messages":[{"role":"user","content":"hi"}]}"#)
}

fn payload_map(headers: &HeaderMap) -> Map<String, Value> {
    let token = headers["authorization"]
        .to_str()
        .unwrap()
        .strip_prefix("Bearer COSY.")
        .unwrap();
    let b64 = token.split_once('.').unwrap().0;
    serde_json::from_slice(&STANDARD.decode(b64).unwrap()).unwrap()
}

#[test]
fn the_verifier_accepts_a_hand_computed_request() {
    // The vector of cosy/tests.rs, computed with Python's hashlib: it shows
    // the verifier, not only the signer, follows the published rule.
    let mut h = HeaderMap::new();
    h.insert("authorization", HeaderValue::from_static("Bearer COSY.eyJ2ZXJzaW9uIjoidjEiLCJyZXF1ZXN0SWQiOiIyMjIyMjIyMi0yMjIyLTQyMjItODIyMi0yMjIyMjIyMjIyMjIiLCJpbmZvIjoiYVc1bWJ3PT0iLCJjb3N5VmVyc2lvbiI6IjAuMi4xIiwiaWRlVmVyc2lvbiI6IiJ9.9b08d6090965289c034163555f2ee23e"));
    h.insert("cosy-key", HeaderValue::from_static("Q29zeUtleQ=="));
    h.insert("cosy-date", HeaderValue::from_static("1764400000"));
    h.insert(
        "cosy-bodyhash",
        HeaderValue::from_static("1041b43865b678814ae01d6c5f1c90c2"),
    );
    h.insert("cosy-bodylength", HeaderValue::from_static("12"));
    assert_eq!(
        verify(&h, b"ep$$BMn%mYKi", PATH, NOW, SKEW).unwrap(),
        VerifiedCosy {
            payload_request_id: "22222222-2222-4222-8222-222222222222".into(),
            date: NOW,
        }
    );
}

#[test]
fn resigned_request_verifies_with_the_fresh_id_and_date() {
    let id = fresh_uuid();
    let out = resign(&client_headers(), &body(), PATH, NOW, &id).unwrap();
    assert_eq!(
        verify(&out, &body(), PATH, NOW + 10, SKEW).unwrap(),
        VerifiedCosy {
            payload_request_id: id,
            date: NOW,
        }
    );
}

#[test]
fn the_client_request_itself_does_not_verify() {
    // Its signature is a placeholder and its date is a day old.
    let err = verify(&client_headers(), &body(), PATH, NOW, SKEW).unwrap_err();
    assert!(err.starts_with(SIGNATURE_INVALID), "{err}");
}

#[test]
fn only_the_payload_request_id_changes() {
    let client = payload_map(&client_headers());
    let out = resign(&client_headers(), &body(), PATH, NOW, &fresh_uuid()).unwrap();
    let mut resigned = payload_map(&out);
    assert_eq!(client["requestId"], CLIENT_ID);
    assert_ne!(resigned["requestId"], client["requestId"]);
    let keys = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&resigned), keys(&client), "key order");
    resigned.insert("requestId".into(), Value::String(CLIENT_ID.into()));
    assert_eq!(resigned, client);
    assert_eq!(out["cosy-key"], client_headers()["cosy-key"]);
    assert_eq!(out["cosy-user"], client_headers()["cosy-user"]);
}

#[test]
fn tampering_fails_as_a_bad_signature() {
    let good = body();
    let out = resign(&client_headers(), &good, PATH, NOW, &fresh_uuid()).unwrap();

    let mut body = good.clone();
    body[3] ^= 1;
    let err = verify(&out, &body, PATH, NOW, SKEW).unwrap_err();
    assert!(err.starts_with(SIGNATURE_INVALID), "{err}");

    let other_path = "/algo/api/v2/service/pro/sse/other?Encode=1";
    assert!(verify(&out, &good, other_path, NOW, SKEW).is_err());

    let mut other_key = out.clone();
    other_key.insert("cosy-key", HeaderValue::from_static("forged"));
    assert!(verify(&other_key, &good, PATH, NOW, SKEW).is_err());

    let mut other_date = out.clone();
    other_date.insert("cosy-date", HeaderValue::from(NOW + 1));
    assert!(verify(&other_date, &good, PATH, NOW, SKEW).is_err());

    let mut other_hash = out.clone();
    other_hash.insert("cosy-bodyhash", HeaderValue::from_static("00"));
    let err = verify(&other_hash, &good, PATH, NOW, SKEW).unwrap_err();
    assert!(err.contains("Cosy-Bodyhash"), "{err}");

    // The query is not signed, so a different one still verifies.
    let bare = "/algo/api/v2/service/pro/sse/agent_chat_generation";
    assert!(verify(&out, &good, bare, NOW, SKEW).is_ok());
}

#[test]
fn a_date_beyond_the_skew_fails_naming_the_skew() {
    let out = resign(&client_headers(), &body(), PATH, NOW, &fresh_uuid()).unwrap();
    assert!(verify(&out, &body(), PATH, NOW + SKEW, SKEW).is_ok());
    assert!(verify(&out, &body(), PATH, NOW - SKEW, SKEW).is_ok());
    let err = verify(&out, &body(), PATH, NOW + SKEW + 1, SKEW).unwrap_err();
    assert!(err.starts_with(SIGNATURE_INVALID), "{err}");
    assert!(err.contains("301 s off"), "{err}");
    let err = verify(&out, &body(), PATH, NOW - 1_000, SKEW).unwrap_err();
    assert!(err.contains("1000 s off"), "{err}");
}

#[test]
fn every_attempt_verifies_with_its_own_id() {
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let out = resign(&client_headers(), &body(), PATH, NOW + i, &fresh_uuid()).unwrap();
            verify(&out, &body(), PATH, NOW, SKEW)
                .unwrap()
                .payload_request_id
        })
        .collect();
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
}

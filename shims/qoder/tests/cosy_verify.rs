//! An independent check of `cosy::resign`: `cosy_check::verify`
//! re-implements the published COSY rule from scratch,
//! calling nothing of the crate's signer, so a slip shared by the signer and
//! its unit tests still shows here. The same checker runs in the scripted
//! qoder upstream of the end-to-end tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../../tests/support/cosy_check.rs"]
mod cosy_check;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use cosy_check::{verify, VerifiedCosy, SIGNATURE_INVALID};
use http::{HeaderMap, HeaderValue};

use serde_json::{Map, Value};

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

#[test]
fn the_test_encoding_and_client_signature_agree_with_the_published_rule() {
    let ask = br#"{"request_id":"r-1","messages":[]}"#;
    let encoded = cosy_check::encode(ask);
    assert_eq!(encoded, encode_body(ask), "one body encoding");
    assert_eq!(cosy_check::decode(&encoded).unwrap(), ask);
    let headers: HeaderMap = cosy_check::client_headers("u-1", "req-1", &encoded, PATH, NOW)
        .into_iter()
        .map(|(k, v)| {
            (
                k.parse::<http::HeaderName>().unwrap(),
                v.parse::<HeaderValue>().unwrap(),
            )
        })
        .collect();
    let ok = verify(&headers, &encoded, PATH, NOW, SKEW).unwrap();
    assert_eq!(ok.payload_request_id, "req-1");
    let resigned = resign(&headers, &encoded, PATH, NOW + 5, &fresh_uuid()).unwrap();
    let again = verify(&resigned, &encoded, PATH, NOW + 5, SKEW).unwrap();
    assert_ne!(again.payload_request_id, "req-1");
}

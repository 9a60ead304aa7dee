//! Re-signing by the published COSY rule: known vectors, what changes and
//! what must not, and malformed headers.

use super::*;

const CLIENT_ID: &str = "11111111-1111-4111-8111-111111111111";
const NEW_ID: &str = "22222222-2222-4222-8222-222222222222";
const PAYLOAD: &str = r#"{"version":"v1","requestId":"11111111-1111-4111-8111-111111111111","info":"aW5mbw==","cosyVersion":"0.2.1","ideVersion":""}"#;
const KEY: &str = "Q29zeUtleQ==";
/// `encode_body(br#"{"a":1}"#)`.
const BODY: &[u8] = b"ep$$BMn%mYKi";
const PATH: &str =
    "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&AgentId=agent_common&Encode=1";
const NOW: u64 = 1_764_400_000;

fn bearer(payload_json: &str) -> String {
    format!("Bearer COSY.{}.0123abcd", STANDARD.encode(payload_json))
}

/// A client's header set, in the order the LeemanCheung doc lists them.
fn client_headers(payload_json: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let mut add = |name: &'static str, value: &str| {
        h.append(name, HeaderValue::from_str(value).unwrap());
    };
    add("accept", "text/event-stream");
    add("authorization", &bearer(payload_json));
    add("cache-control", "no-cache");
    add("content-type", "application/json");
    add("cosy-clienttype", "5");
    add("cosy-date", "1764300000");
    add("cosy-key", KEY);
    add("cosy-machineid", "6b1f3c2e-0000-4000-8000-00000000abcd");
    add("cosy-user", "u-42");
    add("cosy-version", "0.2.1");
    add("x-model-key", "qmodel");
    add("content-length", "999");
    h
}

fn with_body_headers(mut h: HeaderMap) -> HeaderMap {
    h.append("cosy-bodyhash", HeaderValue::from_static("stale"));
    h.append("cosy-bodylength", HeaderValue::from_static("1"));
    h
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> &'a str {
    h.get(name).unwrap().to_str().unwrap()
}

/// The payload JSON inside an `Authorization` value.
fn payload_of(h: &HeaderMap) -> String {
    let token = header(h, "authorization")
        .strip_prefix("Bearer COSY.")
        .unwrap();
    let (payload, _) = token.split_once('.').unwrap();
    String::from_utf8(STANDARD.decode(payload).unwrap()).unwrap()
}

#[test]
fn sign_matches_a_hand_computed_md5() {
    // python3 -c 'import hashlib;print(hashlib.md5(b"p\nk\n1\nb\n/s").hexdigest())'
    assert_eq!(
        sign("p", b"k", "1", b"b", "/s"),
        "5ae70e02bb38a3619755fdd19e323ae3"
    );
}

#[test]
fn resign_matches_a_hand_computed_vector() {
    // Computed with Python's base64 and hashlib over the published rule.
    let out = resign(
        &with_body_headers(client_headers(PAYLOAD)),
        BODY,
        PATH,
        NOW,
        NEW_ID,
    )
    .unwrap();
    assert_eq!(
        header(&out, "authorization"),
        "Bearer COSY.eyJ2ZXJzaW9uIjoidjEiLCJyZXF1ZXN0SWQiOiIyMjIyMjIyMi0yMjIyLTQyMjItODIyMi0yMjIyMjIyMjIyMjIiLCJpbmZvIjoiYVc1bWJ3PT0iLCJjb3N5VmVyc2lvbiI6IjAuMi4xIiwiaWRlVmVyc2lvbiI6IiJ9.9b08d6090965289c034163555f2ee23e"
    );
    assert_eq!(header(&out, "cosy-date"), "1764400000");
    assert_eq!(
        header(&out, "cosy-bodyhash"),
        "1041b43865b678814ae01d6c5f1c90c2"
    );
    assert_eq!(header(&out, "cosy-bodylength"), "12");
}

#[test]
fn client_payload_vector_is_what_the_test_header_carries() {
    assert_eq!(
        bearer(PAYLOAD),
        "Bearer COSY.eyJ2ZXJzaW9uIjoidjEiLCJyZXF1ZXN0SWQiOiIxMTExMTExMS0xMTExLTQxMTEtODExMS0xMTExMTExMTExMTEiLCJpbmZvIjoiYVc1bWJ3PT0iLCJjb3N5VmVyc2lvbiI6IjAuMi4xIiwiaWRlVmVyc2lvbiI6IiJ9.0123abcd"
    );
    assert_eq!(crate::codec::encode_body(br#"{"a":1}"#), BODY);
}

#[test]
fn resign_output_verifies_under_the_published_rule() {
    let out = resign(&client_headers(PAYLOAD), BODY, PATH, NOW, NEW_ID).unwrap();
    let token = header(&out, "authorization")
        .strip_prefix("Bearer COSY.")
        .unwrap();
    let (payload, signature) = token.split_once('.').unwrap();
    let expected = sign(
        payload,
        KEY.as_bytes(),
        "1764400000",
        BODY,
        "/api/v2/service/pro/sse/agent_chat_generation",
    );
    assert_eq!(signature, expected);
}

#[test]
fn only_the_payload_request_id_changes() {
    let out = resign(&client_headers(PAYLOAD), BODY, PATH, NOW, NEW_ID).unwrap();
    assert_eq!(payload_of(&out), PAYLOAD.replace(CLIENT_ID, NEW_ID));
    let keys: Vec<String> =
        serde_json::from_str::<serde_json::Map<String, Value>>(&payload_of(&out))
            .unwrap()
            .keys()
            .cloned()
            .collect();
    assert_eq!(
        keys,
        ["version", "requestId", "info", "cosyVersion", "ideVersion"]
    );
}

#[test]
fn payload_spacing_escapes_and_unknown_keys_survive_byte_for_byte() {
    let client = "{ \"version\" : \"v1\",\n \"extra\":{\"requestId\":\"nested\",\"n\":[1,{}]},\n \"requestId\" :\t\"old\" , \"info\":\"a\\/b+\\u00e9=\", \"cosyVersion\":\"0.1\", \"ideVersion\":\"\" }";
    let out = resign(&client_headers(client), BODY, PATH, NOW, NEW_ID).unwrap();
    assert_eq!(
        payload_of(&out),
        client.replace("\"old\"", &format!("\"{NEW_ID}\""))
    );
}

#[test]
fn a_request_id_needing_escapes_keeps_the_payload_valid_json() {
    let odd = "a\"b\\c\n";
    let out = resign(&client_headers(PAYLOAD), BODY, PATH, NOW, odd).unwrap();
    let payload: Value = serde_json::from_str(&payload_of(&out)).unwrap();
    assert_eq!(payload["requestId"], odd);
    assert_eq!(payload["info"], "aW5mbw==");
}

#[test]
fn body_headers_are_rewritten_only_when_the_client_sent_them() {
    let out = resign(&client_headers(PAYLOAD), BODY, PATH, NOW, NEW_ID).unwrap();
    assert!(!out.contains_key("cosy-bodyhash"));
    assert!(!out.contains_key("cosy-bodylength"));

    let mut only_length = client_headers(PAYLOAD);
    only_length.append("cosy-bodylength", HeaderValue::from_static("3"));
    let out = resign(&only_length, b"", PATH, NOW, NEW_ID).unwrap();
    assert!(!out.contains_key("cosy-bodyhash"));
    assert_eq!(header(&out, "cosy-bodylength"), "0");

    let mut only_hash = client_headers(PAYLOAD);
    only_hash.append("cosy-bodyhash", HeaderValue::from_static("x"));
    let out = resign(&only_hash, b"", PATH, NOW, NEW_ID).unwrap();
    // MD5 of no bytes.
    assert_eq!(
        header(&out, "cosy-bodyhash"),
        "d41d8cd98f00b204e9800998ecf8427e"
    );
    assert!(!out.contains_key("cosy-bodylength"));
}

#[test]
fn cosy_key_and_every_other_header_stay_byte_identical_and_in_order() {
    let mut client = with_body_headers(client_headers(PAYLOAD));
    // Opaque bytes a client could send (obs-text), and a repeated header.
    client.insert("cosy-key", HeaderValue::from_bytes(b"k\xe9y/+=").unwrap());
    client.append("x-multi", HeaderValue::from_static("one"));
    client.append("x-multi", HeaderValue::from_static("two"));
    let out = resign(&client, BODY, PATH, NOW, NEW_ID).unwrap();

    let names = |h: &HeaderMap| h.keys().map(|k| k.as_str().to_owned()).collect::<Vec<_>>();
    assert_eq!(names(&out), names(&client));
    let changed = [
        "authorization",
        "cosy-date",
        "cosy-bodyhash",
        "cosy-bodylength",
    ];
    for name in client.keys() {
        if changed.contains(&name.as_str()) {
            continue;
        }
        let before: Vec<&[u8]> = client.get_all(name).iter().map(|v| v.as_bytes()).collect();
        let after: Vec<&[u8]> = out.get_all(name).iter().map(|v| v.as_bytes()).collect();
        assert_eq!(before, after, "{name}");
    }
    assert_eq!(out.get("cosy-key").unwrap().as_bytes(), b"k\xe9y/+=");
    // Content-Length is the runtime's to drop, not the codec's to fix.
    assert_eq!(header(&out, "content-length"), "999");
}

#[test]
fn the_client_scheme_spelling_is_kept() {
    let mut client = client_headers(PAYLOAD);
    let lower = bearer(PAYLOAD).replacen("Bearer", "bearer", 1);
    client.insert("authorization", HeaderValue::from_str(&lower).unwrap());
    let out = resign(&client, BODY, PATH, NOW, NEW_ID).unwrap();
    assert!(header(&out, "authorization").starts_with("bearer COSY."));
}

#[test]
fn each_attempt_gets_its_own_id_date_and_signature() {
    let request = CosyRequest::parse(&client_headers(PAYLOAD)).unwrap();
    assert_eq!(request.request_id(), CLIENT_ID);
    assert_eq!(request.payload(), PAYLOAD.as_bytes());
    let first = request.headers_for(BODY, PATH, NOW, NEW_ID).unwrap();
    let second = request
        .headers_for(BODY, PATH, NOW + 1, "33333333-3333-4333-8333-333333333333")
        .unwrap();
    assert_ne!(first.get("authorization"), second.get("authorization"));
    assert_eq!(header(&second, "cosy-date"), "1764400001");
    // The output is itself a COSY request: it can be re-signed again.
    let again = CosyRequest::parse(&second).unwrap();
    assert_eq!(again.request_id(), "33333333-3333-4333-8333-333333333333");
}

#[test]
fn the_signature_covers_path_body_key_and_date() {
    let base = resign(&client_headers(PAYLOAD), BODY, PATH, NOW, NEW_ID).unwrap();
    let auth = |h: &HeaderMap| header(h, "authorization").to_owned();
    let other_body = resign(&client_headers(PAYLOAD), b"x", PATH, NOW, NEW_ID).unwrap();
    let other_path = resign(
        &client_headers(PAYLOAD),
        BODY,
        "/algo/api/v1/x",
        NOW,
        NEW_ID,
    )
    .unwrap();
    let other_date = resign(&client_headers(PAYLOAD), BODY, PATH, NOW + 1, NEW_ID).unwrap();
    let mut other_key = client_headers(PAYLOAD);
    other_key.insert("cosy-key", HeaderValue::from_static("other"));
    let other_key = resign(&other_key, BODY, PATH, NOW, NEW_ID).unwrap();
    for other in [other_body, other_path, other_date, other_key] {
        assert_ne!(auth(&other), auth(&base));
    }
    // The query is not signed.
    let no_query = resign(
        &client_headers(PAYLOAD),
        BODY,
        "/algo/api/v2/service/pro/sse/agent_chat_generation",
        NOW,
        NEW_ID,
    )
    .unwrap();
    assert_eq!(auth(&no_query), auth(&base));
}

#[test]
fn signed_path_drops_the_query_and_the_algo_segment() {
    assert_eq!(
        signed_path(PATH),
        "/api/v2/service/pro/sse/agent_chat_generation"
    );
    assert_eq!(
        signed_path("/api/v2/service/pro/sse/agent_chat_generation"),
        "/api/v2/service/pro/sse/agent_chat_generation"
    );
    assert_eq!(signed_path("/algo/api/v1/x#frag"), "/api/v1/x");
    assert_eq!(signed_path("/algo"), "/");
    assert_eq!(signed_path("/algo?Encode=1"), "/");
    assert_eq!(signed_path("/algorithm/x"), "/algorithm/x");
    assert_eq!(signed_path("/x/algo/y?q"), "/x/algo/y");
    assert_eq!(signed_path(""), "");
    assert_eq!(signed_path("?a=b"), "");
}

#[test]
fn is_encoded_needs_the_encode_parameter_set_to_one() {
    assert!(is_encoded(PATH));
    assert!(is_encoded("/p?Encode=1"));
    assert!(is_encoded("/p?Encode=1#x"));
    assert!(!is_encoded("/p?Encode=0"));
    assert!(!is_encoded("/p?Encode=10"));
    assert!(!is_encoded("/p?Encode"));
    assert!(!is_encoded("/p?encode=1"));
    assert!(!is_encoded("/p?XEncode=1"));
    assert!(!is_encoded("/p"));
    assert!(!is_encoded("/p/Encode=1"));
    assert!(!is_encoded("/p#?Encode=1"));
    // The first Encode decides.
    assert!(!is_encoded("/p?Encode=0&Encode=1"));
    assert!(is_encoded("/p?a=b&Encode=1&Encode=0"));
}

#[test]
fn has_cosy_headers_needs_a_cosy_bearer_and_a_key() {
    assert!(has_cosy_headers(&client_headers(PAYLOAD)));
    let mut no_key = client_headers(PAYLOAD);
    no_key.remove("cosy-key");
    assert!(!has_cosy_headers(&no_key));
    let mut plain = client_headers(PAYLOAD);
    plain.insert("authorization", HeaderValue::from_static("Bearer sk-1"));
    assert!(!has_cosy_headers(&plain));
    let mut none = client_headers(PAYLOAD);
    none.remove("authorization");
    assert!(!has_cosy_headers(&none));
    assert!(!has_cosy_headers(&HeaderMap::new()));
}

#[test]
fn malformed_headers_give_the_matching_error() {
    let with_auth = |value: &[u8]| {
        let mut h = client_headers(PAYLOAD);
        h.insert("authorization", HeaderValue::from_bytes(value).unwrap());
        CosyRequest::parse(&h).unwrap_err()
    };
    let b64 = |json: &str| format!("Bearer COSY.{}.sig", STANDARD.encode(json));
    assert_eq!(with_auth(b"Bearer sk-1"), CosyError::NotCosyBearer);
    assert_eq!(with_auth(b"COSY.abc.def"), CosyError::NotCosyBearer);
    assert_eq!(with_auth(b"Basic COSY.abc.def"), CosyError::NotCosyBearer);
    assert_eq!(with_auth(b"Bearer COSY.abc"), CosyError::NotCosyBearer);
    assert_eq!(with_auth(b"Bearer cosy.abc.d"), CosyError::NotCosyBearer);
    assert_eq!(with_auth(b"Bearer COSY"), CosyError::NotCosyBearer);
    assert_eq!(with_auth(b"Bearer \xe9COSY.a.b"), CosyError::NotCosyBearer);
    assert!(matches!(
        with_auth(b"Bearer COSY.!!!.sig"),
        CosyError::PayloadNotBase64(_)
    ));
    // Standard alphabet, padded: URL-safe or unpadded base64 is refused.
    assert!(matches!(
        with_auth(b"Bearer COSY.e30.sig"),
        CosyError::PayloadNotBase64(_)
    ));
    for not_object in ["hello", "[1]", "\"requestId\"", "", "{\"requestId\":\"a\""] {
        assert!(
            matches!(
                with_auth(b64(not_object).as_bytes()),
                CosyError::PayloadNotJson(_)
            ),
            "{not_object:?}"
        );
    }
    for no_id in [
        "{}",
        "{\"requestid\":\"a\"}",
        "{\"requestId\":7}",
        "{\"requestId\":null}",
        "{\"x\":{\"requestId\":\"nested\"}}",
        "{\"request\\u0049d\":\"escaped\"}",
        "{\"requestId\":1,\"requestId\":\"a\"}",
    ] {
        assert_eq!(
            with_auth(b64(no_id).as_bytes()),
            CosyError::NoRequestId,
            "{no_id:?}"
        );
    }
    assert!(matches!(
        with_auth(b64("{\"requestId\":\"a\",\"requestId\":\"b\"}").as_bytes()),
        CosyError::PayloadNotJson(_)
    ));

    let without = |name: &str| {
        let mut h = client_headers(PAYLOAD);
        h.remove(name);
        CosyRequest::parse(&h).unwrap_err()
    };
    assert_eq!(without("authorization"), CosyError::MissingAuthorization);
    assert_eq!(without("cosy-key"), CosyError::MissingCosyKey);
    assert_eq!(without("cosy-date"), CosyError::MissingCosyDate);
    assert_eq!(
        resign(&HeaderMap::new(), BODY, PATH, NOW, NEW_ID).unwrap_err(),
        CosyError::MissingAuthorization
    );
}

#[test]
fn errors_name_what_is_wrong() {
    assert_eq!(CosyError::MissingCosyKey.to_string(), "no Cosy-Key header");
    assert_eq!(
        CosyError::MissingCosyDate.to_string(),
        "no Cosy-Date header"
    );
    assert!(CosyError::NotCosyBearer
        .to_string()
        .contains("Bearer COSY."));
    assert!(CosyError::NoRequestId.to_string().contains("requestId"));
    assert!(CosyError::PayloadNotBase64("bad".into())
        .to_string()
        .ends_with(": bad"));
}

#[test]
fn arbitrary_header_values_never_panic_and_successes_verify() {
    let mut rng = fastrand::Rng::with_seed(5);
    let pieces: [&[u8]; 8] = [
        b"Bearer COSY.",
        b"{\"requestId\":\"",
        b"\"}",
        b".",
        b"\\",
        b"\xe9",
        b"=",
        b"{\"version\":\"v1\",\"requestId\":\"r\",\"info\":\"i\"}",
    ];
    let mut ok = 0;
    for _ in 0..5_000 {
        let mut raw = Vec::new();
        for _ in 0..rng.usize(0..6) {
            match rng.u8(0..3) {
                0 => raw.extend_from_slice(pieces[rng.usize(..pieces.len())]),
                1 => raw.push(rng.u8(..)),
                _ => raw.extend_from_slice(
                    STANDARD
                        .encode(pieces[rng.usize(..pieces.len())])
                        .as_bytes(),
                ),
            }
        }
        let payload: Vec<u8> = (0..rng.usize(0..40)).map(|_| rng.u8(..)).collect();
        let authorization = if rng.bool() {
            raw
        } else {
            let json = if rng.bool() {
                pieces[7].to_vec()
            } else {
                payload.clone()
            };
            format!("Bearer COSY.{}.s", STANDARD.encode(json)).into_bytes()
        };
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&authorization) {
            h.insert("authorization", v);
        }
        if let Ok(v) = HeaderValue::from_bytes(&payload) {
            h.insert("cosy-key", v.clone());
            h.insert("cosy-date", v);
        }
        let path = String::from_utf8_lossy(&payload).into_owned();
        if let Ok(out) = resign(&h, &payload, &path, rng.u64(..), &path) {
            ok += 1;
            let token = header(&out, "authorization")
                .strip_prefix("Bearer COSY.")
                .unwrap();
            let (b64, signature) = token.split_once('.').unwrap();
            let date = header(&out, "cosy-date");
            let key = out.get("cosy-key").unwrap().as_bytes();
            assert_eq!(
                signature,
                sign(b64, key, date, &payload, signed_path(&path))
            );
            assert_eq!(out.get("cosy-key"), h.get("cosy-key"));
        }
    }
    assert!(ok > 0, "some inputs re-sign");
}

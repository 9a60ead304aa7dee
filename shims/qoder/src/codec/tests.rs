//! The body encoding, the test signature, and the Python test codec.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::*;

#[test]
fn custom_alphabet_is_a_permutation_without_the_pad() {
    let mut sorted = CUSTOM_ALPHABET.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), 64);
    assert!(!CUSTOM_ALPHABET.contains(&CUSTOM_PAD));
}

#[test]
fn encode_then_decode_is_identity_for_every_length() {
    let text = "{\"messages\":[{\"role\":\"user\",\"content\":\"héllo 😀\"}]}".repeat(3);
    for len in 0..text.len() {
        let plain = &text.as_bytes()[..len];
        let encoded = encode_body(plain);
        assert!(encoded
            .iter()
            .all(|b| CUSTOM_ALPHABET.contains(b) || *b == CUSTOM_PAD));
        assert_eq!(decode_body(&encoded).unwrap(), plain, "length {len}");
    }
}

#[test]
fn encoding_matches_the_published_steps() {
    // "hello": base64 aGVsbG8= ; k = 2 ; rotated "8=" + "bG" + "sb" .. see below.
    let std = "aGVsbG8=";
    let k = std.len() / 3;
    let rotated = format!(
        "{}{}{}",
        &std[std.len() - k..],
        &std[k..std.len() - k],
        &std[..k]
    );
    let expected: String = rotated
        .bytes()
        .map(|b| match b {
            b'=' => '$',
            _ => {
                char::from(CUSTOM_ALPHABET[STANDARD_ALPHABET.iter().position(|s| *s == b).unwrap()])
            }
        })
        .collect();
    assert_eq!(String::from_utf8(encode_body(b"hello")).unwrap(), expected);
}

#[test]
fn decode_refuses_bytes_outside_the_alphabet() {
    assert_eq!(
        decode_body(b"abc=").unwrap_err(),
        CodecError::Alphabet { byte: b'=', at: 3 }
    );
    assert!(matches!(decode_body(b"_d"), Err(CodecError::Base64(_))));
}

#[test]
fn test_signature_round_trips_and_detects_tampering() {
    let secret = b"s3";
    let body = encode_body(b"{\"a\":1}");
    let path = "/algo/api/v2/service/pro/sse/agent_chat_generation?Encode=1";
    let auth = test_authorization(secret, "rid-1", "1764400000", &body, path);
    let checked = verify_test_signature(secret, &auth, "1764400000", &body, path).unwrap();
    assert_eq!(
        checked,
        TestSignature {
            request_id: "rid-1".into(),
            unix_seconds: 1_764_400_000
        }
    );
    let wrong = |r: Result<TestSignature, CodecError>| r.unwrap_err();
    assert_eq!(
        wrong(verify_test_signature(
            b"other",
            &auth,
            "1764400000",
            &body,
            path
        )),
        CodecError::SignatureMismatch
    );
    assert_eq!(
        wrong(verify_test_signature(
            secret,
            &auth,
            "1764400001",
            &body,
            path
        )),
        CodecError::SignatureMismatch
    );
    assert_eq!(
        wrong(verify_test_signature(
            secret,
            &auth,
            "1764400000",
            b"x",
            path
        )),
        CodecError::SignatureMismatch
    );
    assert_eq!(
        wrong(verify_test_signature(
            secret,
            "Bearer sk-1",
            "1",
            &body,
            path
        )),
        CodecError::NotCosyToken
    );
    assert_eq!(
        wrong(verify_test_signature(
            secret,
            &auth,
            "yesterday",
            &body,
            path
        )),
        CodecError::BadDate
    );
}

fn script_path() -> String {
    format!(
        "{}/../../tests/support/qoder_codec.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Runs the test codec on `lines`, one reply per line.
fn run_script(lines: &[Value], secret: Option<&str>) -> Vec<Value> {
    let mut command = Command::new("python3");
    command
        .arg(script_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    match secret {
        Some(s) => command.env(TEST_SECRET_ENV, s),
        None => command.env_remove(TEST_SECRET_ENV),
    };
    let mut child = command.spawn().expect("python3 runs the test codec");
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
#[cfg_attr(
    windows,
    ignore = "runs python3, a Unix tool: built for Windows, these run under Wine, which cannot start it"
)]
fn python_test_codec_output_decodes_and_verifies() {
    let ask = json!({"request_id": "r-1", "model_config": {"key": "qmodel"}, "messages": [{"role": "user", "content": "héllo \"quoted\" 😀"}]});
    let path =
        "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&Encode=1";
    let request = json!({"ask": ask, "route": {"name": "r1", "url": "http://127.0.0.1:9/base/"}, "path": path});
    let replies = run_script(&[request.clone(), request], None);
    assert_eq!(replies.len(), 2);
    let mut request_ids = Vec::new();
    for reply in &replies {
        assert_eq!(reply["url"], format!("http://127.0.0.1:9/base{path}"));
        let headers = &reply["headers"];
        assert_eq!(headers["X-Model-Key"], "qmodel");
        let body = STANDARD.decode(reply["body"].as_str().unwrap()).unwrap();
        let plain = decode_body(&body).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&plain).unwrap(), ask);
        let checked = verify_test_signature(
            DEFAULT_TEST_SECRET.as_bytes(),
            headers["Authorization"].as_str().unwrap(),
            headers["Cosy-Date"].as_str().unwrap(),
            &body,
            path,
        )
        .unwrap();
        request_ids.push(checked.request_id);
    }
    assert_ne!(request_ids[0], request_ids[1], "each call signs afresh");
}

#[test]
#[cfg_attr(
    windows,
    ignore = "runs python3, a Unix tool: built for Windows, these run under Wine, which cannot start it"
)]
fn python_test_codec_uses_the_secret_from_the_environment() {
    let request =
        json!({"ask": {"messages": []}, "route": {"name": "r", "url": "http://h"}, "path": "/p"});
    let reply = &run_script(&[request], Some("custom-key"))[0];
    let body = STANDARD.decode(reply["body"].as_str().unwrap()).unwrap();
    let headers = &reply["headers"];
    let check = |secret: &[u8]| {
        verify_test_signature(
            secret,
            headers["Authorization"].as_str().unwrap(),
            headers["Cosy-Date"].as_str().unwrap(),
            &body,
            "/p",
        )
    };
    assert!(check(b"custom-key").is_ok());
    assert_eq!(
        check(DEFAULT_TEST_SECRET.as_bytes()).unwrap_err(),
        CodecError::SignatureMismatch
    );
}

#[test]
#[cfg_attr(
    windows,
    ignore = "runs python3, a Unix tool: built for Windows, these run under Wine, which cannot start it"
)]
fn python_test_codec_answers_bad_lines_with_an_error_and_keeps_going() {
    let replies = run_script(
        &[
            json!("not an object"),
            json!({"ask": {}, "route": {}}),
            json!({"ask": {}, "route": {"url": "http://h"}}),
        ],
        None,
    );
    assert!(replies[0]["error"].is_string());
    assert!(replies[1]["error"].as_str().unwrap().contains("route"));
    assert!(replies[2]["url"]
        .as_str()
        .unwrap()
        .starts_with("http://h/algo/"));
}

#[test]
fn test_signature_matches_known_hmac_sha256_vectors() {
    // python3: hmac.new(key, msg, hashlib.sha256).hexdigest()
    let path = "/algo/api/v2/service/pro/sse/agent_chat_generation?Encode=1";
    assert_eq!(
        sign_test(b"s3", "1764400000", b"ep$$BMn%mYKi", path),
        "0891390439ff7cc60dbe050d51eba24928311730732dcee8f51b85ca84e25dce"
    );
    // A key longer than a block is hashed first (RFC 2104).
    assert_eq!(
        sign_test(&[0xaa; 131], "1", b"body", "/p"),
        "75a8f0a0506424fac06baf166d3b6318afc161cd94358b55a647029d21a4460b"
    );
}

//! The public qoder body encoding (`Encode=1`: base64, a positional
//! alphabet swap, a rotation) and the test signature made by
//! `tests/support/qoder_codec.py`, as plain functions: a scripted upstream in
//! tests decodes and checks what the `exec` codec sent.
//!
//! The encoding hides nothing (it is reversible by anyone); the real
//! client's COSY re-signing is in [`crate::cosy`].

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The alphabet standing in, position by position, for standard base64's
/// `A–Z a–z 0–9 + /`.
pub const CUSTOM_ALPHABET: &[u8; 64] =
    b"_doRTgHZBKcGVjlvpC,@aFSx#DPuNJme&i*MzLOEn)sUrthbf%Y^w.(kIQyXqWA!";
const STANDARD_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/// What base64 padding `=` becomes.
pub const CUSTOM_PAD: u8 = b'$';

/// The environment variable holding the test codec's signing key.
pub const TEST_SECRET_ENV: &str = "QODER_TEST_SECRET";
/// The test codec's signing key when the variable is unset.
pub const DEFAULT_TEST_SECRET: &str = "shimgate-test";
const COSY_PREFIX: &str = "COSY.";

/// Byte maps between the alphabets; 0 marks a byte outside the alphabet.
const TO_CUSTOM: [u8; 256] = byte_map(STANDARD_ALPHABET, CUSTOM_ALPHABET, b'=', CUSTOM_PAD);
const TO_STANDARD: [u8; 256] = byte_map(CUSTOM_ALPHABET, STANDARD_ALPHABET, CUSTOM_PAD, b'=');

const fn byte_map(from: &[u8; 64], to: &[u8; 64], pad_from: u8, pad_to: u8) -> [u8; 256] {
    let mut map = [0u8; 256];
    let mut i = 0;
    while i < 64 {
        map[from[i] as usize] = to[i];
        i += 1;
    }
    map[pad_from as usize] = pad_to;
    map
}

/// Why a body or signature did not check out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// A byte outside the custom alphabet.
    Alphabet {
        /// The byte.
        byte: u8,
        /// Its position in the encoded body.
        at: usize,
    },
    /// The unrotated text is not valid base64.
    Base64(String),
    /// `Authorization` is not `Bearer COSY.<payload>.<signature>`.
    NotCosyToken,
    /// The COSY payload is not base64 JSON with a `requestId`.
    Payload(String),
    /// `Cosy-Date` is not unix seconds.
    BadDate,
    /// The signature does not match.
    SignatureMismatch,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::Alphabet { byte, at } => {
                write!(
                    f,
                    "byte 0x{byte:02x} at {at} is not in the qoder body alphabet"
                )
            }
            CodecError::Base64(e) => write!(f, "qoder body is not base64 once unrotated: {e}"),
            CodecError::NotCosyToken => f.write_str("authorization is not a COSY bearer token"),
            CodecError::Payload(e) => write!(f, "COSY payload unreadable: {e}"),
            CodecError::BadDate => f.write_str("Cosy-Date is not unix seconds"),
            CodecError::SignatureMismatch => f.write_str("test signature does not match"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Encodes an ask as the `Encode=1` body: standard padded base64, each
/// character swapped for the one at the same position of
/// [`CUSTOM_ALPHABET`] (`=` → `$`), then the last third moved to the front
/// and the first third to the back.
pub fn encode_body(plain: &[u8]) -> Vec<u8> {
    let mapped: Vec<u8> = STANDARD
        .encode(plain)
        .bytes()
        .map(|b| TO_CUSTOM[usize::from(b)])
        .collect();
    swap_thirds(&mapped)
}

/// Decodes an `Encode=1` body back to the ask bytes.
pub fn decode_body(encoded: &[u8]) -> Result<Vec<u8>, CodecError> {
    // The swap is per character, so it may come before the rotation.
    let mapped = encoded
        .iter()
        .enumerate()
        .map(|(at, &byte)| match TO_STANDARD[usize::from(byte)] {
            0 => Err(CodecError::Alphabet { byte, at }),
            mapped => Ok(mapped),
        })
        .collect::<Result<Vec<u8>, _>>()?;
    STANDARD
        .decode(swap_thirds(&mapped))
        .map_err(|e| CodecError::Base64(e.to_string()))
}

/// `last k + middle + first k` with `k = len / 3`: its own inverse.
fn swap_thirds(text: &[u8]) -> Vec<u8> {
    let len = text.len();
    let third = len / 3;
    // third <= len - third, so every range is in bounds.
    let first = text.get(..third).unwrap_or_default();
    let middle = text.get(third..len - third).unwrap_or_default();
    let last = text.get(len - third..).unwrap_or_default();
    [last, middle, first].concat()
}

/// The test codec's key: `QODER_TEST_SECRET`, else [`DEFAULT_TEST_SECRET`].
pub fn test_secret() -> Vec<u8> {
    std::env::var(TEST_SECRET_ENV)
        .unwrap_or_else(|_| DEFAULT_TEST_SECRET.to_owned())
        .into_bytes()
}

/// The test signature: lowercase hex HMAC-SHA256 under `secret` of
/// `unix seconds LF encoded body LF path` (the path exactly as requested,
/// query included).
pub fn sign_test(secret: &[u8], unix_seconds: &str, encoded_body: &[u8], path: &str) -> String {
    let mut message = Vec::with_capacity(unix_seconds.len() + encoded_body.len() + path.len() + 2);
    message.extend_from_slice(unix_seconds.as_bytes());
    message.push(b'\n');
    message.extend_from_slice(encoded_body);
    message.push(b'\n');
    message.extend_from_slice(path.as_bytes());
    // HMAC takes a key of any length, so the error arm never runs.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(&message);
    format!("{:x}", mac.finalize().into_bytes())
}

/// The `Authorization` value the test codec sends:
/// `Bearer COSY.<base64 payload JSON with requestId>.<signature>`.
pub fn test_authorization(
    secret: &[u8],
    request_id: &str,
    unix_seconds: &str,
    encoded_body: &[u8],
    path: &str,
) -> String {
    let payload = serde_json::json!({
        "version": "v1",
        "requestId": request_id,
        "info": "shimgate-test",
        "cosyVersion": "shimgate-test",
        "ideVersion": "",
    });
    let payload = STANDARD.encode(payload.to_string());
    let signature = sign_test(secret, unix_seconds, encoded_body, path);
    format!("Bearer {COSY_PREFIX}{payload}.{signature}")
}

/// What a checked test signature carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestSignature {
    /// The payload's `requestId` (fresh for every codec call).
    pub request_id: String,
    /// `Cosy-Date`.
    pub unix_seconds: u64,
}

/// Checks a request made by the test codec: `authorization` and
/// `cosy_date` are the header values, `encoded_body` the request body as
/// received, `path` the request path with its query.
pub fn verify_test_signature(
    secret: &[u8],
    authorization: &str,
    cosy_date: &str,
    encoded_body: &[u8],
    path: &str,
) -> Result<TestSignature, CodecError> {
    let token = authorization
        .strip_prefix("Bearer ")
        .and_then(|t| t.strip_prefix(COSY_PREFIX))
        .ok_or(CodecError::NotCosyToken)?;
    let (payload, signature) = token.rsplit_once('.').ok_or(CodecError::NotCosyToken)?;
    let unix_seconds = cosy_date
        .trim()
        .parse::<u64>()
        .map_err(|_| CodecError::BadDate)?;
    let expected = sign_test(secret, cosy_date.trim(), encoded_body, path);
    if !same_bytes(expected.as_bytes(), signature.as_bytes()) {
        return Err(CodecError::SignatureMismatch);
    }
    let payload = STANDARD
        .decode(payload)
        .map_err(|e| CodecError::Payload(e.to_string()))?;
    let payload: serde_json::Value =
        serde_json::from_slice(&payload).map_err(|e| CodecError::Payload(e.to_string()))?;
    let request_id = payload
        .get("requestId")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| CodecError::Payload("no requestId".to_owned()))?;
    Ok(TestSignature {
        request_id: request_id.to_owned(),
        unix_seconds,
    })
}

/// Compares without stopping at the first difference.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;

//! The real qoder client's COSY signature, made again for every upstream
//! attempt by the published rule (`docs/clients.md`), because a
//! rebuilt ask needs a fresh `requestId` and a signature over its own bytes,
//! and the rule hashes only what the client sent: no secret is needed and
//! nothing is decrypted (`info` and `Cosy-Key` travel opaque).
//!
//! The client's `Authorization` is `Bearer COSY.<payloadB64>.<md5hex>`,
//! where the payload is JSON in a fixed key order
//! (`{"version","requestId","info","cosyVersion","ideVersion"}`, standard
//! padded base64) and the signature is
//! `lowerhex(MD5(payloadB64 LF Cosy-Key LF Cosy-Date LF encodedBody LF
//! signedPath))`. Re-signing swaps only the payload's `requestId` (byte
//! level: every other byte of the payload JSON stays), sets `Cosy-Date`,
//! and rewrites `Cosy-Bodyhash`/`Cosy-Bodylength` only where the client
//! sent them. Pure functions: the caller passes the clock and the id in.

use std::fmt;
use std::ops::Range;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use md5::{Digest, Md5};
use serde_json::Value;

use crate::scan::Cursor;

/// What follows the `Bearer ` scheme in a COSY `Authorization` value.
pub const TOKEN_PREFIX: &str = "COSY.";
/// The client's opaque key header, signed and forwarded byte for byte.
pub const COSY_KEY: HeaderName = HeaderName::from_static("cosy-key");
/// The signing time, unix seconds.
pub const COSY_DATE: HeaderName = HeaderName::from_static("cosy-date");
/// Lowercase hex MD5 of the encoded body (some clients send it).
pub const COSY_BODYHASH: HeaderName = HeaderName::from_static("cosy-bodyhash");
/// The encoded body's length in bytes, decimal (some clients send it).
pub const COSY_BODYLENGTH: HeaderName = HeaderName::from_static("cosy-bodylength");
/// The payload key that changes on every attempt.
pub const REQUEST_ID_KEY: &str = "requestId";
/// The request-path prefix the signature leaves out.
const ALGO_PREFIX: &str = "/algo";
const BEARER: &str = "Bearer ";

/// Why a request's headers are not a COSY request this module can re-sign.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CosyError {
    /// No `Authorization` header.
    MissingAuthorization,
    /// `Authorization` is not `Bearer COSY.<payload>.<signature>`.
    NotCosyBearer,
    /// The payload is not standard padded base64.
    PayloadNotBase64(String),
    /// The decoded payload is not a JSON object (or names `requestId`
    /// twice, which would leave the server's choice unknown).
    PayloadNotJson(String),
    /// The payload has no top-level string `requestId`.
    NoRequestId,
    /// No `Cosy-Key` header.
    MissingCosyKey,
    /// No `Cosy-Date` header.
    MissingCosyDate,
}

impl fmt::Display for CosyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CosyError::MissingAuthorization => f.write_str("no Authorization header"),
            CosyError::NotCosyBearer => {
                f.write_str("Authorization is not a Bearer COSY.<payload>.<signature> token")
            }
            CosyError::PayloadNotBase64(e) => {
                write!(f, "COSY payload is not standard base64: {e}")
            }
            CosyError::PayloadNotJson(e) => write!(f, "COSY payload is not a JSON object: {e}"),
            CosyError::NoRequestId => f.write_str("COSY payload has no string requestId"),
            CosyError::MissingCosyKey => f.write_str("no Cosy-Key header"),
            CosyError::MissingCosyDate => f.write_str("no Cosy-Date header"),
        }
    }
}

impl std::error::Error for CosyError {}

/// The published signature: lowercase hex MD5 of the five fields joined by
/// LF, no trailing LF.
pub fn sign(
    payload_b64: &str,
    cosy_key: &[u8],
    date: &str,
    encoded_body: &[u8],
    signed_path: &str,
) -> String {
    let mut md5 = Md5::new();
    md5.update(payload_b64.as_bytes());
    for field in [
        cosy_key,
        date.as_bytes(),
        encoded_body,
        signed_path.as_bytes(),
    ] {
        md5.update(b"\n");
        md5.update(field);
    }
    format!("{:x}", md5.finalize())
}

/// The path the signature covers: `path_and_query` without its query (and
/// fragment) and without a leading `/algo` segment, so
/// `/algo/api/v2/service/pro/sse/agent_chat_generation?Encode=1` signs as
/// `/api/v2/service/pro/sse/agent_chat_generation`. A bare `/algo` signs
/// as `/`; `/algorithm/…` keeps its prefix (only a whole segment goes).
pub fn signed_path(path_and_query: &str) -> &str {
    let path = path_and_query.split(['?', '#']).next().unwrap_or_default();
    match path.strip_prefix(ALGO_PREFIX) {
        Some("") => "/",
        Some(rest) if rest.starts_with('/') => rest,
        _ => path,
    }
}

/// Whether the request's query says the body is in the `Encode=1` body
/// encoding ([`crate::codec::decode_body`] turns it back into the ask). The
/// key is matched as the client spells it; the first `Encode` decides.
pub fn is_encoded(path_and_query: &str) -> bool {
    let before_fragment = path_and_query.split('#').next().unwrap_or_default();
    let Some((_, query)) = before_fragment.split_once('?') else {
        return false;
    };
    let value = query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == "Encode").then_some(value)
    });
    value == Some("1")
}

/// Whether the headers are the real client's: a `Bearer COSY.` token in
/// `Authorization` and a `Cosy-Key`. Says nothing about whether the
/// payload parses; [`CosyRequest::parse`] does.
pub fn has_cosy_headers(headers: &HeaderMap) -> bool {
    headers.contains_key(COSY_KEY)
        && headers
            .get(AUTHORIZATION)
            .and_then(|v| split_token(v).ok())
            .is_some()
}

/// The headers for one upstream attempt: [`CosyRequest::parse`] then
/// [`CosyRequest::headers_for`]. `encoded_body` is the body as it will be
/// sent (already in the `Encode=1` encoding), `path_and_query` the upstream
/// request's path with its query, `unix_seconds` now, `request_id` a fresh
/// UUID (see [`crate::ask::fresh_uuid`]).
pub fn resign(
    headers: &HeaderMap,
    encoded_body: &[u8],
    path_and_query: &str,
    unix_seconds: u64,
    request_id: &str,
) -> Result<HeaderMap, CosyError> {
    CosyRequest::parse(headers)?.headers_for(encoded_body, path_and_query, unix_seconds, request_id)
}

/// A client's COSY request headers, checked once and re-signed per attempt.
#[derive(Debug, Clone)]
pub struct CosyRequest {
    /// The client's headers as received.
    headers: HeaderMap,
    /// `Authorization` up to and including `COSY.`, as the client wrote it.
    scheme: String,
    /// The decoded payload JSON.
    payload: Vec<u8>,
    /// Where the `requestId` value (quotes included) sits in `payload`.
    request_id_at: Range<usize>,
    /// The client's `requestId`, decoded.
    request_id: String,
}

impl CosyRequest {
    /// Reads the client's `Authorization`, `Cosy-Key` and `Cosy-Date` and
    /// the payload inside the token. The token's signature is not checked:
    /// shimgate replaces it, it does not vouch for it.
    pub fn parse(headers: &HeaderMap) -> Result<Self, CosyError> {
        let authorization = headers
            .get(AUTHORIZATION)
            .ok_or(CosyError::MissingAuthorization)?;
        let (scheme, payload_b64) = split_token(authorization)?;
        if !headers.contains_key(COSY_KEY) {
            return Err(CosyError::MissingCosyKey);
        }
        if !headers.contains_key(COSY_DATE) {
            return Err(CosyError::MissingCosyDate);
        }
        let payload = STANDARD
            .decode(payload_b64)
            .map_err(|e| CosyError::PayloadNotBase64(e.to_string()))?;
        let (request_id, request_id_at) = find_request_id(&payload)?;
        Ok(CosyRequest {
            headers: headers.clone(),
            scheme: scheme.to_owned(),
            payload,
            request_id_at,
            request_id,
        })
    }

    /// The client's own payload `requestId`.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The client's decoded payload JSON, byte for byte.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The payload with `request_id` in place of the client's, every other
    /// byte unchanged, as standard padded base64.
    pub fn payload_b64_with(&self, request_id: &str) -> String {
        // A JSON string, so any id (even one needing escapes) stays valid.
        let quoted = Value::String(request_id.to_owned()).to_string();
        let before = self
            .payload
            .get(..self.request_id_at.start)
            .unwrap_or_default();
        let after = self
            .payload
            .get(self.request_id_at.end..)
            .unwrap_or_default();
        let mut json = Vec::with_capacity(before.len() + quoted.len() + after.len());
        json.extend_from_slice(before);
        json.extend_from_slice(quoted.as_bytes());
        json.extend_from_slice(after);
        STANDARD.encode(json)
    }

    /// The full header set for one attempt: the client's headers with
    /// `Authorization` (new payload and signature), `Cosy-Date`
    /// (`unix_seconds`) and, where the client sent them, `Cosy-Bodyhash`
    /// and `Cosy-Bodylength` replaced in place; everything else, `Cosy-Key`
    /// included, unchanged. `Content-Length` is left as received: the
    /// runtime drops it for every forwarded request and sets its own.
    pub fn headers_for(
        &self,
        encoded_body: &[u8],
        path_and_query: &str,
        unix_seconds: u64,
        request_id: &str,
    ) -> Result<HeaderMap, CosyError> {
        let payload = self.payload_b64_with(request_id);
        let date = unix_seconds.to_string();
        let key = self
            .headers
            .get(COSY_KEY)
            .map(HeaderValue::as_bytes)
            .unwrap_or_default();
        let signature = sign(
            &payload,
            key,
            &date,
            encoded_body,
            signed_path(path_and_query),
        );
        let mut headers = self.headers.clone();
        // `insert` replaces a value where it stands, so the order holds.
        headers.insert(
            AUTHORIZATION,
            text_value(format!("{}{payload}.{signature}", self.scheme))?,
        );
        headers.insert(COSY_DATE, HeaderValue::from(unix_seconds));
        if headers.contains_key(COSY_BODYHASH) {
            let hash = format!("{:x}", Md5::digest(encoded_body));
            headers.insert(COSY_BODYHASH, text_value(hash)?);
        }
        if headers.contains_key(COSY_BODYLENGTH) {
            headers.insert(COSY_BODYLENGTH, HeaderValue::from(encoded_body.len()));
        }
        Ok(headers)
    }
}

/// `Authorization` split into the part up to `COSY.` (the scheme as the
/// client cased it) and the payload; the signature after the next `.` is
/// dropped (base64 has no `.`).
fn split_token(authorization: &HeaderValue) -> Result<(&str, &str), CosyError> {
    let text = authorization
        .to_str()
        .map_err(|_| CosyError::NotCosyBearer)?
        .trim();
    let scheme_len = BEARER.len() + TOKEN_PREFIX.len();
    let (scheme, token) = match (text.get(..scheme_len), text.get(scheme_len..)) {
        (Some(scheme), Some(token)) => (scheme, token),
        _ => return Err(CosyError::NotCosyBearer),
    };
    let (bearer, cosy) = scheme.split_at(BEARER.len());
    if !bearer.eq_ignore_ascii_case(BEARER) || cosy != TOKEN_PREFIX {
        return Err(CosyError::NotCosyBearer);
    }
    let (payload, _signature) = token.split_once('.').ok_or(CosyError::NotCosyBearer)?;
    Ok((scheme, payload))
}

/// The top-level `requestId` of a payload: its decoded value and the span
/// of its JSON string (quotes included).
fn find_request_id(payload: &[u8]) -> Result<(String, Range<usize>), CosyError> {
    let value: Value =
        serde_json::from_slice(payload).map_err(|e| CosyError::PayloadNotJson(e.to_string()))?;
    let Value::Object(object) = &value else {
        return Err(CosyError::PayloadNotJson("not an object".to_owned()));
    };
    let Some(Value::String(request_id)) = object.get(REQUEST_ID_KEY) else {
        return Err(CosyError::NoRequestId);
    };
    // serde_json has accepted the text, so the cursor reads it to the end.
    let unreadable = || CosyError::PayloadNotJson("unreadable".to_owned());
    let mut cursor = Cursor::new(payload);
    cursor.enter_object().ok_or_else(unreadable)?;
    let mut first = true;
    let mut found = None;
    while let Some(key) = cursor.next_key(&mut first).ok_or_else(unreadable)? {
        if key.raw(payload) != REQUEST_ID_KEY.as_bytes() {
            cursor.skip_value().ok_or_else(unreadable)?;
            continue;
        }
        if found.is_some() {
            return Err(CosyError::PayloadNotJson("requestId twice".to_owned()));
        }
        cursor.peek();
        let start = cursor.offset();
        // serde_json kept the last requestId; an earlier non-string one
        // fails here.
        let text = cursor.string().ok_or(CosyError::NoRequestId)?;
        found = Some(start..text.end + 1);
    }
    // An escaped key (`"request\u0049d"`) is the only way to get here.
    let at = found.ok_or(CosyError::NoRequestId)?;
    Ok((request_id.clone(), at))
}

/// A header value from text made of base64, hex and the client's own
/// `Authorization` prefix, all visible ASCII: the error arm never runs.
fn text_value(text: String) -> Result<HeaderValue, CosyError> {
    HeaderValue::try_from(text).map_err(|_| CosyError::NotCosyBearer)
}

#[cfg(test)]
mod tests;

//! Header hygiene shared by every forwarding path: hop-by-hop headers never
//! cross a proxy, and only header *names* are ever shown.

use std::sync::{Arc, OnceLock};

use http::header::{self, HeaderMap, HeaderName};

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// Removes hop-by-hop headers (and those named in `Connection`), plus
/// `transfer-encoding`, which hyper sets itself.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most heads carry none of these, which one pass over the names tells
    // (a removal by name parses and hashes the name, nine times over).
    let hop = |k: &HeaderName| k == header::TRANSFER_ENCODING || HOP_BY_HOP.contains(&k.as_str());
    if !headers.keys().any(hop) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::TRANSFER_ENCODING);
}

/// The headers of a client request, ready to send upstream: hop-by-hop,
/// `host` and `content-length` removed (the client sets them anew).
pub fn for_upstream(client: &HeaderMap) -> HeaderMap {
    let mut h = client.clone();
    strip_hop_by_hop(&mut h);
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    h
}

/// `headers` with each value in bytes of its own: hyper's parsed values
/// are slices of the connection's read buffer, and a map kept for long
/// (for a stream's life, or under a rid) would pin the whole buffer. A
/// value that does not copy (it always does: it was a value) is dropped.
pub fn owned(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if let Ok(mut copy) = http::HeaderValue::from_bytes(value.as_bytes()) {
            copy.set_sensitive(value.is_sensitive());
            out.append(name.clone(), copy);
        }
    }
    out
}

/// Whether a head says `text/event-stream` (parameters and leading
/// space allowed): the one test of "is this an SSE answer".
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().starts_with("text/event-stream"))
}

/// Header names only, sorted: what `/status` may show.
pub fn names(headers: &HeaderMap) -> Vec<String> {
    let mut v: Vec<String> = headers.keys().map(|k| k.as_str().to_string()).collect();
    v.sort();
    v.dedup();
    v
}

/// Masks credential-looking words in text that came from outside (an
/// upstream's error body may echo a token back): `Bearer xyz`, `sk-…`,
/// `COSY.…`, `Cloud-IDE-JWT …`.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut mask_next = false;
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let bare = word.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        let secret = mask_next
            || bare.starts_with("sk-")
            || bare.starts_with("COSY.")
            || (bare.len() >= 32
                && bare
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && bare.chars().any(|c| c.is_ascii_digit()));
        mask_next = matches!(bare, "Bearer" | "bearer" | "Cloud-IDE-JWT" | "Basic");
        if secret && !bare.is_empty() {
            out.push_str(&word.replace(bare, "***"));
        } else {
            out.push_str(word);
        }
    }
    out
}

/// Shorter values are not masked: a short value is no credential and
/// masking it would garble ordinary words in a reason.
const MIN_SECRET_LEN: usize = 8;

/// The credential values of `headers`: `Authorization` (whole and its
/// token part), every cookie value, and any header whose name says token,
/// key, secret, auth or password; longest first.
fn values_of(headers: &HeaderMap) -> Vec<String> {
    let mut values = Vec::new();
    for (name, value) in headers {
        // The name first: most headers are not credentials, and their
        // values need no reading.
        let n = name.as_str();
        let cookie = n == "cookie";
        let named = ["token", "key", "secret", "auth", "password"]
            .iter()
            .any(|w| n.contains(w));
        if !cookie && (!named || n.ends_with("model-key")) {
            continue;
        }
        let Ok(v) = value.to_str() else { continue };
        let v = v.trim();
        if cookie {
            for pair in v.split(';') {
                if let Some((_, val)) = pair.split_once('=') {
                    values.push(val.trim().to_owned());
                }
            }
            continue;
        }
        values.push(v.to_owned());
        if let Some((_, token)) = v.split_once(' ') {
            values.push(token.trim().to_owned());
        }
    }
    values.retain(|v| v.len() >= MIN_SECRET_LEN);
    // Longest first, so a token inside a longer value is masked whole.
    values.sort_by_key(|v| std::cmp::Reverse(v.len()));
    values.dedup();
    values
}

/// The exact credential values a request carried, to be masked wherever
/// text from upstream (an error body that echoes the agent's token or
/// cookie) is shown, logged or handed to the proxy.
///
/// Read from the headers the first time a text is scrubbed, not when the
/// call starts: only a failure has text to scrub, and the read (every
/// header name, the cookie pairs) was on every request's way upstream.
/// Clones share the one reading. `Debug` shows how many values, never
/// them.
#[derive(Clone, Default)]
pub struct Secrets {
    /// The request's headers (none: nothing to mask).
    headers: Option<Arc<HeaderMap>>,
    values: Arc<OnceLock<Vec<String>>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let read = self.values.get().map(Vec::len);
        f.debug_struct("Secrets").field("values", &read).finish()
    }
}

impl Secrets {
    /// The credential values of `headers` (read when first needed).
    pub fn of(headers: Arc<HeaderMap>) -> Secrets {
        Secrets {
            headers: Some(headers),
            values: Arc::default(),
        }
    }

    fn values(&self) -> &[String] {
        self.values
            .get_or_init(|| self.headers.as_deref().map(values_of).unwrap_or_default())
    }

    /// `failure` with its reason scrubbed ([`Secrets::scrub`]).
    pub fn scrub_failure(
        &self,
        mut failure: shimgate_shim_api::Failure,
    ) -> shimgate_shim_api::Failure {
        if !self.values().is_empty() {
            failure.message = self.scrub(&failure.message);
        }
        failure
    }

    /// `text` with every credential value replaced by `***`, then the known
    /// token shapes masked too ([`redact`]).
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for v in self.values() {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), "***");
            }
        }
        redact(&out)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_request_s_own_credentials_are_scrubbed_from_upstream_text() {
        let mut h = HeaderMap::new();
        h.insert("x-ide-token", HeaderValue::from_static("tok-abcdef123"));
        h.insert(
            "cookie",
            HeaderValue::from_static("sid=cookievalue42; lang=en"),
        );
        h.insert(
            "authorization",
            HeaderValue::from_static("Cloud-IDE-JWT jwt.value.here"),
        );
        h.insert("x-model-key", HeaderValue::from_static("qfmodel-long"));
        let s = Secrets::of(Arc::new(h));
        assert_eq!(format!("{s:?}"), "Secrets { values: None }", "not read yet");
        let copy = s.clone();
        assert_eq!(
            s.scrub("invalid token tok-abcdef123, cookie sid=cookievalue42, jwt jwt.value.here, model qfmodel-long"),
            "invalid token ***, cookie sid=***, jwt ***, model qfmodel-long"
        );
        // Read once, for every clone; shown as a count, never the values.
        assert_eq!(format!("{copy:?}"), "Secrets { values: Some(4) }");
        assert_eq!(copy.scrub("tok-abcdef123"), "***");
        assert_eq!(
            Secrets::default().scrub("plain words stay"),
            "plain words stay"
        );
    }

    #[test]
    fn tokens_in_text_are_masked() {
        assert_eq!(
            redact("auth failed for Bearer abc123 and key sk-live-1 and Cloud-IDE-JWT eyJx"),
            "auth failed for Bearer *** and key *** and Cloud-IDE-JWT ***"
        );
        assert_eq!(redact("plain words stay"), "plain words stay");
    }

    use super::*;
    use http::HeaderValue;

    #[test]
    fn connection_named_headers_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("authorization", HeaderValue::from_static("Bearer t"));
        strip_hop_by_hop(&mut h);
        assert!(h.get("x-secret-hop").is_none());
        assert!(h.get("connection").is_none());
        assert!(h.get("authorization").is_some());
    }

    #[test]
    fn every_hop_by_hop_header_goes_and_a_clean_head_stays_as_it_was() {
        let mut h = HeaderMap::new();
        for name in HOP_BY_HOP.iter().chain(["transfer-encoding"].iter()) {
            h.insert(*name, HeaderValue::from_static("x"));
        }
        h.insert(
            "content-type",
            HeaderValue::from_static("text/event-stream"),
        );
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), vec!["content-type".to_string()]);
        let mut clean = HeaderMap::new();
        clean.insert("content-type", HeaderValue::from_static("application/json"));
        clean.insert("x-uid", HeaderValue::from_static("u"));
        let before = clean.clone();
        strip_hop_by_hop(&mut clean);
        assert_eq!(clean, before);
    }
}

//! An OpenAI chat body as JSON text: what a shim's fold writes for the
//! compression proxy and what the proxy sends the return leg, read where a
//! part is needed (a top-level member, the answer shape) instead of parsed
//! whole into a `serde_json::Value`. The whole `Value` is still there for
//! whoever needs it: parsed once, on first use.

use std::ops::Deref;
use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::Value;

use crate::error::ShimError;
use crate::json_scan;

/// An OpenAI chat body: a JSON object, as text.
#[derive(Clone, Default)]
pub struct OpenAiBody {
    text: Bytes,
    parsed: OnceLock<Value>,
    /// Where the top-level members sit, walked once on the first lookup
    /// (a return leg reads five or six members of one body).
    members: OnceLock<Result<Vec<json_scan::MemberSpan>, json_scan::Unsure>>,
}

impl std::fmt::Debug for OpenAiBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OpenAiBody")
            .field(&String::from_utf8_lossy(&self.text))
            .finish()
    }
}

impl OpenAiBody {
    /// A body a shim wrote (the shim vouches that it is one JSON object
    /// `serde_json` reads).
    pub fn written(text: impl Into<Bytes>) -> OpenAiBody {
        OpenAiBody {
            text: text.into(),
            parsed: OnceLock::new(),
            members: OnceLock::new(),
        }
    }

    /// A body from outside (the proxy's), checked with the strict reading
    /// (which accepts exactly what `serde_json` accepts): `Err` with
    /// `serde_json`'s reason when it is not JSON, or a note when it is JSON
    /// but not an object. Nothing is parsed; the walk that checks an
    /// object also finds its members (one walk, not two: a return leg
    /// reads several).
    pub fn parse(text: impl Into<Bytes>) -> Result<OpenAiBody, ShimError> {
        let text = text.into();
        let utf8 = std::str::from_utf8(&text).is_ok();
        if let Some(members) = utf8
            .then(|| json_scan::strict_member_spans(&text).ok())
            .flatten()
        {
            let body = OpenAiBody::written(text);
            let _ = body.members.set(members);
            return Ok(body);
        }
        // Not an object a strict walk accepts: which refusal it is.
        let valid = utf8 && json_scan::is_valid(&text);
        let object = text
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b == b'{');
        match (valid, object) {
            (true, true) => Ok(OpenAiBody::written(text)),
            (true, false) => Err(not_an_object()),
            (false, _) => Err(not_json(&text)),
        }
    }

    /// [`OpenAiBody::parse`] for a reader that needs the whole `Value`
    /// anyway (a restore that rewrites the body from it): checked by the
    /// parse itself, which is kept (one pass, not a check and a parse).
    pub fn parse_whole(text: impl Into<Bytes>) -> Result<OpenAiBody, ShimError> {
        let text = text.into();
        match serde_json::from_slice::<Value>(&text) {
            Ok(value @ Value::Object(_)) => {
                let body = OpenAiBody::written(text);
                let _ = body.parsed.set(value);
                Ok(body)
            }
            Ok(_) => Err(not_an_object()),
            Err(e) => Err(ShimError::new(format!("the request body is not JSON: {e}"))),
        }
    }

    /// The body of a `Value` a shim built (kept: it is the parse).
    pub fn from_value(value: Value) -> OpenAiBody {
        let body = OpenAiBody::written(serde_json::to_vec(&value).unwrap_or_default());
        let _ = body.parsed.set(value);
        body
    }

    /// The parse, when it was made (or the body came as a `Value`).
    pub fn parsed(&self) -> Option<&Value> {
        self.parsed.get()
    }

    /// The body of `value` (a test's or a fallback's).
    pub fn of_value(value: &Value) -> OpenAiBody {
        let body = OpenAiBody::written(serde_json::to_vec(value).unwrap_or_default());
        let _ = body.parsed.set(value.clone());
        body
    }

    /// The JSON text.
    pub fn as_bytes(&self) -> &[u8] {
        &self.text
    }

    /// The JSON text, shared.
    pub fn bytes(&self) -> Bytes {
        self.text.clone()
    }

    /// The whole body parsed (on first use, then kept).
    pub fn value(&self) -> &Value {
        self.parsed
            .get_or_init(|| serde_json::from_slice(&self.text).unwrap_or(Value::Null))
    }

    /// The raw JSON of the top-level member `key` (its last one, as the
    /// parsed body keeps it); `Err` when a key holds an escape (it might
    /// spell `key`), and the caller reads [`OpenAiBody::value`].
    pub fn member(&self, key: &str) -> Result<Option<&[u8]>, json_scan::Unsure> {
        let spans = self
            .members
            .get_or_init(|| json_scan::member_spans(&self.text))
            .as_ref()
            .map_err(|u| *u)?;
        Ok(json_scan::last_of(&self.text, spans, key.as_bytes()))
    }

    /// The top-level member `key` parsed (it alone; the whole body only
    /// when a key holds an escape), or taken from the parse when there is
    /// one.
    pub fn get(&self, key: &str) -> Option<Value> {
        if let Some(parsed) = self.parsed.get() {
            return parsed.get(key).cloned();
        }
        match self.member(key) {
            Ok(raw) => serde_json::from_slice(raw?).ok(),
            Err(_) => self.value().get(key).cloned(),
        }
    }

    /// [`crate::answer_shape`] of the body, read member by member.
    pub fn answer_shape(&self) -> Value {
        let mut shape = serde_json::Map::new();
        for key in crate::shape::SHAPE_KEYS {
            if let Some(v) = self.get(key) {
                shape.insert(key.to_string(), v);
            }
        }
        Value::Object(shape)
    }
}

/// The body parsed: code that wants the whole `Value` (the tests, the rare
/// paths) reads it as one; the parse happens once, on first use.
impl Deref for OpenAiBody {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl From<Value> for OpenAiBody {
    fn from(value: Value) -> OpenAiBody {
        OpenAiBody::from_value(value)
    }
}

fn not_an_object() -> ShimError {
    ShimError::new("the request body is JSON but not an object")
}

fn not_json(text: &[u8]) -> ShimError {
    ShimError::new(match serde_json::from_slice::<Value>(text) {
        Err(e) => format!("the request body is not JSON: {e}"),
        // The strict reading and serde_json agree (tested); kept apart
        // only so the answer never claims a reason it lacks.
        Ok(_) => "the request body is not JSON".to_string(),
    })
}

impl From<&Value> for OpenAiBody {
    fn from(value: &Value) -> OpenAiBody {
        OpenAiBody::of_value(value)
    }
}

impl PartialEq for OpenAiBody {
    fn eq(&self, other: &OpenAiBody) -> bool {
        self.value() == other.value()
    }
}

impl serde::Serialize for OpenAiBody {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_is_read_member_by_member_as_the_parsed_body_reads_it() {
        let text = br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"stream":true,"stream_options":{"include_usage":false}}"#;
        let body = OpenAiBody::parse(&text[..]).unwrap();
        let parsed: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(body.answer_shape(), crate::answer_shape(&parsed));
        assert_eq!(body.get("stream"), Some(json!(true)));
        assert_eq!(body.get("tools"), None);
        assert_eq!(*body, parsed);
        let escaped = OpenAiBody::parse(&br#"{"str\u0065am":true}"#[..]).unwrap();
        assert_eq!(escaped.get("stream"), Some(json!(true)));
    }

    #[test]
    fn the_checking_walk_finds_the_members_one_more_walk_would() {
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        let mut corpus: Vec<String> = [
            r#"{}"#,
            r#"  { "a" : 1 , "b":[1,{"c":2}] }  "#,
            r#"{"a":1,"a":2}"#,
            r#"{"str\u0065am":true,"b":1}"#,
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":1e400}"#,
            r#"[{"a":1}]"#,
            r#""text""#,
            r#"{"a":"\ud800"}"#,
        ]
        .map(str::to_owned)
        .into();
        corpus.extend([deep(125), deep(126), deep(127), deep(200)]);
        for text in corpus {
            let t = text.as_bytes();
            let object = t.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
            let valid = json_scan::is_valid(t) && object;
            assert_eq!(
                serde_json::from_str::<Value>(&text).is_ok() && object,
                valid,
                "{text}"
            );
            match OpenAiBody::parse(Bytes::copy_from_slice(t)) {
                Ok(body) => {
                    assert!(valid, "{text}");
                    let walked = json_scan::member_spans(t);
                    assert_eq!(body.members.get(), Some(&walked), "{text}");
                }
                Err(_) => assert!(!valid, "{text}"),
            }
        }
    }

    #[test]
    fn a_body_from_outside_is_refused_as_serde_json_refuses_it() {
        type Parse = fn(&'static [u8]) -> Result<OpenAiBody, ShimError>;
        let ways: [Parse; 2] = [|t| OpenAiBody::parse(t), |t| OpenAiBody::parse_whole(t)];
        for parse in ways {
            let reason = |t: &'static [u8]| parse(t).unwrap_err().0;
            assert!(reason(b"[1]").contains("not an object"));
            assert!(reason(b"{\"a\":").contains("not JSON: EOF"));
            assert!(reason(br#"{"a":1e400}"#).contains("not JSON: number out of range"));
            assert!(reason(b"{\"a\":\"\xff\"}").contains("not JSON"));
        }
    }
}

//! The fold and the restore written from the ask's bytes, so that the
//! request's way to the upstream (its time to first token) does not parse
//! the whole conversation into a `serde_json::Value`, clone it, serialise
//! it for the proxy and drop it again.
//!
//! The fold reads the ask's top-level members in one strict pass (checked
//! as `serde_json` would check them) and copies `messages` and `tools` as
//! the agent wrote them; only `model_config` (and `parameters` when a key
//! in it holds an escape) is parsed. It makes the OpenAI body
//! [`crate::ask::fold`] makes, member for member and value for value. What
//! it is not sure of (a repeated or escaped top-level key, whose parsed
//! reading keeps the last value or might spell a name; text a strict
//! reading refuses, an out-of-range number among it; not UTF-8) it leaves
//! to that `Value` fold (`None`), which decides, refusals included.
//!
//! The restore writes the ask member by member from the original's bytes,
//! in the original's order, replacing what [`crate::ask::restore`]
//! replaces; the proxy's `messages` and `tools` are copied when their text
//! is what `serde_json` would write for them (else parsed and written), so
//! that for a canonical original the bytes are the `Value` restore's. The
//! ask's `parameters` object is written the same way, member by member with
//! the proxy's sampling fields in place, not parsed into a map (unless a
//! key there is repeated or holds an escape).

use std::ops::Range;

use serde_json::{Map, Value};
use shimgate_shim_api::json_scan::{self, Cursor};
use shimgate_shim_api::{OpenAiBody, ShimError};

use crate::fields::{
    config_key, leading_system_text, rebuild_parameters, thinking_after, DEFAULT_MODEL,
    SAMPLING_KEYS,
};

/// What the written fold keeps of the ask for restore and the accessors.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Written {
    /// The ask as the agent sent it.
    pub text: Vec<u8>,
    /// Its top-level members in order: the key's contents (between its
    /// quotes, no escape) and the value's raw text.
    pub members: Vec<(Range<usize>, Range<usize>)>,
    /// `model_config.key`, when a string.
    pub model_key: Option<String>,
    /// `request_id`, when a string.
    pub request_id: Option<String>,
    /// Whether `chat_record_id` equals `request_id` (it then follows it).
    pub record_follows: bool,
    /// Whether the ask has a top-level `system` string (restore mirrors
    /// the leading system message there).
    pub system_string: bool,
}

impl Written {
    /// The raw value of the top-level member `key`.
    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let (_, value) = self
            .members
            .iter()
            .find(|(k, _)| self.text.get(k.clone()) == Some(key))?;
        self.text.get(value.clone())
    }

    fn has(&self, key: &[u8]) -> bool {
        self.get(key).is_some()
    }
}

/// The top-level members of the object in `text`, read strictly; `None`
/// for a repeated or escaped key or text a strict reading refuses.
fn top_members(text: &[u8]) -> Option<Vec<(Range<usize>, Range<usize>)>> {
    let mut c = Cursor::strict(text);
    c.enter_object()?;
    let mut members: Vec<(Range<usize>, Range<usize>)> = Vec::with_capacity(32);
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        let name = text.get(key.start..key.end)?;
        let repeated = members
            .iter()
            .any(|(k, _)| text.get(k.clone()) == Some(name));
        if key.escaped || repeated {
            return None;
        }
        c.peek()?;
        let start = c.offset();
        c.skip_value()?;
        members.push((key.start..key.end, start..c.offset()));
    }
    c.at_end().then_some(members)
}

/// A raw string literal decoded (a strict reading accepted it).
fn decoded(raw: &[u8]) -> Option<String> {
    if raw.first() != Some(&b'"') {
        return None;
    }
    serde_json::from_slice(raw).ok()
}

/// Whether a raw JSON value is the string `want`.
fn is_string(raw: &[u8], want: &str) -> bool {
    if raw.first() != Some(&b'"') {
        return false;
    }
    if !raw.contains(&b'\\') {
        return raw.get(1..raw.len() - 1) == Some(want.as_bytes());
    }
    decoded(raw).is_some_and(|s| s == want)
}

/// The raw first item of a raw JSON array, `None` for an empty one.
fn first_item(list: &[u8]) -> Option<&[u8]> {
    let mut c = Cursor::new(list);
    c.enter_array()?;
    if !c.next_item(&mut true)? {
        return None;
    }
    c.peek()?;
    let start = c.offset();
    c.skip_value()?;
    list.get(start..c.offset())
}

/// Whether a raw JSON array holds no item.
fn is_empty_list(list: &[u8]) -> bool {
    let inner = list
        .get(1..list.len().saturating_sub(1))
        .unwrap_or_default();
    inner.iter().all(u8::is_ascii_whitespace)
}

/// Whether the raw messages list starts with a system message (its last
/// `role`, as the parsed message keeps it, is `"system"`).
fn starts_with_system(messages: &[u8]) -> bool {
    let Some(message) = first_item(messages).filter(|m| m.first() == Some(&b'{')) else {
        return false;
    };
    match json_scan::last_member(message, b"role") {
        Ok(role) => role.is_some_and(|r| is_string(r, "system")),
        // A key with an escape might spell `role`: the message decides.
        Err(_) => serde_json::from_slice::<Value>(message)
            .ok()
            .and_then(|m| m.get("role").and_then(Value::as_str).map(|r| r == "system"))
            .unwrap_or(false),
    }
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    // Writing a Value (string keys) into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

fn put_map(out: &mut Vec<u8>, map: &Map<String, Value>) {
    // As `put_value`.
    let _ = serde_json::to_writer(&mut *out, map);
}

/// What the written fold makes of an ask.
pub(crate) struct Fold {
    /// The OpenAI body's text.
    pub openai: Vec<u8>,
    /// What restore needs.
    pub kept: Written,
    /// Whether a top-level `system` became a leading system message.
    pub system_folded: bool,
}

/// The written fold of `text`: the OpenAI body's bytes, what restore
/// needs and whether a top-level `system` became a leading message;
/// `None` when it leaves the ask to the `Value` fold, `Some(Err)` for an
/// ask without a `messages` array.
pub(crate) fn fold(text: &[u8]) -> Option<Result<Fold, ShimError>> {
    std::str::from_utf8(text).ok()?;
    let mut kept = Written {
        members: top_members(text)?,
        ..Written::default()
    };
    let get = |key: &[u8]| {
        kept.members
            .iter()
            .find(|(k, _)| text.get(k.clone()) == Some(key))
            .and_then(|(_, v)| text.get(v.clone()))
    };
    let Some(messages) = get(b"messages").filter(|m| m.first() == Some(&b'[')) else {
        return Some(Err(ShimError::new("qoder ask has no messages array")));
    };
    let model_key = config_key(get(b"model_config"))?;
    let request_id = get(b"request_id").and_then(decoded);
    let record_follows = request_id.is_some()
        && get(b"chat_record_id").and_then(decoded).as_ref() == request_id.as_ref();
    let system = get(b"system").filter(|s| s.first() == Some(&b'"'));
    let leading = system.filter(|s| !json_scan::is_empty_string(s));
    let system_folded = leading.is_some() && !starts_with_system(messages);

    let mut out = Vec::with_capacity(text.len() + 128);
    out.extend_from_slice(b"{\"model\":");
    let model = model_key.as_deref().filter(|k| !k.is_empty());
    put_str(&mut out, model.unwrap_or(DEFAULT_MODEL));
    out.extend_from_slice(b",\"messages\":");
    match leading.filter(|_| system_folded) {
        Some(system) => {
            out.extend_from_slice(b"[{\"role\":\"system\",\"content\":");
            out.extend_from_slice(system);
            out.push(b'}');
            if !is_empty_list(messages) {
                out.push(b',');
                out.extend_from_slice(messages.get(1..)?);
            } else {
                out.push(b']');
            }
        }
        None => out.extend_from_slice(messages),
    }
    // `tools: []` is invalid OpenAI; restore puts `[]` back.
    if let Some(tools) = get(b"tools").filter(|t| t.first() == Some(&b'[') && !is_empty_list(t)) {
        out.extend_from_slice(b",\"tools\":");
        out.extend_from_slice(tools);
    }
    if let Some(parameters) = get(b"parameters").filter(|p| p.first() == Some(&b'{')) {
        write_sampling(parameters, &mut out)?;
    }
    out.extend_from_slice(b",\"stream\":true}");
    kept.model_key = model_key;
    kept.request_id = request_id;
    kept.record_follows = record_follows;
    kept.system_string = system.is_some();
    kept.text = text.to_vec();
    Some(Ok(Fold {
        openai: out,
        kept,
        system_folded,
    }))
}

/// The sampling fields of a raw `parameters` object (non-null), in
/// [`SAMPLING_KEYS`] order, each as `,"key":value`.
fn write_sampling(parameters: &[u8], out: &mut Vec<u8>) -> Option<()> {
    match json_scan::member_spans(parameters) {
        Ok(spans) => {
            for key in SAMPLING_KEYS {
                let value = json_scan::last_of(parameters, &spans, key.as_bytes());
                if let Some(value) = value.filter(|v| *v != b"null") {
                    out.push(b',');
                    put_key(out, key.as_bytes());
                    out.extend_from_slice(value);
                }
            }
        }
        // A key with an escape might spell a sampling key: parse it.
        Err(_) => {
            let map: Map<String, Value> = serde_json::from_slice(parameters).ok()?;
            for key in SAMPLING_KEYS {
                if let Some(v) = map.get(key).filter(|v| !v.is_null()) {
                    out.push(b',');
                    put_key(out, key.as_bytes());
                    put_value(out, v);
                }
            }
        }
    }
    Some(())
}

/// The text of the `parameters` restore writes ([`rebuild_parameters`]'s
/// map as `serde_json` writes it): written from the ask's object and the
/// proxy's members when [`written_parameters`] is sure, else through the
/// parsed map. `None` when the ask keeps what it had.
fn parameters_text(original: &Written, openai: &OpenAiBody) -> Option<Vec<u8>> {
    let raw = original
        .get(b"parameters")
        .filter(|raw| raw.first() == Some(&b'{'));
    if let Some(text) = raw.and_then(|raw| written_parameters(raw, openai)) {
        return Some(text);
    }
    let had: Option<Map<String, Value>> = raw.and_then(|raw| serde_json::from_slice(raw).ok());
    let parameters = rebuild_parameters(had.as_ref(), |key| openai.get(key))?;
    let mut out = Vec::new();
    put_map(&mut out, &parameters);
    Some(out)
}

/// The ask's `parameters` object `had` with its sampling fields taken from
/// the proxy's body, written without parsing the object: each member in
/// its place, a sampling field the body no longer has left out, new ones
/// after it in [`SAMPLING_KEYS`] order, values as `serde_json` writes them
/// (their text when it already is that, else parsed and written), and
/// `enable_thinking` set as [`rebuild_parameters`] sets it. `None` where
/// the parsed map could differ: a key with an escape or repeated (the map
/// keeps the first place and the last value), a value that does not parse
/// (the map then does not exist), a body parsed whole or with an escaped
/// key.
fn written_parameters(had: &[u8], openai: &OpenAiBody) -> Option<Vec<u8>> {
    if openai.parsed().is_some() {
        return None;
    }
    let spans = json_scan::member_spans(had).ok()?;
    let key = |s: &json_scan::MemberSpan| had.get(s.key.clone()).unwrap_or_default();
    let value = |s: &json_scan::MemberSpan| had.get(s.value.clone()).unwrap_or_default();
    let find = |k: &[u8]| spans.iter().find(|s| key(s) == k).map(value);
    if spans
        .iter()
        .enumerate()
        .any(|(i, s)| spans.iter().take(i).any(|t| key(t) == key(s)))
    {
        return None;
    }
    let mut sampled: [Option<&[u8]>; SAMPLING_KEYS.len()] = [None; SAMPLING_KEYS.len()];
    for (slot, k) in sampled.iter_mut().zip(SAMPLING_KEYS) {
        *slot = openai.member(k).ok()?.filter(|v| *v != b"null");
    }
    let slot_of = |k: &[u8]| SAMPLING_KEYS.iter().position(|s| s.as_bytes() == k);
    let thinking = match find(b"enable_thinking") {
        Some(_) => thinking_of_raw(
            find(b"reasoning_effort"),
            sampled[slot_of(b"reasoning_effort")?],
        )?,
        None => None,
    };
    let mut out = Vec::with_capacity(had.len() + 32);
    out.push(b'{');
    let put = |out: &mut Vec<u8>, k: &[u8], v: &[u8]| {
        if out.len() > 1 {
            out.push(b',');
        }
        put_key(out, k);
        put_as_serde_writes(out, v).ok()
    };
    for s in &spans {
        let k = key(s);
        let v = match slot_of(k) {
            Some(slot) => sampled[slot],
            None if k == b"enable_thinking" => thinking.or(Some(value(s))),
            None => Some(value(s)),
        };
        if let Some(v) = v {
            put(&mut out, k, v)?;
        }
    }
    for (k, v) in SAMPLING_KEYS.iter().zip(sampled) {
        if let (None, Some(v)) = (find(k.as_bytes()), v) {
            put(&mut out, k.as_bytes(), v)?;
        }
    }
    out.push(b'}');
    Some(out)
}

/// [`thinking_after`] of raw efforts, as the text `enable_thinking` is
/// written with: `Some(None)` to keep it, `None` when a value does not
/// parse.
fn thinking_of_raw(old: Option<&[u8]>, new: Option<&[u8]>) -> Option<Option<&'static [u8]>> {
    let parse = |raw: Option<&[u8]>| match raw {
        Some(raw) => serde_json::from_slice::<Value>(raw).ok().map(Some),
        None => Some(None),
    };
    let (old, new) = (parse(old)?, parse(new)?);
    Some(thinking_after(old.as_ref(), new.as_ref()).map(|on| {
        if on {
            &b"true"[..]
        } else {
            &b"false"[..]
        }
    }))
}

/// `raw` (one value a strict reading accepted) as `serde_json` writes the
/// value it holds: the text itself when it is already that (the usual
/// case), else parsed and written; `Err` when it does not parse.
fn put_as_serde_writes(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), serde_json::Error> {
    if json_scan::is_canonical(raw) {
        out.extend_from_slice(raw);
    } else {
        put_value(out, &serde_json::from_slice(raw)?);
    }
    Ok(())
}

/// A top-level member of the proxy's body: its text, or (when a key of
/// the body holds an escape) its parsed value.
enum Member<'a> {
    Raw(&'a [u8]),
    Parsed(&'a Value),
}

impl<'a> Member<'a> {
    fn of(body: &'a OpenAiBody, key: &str) -> Option<Member<'a>> {
        match body.member(key) {
            Ok(raw) => raw.map(Member::Raw),
            Err(_) => body.value().get(key).map(Member::Parsed),
        }
    }

    fn is_array(&self) -> bool {
        match self {
            Member::Raw(raw) => raw.first() == Some(&b'['),
            Member::Parsed(v) => v.is_array(),
        }
    }

    /// Written as `serde_json` writes its value ([`put_as_serde_writes`]).
    fn write(&self, out: &mut Vec<u8>) -> Result<(), ShimError> {
        match self {
            Member::Raw(raw) => put_as_serde_writes(out, raw)
                .map_err(|e| ShimError::new(format!("compressed body is not JSON: {e}"))),
            Member::Parsed(v) => {
                put_value(out, v);
                Ok(())
            }
        }
    }

    /// The text of the leading system message (see
    /// [`leading_system_text`]), parsing that message only.
    fn leading_system_text(&self) -> Option<String> {
        match self {
            Member::Raw(raw) => {
                let first: Value = serde_json::from_slice(first_item(raw)?).ok()?;
                leading_system_text(std::slice::from_ref(&first))
            }
            Member::Parsed(v) => leading_system_text(v.as_array()?),
        }
    }
}

/// The ask rebuilt from the written original and the proxy's body, with
/// `new_id` as the fresh `request_id`: the bytes
/// [`crate::ask::restore`] writes for the parsed original.
pub(crate) fn restore(
    original: &Written,
    openai: &OpenAiBody,
    new_id: &str,
) -> Result<Vec<u8>, ShimError> {
    let object = openai
        .as_bytes()
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    if !object {
        return Err(ShimError::new("compressed body is not a JSON object"));
    }
    let Some(messages) = Member::of(openai, "messages").filter(Member::is_array) else {
        return Err(ShimError::new("compressed body has no messages array"));
    };
    let tools = Member::of(openai, "tools").filter(Member::is_array);
    let system = if original.system_string {
        messages.leading_system_text()
    } else {
        None
    };
    let parameters = parameters_text(original, openai);

    let text = &original.text;
    let mut out = Vec::with_capacity(text.len() + openai.as_bytes().len() / 2 + 128);
    out.push(b'{');
    let write_tools = |out: &mut Vec<u8>| match &tools {
        Some(tools) => tools.write(out),
        None => {
            out.extend_from_slice(b"[]");
            Ok(())
        }
    };
    for (i, (key, value)) in original.members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let key = text.get(key.clone()).unwrap_or_default();
        put_key(&mut out, key);
        match (key, &system, &parameters) {
            (b"system", Some(system), _) => put_str(&mut out, system),
            (b"messages", ..) => messages.write(&mut out)?,
            (b"tools", ..) => write_tools(&mut out)?,
            (b"parameters", _, Some(p)) => out.extend_from_slice(p),
            (b"chat_record_id", ..) if original.record_follows => put_str(&mut out, new_id),
            (b"request_id", ..) => put_str(&mut out, new_id),
            _ => out.extend_from_slice(text.get(value.clone()).unwrap_or(b"null")),
        }
    }
    let append = |out: &mut Vec<u8>, key: &[u8]| {
        if out.len() > 1 {
            out.push(b',');
        }
        put_key(out, key);
    };
    if !original.has(b"messages") {
        append(&mut out, b"messages");
        messages.write(&mut out)?;
    }
    if !original.has(b"tools") {
        append(&mut out, b"tools");
        write_tools(&mut out)?;
    }
    if let (false, Some(p)) = (original.has(b"parameters"), &parameters) {
        append(&mut out, b"parameters");
        out.extend_from_slice(p);
    }
    if !original.has(b"request_id") {
        append(&mut out, b"request_id");
        put_str(&mut out, new_id);
    }
    out.push(b'}');
    // Numbers the proxy's body carries as tags go back as their tokens.
    Ok(shimgate_shim_api::json::restore_numbers(out))
}

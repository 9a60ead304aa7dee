//! Exchange accounting: what the compression proxy did to one request.
//!
//! The ingress records a summary of each message it sent to the proxy (role,
//! content length in characters, a hash); the return leg compares the body
//! that came back. `compacted` = the messages differ at all (a proxy that
//! only adds a system preamble counts); `folded` = the total content really
//! got shorter, the proof of compression. Only `content` counts, never JSON
//! keys or tool definitions.

use std::collections::hash_map::DefaultHasher;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::SystemTime;

use serde_json::{json, Value};
use shimgate_shim_api::json_scan::{is_canonical, last_member, Cursor};
use shimgate_shim_api::OpenAiBody;
use similar::{Algorithm, DiffOp};

use crate::clock::epoch_ms;

/// Exchanges kept in `recentExchanges`.
pub const RECENT_EXCHANGES: usize = 6;
/// Per-message diff lines kept in `lastExchange.diff`.
const DIFF_LIMIT: usize = 64;

/// One message as the accounting sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MessageSummary {
    pub role: String,
    /// Characters of content (string content, or the text of text parts).
    pub chars: usize,
    hash: u64,
}

/// Summaries of the `messages` of an OpenAI body.
pub fn summarize(body: &Value) -> Vec<MessageSummary> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Vec::new();
    };
    messages.iter().map(summarize_one).collect()
}

fn summarize_one(m: &Value) -> MessageSummary {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut hasher = DefaultHasher::new();
    role.hash(&mut hasher);
    let mut chars = 0;
    match m.get("content") {
        Some(Value::String(s)) => {
            chars = s.chars().count();
            s.hash(&mut hasher);
        }
        Some(Value::Array(parts)) => {
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    chars += t.chars().count();
                    t.hash(&mut hasher);
                } else {
                    p.to_string().hash(&mut hasher);
                }
            }
        }
        Some(other) => other.to_string().hash(&mut hasher),
        None => {}
    }
    if let Some(calls) = m.get("tool_calls") {
        calls.to_string().hash(&mut hasher);
    }
    MessageSummary {
        role,
        chars,
        hash: hasher.finish(),
    }
}

/// [`summarize`] of a body's text, read with the cursor instead of parsed
/// whole: the same summaries (roles, counts, hashes) for the same JSON
/// however it is written. A message the cursor is unsure of (an escaped
/// or repeated key) is parsed alone; so is a value that is not written as
/// `serde_json` writes it, where the hash reads its serialisation.
pub fn summarize_text(body: &OpenAiBody) -> Vec<MessageSummary> {
    if let Some(parsed) = body.parsed() {
        return summarize(parsed);
    }
    match body.member("messages") {
        Ok(Some(raw)) if raw.first() == Some(&b'[') => {
            summarize_list(raw).unwrap_or_else(|| summarize(body.value()))
        }
        Ok(_) => Vec::new(),
        Err(_) => summarize(body.value()),
    }
}

fn summarize_list(raw: &[u8]) -> Option<Vec<MessageSummary>> {
    let mut c = Cursor::new(raw);
    c.enter_array()?;
    let mut out = Vec::new();
    let mut first = true;
    while c.next_item(&mut first)? {
        c.peek()?;
        let start = c.offset();
        c.skip_value()?;
        let message = raw.get(start..c.offset())?;
        out.push(summarize_message(message).unwrap_or_else(|| {
            let v: Value = serde_json::from_slice(message).unwrap_or(Value::Null);
            summarize_one(&v)
        }));
    }
    Some(out)
}

/// One message's summary off its text; `None` to parse it instead.
fn summarize_message(raw: &[u8]) -> Option<MessageSummary> {
    if raw.first() != Some(&b'{') {
        return None;
    }
    let (mut role, mut content, mut calls) = (None, None, None);
    let mut keys: Vec<&[u8]> = Vec::new();
    let mut c = Cursor::new(raw);
    c.enter_object()?;
    let mut first = true;
    while let Some(key) = c.next_key(&mut first)? {
        let name = key.raw(raw);
        if key.escaped || keys.contains(&name) {
            return None;
        }
        keys.push(name);
        c.peek()?;
        let start = c.offset();
        c.skip_value()?;
        let value = raw.get(start..c.offset())?;
        match name {
            b"role" => role = Some(value),
            b"content" => content = Some(value),
            b"tool_calls" => calls = Some(value),
            _ => {}
        }
    }
    let role = match role {
        Some(r) if r.first() == Some(&b'"') => string_of(r)?,
        _ => String::new(),
    };
    let mut hasher = DefaultHasher::new();
    role.hash(&mut hasher);
    let mut chars = 0;
    match content {
        Some(s) if s.first() == Some(&b'"') => {
            let s = string_of(s)?;
            chars = s.chars().count();
            s.hash(&mut hasher);
        }
        Some(list) if list.first() == Some(&b'[') => {
            let mut c = Cursor::new(list);
            c.enter_array()?;
            let mut first = true;
            while c.next_item(&mut first)? {
                c.peek()?;
                let start = c.offset();
                c.skip_value()?;
                let part = list.get(start..c.offset())?;
                match part_text(part)? {
                    Some(t) => {
                        chars += t.chars().count();
                        t.hash(&mut hasher);
                    }
                    None => serialised(part)?.hash(&mut hasher),
                }
            }
        }
        Some(other) => serialised(other)?.hash(&mut hasher),
        None => {}
    }
    if let Some(calls) = calls {
        serialised(calls)?.hash(&mut hasher);
    }
    Some(MessageSummary {
        role,
        chars,
        hash: hasher.finish(),
    })
}

/// A part's `text` when it is a string (`Some(None)`: it has none).
fn part_text(part: &[u8]) -> Option<Option<String>> {
    if part.first() != Some(&b'{') {
        return Some(None);
    }
    match last_member(part, b"text") {
        Ok(Some(t)) if t.first() == Some(&b'"') => Some(Some(string_of(t)?)),
        Ok(_) => Some(None),
        Err(_) => None,
    }
}

/// A raw string literal decoded.
fn string_of(raw: &[u8]) -> Option<String> {
    let inner = raw.get(1..raw.len().checked_sub(1)?)?;
    if inner.contains(&b'\\') {
        return serde_json::from_slice(raw).ok();
    }
    std::str::from_utf8(inner).ok().map(str::to_owned)
}

/// `Value::to_string` of a raw value: the text itself when it is written
/// as `serde_json` writes it, else its parse written again.
fn serialised(raw: &[u8]) -> Option<String> {
    if is_canonical(raw) {
        return std::str::from_utf8(raw).ok().map(str::to_owned);
    }
    serde_json::from_slice::<Value>(raw)
        .ok()
        .map(|v| v.to_string())
}

/// How one message changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiffKind {
    Shrunk,
    Grown,
    Added,
    Removed,
    Changed,
}

impl DiffKind {
    fn as_str(self) -> &'static str {
        match self {
            DiffKind::Shrunk => "shrunk",
            DiffKind::Grown => "grown",
            DiffKind::Added => "added",
            DiffKind::Removed => "removed",
            DiffKind::Changed => "changed",
        }
    }
}

/// One line of the per-message diff.
#[derive(Debug, Clone)]
pub struct DiffEntry {
    pub kind: DiffKind,
    pub role: String,
    pub before_len: usize,
    pub after_len: usize,
}

/// One return-leg request compared with what the ingress sent.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub at: SystemTime,
    pub rid: String,
    pub before_count: usize,
    pub after_count: usize,
    pub before_content: usize,
    pub after_content: usize,
    pub changed: bool,
    pub diff: Vec<DiffEntry>,
}

impl Exchange {
    /// The content really got shorter.
    pub fn content_shrank(&self) -> bool {
        self.after_content < self.before_content
    }

    /// `lastExchange`.
    pub fn to_json(&self) -> Value {
        json!({
            "at": epoch_ms(self.at),
            "rid": self.rid,
            "beforeCount": self.before_count,
            "afterCount": self.after_count,
            "beforeContent": self.before_content,
            "afterContent": self.after_content,
            "contentShrank": self.content_shrank(),
            "changed": self.changed,
            "diff": self.diff.iter().map(|d| json!({
                "kind": d.kind.as_str(),
                "role": d.role,
                "beforeLen": d.before_len,
                "afterLen": d.after_len,
                "delta": d.after_len as i64 - d.before_len as i64,
            })).collect::<Vec<_>>(),
        })
    }

    /// One line of `recentExchanges`.
    pub fn short_json(&self) -> Value {
        json!({
            "at": epoch_ms(self.at),
            "beforeCount": self.before_count,
            "afterCount": self.after_count,
            "beforeContent": self.before_content,
            "afterContent": self.after_content,
            "shrank": self.content_shrank(),
            "changed": self.changed,
        })
    }
}

/// Compares what was sent to the proxy with what came back.
pub fn compare(rid: &str, before: &[MessageSummary], after: &[MessageSummary]) -> Exchange {
    let pairs = align(before, after);
    let mut diff = Vec::new();
    let (mut bi, mut ai) = (0, 0);
    let gap =
        |b_end: usize, a_end: usize, bi: &mut usize, ai: &mut usize, diff: &mut Vec<DiffEntry>| {
            let olds = &before[*bi..b_end];
            let news = &after[*ai..a_end];
            // Within a gap, pair messages of the same role in order.
            let mut used = vec![false; news.len()];
            for old in olds {
                let found = news
                    .iter()
                    .enumerate()
                    .find(|(i, n)| !used[*i] && n.role == old.role)
                    .map(|(i, _)| i);
                match found {
                    Some(i) => {
                        used[i] = true;
                        let new = &news[i];
                        let kind = match new.chars.cmp(&old.chars) {
                            std::cmp::Ordering::Less => DiffKind::Shrunk,
                            std::cmp::Ordering::Greater => DiffKind::Grown,
                            std::cmp::Ordering::Equal => DiffKind::Changed,
                        };
                        diff.push(DiffEntry {
                            kind,
                            role: old.role.clone(),
                            before_len: old.chars,
                            after_len: new.chars,
                        });
                    }
                    None => diff.push(DiffEntry {
                        kind: DiffKind::Removed,
                        role: old.role.clone(),
                        before_len: old.chars,
                        after_len: 0,
                    }),
                }
            }
            for (i, new) in news.iter().enumerate() {
                if !used[i] {
                    diff.push(DiffEntry {
                        kind: DiffKind::Added,
                        role: new.role.clone(),
                        before_len: 0,
                        after_len: new.chars,
                    });
                }
            }
            *bi = b_end;
            *ai = a_end;
        };
    for (b, a) in pairs {
        gap(b, a, &mut bi, &mut ai, &mut diff);
        bi += 1;
        ai += 1;
    }
    gap(before.len(), after.len(), &mut bi, &mut ai, &mut diff);
    let changed = !diff.is_empty();
    diff.truncate(DIFF_LIMIT);
    Exchange {
        at: SystemTime::now(),
        rid: rid.to_string(),
        before_count: before.len(),
        after_count: after.len(),
        before_content: before.iter().map(|m| m.chars).sum(),
        after_content: after.iter().map(|m| m.chars).sum(),
        changed,
        diff,
    }
}

/// Index pairs of identical messages, in order: the equal runs of a
/// `similar` Myers diff, a longest common subsequence except where its
/// heuristics trade exactness for bounded work (a huge body changed
/// throughout: 10,000 messages take about 1 ms).
fn align(before: &[MessageSummary], after: &[MessageSummary]) -> Vec<(usize, usize)> {
    similar::capture_diff_slices(Algorithm::Myers, before, after)
        .iter()
        .filter_map(|op| match *op {
            DiffOp::Equal {
                old_index,
                new_index,
                len,
            } => Some((0..len).map(move |k| (old_index + k, new_index + k))),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The last exchange and the recent ones, for `/status`.
#[derive(Debug, Default)]
pub struct Exchanges {
    last: Option<Exchange>,
    recent: VecDeque<Exchange>,
}

impl Exchanges {
    /// Adds an exchange.
    pub fn push(&mut self, ex: Exchange) {
        if self.recent.len() == RECENT_EXCHANGES {
            self.recent.pop_front();
        }
        self.recent.push_back(ex.clone());
        self.last = Some(ex);
    }

    /// `(lastExchange, recentExchanges)`, newest first.
    pub fn to_json(&self) -> (Value, Value) {
        (
            self.last.as_ref().map_or(Value::Null, Exchange::to_json),
            Value::Array(self.recent.iter().rev().map(Exchange::short_json).collect()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(msgs: &[(&str, &str)]) -> Value {
        json!({"messages": msgs.iter().map(|(r, c)| json!({"role": r, "content": c})).collect::<Vec<_>>()})
    }

    #[test]
    fn identical_bodies_are_unchanged() {
        let b = summarize(&body(&[("user", "hi"), ("assistant", "hello")]));
        let ex = compare("r", &b, &b);
        assert!(!ex.changed);
        assert!(!ex.content_shrank());
        assert!(ex.diff.is_empty());
    }

    #[test]
    fn a_preamble_alone_is_compacted_but_not_folded() {
        let before = summarize(&body(&[("user", "hi"), ("assistant", "hello")]));
        let after = summarize(&body(&[
            ("system", "be brief"),
            ("user", "hi"),
            ("assistant", "hello"),
        ]));
        let ex = compare("r", &before, &after);
        assert!(ex.changed);
        assert!(!ex.content_shrank());
        assert_eq!(ex.diff.len(), 1);
        assert_eq!(ex.diff[0].kind, DiffKind::Added);
        assert_eq!(ex.diff[0].role, "system");
    }

    #[test]
    fn summarised_history_is_folded() {
        let long = "x".repeat(1000);
        let before = summarize(&body(&[
            ("user", &long),
            ("assistant", &long),
            ("user", "now?"),
        ]));
        let after = summarize(&body(&[
            ("system", "summary of earlier turns"),
            ("user", "now?"),
        ]));
        let ex = compare("r", &before, &after);
        assert!(ex.changed);
        assert!(ex.content_shrank());
        assert_eq!(ex.before_content, 2004);
        let kinds: Vec<_> = ex.diff.iter().map(|d| d.kind).collect();
        assert!(kinds.contains(&DiffKind::Removed));
        assert!(kinds.contains(&DiffKind::Added));
    }

    #[test]
    fn a_shortened_message_is_shrunk_with_its_delta() {
        let before = summarize(&body(&[("user", "aaaaaaaaaa"), ("user", "q")]));
        let after = summarize(&body(&[("user", "aaa"), ("user", "q")]));
        let ex = compare("r", &before, &after);
        assert_eq!(ex.diff.len(), 1);
        assert_eq!(ex.diff[0].kind, DiffKind::Shrunk);
        assert_eq!(ex.to_json()["diff"][0]["delta"], -7);
    }

    #[test]
    fn a_huge_body_shortened_throughout_is_diffed_per_message() {
        let long: Vec<(String, String)> = (0..5000)
            .map(|i| ("user".to_string(), format!("message {i} in full")))
            .collect();
        let short: Vec<(String, String)> = (0..5000)
            .map(|i| ("user".to_string(), format!("m{i}")))
            .collect();
        let as_body = |m: &[(String, String)]| json!({"messages": m.iter().map(|(r, c)| json!({"role": r, "content": c})).collect::<Vec<_>>()});
        let ex = compare(
            "r",
            &summarize(&as_body(&long)),
            &summarize(&as_body(&short)),
        );
        assert!(ex.changed && ex.content_shrank());
        assert_eq!(ex.diff.len(), DIFF_LIMIT);
        assert!(ex.diff.iter().all(|d| d.kind == DiffKind::Shrunk));
    }

    #[test]
    fn text_parts_count_as_content() {
        let b = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "image_url", "image_url": {"url": "data:x"}}]}]});
        assert_eq!(summarize(&b)[0].chars, 3);
    }

    #[test]
    fn recent_keeps_six_newest_first() {
        let mut ex = Exchanges::default();
        for i in 0..8 {
            ex.push(compare(&i.to_string(), &[], &[]));
        }
        let (last, recent) = ex.to_json();
        assert_eq!(last["rid"], "7");
        assert_eq!(recent.as_array().unwrap().len(), 6);
    }

    #[test]
    fn the_text_is_summarised_as_its_parse_is() {
        let messages = json!([
            {"role": "system", "content": "You are \"qoder\".\n"},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": 5}]},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "function": {"name": "g", "arguments": "{\"p\":1.5}"}}]},
            {"role": "tool", "content": {"odd": [1, 2.5, -0.0, 1e2]}},
            {"role": 7, "content": "é 中文 😀"},
            {"content": "no role"},
            "not a message",
            {"role": "user"},
        ]);
        let texts = [
            serde_json::to_string(&json!({"model": "m", "messages": messages})).unwrap(),
            serde_json::to_string_pretty(&json!({"model": "m", "messages": messages})).unwrap(),
            r#"{"messages":[{"role":"us\u0065r","content":"a\/b \u00e9"},{"role":"user","content":"x","content":"y"},{"ro\u006ce":"user","content":[{"text":"t","text":"u"}]}]}"#.to_string(),
            r#"{"messages":{"not":"a list"}}"#.to_string(),
            r#"{"model":"m"}"#.to_string(),
            r#"{"m\u0065ssages":[{"role":"user","content":"x"}]}"#.to_string(),
        ];
        for text in texts {
            let parsed: Value = serde_json::from_str(&text).unwrap();
            let body = OpenAiBody::parse(text.clone().into_bytes()).unwrap();
            assert_eq!(summarize_text(&body), summarize(&parsed), "{text}");
        }
    }
}

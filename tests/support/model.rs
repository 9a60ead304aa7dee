//! A scripted *model* behind a shim, for the compression runs: it speaks
//! the provider's wire (qoder envelopes, TRAE SOLO events, or plain OpenAI
//! SSE), reports `prompt_tokens` from what it really received, as a real
//! model would (characters / 4 of the messages' content and the tools'
//! definitions, [`prompt_tokens`]), and on the wires that report it (qoder,
//! OpenAI) the cached part: the leading messages that were the same in the
//! request before ([`Seen::cached_tokens`]). It follows billion-context's
//! nudges: when the last user message
//! asks it to call `compress` and offers a range (`m00003–m00021`, or a
//! block `b1`), it answers with a streamed `compress` tool call naming the
//! first offered range. It can be told to refuse the next request as too
//! long for its window (`overflow_next`), in its wire's own words.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use shimgate_testkit::openai::{frame, Chunks, DONE};

use super::cosy_check;
use super::qoder;
use super::upstream::{Recorded, Reply, Upstream};

/// Which provider wire the model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Qoder,
    Trae,
    OpenAi,
}

/// What the model saw of one request.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Message content characters (text and tool-call arguments).
    pub chars: usize,
    pub messages: usize,
    /// The `prompt_tokens` it reported.
    pub prompt_tokens: u64,
    /// The cached part it reported (0 on TRAE, whose wire has no such field).
    pub cached_tokens: u64,
    /// The start of its first message's text (a compressor's own request,
    /// a summary, says what it is there).
    pub first: String,
    /// The request carried a compress nudge and was answered with `compress`.
    pub compressed: bool,
    /// The request was refused as too long.
    pub overflowed: bool,
    /// Problems with the request, as the provider would see them.
    pub problems: Vec<String>,
}

/// A running model upstream.
#[derive(Clone)]
pub struct Model {
    pub upstream: Upstream,
    seen: Arc<Mutex<Vec<Seen>>>,
    overflow: Overflow,
    /// Answers given, once each, before the model answers again (after the
    /// request passed the provider's checks).
    scripted: Arc<Mutex<std::collections::VecDeque<Reply>>>,
}

/// What the model last read, message by message (its prompt cache).
type Cache = Arc<Mutex<Vec<String>>>;

/// The ids a qoder upstream has seen: it refuses a reused one with 103.
#[derive(Default)]
struct SeenIds {
    ask: HashSet<String>,
    payload: HashSet<String>,
}

/// The window the model names when it refuses a request as too long.
pub const MODEL_WINDOW: u64 = 16_000;

/// The next request is refused as too long: `Some(None)` in the model's
/// default words, `Some(Some(text))` in those.
type Overflow = Arc<Mutex<Option<Option<String>>>>;

impl Model {
    /// Starts a model speaking `wire`.
    pub async fn start(wire: Wire) -> Model {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let overflow: Overflow = Arc::default();
        let ids: Arc<Mutex<SeenIds>> = Arc::default();
        let scripted: Arc<Mutex<std::collections::VecDeque<Reply>>> = Arc::default();
        let cache: Cache = Arc::default();
        let (s, o, q) = (seen.clone(), overflow.clone(), scripted.clone());
        let upstream = Upstream::start(move |r, n| {
            let body = match qoder_checks(wire, r, &ids) {
                Ok(body) => body,
                Err(refusal) => {
                    s.lock().unwrap().push(Seen {
                        chars: 0,
                        messages: 0,
                        prompt_tokens: 0,
                        cached_tokens: 0,
                        first: String::new(),
                        compressed: false,
                        overflowed: false,
                        problems: vec![refusal.clone()],
                    });
                    return Reply::json(403, &refusal);
                }
            };
            let reply = answer(wire, r, &body, n, (&s, &o, &cache));
            q.lock().unwrap().pop_front().unwrap_or(reply)
        })
        .await;
        Model {
            upstream,
            seen,
            overflow,
            scripted,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.upstream.url()
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Answer the next request with `reply` (it is still checked and
    /// recorded as the provider would).
    pub fn answer_next_with(&self, reply: Reply) {
        self.scripted.lock().unwrap().push_back(reply);
    }

    /// Refuse the next request as longer than the window.
    pub fn overflow_next(&self) {
        *self.overflow.lock().unwrap() = Some(None);
    }

    /// Refuse the next request as too long, with `message` as the
    /// provider's words (TRAE's own 4022 text, say).
    pub fn overflow_next_saying(&self, message: &str) {
        *self.overflow.lock().unwrap() = Some(Some(message.to_owned()));
    }
}

/// What qoder checks before it answers: an `Encode=1` body decodes and its
/// COSY signature verifies (`101 Signature invalid` otherwise); neither the
/// payload `requestId` nor the ask `request_id` was seen before (`103
/// Duplicate request`). The ask on success, the refusal body otherwise.
fn qoder_checks(wire: Wire, r: &Recorded, ids: &Mutex<SeenIds>) -> Result<Value, String> {
    if wire != Wire::Qoder {
        return Ok(r.json());
    }
    let refuse =
        |code: &str, message: String| json!({"code": code, "message": message}).to_string();
    let ask = if r.body.first() == Some(&b'{') {
        r.json()
    } else {
        let headers: http::HeaderMap = r
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.parse::<http::HeaderName>().ok()?, v.parse().ok()?)))
            .collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let signed = cosy_check::verify(&headers, &r.body, &r.path, now, 300)
            .map_err(|e| refuse("101", e))?;
        if !ids
            .lock()
            .unwrap()
            .payload
            .insert(signed.payload_request_id.clone())
        {
            return Err(refuse(
                "103",
                format!(
                    "Duplicate request (requestId {})",
                    signed.payload_request_id
                ),
            ));
        }
        let plain = cosy_check::decode(&r.body)
            .ok_or_else(|| refuse("101", "the body does not decode".into()))?;
        serde_json::from_slice(&plain)
            .map_err(|e| refuse("400", format!("the ask is not JSON: {e}")))?
    };
    let id = ask["request_id"].as_str().unwrap_or_default().to_owned();
    if !ids.lock().unwrap().ask.insert(id.clone()) {
        return Err(refuse(
            "103",
            format!("Duplicate request (request_id {id})"),
        ));
    }
    Ok(ask)
}

/// The prompt tokens a request costs: a quarter of the characters of its
/// messages' content (text and tool-call arguments) and of its tools'
/// definitions (a tool's `parameters` counted as the JSON object it
/// describes, whether the wire sends it as an object or as a string).
pub fn prompt_tokens(body: &Value) -> u64 {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    ((content_chars(&messages) + tools_chars(body)) / 4) as u64
}

/// Characters of a body's tool definitions, `parameters` as objects.
pub fn tools_chars(body: &Value) -> usize {
    let mut tools = body["tools"].as_array().cloned().unwrap_or_default();
    for t in &mut tools {
        if let Some(p) = t.pointer_mut("/function/parameters") {
            if let Some(parsed) = p
                .as_str()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
            {
                *p = parsed;
            }
        }
    }
    if tools.is_empty() {
        return 0;
    }
    Value::Array(tools).to_string().chars().count()
}

/// The cached part of a prompt: the characters / 4 of the leading
/// messages that are the same as in the request before (a rewritten
/// prefix, as a compressor's, starts the cache afresh).
fn cached_tokens(messages: &[Value], cache: &Mutex<Vec<String>>) -> u64 {
    let texts: Vec<String> = messages.iter().map(Value::to_string).collect();
    let mut before = cache.lock().unwrap();
    let same = before
        .iter()
        .zip(&texts)
        .take_while(|(a, b)| a == b)
        .count();
    let chars = content_chars(&messages[..same]);
    *before = texts;
    (chars / 4) as u64
}

fn answer(
    wire: Wire,
    r: &Recorded,
    body: &Value,
    n: usize,
    (seen, overflow, cache): (&Mutex<Vec<Seen>>, &Overflow, &Cache),
) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let chars = content_chars(&messages);
    let prompt_tokens = prompt_tokens(body);
    let cached = if wire == Wire::Trae {
        0
    } else {
        cached_tokens(&messages, cache).min(prompt_tokens)
    };
    let usage = Counted {
        prompt: prompt_tokens,
        cached,
    };
    let mut record = Seen {
        chars,
        messages: messages.len(),
        prompt_tokens,
        cached_tokens: cached,
        first: messages
            .first()
            .map(|m| content_text(&m["content"]).chars().take(80).collect())
            .unwrap_or_default(),
        compressed: false,
        overflowed: false,
        problems: problems(wire, r, body),
    };
    let refuse = overflow.lock().unwrap().take();
    let reply = if let Some(words) = refuse {
        record.overflowed = true;
        too_long(wire, prompt_tokens, words)
    } else if let Some((start, end)) = nudge_range(&messages) {
        record.compressed = true;
        let args = json!({"topic": "earlier turns", "content": [{"startId": start, "endId": end,
            "summary": format!("The user and the assistant went through notes {start} to {end}.")}]})
        .to_string();
        tool_call(wire, &format!("call_c{n}"), "compress", &args, usage)
    } else {
        text(wire, &format!("Noted, reply {n}."), usage)
    };
    seen.lock().unwrap().push(record);
    reply
}

/// What the real provider would refuse in a request.
fn problems(wire: Wire, r: &Recorded, b: &Value) -> Vec<String> {
    match wire {
        Wire::Trae => super::trae::check_request(r),
        Wire::Qoder => {
            let mut bad = Vec::new();
            if !b["request_id"].is_string() || !b["business"].is_object() {
                bad.push("the ask lost request_id or business".into());
            }
            if !b["tools"].is_array() {
                bad.push("the ask has no tools".into());
            }
            bad
        }
        Wire::OpenAi => Vec::new(),
    }
}

/// The text of a message's content: a string, or SOLO text parts.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Content characters of a message list: text plus tool-call arguments.
pub fn content_chars(messages: &[Value]) -> usize {
    messages
        .iter()
        .map(|m| {
            let args: usize = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let f = if c["function"].is_object() {
                        &c["function"]
                    } else {
                        &c["function_call"]
                    };
                    f["arguments"].as_str().map_or(0, |a| a.chars().count())
                })
                .sum();
            content_text(&m["content"]).chars().count() + args
        })
        .sum()
}

/// The first range a compress nudge offers, if the last message is one.
pub fn nudge_range(messages: &[Value]) -> Option<(String, String)> {
    let last = messages.last()?;
    if last["role"] != "user" {
        return None;
    }
    offered_range(&content_text(&last["content"]))
}

/// The first range a nudge text offers: the first `mNNNNN–mNNNNN` (an en
/// dash) under "Compressible ranges", else the block ids of a tier-2/3
/// nudge's `Example: compress({ content: [{ startId: "b1", endId: "b2" …`.
pub fn offered_range(text: &str) -> Option<(String, String)> {
    if let Some(at) = text.find("Compressible ranges") {
        let listed = &text[at..];
        let is_ref = |s: &str| {
            s.len() >= 6 && s.starts_with('m') && s.as_bytes()[1..6].iter().all(u8::is_ascii_digit)
        };
        return listed.match_indices('m').find_map(|(i, _)| {
            let cand = &listed[i..];
            let end = cand.get(6..)?.strip_prefix('\u{2013}')?;
            (is_ref(cand) && is_ref(end)).then(|| (cand[..6].to_string(), end[..6].to_string()))
        });
    }
    let example = &text[text.find("Example: compress(")?..];
    let quoted = |key: &str| -> Option<String> {
        let from = &example[example.find(key)? + key.len()..];
        let from = from.trim_start_matches([':', ' ', '"']);
        Some(from[..from.find('"')?].to_string())
    };
    Some((quoted("startId")?, quoted("endId")?))
}

/// What the model reports of a request it answers.
#[derive(Debug, Clone, Copy)]
struct Counted {
    prompt: u64,
    cached: u64,
}

/// The usage chunk of `chunks` with the cached part, as qoder's envelope
/// and the OpenAI wire report it (`prompt_tokens_details.cached_tokens`).
fn usage_chunk(chunks: &Chunks<'_>, c: Counted) -> Value {
    let mut v = chunks.usage(c.prompt, 5);
    v["usage"]["prompt_tokens_details"] = json!({"cached_tokens": c.cached});
    v
}

fn text(wire: Wire, text: &str, c: Counted) -> Reply {
    match wire {
        Wire::Qoder => {
            // The testkit's answer, its usage frame reporting the cache.
            let usage = qoder::envelope(&usage_chunk(&qoder::CHUNKS, c).to_string());
            qoder::answer_frames(text, c.prompt)
                .into_iter()
                .map(|f| {
                    if f.contains("usage") {
                        usage.clone()
                    } else {
                        f
                    }
                })
                .fold(Reply::sse(), |r, f| r.chunk(f))
                .hold()
        }
        Wire::Trae => super::trae::reply(&super::trae::answer(text, None, c.prompt)),
        Wire::OpenAi => openai_sse(&[json!({"content": text})], "stop", c),
    }
}

fn tool_call(wire: Wire, id: &str, name: &str, args: &str, c: Counted) -> Reply {
    match wire {
        Wire::Trae => {
            super::trae::reply(&super::trae::answer("", Some((id, name, args)), c.prompt))
        }
        Wire::Qoder => {
            let (a, b) = args.split_at(args.len() / 2);
            let chunk = |delta, finish| qoder::CHUNKS.delta(delta, finish).to_string();
            let usage = usage_chunk(&qoder::CHUNKS, c).to_string();
            Reply::sse()
                .chunk(qoder::envelope(&qoder::role_chunk()))
                .chunk(qoder::envelope(&chunk(
                    json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}),
                    Value::Null,
                )))
                .chunk(qoder::envelope(&chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
                    Value::Null,
                )))
                .chunk(qoder::envelope(&chunk(json!({}), json!("tool_calls"))))
                .chunk(qoder::envelope(&usage))
                .chunk(qoder::envelope("[DONE]"))
                .hold()
        }
        Wire::OpenAi => openai_sse(
            &[
                json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": args}}]}),
            ],
            "tool_calls",
            c,
        ),
    }
}

/// The model's refusal of a request too long for its window, in `words`
/// or its default ones.
fn too_long(wire: Wire, prompt_tokens: u64, words: Option<String>) -> Reply {
    let message = words.unwrap_or_else(|| {
        format!(
            "The prompt is too long: {prompt_tokens} tokens, the limit of {MODEL_WINDOW} tokens"
        )
    });
    match wire {
        Wire::Trae => super::trae::reply(&super::trae::error_answer(4022, &message)),
        Wire::Qoder => Reply::sse()
            .chunk(qoder::error_envelope(
                400,
                &json!({"code": "400", "message": message}).to_string(),
            ))
            .end(),
        Wire::OpenAi => Reply::json(
            400,
            &json!({"error": {"message": message, "code": "context_length_exceeded"}}).to_string(),
        ),
    }
}

fn openai_sse(deltas: &[Value], finish: &str, c: Counted) -> Reply {
    let chunks = Chunks {
        id: "chatcmpl-m",
        created: 1,
        model: "m",
    };
    let mut r = Reply::sse().chunk(frame(
        &chunks.delta(json!({"role": "assistant"}), Value::Null),
    ));
    for d in deltas {
        r = r.chunk(frame(&chunks.delta(d.clone(), Value::Null)));
    }
    r.chunk(frame(&chunks.delta(json!({}), json!(finish))))
        .chunk(frame(&usage_chunk(&chunks, c)))
        .chunk(DONE)
        .end()
}

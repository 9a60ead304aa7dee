//! Test support shared by the unit tests, the fuzz targets and the bench:
//! what a TRAE client makes of a SOLO stream (the [`Digest`]), both legs run
//! over whole byte streams, a check that OpenAI output is well framed, and a
//! simulation of what billion-context measurably does to a stream
//! (`research/bili.md` §2).

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use serde_json::{json, Map, Value};
use shimgate_shim_api::sse::{parse_all, SseEvent, SseParser};
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};

use crate::solo::Output;
use crate::{ToOpenAi, ToSolo};

/// An event's data: JSON when it parses, else the text.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// Parsed JSON.
    Json(Value),
    /// Anything else, as (lossy) text.
    Text(String),
}

impl Data {
    fn of(raw: &[u8]) -> Data {
        match serde_json::from_slice(raw) {
            Ok(v) => Data::Json(v),
            Err(_) => Data::Text(String::from_utf8_lossy(raw).into_owned()),
        }
    }
}

/// An event with its name, last-event-id and data.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    /// The `event:` name (`None` = no name).
    pub name: Option<String>,
    /// The last-event-id at dispatch.
    pub id: Option<String>,
    /// The data.
    pub data: Data,
}

/// One tool call assembled from its fragments.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Call {
    /// The first non-empty id.
    pub id: String,
    /// The first non-empty name.
    pub name: String,
    /// The concatenated arguments.
    pub arguments: String,
    /// Members OpenAI lacks, per fragment that had any.
    pub extra: Vec<(Map<String, Value>, Map<String, Value>)>,
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum End {
    /// No end event: the stream was cut.
    #[default]
    Cut,
    /// A `done` event (or a bare `[DONE]`, as `{"finish_reason": …}` with no id).
    Done(Seen),
    /// An `error` event.
    Error(Seen),
}

/// What a TRAE client assembles from a SOLO stream, up to its first end.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Digest {
    /// All `output.response` text.
    pub text: String,
    /// All `output.reasoning_content` text (`extra_info` is not reasoning).
    pub reasoning: String,
    /// Tool calls by index.
    pub calls: BTreeMap<u64, Call>,
    /// The last `token_usage`.
    pub usage: Option<Seen>,
    /// How it ended.
    pub end: End,
    /// Every other event, in order (`output` frames SOLO's shape does not
    /// explain, or with nothing to stream, are here too).
    pub events: Vec<Seen>,
    /// Per streamed `output` event: its id and members OpenAI lacks.
    pub outputs: Vec<(Option<String>, Map<String, Value>)>,
}

fn lossy(b: Option<&Bytes>) -> Option<String> {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
}

/// The digest of a SOLO byte stream.
pub fn digest(solo: &[u8]) -> Digest {
    let mut d = Digest::default();
    let mut parser = SseParser::new();
    parser.push(Bytes::copy_from_slice(solo));
    let mut named = false;
    while let Ok(Some(ev)) = parser.next_event() {
        let seen = || Seen {
            name: lossy(ev.event.as_ref()),
            id: lossy(ev.id.as_ref()),
            data: Data::of(&ev.data),
        };
        match ev.event.as_deref() {
            Some(b"output") => match Output::parse(&ev.data).filter(Output::is_content) {
                Some(o) => named |= add_output(&mut d, &o, lossy(ev.id.as_ref())),
                None => d.events.push(seen()),
            },
            Some(b"token_usage") => d.usage = Some(seen()),
            Some(b"done") => {
                d.end = End::Done(seen());
                break;
            }
            Some(b"error") => {
                d.end = End::Error(seen());
                break;
            }
            None | Some(b"message") if ev.data.trim_ascii() == b"[DONE]" => {
                let reason = if named { "tool_calls" } else { "stop" };
                d.end = End::Done(Seen {
                    name: Some("done".into()),
                    id: None,
                    data: Data::Json(json!({ "finish_reason": reason })),
                });
                break;
            }
            _ => d.events.push(seen()),
        }
    }
    d
}

fn decode(raw: &[u8]) -> String {
    serde_json::from_slice(raw).unwrap_or_default()
}

/// Adds one streamed `output`; whether it named a tool call.
fn add_output(d: &mut Digest, o: &Output<'_>, id: Option<String>) -> bool {
    if o.has_text() {
        d.text.push_str(&decode(o.response));
    }
    if o.has_reasoning() {
        d.reasoning.push_str(&decode(o.reasoning));
    }
    let mut named = false;
    for t in &o.tools {
        let call = d.calls.entry(t.index).or_default();
        if call.id.is_empty() {
            call.id.clone_from(&t.id);
        }
        if call.name.is_empty() {
            call.name.clone_from(&t.name);
        }
        named |= !t.name.is_empty();
        call.arguments.push_str(&t.arguments);
        if !t.extra.is_empty() || !t.function_extra.is_empty() {
            call.extra.push((t.extra.clone(), t.function_extra.clone()));
        }
    }
    let extra = o
        .extra
        .iter()
        .map(|(k, v)| (decode(k), serde_json::from_slice(v).unwrap_or(Value::Null)))
        .collect();
    d.outputs.push((id, extra));
    named
}

/// Runs a translator over `chunks` as the runtime does: events until `End`
/// or `Error`, then `eof`, and `fail` when the end was an error nobody wrote.
pub fn run<T: StreamTranslator>(t: &mut T, chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    for chunk in chunks {
        parser.push(chunk);
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => match t.event(&ev, &mut out) {
                    FrameClass::End | FrameClass::Error(_) => return out.to_vec(),
                    _ => {}
                },
                Ok(None) => break,
                Err(e) => {
                    t.fail(
                        &Failure::new(FailureCode::Transport, e.to_string()),
                        &mut out,
                    );
                    return out.to_vec();
                }
            }
        }
    }
    let _ = parser.finish();
    if let FrameClass::Error(f) = t.eof(&mut out) {
        t.fail(&f, &mut out);
    }
    out.to_vec()
}

/// `bytes` cut into pieces of `size` bytes (at least 1).
pub fn pieces(bytes: &[u8], size: usize) -> Vec<Bytes> {
    bytes
        .chunks(size.max(1))
        .map(Bytes::copy_from_slice)
        .collect()
}

/// The return leg over a SOLO stream given as `chunks`.
pub fn convert(chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    let request = json!({"model": "glm-5.2", "stream": true});
    run(
        &mut ToOpenAi::with_identity(&request, "chatcmpl-test", 1),
        chunks,
    )
}

/// The ingress over an OpenAI stream given as `chunks`.
pub fn rebuild(chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    run(&mut ToSolo::new(), chunks)
}

/// Checks OpenAI output framing: every frame is one `data:` line ended by a
/// blank line, holds a JSON object or `[DONE]`, and exactly one `[DONE]`
/// closes the stream.
pub fn check_openai(bytes: &[u8]) -> Result<(), String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
    let body = text
        .strip_suffix("\n\n")
        .ok_or_else(|| "does not end with a blank line".to_owned())?;
    let frames: Vec<&str> = body.split("\n\n").collect();
    for (i, frame) in frames.iter().enumerate() {
        let data = frame
            .strip_prefix("data: ")
            .ok_or_else(|| format!("frame {i} is not a data line: {frame:?}"))?;
        if data.contains(['\n', '\r']) {
            return Err(format!("frame {i} has more than one line: {frame:?}"));
        }
        let last = i + 1 == frames.len();
        if data == "[DONE]" {
            if !last {
                return Err(format!("[DONE] at frame {i} is not last"));
            }
        } else if last {
            return Err("the stream does not end with [DONE]".into());
        } else if !serde_json::from_str::<Value>(data).is_ok_and(|v| v.is_object()) {
            return Err(format!("frame {i} is not a JSON object: {data:?}"));
        }
    }
    Ok(())
}

/// What billion-context does to an OpenAI stream (`research/bili.md` §2):
/// content frames (a choice with a delta, no finish, no tool calls) pass byte
/// for byte; finish, usage, `[DONE]`, error and choice-less frames are
/// swallowed; tool-call fragments come back as one frame with whole calls;
/// then its own `stop` finish with the last usage, and its own `[DONE]`.
pub fn bili(openai: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut usage = json!({"total_tokens": 0});
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    for ev in parse_all(openai).unwrap_or_default() {
        if ev.data.trim_ascii() == b"[DONE]" {
            break;
        }
        let Ok(v) = serde_json::from_slice::<Value>(&ev.data) else {
            continue;
        };
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            usage = u.clone();
        }
        let Some(choice) = v.pointer("/choices/0") else {
            continue;
        };
        if choice.get("finish_reason").is_some_and(|r| !r.is_null()) {
            continue;
        }
        if let Some(list) = choice
            .pointer("/delta/tool_calls")
            .and_then(Value::as_array)
        {
            for (pos, t) in list.iter().enumerate() {
                let s = |p: &str| {
                    t.pointer(p)
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned()
                };
                let index = t.get("index").and_then(Value::as_u64).unwrap_or(pos as u64);
                let call = calls.entry(index).or_default();
                if call.0.is_empty() {
                    call.0 = s("/id");
                }
                if call.1.is_empty() {
                    call.1 = s("/function/name");
                }
                call.2.push_str(&s("/function/arguments"));
            }
            continue;
        }
        if choice.get("delta").is_some() {
            pass(&mut out, &ev);
        }
    }
    let head =
        json!({"id":"chatcmpl-proxy-1","object":"chat.completion.chunk","created":1,"model":"m"});
    if !calls.is_empty() {
        let list: Vec<Value> = calls
            .into_iter()
            .map(|(i, (id, name, args))| {
                json!({"index":i,"id":id,"type":"function","function":{"name":name,"arguments":args}})
            })
            .collect();
        let mut frame = head.clone();
        frame["choices"] = json!([{"index":0,"delta":{"tool_calls":list},"finish_reason":null}]);
        data_line(&mut out, &frame);
    }
    let mut finish = head;
    finish["choices"] = json!([{"index":0,"delta":{},"finish_reason":"stop"}]);
    finish["usage"] = usage;
    data_line(&mut out, &finish);
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn pass(out: &mut Vec<u8>, ev: &SseEvent) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(&ev.data);
    out.extend_from_slice(b"\n\n");
}

fn data_line(out: &mut Vec<u8>, v: &Value) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(v.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Which proxy sat between the two legs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// None: the ingress read the return leg's bytes.
    Direct,
    /// billion-context, as [`bili`] simulates it.
    Bili,
    /// A proxy that passes every byte but re-chunks them one by one.
    PassThrough,
}

/// Every proxy situation.
pub const PROXIES: [Proxy; 3] = [Proxy::Direct, Proxy::Bili, Proxy::PassThrough];

/// The SOLO stream the agent gets for an upstream SOLO stream.
pub fn round_trip(solo: &[u8], proxy: Proxy) -> Vec<u8> {
    let openai = convert(pieces(solo, 4096));
    match proxy {
        Proxy::Direct => rebuild(pieces(&openai, 4096)),
        Proxy::Bili => rebuild(pieces(&bili(&openai), 4096)),
        Proxy::PassThrough => rebuild(pieces(&openai, 1)),
    }
}

/// Checks that `rebuilt` gives the agent what `original` did. Through
/// billion-context, per-fragment details of tool calls and the ids of
/// streamed frames are not compared (it re-emits calls as one frame), and
/// a `token_usage` it invents for a stream that had none is allowed. A cut
/// original must come back as a `TRANSPORT` error.
pub fn compare(original: &Digest, rebuilt: &Digest, proxy: Proxy) -> Result<(), String> {
    let differ = |what: &str, a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| {
        Err(format!(
            "{what} differs:\n  upstream: {a:?}\n  agent:    {b:?}"
        ))
    };
    if original.text != rebuilt.text {
        return differ("text", &original.text, &rebuilt.text);
    }
    if original.reasoning != rebuilt.reasoning {
        return differ("reasoning", &original.reasoning, &rebuilt.reasoning);
    }
    let core = |calls: &BTreeMap<u64, Call>| -> Vec<(u64, String, String, String)> {
        calls
            .iter()
            .map(|(i, c)| (*i, c.id.clone(), c.name.clone(), c.arguments.clone()))
            .collect()
    };
    if core(&original.calls) != core(&rebuilt.calls) {
        return differ("tool calls", &original.calls, &rebuilt.calls);
    }
    if original.events != rebuilt.events {
        return differ("events", &original.events, &rebuilt.events);
    }
    let usage_may_differ = proxy == Proxy::Bili && original.usage.is_none();
    if !usage_may_differ && original.usage != rebuilt.usage {
        return differ("token_usage", &original.usage, &rebuilt.usage);
    }
    match (&original.end, &rebuilt.end) {
        (End::Cut, End::Error(e)) => {
            let code = match &e.data {
                Data::Json(v) => v.get("code").cloned(),
                Data::Text(_) => None,
            };
            if code != Some(json!("TRANSPORT")) {
                return differ("end of a cut stream", &original.end, &rebuilt.end);
            }
        }
        (End::Done(a), End::Done(b)) if a.id.is_none() && a.data == b.data => {}
        (a, b) if a == b => {}
        (a, b) => return differ("end", a, b),
    }
    if proxy != Proxy::Bili {
        if original.outputs != rebuilt.outputs {
            return differ(
                "output ids and members",
                &original.outputs,
                &rebuilt.outputs,
            );
        }
        let extras = |calls: &BTreeMap<u64, Call>| -> Vec<_> {
            calls.values().map(|c| c.extra.clone()).collect()
        };
        if extras(&original.calls) != extras(&rebuilt.calls) {
            return differ("tool-call members", &original.calls, &rebuilt.calls);
        }
    }
    Ok(())
}

/// Builds a SOLO stream from arbitrary bytes (for the round-trip fuzz
/// target and its stable stand-in test): every byte picks the next event
/// (text, reasoning, tool-call fragments, usage, done, error, bookkeeping,
/// unknown events, id and retry lines, a bare `[DONE]`), later bytes fill it
/// in; the first byte also picks CRLF or LF line ends.
pub fn generate(bytes: &[u8]) -> Vec<u8> {
    let mut g = Gen { bytes, at: 0 };
    let crlf = g.byte() & 3 == 0;
    let mut out = String::new();
    let ev = |out: &mut String, name: Option<&str>, data: &str, id: Option<&str>| {
        if let Some(id) = id {
            out.push_str(&format!("id:{id}\n"));
        }
        if let Some(name) = name {
            out.push_str(&format!("event:{name}\n"));
        }
        out.push_str(&format!("data:{data}\n\n"));
    };
    while g.at < g.bytes.len() {
        let op = g.byte();
        let id = (op & 0x80 != 0).then(|| g.byte().to_string());
        let id = id.as_deref();
        let idx = u64::from(g.byte() % 3);
        let out_json = |response: Value, reasoning: Value, tools: Value| {
            json!({"response": response, "reasoning_content": reasoning, "tool_calls": tools})
                .to_string()
        };
        match op % 16 {
            0 | 1 => ev(
                &mut out,
                Some("output"),
                &out_json(json!(g.text()), Value::Null, Value::Null),
                id,
            ),
            2 => ev(
                &mut out,
                Some("output"),
                &out_json(json!(""), json!(g.text()), Value::Null),
                id,
            ),
            3 => ev(
                &mut out,
                Some("output"),
                &out_json(json!(g.text()), json!(g.text()), Value::Null),
                id,
            ),
            4 => {
                let call = json!([{"index": idx, "id": format!("call_{idx}"), "type": "function",
                    "function_call": {"name": format!("tool{idx}"), "arguments": g.text()}}]);
                ev(
                    &mut out,
                    Some("output"),
                    &out_json(json!(""), Value::Null, call),
                    id,
                );
            }
            5 => {
                let call = json!([{"index": idx, "id": "", "type": "function", "namespace": "ns",
                    "function_call": {"name": "", "arguments": g.text()}}]);
                ev(
                    &mut out,
                    Some("output"),
                    &out_json(json!(""), Value::Null, call),
                    id,
                );
            }
            6 => {
                let call = json!({"index": idx, "id": format!("c{idx}"), "type": "function",
                    "function_call": {"name": "f", "arguments": g.text()}});
                ev(
                    &mut out,
                    Some("output"),
                    &out_json(json!(g.text()), Value::Null, call),
                    id,
                );
            }
            7 => {
                let (p, c) = (u64::from(g.byte()), u64::from(g.byte()));
                let data = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c, "reasoning_tokens": c / 2});
                ev(&mut out, Some("token_usage"), &data.to_string(), id);
            }
            8 => {
                let reason =
                    ["stop", "tool_calls", "length", "content_filter"][usize::from(g.byte() % 4)];
                ev(
                    &mut out,
                    Some("done"),
                    &json!({ "finish_reason": reason }).to_string(),
                    id,
                );
            }
            9 => {
                let code =
                    [4008, 4022, 4001, 1001, 4050, 7777, 4_000_005][usize::from(g.byte() % 7)];
                let data = json!({"code": code, "message": g.text(), "extra": null});
                ev(&mut out, Some("error"), &data.to_string(), id);
            }
            10 => {
                let name = [
                    "metadata",
                    "timing_cost",
                    "extra_info",
                    "queue_begin",
                    "request_wait_in_queue",
                ][usize::from(g.byte() % 5)];
                ev(
                    &mut out,
                    Some(name),
                    &json!({ "v": g.text() }).to_string(),
                    id,
                );
            }
            11 => ev(
                &mut out,
                Some("mystery_event"),
                &g.text().replace(['\n', '\r'], " "),
                id,
            ),
            12 => ev(
                &mut out,
                None,
                &json!({ "nameless": g.byte() }).to_string(),
                id,
            ),
            13 => out.push_str(&format!("retry:{}\n", g.byte())),
            14 => ev(
                &mut out,
                Some("output"),
                r#"{"response":"","reasoning_content":"","tool_calls":null}"#,
                id,
            ),
            _ => {
                if g.byte() & 7 == 0 {
                    ev(&mut out, None, "[DONE]", id);
                } else {
                    ev(
                        &mut out,
                        Some("output"),
                        &format!("{{\"response\":{},\n\"x\":1}}", json!(g.text()))
                            .replace('\n', "\ndata:"),
                        id,
                    );
                }
            }
        }
    }
    if crlf {
        out = out.replace('\n', "\r\n");
    }
    out.into_bytes()
}

struct Gen<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Gen<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// A short text that exercises escaping: quotes, backslashes, line
    /// breaks, control characters, CJK and astral characters.
    fn text(&mut self) -> String {
        const ALPHABET: [&str; 16] = [
            "a", "Z", " ", "\"", "\\", "\n", "\r", "\t", "\u{1}", "中", "😀", "{", "}", ":", ",",
            "\u{2028}",
        ];
        let len = self.byte() % 8;
        (0..len)
            .map(|_| ALPHABET[usize::from(self.byte() % 16)])
            .collect()
    }
}

//! The digest of a SOLO stream (what a TRAE client assembles from it) and
//! the comparison of an upstream stream's digest with the agent's.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use shimgate_shim_api::sse::SseParser;
use shimgate_shim_trae::solo::Output;

use super::Proxy;

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

//! Both provider wires as the load tool speaks them: what an agent sends
//! (a qoder plaintext ask, a TRAE SOLO body) and what a scripted upstream
//! answers (envelope SSE, SOLO SSE), with every content piece numbered so a
//! checker can prove nothing was lost, doubled or reordered. The frames
//! themselves come from `shimgate_testkit`.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use shimgate_testkit::openai::{self, Chunks};
use shimgate_testkit::upstream::{Reply, Step, STAMP};
use shimgate_testkit::{qoder, trae};

pub use shimgate_testkit::qoder::{envelope, PATH as QODER_PATH};
pub use shimgate_testkit::trae::{
    body as trae_body, body_problems as solo_problems, text as solo_text, PATH as TRAE_PATH,
    REASONING,
};

/// A path no shim intercepts: it passes through the chain byte for byte.
pub const PASSTHROUGH_PATH: &str = "/api/ide/v1/get_detail_param";

/// The two wires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wire {
    Qoder,
    Trae,
}

impl Wire {
    pub fn name(self) -> &'static str {
        match self {
            Wire::Qoder => "qoder",
            Wire::Trae => "trae",
        }
    }

    /// The inference path the agent posts to.
    pub fn path(self) -> &'static str {
        match self {
            Wire::Qoder => QODER_PATH,
            Wire::Trae => TRAE_PATH,
        }
    }

    /// The wire of an upstream request path (after the route prefix).
    pub fn of_path(path: &str) -> Option<Wire> {
        if path.contains("/agent_chat_generation") {
            Some(Wire::Qoder)
        } else if path.contains("/llm_utils_chat") {
            Some(Wire::Trae)
        } else {
            None
        }
    }
}

/// The marker of text piece `k` of call `call`: `~call.k~`, or with a send
/// time `~call.k:NNNN~` (filled in by the upstream as the frame leaves).
/// Only digits, `~`, `.` and `:`: it survives any level of JSON escaping.
pub fn piece(call: u64, k: usize, stamped: bool) -> String {
    if stamped {
        format!("~{call}.{k}:{}~", std::str::from_utf8(STAMP).unwrap_or(""))
    } else {
        format!("~{call}.{k}~")
    }
}

/// Tool-call argument fragment `k` (the arguments are `{"seq":"…"}`).
pub fn arg_piece(call: u64, k: usize) -> String {
    format!("~{call}.a{k}~")
}

/// The whole tool-call arguments for `n` fragments.
pub fn args_of(call: u64, n: usize) -> String {
    let inner: String = (0..n).map(|k| arg_piece(call, k)).collect();
    format!("{{\"seq\":\"{inner}\"}}")
}

/// The argument fragments as the upstream streams them: an opening, the
/// numbered middle, a closing.
fn arg_fragments(call: u64, n: usize) -> Vec<String> {
    let mut v = vec!["{\"seq\":\"".to_string()];
    v.extend((0..n).map(|k| arg_piece(call, k)));
    v.push("\"}".to_string());
    v
}

/// How an answer is written.
#[derive(Debug, Clone)]
pub struct Answer {
    pub call: u64,
    /// Numbered text pieces.
    pub pieces: usize,
    /// Tool-call argument fragments (0: no tool call).
    pub tool_frags: usize,
    /// Every frame cut into 1–7 byte writes.
    pub split: bool,
    /// Heartbeat envelopes between frames (qoder).
    pub heartbeats: bool,
    /// Which of the wire's endings (qoder: `body:"[DONE]"` then hold open,
    /// bare `[DONE]`, `event:finish`; trae: `done`, `done` + `[DONE]`).
    pub ending: u8,
    /// Pause between content frames.
    pub pace: Option<Duration>,
    /// Stamp the send time into each piece (latency runs).
    pub stamped: bool,
}

impl Answer {
    /// A plain answer of `pieces` numbered pieces.
    pub fn plain(call: u64, pieces: usize) -> Answer {
        Answer {
            call,
            pieces,
            tool_frags: 0,
            split: false,
            heartbeats: false,
            ending: 0,
            pace: None,
            stamped: false,
        }
    }
}

/// Builds replies frame by frame, splitting and pacing as asked.
struct Writer {
    reply: Reply,
    split: bool,
}

impl Writer {
    fn new(split: bool) -> Writer {
        Writer {
            reply: Reply::sse(),
            split,
        }
    }

    fn frame(&mut self, bytes: String) {
        let reply = std::mem::take(&mut self.reply);
        self.reply = if self.split {
            reply.scatter(bytes.as_bytes(), 7)
        } else {
            reply.then(Step::Chunk(Bytes::from(bytes)))
        };
    }

    fn stamped(&mut self, bytes: String) {
        let reply = std::mem::take(&mut self.reply);
        self.reply = reply.stamped(Bytes::from(bytes));
    }

    fn pause(&mut self, d: Option<Duration>) {
        if let Some(d) = d {
            let reply = std::mem::take(&mut self.reply);
            self.reply = reply.then(Step::Sleep(d));
        }
    }

    fn done(self, last: Step) -> Reply {
        self.reply.then(last)
    }
}

/// The head of an answer on either wire and `pieces` content frames,
/// then `last` (a reset, a clean close or a stall).
pub fn cut(wire: Wire, a: &Answer, pieces: usize, pause: Duration, last: Step) -> Reply {
    let mut w = Writer::new(a.split);
    match wire {
        Wire::Qoder => {
            qoder_preamble(&mut w);
            qoder_pieces(&mut w, a, 0, pieces);
        }
        Wire::Trae => {
            trae_preamble(&mut w);
            trae_pieces(&mut w, a, 0, pieces);
        }
    }
    w.pause(Some(pause));
    w.done(last)
}

// ---------------------------------------------------------------- qoder

/// A plaintext ask as the agent hands it to the ingress.
pub fn qoder_ask(request_id: &str, messages: &[Value]) -> Value {
    qoder::ask_with(request_id, "session-load", messages)
}

/// The chunk fields of the load run's qoder answers.
const QODER_CHUNKS: Chunks<'static> = Chunks {
    id: "chatcmpl-load",
    created: 1,
    model: "qmodel_38max",
};

fn qoder_chunk(delta: Value, finish: Option<&str>) -> String {
    QODER_CHUNKS.delta(delta, json!(finish)).to_string()
}

/// The head of a qoder answer: role chunk and heartbeats (no content).
fn qoder_preamble(w: &mut Writer) {
    w.frame(envelope("null"));
    w.frame(envelope(&qoder_chunk(
        json!({"role": "assistant", "content": ""}),
        None,
    )));
    w.frame(envelope(""));
}

/// The numbered text frames of a qoder answer, `from..to`.
fn qoder_pieces(w: &mut Writer, a: &Answer, from: usize, to: usize) {
    for k in from..to {
        let frame = envelope(&qoder_chunk(
            json!({"content": piece(a.call, k, a.stamped)}),
            None,
        ));
        if a.stamped {
            w.stamped(frame);
        } else {
            w.frame(frame);
        }
        if a.heartbeats && k % 3 == 1 {
            w.frame(envelope("{}"));
        }
        if k + 1 < to {
            w.pause(a.pace);
        }
    }
}

/// A whole qoder answer.
pub fn qoder_answer(a: &Answer) -> Reply {
    let mut w = Writer::new(a.split);
    qoder_preamble(&mut w);
    qoder_pieces(&mut w, a, 0, a.pieces);
    if a.tool_frags > 0 {
        for (i, frag) in arg_fragments(a.call, a.tool_frags).iter().enumerate() {
            let call = if i == 0 {
                json!([{"index": 0, "id": format!("toolu_{}", a.call), "type": "function", "function": {"name": "read_file", "arguments": frag}}])
            } else {
                json!([{"index": 0, "function": {"arguments": frag}}])
            };
            w.frame(envelope(&qoder_chunk(json!({"tool_calls": call}), None)));
        }
    }
    let finish = if a.tool_frags > 0 {
        "tool_calls"
    } else {
        "stop"
    };
    w.frame(envelope(&qoder_chunk(json!({}), Some(finish))));
    w.frame(envelope(&QODER_CHUNKS.usage(1000, 5).to_string()));
    match a.ending % 3 {
        // The gateway keeps the body open after the sentinel.
        0 => {
            w.frame(envelope("[DONE]"));
            w.done(Step::Hold)
        }
        1 => {
            w.frame(openai::DONE.to_string());
            w.done(Step::End)
        }
        _ => {
            w.frame(qoder::finish_event(414, 571, 88));
            w.done(Step::End)
        }
    }
}

/// A 200 stream with no content at all.
pub fn qoder_empty() -> Reply {
    let mut w = Writer::new(false);
    qoder_preamble(&mut w);
    w.frame(envelope("[DONE]"));
    w.done(Step::End)
}

/// A 200 stream whose first frame is an error envelope.
pub fn qoder_error(status: u16, body: &str) -> Reply {
    let mut w = Writer::new(false);
    w.frame(envelope("null"));
    w.frame(qoder::error_envelope(status, body));
    w.done(Step::End)
}

/// qoder 103: the request id was seen before.
pub const QODER_103: &str = r#"{"code":"103","message":"Duplicate request"}"#;
/// qoder 110: the daily allowance is used up.
pub const QODER_110: &str = r#"{"code":110,"message":"Billing daily count exceeded"}"#;

/// qoder 10605: the queue throttle, three JSON levels deep.
pub fn qoder_10605(retry_after_s: f64) -> String {
    let inner = json!({"isQueued": false, "modelKey": "qmodel_38max", "queueCount": 0, "queueType": "slow", "retryAfterSeconds": retry_after_s}).to_string();
    let mid = json!({"code": "10605", "message": inner}).to_string();
    json!({"code": "403", "message": mid}).to_string()
}

// ----------------------------------------------------------------- trae

fn solo_output(response: &str, reasoning: Option<&str>, tools: Value) -> String {
    trae::output(response, json!(reasoning), tools)
}

fn trae_preamble(w: &mut Writer) {
    w.frame(trae::metadata("s-load", 0));
    w.frame(trae::timing_cost());
}

fn trae_pieces(w: &mut Writer, a: &Answer, from: usize, to: usize) {
    for k in from..to {
        let frame = solo_output(&piece(a.call, k, a.stamped), Some(""), Value::Null);
        if a.stamped {
            w.stamped(frame);
        } else {
            w.frame(frame);
        }
        if k + 1 < to {
            w.pause(a.pace);
        }
    }
}

/// A whole SOLO answer.
pub fn trae_answer(a: &Answer) -> Reply {
    let mut w = Writer::new(a.split);
    trae_preamble(&mut w);
    if !a.stamped {
        w.frame(solo_output("", Some(REASONING), Value::Null));
    }
    trae_pieces(&mut w, a, 0, a.pieces);
    if a.tool_frags > 0 {
        for (i, frag) in arg_fragments(a.call, a.tool_frags).iter().enumerate() {
            let (id, name) = if i == 0 {
                (format!("call_{}", a.call), "glob")
            } else {
                (String::new(), "")
            };
            w.frame(solo_output("", None, trae::tool_fragment(&id, name, frag)));
        }
    }
    if !a.stamped {
        w.frame(trae::extra_info(REASONING));
    }
    w.frame(trae::token_usage(1000, 12, 3));
    let finish = if a.tool_frags > 0 {
        "tool_calls"
    } else {
        "stop"
    };
    w.frame(trae::done(finish));
    if a.ending % 2 == 1 {
        w.frame(openai::DONE.into());
    }
    w.done(Step::End)
}

/// A 200 SOLO stream with no content.
pub fn trae_empty() -> Reply {
    let mut w = Writer::new(false);
    trae_preamble(&mut w);
    w.frame(trae::token_usage(10, 0, 0));
    w.frame(trae::done("stop"));
    w.done(Step::End)
}

/// An in-band SOLO error (inside a 200 stream), then the `done` that is
/// not a success.
pub fn trae_error(code: u64, message: &str) -> Reply {
    let mut w = Writer::new(false);
    trae_preamble(&mut w);
    w.frame(trae::error(code, message));
    w.frame(trae::done("stop"));
    w.done(Step::End)
}

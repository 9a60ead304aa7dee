//! Both provider wires as the load tool speaks them: what an agent sends
//! (a qoder plaintext ask, a TRAE SOLO body) and what a scripted upstream
//! answers (envelope SSE, SOLO SSE), with every content piece numbered so a
//! checker can prove nothing was lost, doubled or reordered.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use super::upstream::{Reply, Step, STAMP};

/// The qoder inference path with the query the real client sends.
pub const QODER_PATH: &str = "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&AgentId=agent_common&Encode=1";
/// The SOLO chat path.
pub const TRAE_PATH: &str = "/api/agent/v3/llm_utils_chat";
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

/// The reasoning a trae answer streams once (and `extra_info` repeats).
pub const REASONING: &str = "Let me think.";

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
            reply.split(bytes.as_bytes(), 7)
        } else {
            reply.chunk(Bytes::from(bytes))
        };
    }

    fn stamped(&mut self, bytes: String) {
        let reply = std::mem::take(&mut self.reply);
        self.reply = reply.stamped(Bytes::from(bytes));
    }

    fn pause(&mut self, d: Option<Duration>) {
        if let Some(d) = d {
            let reply = std::mem::take(&mut self.reply);
            self.reply = reply.sleep(d);
        }
    }

    fn done(self, last: Step) -> Reply {
        self.reply.then(last)
    }
}

// ---------------------------------------------------------------- qoder

/// A plaintext ask as the agent hands it to the ingress.
pub fn qoder_ask(request_id: &str, messages: &[Value]) -> Value {
    json!({
        "request_id": request_id,
        "chat_record_id": request_id,
        "request_set_id": "set-1",
        "session_id": "session-load",
        "stream": true,
        "chat_task": "FREE_INPUT",
        "chat_context": {"text": "hi", "features": [], "extra": {"context": [], "modelConfig": {"key": "qmodel_38max", "is_reasoning": false}, "originalContent": "hi"}, "chatPrompt": "", "imageUrls": null},
        "is_reply": true,
        "is_retry": false,
        "source": 1,
        "version": "3",
        "agent_id": "agent_common",
        "task_id": "common",
        "session_type": "qodercli",
        "model_config": {"key": "qmodel_38max", "source": "system", "is_reasoning": false},
        "business": {"product": "cli", "type": "agent", "stage": "start"},
        "messages": messages,
        "tools": [{"type": "function", "function": {"name": "read_file", "description": "read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
        "parameters": {"max_tokens": 4096, "temperature": 0.2},
    })
}

/// One envelope frame around `body`.
pub fn envelope(body: &str) -> String {
    format!(
        "data:{{\"headers\":{{\"Content-Type\":[\"application/json\"]}},\"body\":{},\"statusCodeValue\":200,\"statusCode\":\"OK\"}}\n\n",
        serde_json::to_string(body).unwrap_or_default()
    )
}

/// An error envelope (`statusCodeValue != 200`).
pub fn error_envelope(status: u16, body: &str) -> String {
    format!(
        "data:{{\"headers\":{{}},\"body\":{},\"statusCodeValue\":{status},\"statusCode\":\"ERR\"}}\n\n",
        serde_json::to_string(body).unwrap_or_default()
    )
}

fn qoder_chunk(delta: Value, finish: Option<&str>) -> String {
    json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 1, "model": "qmodel_38max",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    .to_string()
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
    w.frame(envelope(&json!({"id": "chatcmpl-load", "object": "chat.completion.chunk", "created": 1, "model": "qmodel_38max",
        "choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005}}).to_string()));
    match a.ending % 3 {
        // The gateway keeps the body open after the sentinel.
        0 => {
            w.frame(envelope("[DONE]"));
            w.done(Step::Hold)
        }
        1 => {
            w.frame("data: [DONE]\n\n".to_string());
            w.done(Step::End)
        }
        _ => {
            w.frame("event:finish\ndata:{\"firstTokenDuration\":414,\"totalDuration\":571,\"serverDuration\":88}\n\n".to_string());
            w.done(Step::End)
        }
    }
}

/// `pieces` content frames, then `last` (a reset or a clean close).
pub fn qoder_cut(a: &Answer, pieces: usize, pause: Duration, last: Step) -> Reply {
    let mut w = Writer::new(a.split);
    qoder_preamble(&mut w);
    qoder_pieces(&mut w, a, 0, pieces);
    w.pause(Some(pause));
    w.done(last)
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
    w.frame(error_envelope(status, body));
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

/// A Max-mode SOLO body as the agent sends it.
pub fn trae_body(messages: &[Value]) -> Value {
    json!({
        "messages": messages,
        "model": "glm-5.3",
        "config_name": "glm-5.3",
        "function": "solo_work_remote",
        "stream": true,
        "tools": [{"type": "function", "function": {"name": "glob", "description": "find files", "parameters": "{\"type\":\"object\",\"properties\":{\"pattern\":{\"type\":\"string\"}}}"}}],
        "tool_choice": "auto",
        "max_tokens": 64000,
        "temperature": 0.3,
        "reasoning_effort": "high",
        "model_auto_selection": {"strategy": "max", "fallback_to_advance_model": null, "entitlement_id": null},
        "model_selection_strategy": "max",
        "mode_type": 1,
        "context_window_size": 1000000,
        "prompt_max_tokens": 936000,
    })
}

/// A SOLO text message.
pub fn solo_text(role: &str, t: &str) -> Value {
    json!({"role": role, "content": [{"type": "text", "text": t}]})
}

/// What a real SOLO upstream would refuse in a request body.
pub fn solo_problems(body: &[u8]) -> Vec<String> {
    let mut bad = Vec::new();
    let Ok(b) = serde_json::from_slice::<Value>(body) else {
        return vec!["body is not JSON".into()];
    };
    if b["model"] != b["config_name"] || b["model"].is_null() {
        bad.push("model and config_name differ".into());
    }
    if !b["function"].is_string() {
        bad.push("function is missing".into());
    }
    for (i, m) in b["messages"].as_array().into_iter().flatten().enumerate() {
        match &m["content"] {
            Value::Array(parts) if parts.iter().all(|p| p["type"].is_string()) => {}
            Value::Null if m["tool_calls"].is_array() => {}
            other => bad.push(format!("messages[{i}].content is not text parts: {other}")),
        }
    }
    for (i, t) in b["tools"].as_array().into_iter().flatten().enumerate() {
        if !t["function"]["parameters"].is_string() {
            bad.push(format!("tools[{i}].parameters is not a JSON string"));
        }
    }
    bad
}

fn solo_output(response: &str, reasoning: Option<&str>, tools: Value) -> String {
    format!(
        "event:output\ndata:{}\n\n",
        json!({"response": response, "reasoning_content": reasoning, "tool_calls": tools})
    )
}

fn trae_preamble(w: &mut Writer) {
    w.frame("id:1\nevent:metadata\ndata:{\"model\":\"\",\"session_id\":\"s-load\",\"prompt_completion_id\":0}\n\n".into());
    w.frame(
        "id:2\nevent:timing_cost\ndata:{\"name\":\"llm_raw_chat_v2\",\"preprocess_timing\":71}\n\n"
            .into(),
    );
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
            let tools = json!([{"index": 0, "id": id, "type": "function", "function_call": {"name": name, "arguments": frag}}]);
            w.frame(solo_output("", None, tools));
        }
    }
    if !a.stamped {
        w.frame(format!(
            "event:extra_info\ndata:{}\n\n",
            json!({ "reasoning_content": REASONING })
        ));
    }
    w.frame("event:token_usage\ndata:{\"prompt_tokens\":1000,\"completion_tokens\":12,\"total_tokens\":1012,\"reasoning_tokens\":3}\n\n".into());
    let finish = if a.tool_frags > 0 {
        "tool_calls"
    } else {
        "stop"
    };
    w.frame(format!(
        "event:done\ndata:{{\"finish_reason\":\"{finish}\"}}\n\n"
    ));
    if a.ending % 2 == 1 {
        w.frame("data: [DONE]\n\n".into());
    }
    w.done(Step::End)
}

/// `pieces` content frames, then `last` (a reset or a clean close).
pub fn trae_cut(a: &Answer, pieces: usize, pause: Duration, last: Step) -> Reply {
    let mut w = Writer::new(a.split);
    trae_preamble(&mut w);
    trae_pieces(&mut w, a, 0, pieces);
    w.pause(Some(pause));
    w.done(last)
}

/// A 200 SOLO stream with no content.
pub fn trae_empty() -> Reply {
    let mut w = Writer::new(false);
    trae_preamble(&mut w);
    w.frame("event:token_usage\ndata:{\"prompt_tokens\":10,\"completion_tokens\":0,\"total_tokens\":10,\"reasoning_tokens\":0}\n\n".into());
    w.frame("event:done\ndata:{\"finish_reason\":\"stop\"}\n\n".into());
    w.done(Step::End)
}

/// An in-band SOLO error (inside a 200 stream), then the `done` that is
/// not a success.
pub fn trae_error(code: u64, message: &str) -> Reply {
    let mut w = Writer::new(false);
    trae_preamble(&mut w);
    w.frame(format!(
        "event:error\ndata:{}\n\n",
        json!({"code": code, "message": message, "extra": null})
    ));
    w.frame("event:done\ndata:{\"finish_reason\":\"stop\"}\n\n".into());
    w.done(Step::End)
}

//! Reads what an agent received, on either wire, into the facts the checks
//! need: the text and tool-call arguments in order, error frames, end
//! markers, and anything malformed or written after the end.

use serde_json::Value;
use shimgate_shim_api::sse::parse_all;

use super::wire::Wire;

/// What one agent call received.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    pub status: u16,
    /// Text deltas, concatenated.
    pub text: String,
    /// Reasoning deltas, concatenated.
    pub reasoning: String,
    /// Arguments of tool call 0, concatenated.
    pub args: String,
    /// Tool names announced (a name must come once).
    pub tool_names: Vec<String>,
    /// Error frames (or 1 for a non-2xx whole error body).
    pub errors: usize,
    /// Their codes, as text.
    pub error_codes: Vec<String>,
    /// End markers: `[DONE]` (qoder) or `done` events (trae).
    pub ends: usize,
    /// Content or error frames after an error frame or the end.
    pub after_end: usize,
    /// Anything malformed.
    pub problems: Vec<String>,
}

impl Seen {
    /// Exactly one error frame and nothing after it.
    pub fn one_final_error(&self) -> bool {
        self.errors == 1 && self.after_end == 0
    }

    /// A complete, error-free answer.
    pub fn complete(&self) -> bool {
        self.status == 200 && self.errors == 0 && self.ends == 1 && self.after_end == 0
    }
}

/// Reads a response body.
pub fn read(wire: Wire, status: u16, sse: bool, body: &[u8]) -> Seen {
    let mut seen = Seen {
        status,
        ..Seen::default()
    };
    if !sse {
        match serde_json::from_slice::<Value>(body) {
            Ok(v) if v.get("error").is_some() => {
                seen.errors = 1;
                seen.error_codes.push(code_text(&v["error"]["code"]));
            }
            _ if status == 200 => {}
            _ => seen.problems.push(format!(
                "status {status} without a JSON error body: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )),
        }
        return seen;
    }
    if !body.is_empty() && !body.ends_with(b"\n\n") {
        seen.problems.push(format!(
            "stream ends inside a frame: …{}",
            String::from_utf8_lossy(&body[body.len().saturating_sub(120)..])
        ));
    }
    let events = match parse_all(body) {
        Ok(e) => e,
        Err(e) => {
            seen.problems.push(format!("unparseable SSE: {e}"));
            return seen;
        }
    };
    for ev in events {
        let name = ev
            .event
            .as_ref()
            .map(|n| String::from_utf8_lossy(n).into_owned());
        match wire {
            Wire::Qoder => qoder_event(&mut seen, name.as_deref(), &ev.data),
            Wire::Trae => trae_event(&mut seen, name.as_deref(), &ev.data),
        }
    }
    seen
}

fn code_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn ended(seen: &Seen) -> bool {
    seen.errors > 0 || seen.ends > 0
}

fn qoder_event(seen: &mut Seen, name: Option<&str>, data: &[u8]) {
    if name.is_some() {
        seen.problems
            .push(format!("named event {name:?} reached a qoder agent"));
    }
    if data == b"[DONE]" {
        seen.ends += 1;
        return;
    }
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        seen.problems.push(format!(
            "frame is not JSON: {}",
            String::from_utf8_lossy(data)
        ));
        return;
    };
    if v.get("statusCodeValue").is_some() || v.get("headers").is_some() {
        seen.problems.push("an envelope reached the agent".into());
    }
    if let Some(err) = v.get("error") {
        if ended(seen) {
            seen.after_end += 1;
        }
        seen.errors += 1;
        seen.error_codes.push(code_text(&err["code"]));
        return;
    }
    let delta = &v["choices"][0]["delta"];
    let content = delta["content"].as_str().filter(|s| !s.is_empty());
    let reasoning = delta["reasoning_content"]
        .as_str()
        .filter(|s| !s.is_empty());
    let calls = delta["tool_calls"].as_array().filter(|c| !c.is_empty());
    if ended(seen) && (content.is_some() || reasoning.is_some() || calls.is_some()) {
        seen.after_end += 1;
    }
    if let Some(t) = content {
        seen.text.push_str(t);
    }
    if let Some(t) = reasoning {
        seen.reasoning.push_str(t);
    }
    for c in calls.into_iter().flatten() {
        if c["index"].as_u64().unwrap_or(0) != 0 {
            seen.problems.push(format!("unexpected tool call {c}"));
        }
        if let Some(n) = c["function"]["name"].as_str().filter(|n| !n.is_empty()) {
            seen.tool_names.push(n.to_string());
        }
        if let Some(a) = c["function"]["arguments"].as_str() {
            seen.args.push_str(a);
        }
    }
}

fn trae_event(seen: &mut Seen, name: Option<&str>, data: &[u8]) {
    match name {
        Some("output") => {
            let Ok(v) = serde_json::from_slice::<Value>(data) else {
                seen.problems.push(format!(
                    "output is not JSON: {}",
                    String::from_utf8_lossy(data)
                ));
                return;
            };
            let text = v["response"].as_str().filter(|s| !s.is_empty());
            let reasoning = v["reasoning_content"].as_str().filter(|s| !s.is_empty());
            let calls = v["tool_calls"].as_array().filter(|c| !c.is_empty());
            if ended(seen) && (text.is_some() || reasoning.is_some() || calls.is_some()) {
                seen.after_end += 1;
            }
            if let Some(t) = text {
                seen.text.push_str(t);
            }
            if let Some(t) = reasoning {
                seen.reasoning.push_str(t);
            }
            for c in calls.into_iter().flatten() {
                if c.get("function").is_some() {
                    seen.problems
                        .push("an OpenAI tool call reached a SOLO agent".into());
                }
                if let Some(n) = c["function_call"]["name"]
                    .as_str()
                    .filter(|n| !n.is_empty())
                {
                    seen.tool_names.push(n.to_string());
                }
                if let Some(a) = c["function_call"]["arguments"].as_str() {
                    seen.args.push_str(a);
                }
            }
        }
        Some("error") => {
            if ended(seen) {
                seen.after_end += 1;
            }
            seen.errors += 1;
            let v: Value = serde_json::from_slice(data).unwrap_or(Value::Null);
            let inner = v.get("error").filter(|e| e.is_object()).unwrap_or(&v);
            seen.error_codes.push(code_text(&inner["code"]));
        }
        Some("done") => {
            if ended(seen) {
                seen.after_end += 1;
            }
            seen.ends += 1;
        }
        Some(_) => {}
        None => {
            if data != b"[DONE]" {
                seen.problems.push(format!(
                    "unnamed frame reached a SOLO agent: {}",
                    String::from_utf8_lossy(data)
                ));
            }
        }
    }
}

/// How many leading pieces of `call` the text holds, if the text is
/// exactly pieces `0..n` in order (anything else: `None`).
pub fn prefix_len(text: &str, call: u64, max: usize) -> Option<usize> {
    let mut rest = text;
    let mut n = 0;
    while !rest.is_empty() {
        let want = super::wire::piece(call, n, false);
        rest = rest.strip_prefix(want.as_str())?;
        n += 1;
        if n > max {
            return None;
        }
    }
    Some(n)
}

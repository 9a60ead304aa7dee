//! The TRAE SOLO wire for tests: an agent's SOLO body, a checker for what
//! the upstream receives, and scripted SOLO answers byte for byte.

use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::upstream::{Recorded, Reply};

/// The SOLO chat path.
pub const PATH: &str = "/api/agent/v3/llm_utils_chat";

/// A SOLO text message.
pub fn text(role: &str, t: &str) -> Value {
    json!({"role": role, "content": [{"type": "text", "text": t}]})
}

/// An assistant turn that called a tool, and the tool's result.
pub fn tool_turn(id: &str, name: &str, args: &str, result: &str) -> [Value; 2] {
    [
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function", "function_call": {"name": name, "arguments": args}}]}),
        json!({"role": "tool", "tool_call_id": id, "content": [{"type": "text", "text": result}]}),
    ]
}

/// A Max-mode SOLO body as the agent sends it.
pub fn body(messages: &[Value]) -> Value {
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
        "x_unknown_client_field": {"keep": [1, 2]},
    })
}

/// Checks a SOLO request as the real upstream would; returns the problems.
pub fn check_request(r: &Recorded) -> Vec<String> {
    let mut bad = Vec::new();
    if r.method != "POST" || r.path != PATH {
        bad.push(format!("{} {}", r.method, r.path));
    }
    let b = r.json();
    if b["model"] != b["config_name"] || b["model"].is_null() {
        bad.push("model and config_name differ".into());
    }
    if !b["function"].is_string() {
        bad.push("function is missing".into());
    }
    for (i, m) in b["messages"].as_array().into_iter().flatten().enumerate() {
        match &m["content"] {
            Value::Array(parts) => {
                if parts.iter().any(|p| p["type"].is_null()) {
                    bad.push(format!("messages[{i}] has a part without type"));
                }
            }
            Value::Null if m["tool_calls"].is_array() => {}
            other => bad.push(format!("messages[{i}].content is not text parts: {other}")),
        }
        if m["role"] == "developer" {
            bad.push(format!("messages[{i}] has the developer role"));
        }
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            if c.get("function").is_some() || !c["function_call"].is_object() {
                bad.push(format!("messages[{i}] tool call is not function_call: {c}"));
            }
        }
    }
    for (i, t) in b["tools"].as_array().into_iter().flatten().enumerate() {
        if !t["function"]["parameters"].is_string() {
            bad.push(format!(
                "tools[{i}].function.parameters is not a JSON string"
            ));
        }
    }
    bad
}

/// Collects problems across requests.
pub type Problems = Arc<Mutex<Vec<String>>>;

/// A SOLO answer: metadata, timing, reasoning, text in pieces, an optional
/// tool call in fragments, extra_info (repeats the reasoning), usage, done.
pub fn answer(text: &str, tool: Option<(&str, &str, &str)>, prompt_tokens: u64) -> String {
    let mut s = String::new();
    s.push_str("id:1\nevent:metadata\ndata:{\"model\":\"\",\"session_id\":\"s-1\",\"prompt_completion_id\":0}\n\n");
    s.push_str(
        "id:2\nevent:timing_cost\ndata:{\"name\":\"llm_raw_chat_v2\",\"preprocess_timing\":71}\n\n",
    );
    s.push_str("event:output\ndata:{\"response\":\"\",\"reasoning_content\":\"Let me think.\",\"tool_calls\":null}\n\n");
    for piece in text.split_inclusive(' ') {
        s.push_str(&format!(
            "event:output\ndata:{}\n\n",
            json!({"response": piece, "reasoning_content": "", "tool_calls": null})
        ));
    }
    let finish = if let Some((id, name, args)) = tool {
        let (a, b) = args.split_at(args.len() / 2);
        s.push_str(&format!("event:output\ndata:{}\n\n", json!({"response": "", "reasoning_content": null, "tool_calls": [{"index": 0, "id": id, "type": "function", "function_call": {"name": name, "arguments": a}}]})));
        s.push_str(&format!("event:output\ndata:{}\n\n", json!({"response": "", "reasoning_content": null, "tool_calls": [{"index": 0, "id": "", "type": "function", "function_call": {"name": "", "arguments": b}}]})));
        "tool_calls"
    } else {
        "stop"
    };
    s.push_str("event:extra_info\ndata:{\"reasoning_content\":\"Let me think.\"}\n\n");
    s.push_str(&format!(
        "event:token_usage\ndata:{}\n\n",
        json!({"prompt_tokens": prompt_tokens, "completion_tokens": 12, "total_tokens": prompt_tokens + 12, "reasoning_tokens": 3})
    ));
    s.push_str(&format!(
        "event:done\ndata:{{\"finish_reason\":\"{finish}\"}}\n\n"
    ));
    s
}

/// A SOLO error inside a 200 stream, followed by the `done` that is not success.
pub fn error_answer(code: u64, message: &str) -> String {
    format!(
        "id:1\nevent:metadata\ndata:{{\"model\":\"\"}}\n\nevent:error\ndata:{}\n\nevent:done\ndata:{{\"finish_reason\":\"stop\"}}\n\n",
        json!({"code": code, "message": message, "extra": null})
    )
}

/// An SSE reply carrying `solo`.
pub fn reply(solo: &str) -> Reply {
    Reply::sse().chunk(solo.as_bytes()).end()
}

/// Event names in a SOLO byte stream (None for an unnamed event).
pub fn event_names(bytes: &[u8]) -> Vec<Option<String>> {
    shimgate_shim_api::sse::parse_all(bytes)
        .unwrap()
        .iter()
        .map(|e| {
            e.event
                .as_ref()
                .map(|n| String::from_utf8_lossy(n).into_owned())
        })
        .collect()
}

//! The scripted TRAE provider: checks the restored SOLO body (text parts,
//! `function_call`, parameters as strings, `model` = `config_name`, the
//! `function` channel, the agent's credentials) and answers in SOLO events —
//! reasoning, text or a tool call in fragments, `extra_info`, growing
//! `token_usage`, `done`.

use bytes::Bytes;
use http::{header, Method, StatusCode};
use serde_json::{json, Value};

use super::{last_turn, pieces, Log, Reply};
use crate::demo::script;

/// Answers one request.
pub fn answer(_log: &Log, parts: &http::request::Parts, body: &[u8]) -> Reply {
    let refuse =
        |why: String| Reply::Refuse(StatusCode::BAD_REQUEST, format!("trae provider: {why}"));
    if parts.method != Method::POST || parts.uri.path() != shimgate_shim_trae::INFERENCE_PATH {
        return Reply::Refuse(
            StatusCode::NOT_FOUND,
            format!("trae provider: unexpected {} {}", parts.method, parts.uri),
        );
    }
    let header_is = |name: &str, want: &str| {
        parts.headers.get(name).and_then(|v| v.to_str().ok()) == Some(want)
    };
    if !header_is(header::AUTHORIZATION.as_str(), script::TRAE_AUTH)
        || !header_is("x-ide-token", script::TRAE_IDE_TOKEN)
    {
        return Reply::Refuse(
            StatusCode::UNAUTHORIZED,
            "trae provider: the agent's credentials did not arrive (1001 auth)".into(),
        );
    }
    let solo: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return refuse(format!("the body is not JSON: {e}")),
    };
    if let Some(why) = solo_problem(&solo) {
        return refuse(why);
    }
    let messages = solo
        .get("messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice);
    let Some(turn) = last_turn(messages) else {
        return refuse("no user message with a [turn N] marker".into());
    };
    let after_tool = messages
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("tool");
    let tool = (!after_tool && script::calls_tool(turn)).then(|| script::tool_call(turn));
    Reply::Stream {
        frames: frames(turn, after_tool, tool.as_ref()),
        hold: false,
    }
}

/// What the real upstream would reject in a SOLO body (4001 bad parameter).
fn solo_problem(b: &Value) -> Option<String> {
    if b.get("model").is_none() || b.get("model") != b.get("config_name") {
        return Some("model and config_name differ".into());
    }
    if !b.get("function").is_some_and(Value::is_string) {
        return Some("the function channel is missing".into());
    }
    let messages = b.get("messages").and_then(Value::as_array)?;
    for (i, m) in messages.iter().enumerate() {
        match m.get("content") {
            Some(Value::Array(parts)) if parts.iter().all(|p| p.get("type").is_some()) => {}
            Some(Value::Null) | None if m.get("tool_calls").is_some() => {}
            other => {
                return Some(format!(
                    "messages[{i}].content is not text parts: {other:?}"
                ))
            }
        }
        for c in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if c.get("function").is_some() || !c.get("function_call").is_some_and(Value::is_object)
            {
                return Some(format!(
                    "messages[{i}] has a tool call that is not function_call"
                ));
            }
        }
    }
    for (i, t) in b
        .get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if !t
            .pointer("/function/parameters")
            .is_some_and(Value::is_string)
        {
            return Some(format!(
                "tools[{i}].function.parameters is not a JSON string"
            ));
        }
    }
    None
}

/// The SOLO answer of `turn`.
fn frames(turn: u32, after_tool: bool, tool: Option<&script::ToolCall>) -> Vec<Bytes> {
    let event = |name: &str, data: Value| Bytes::from(format!("event:{name}\ndata:{data}\n\n"));
    let output = |response: &str, reasoning: Value, calls: Value| {
        event(
            "output",
            json!({"response": response, "reasoning_content": reasoning, "tool_calls": calls}),
        )
    };
    let mut out = vec![
        Bytes::from(format!(
            "id:1\nevent:metadata\ndata:{}\n\n",
            json!({"model": "", "session_id": "demo-session", "prompt_completion_id": turn})
        )),
        Bytes::from_static(b"id:2\nevent:timing_cost\ndata:{\"name\":\"llm_raw_chat_v2\",\"preprocess_timing\":71}\n\n"),
        output("", json!(script::REASONING), Value::Null),
    ];
    let finish = match tool {
        Some(call) => {
            // Fragments as SOLO streams them: the second carries no id or name.
            let half = call.arguments.len() / 2;
            let mid = (0..=half)
                .rev()
                .find(|i| call.arguments.is_char_boundary(*i))
                .unwrap_or(0);
            let (a, b) = call.arguments.split_at(mid);
            let fragment = |id: &str, name: &str, args: &str| json!([{"index": 0, "id": id, "type": "function", "function_call": {"name": name, "arguments": args}}]);
            out.push(output("", Value::Null, fragment(&call.id, &call.name, a)));
            out.push(output("", Value::Null, fragment("", "", b)));
            "tool_calls"
        }
        None => {
            let text = script::trae_answer(turn, after_tool);
            for piece in pieces(&text) {
                out.push(output(piece, json!(""), Value::Null));
            }
            "stop"
        }
    };
    out.push(event(
        "extra_info",
        json!({"reasoning_content": script::REASONING}),
    ));
    let prompt = script::prompt_tokens(turn);
    out.push(event(
        "token_usage",
        json!({"prompt_tokens": prompt, "completion_tokens": 40, "total_tokens": prompt + 40, "reasoning_tokens": 12}),
    ));
    out.push(event("done", json!({"finish_reason": finish})));
    out
}

//! The scripted TRAE provider: checks the restored SOLO body (text parts,
//! `function_call`, parameters as strings, `model` = `config_name`, the
//! `function` channel, the agent's credentials) and answers in SOLO events —
//! reasoning, text or a tool call in fragments, `extra_info`, growing
//! `token_usage`, `done`.

use bytes::Bytes;
use http::{header, Method, StatusCode};
use serde_json::{json, Value};
use shimgate_testkit::trae;

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
    if let Some(why) = trae::body_problems(body).into_iter().next() {
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
        frames: frames(
            turn,
            after_tool,
            tool.as_ref(),
            script::prompt_tokens(&solo),
        )
        .into_iter()
        .map(Bytes::from)
        .collect(),
        hold: false,
    }
}

/// The SOLO answer of `turn`.
fn frames(
    turn: u32,
    after_tool: bool,
    tool: Option<&script::ToolCall>,
    prompt_tokens: u64,
) -> Vec<String> {
    let mut out = vec![
        trae::metadata("demo-session", u64::from(turn)),
        trae::timing_cost(),
        trae::output("", json!(script::REASONING), Value::Null),
    ];
    let finish = match tool {
        Some(call) => {
            out.extend(trae::tool_call_outputs(
                &call.id,
                &call.name,
                &call.arguments,
            ));
            "tool_calls"
        }
        None => {
            let text = script::trae_answer(turn, after_tool);
            for piece in pieces(&text) {
                out.push(trae::output(piece, json!(""), Value::Null));
            }
            "stop"
        }
    };
    out.push(trae::extra_info(script::REASONING));
    out.push(trae::token_usage(prompt_tokens, 40, 12));
    out.push(trae::done(finish));
    out
}

//! The TRAE SOLO wire: the body an agent sends (text parts, `function_call`
//! tool turns, Max-mode fields), what a real upstream refuses in one, and
//! the SOLO events an upstream streams back, byte for byte. With `dev`:
//! what a TRAE client makes of a SOLO stream ([`Digest`]) and the check
//! that the agent got what the upstream sent ([`compare`]), the shim's two
//! legs over whole streams ([`convert`], [`rebuild`], [`round_trip`]), what
//! billion-context measurably does to a stream ([`bili()`]) and a SOLO stream generator for fuzzing
//! ([`generate()`]).

use serde_json::{json, Value};

#[cfg(feature = "dev")]
mod bili;
#[cfg(feature = "dev")]
mod digest;
#[cfg(feature = "dev")]
mod generate;
#[cfg(feature = "dev")]
mod pipeline;

#[cfg(feature = "dev")]
pub use bili::bili;
#[cfg(feature = "dev")]
pub use digest::{compare, digest, Call, Data, Digest, End, Seen};
#[cfg(feature = "dev")]
pub use generate::generate;
#[cfg(feature = "dev")]
pub use pipeline::{
    convert, convert_unmemoized, pieces, rebuild, rebuild_unmemoized, round_trip, run, Proxy,
    PROXIES,
};

/// The SOLO chat path.
pub const PATH: &str = "/api/agent/v3/llm_utils_chat";

/// The reasoning the scripted answers stream (and `extra_info` repeats).
pub const REASONING: &str = "Let me think.";

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

/// What a real SOLO upstream would refuse in a request body (its 4001 bad
/// parameter); empty when it would take it.
pub fn body_problems(body: &[u8]) -> Vec<String> {
    let Ok(b) = serde_json::from_slice::<Value>(body) else {
        return vec!["the body is not JSON".into()];
    };
    let mut bad = Vec::new();
    if b["model"].is_null() || b["model"] != b["config_name"] {
        bad.push("model and config_name differ".into());
    }
    if !b["function"].is_string() {
        bad.push("the function channel is missing".into());
    }
    for (i, m) in b["messages"].as_array().into_iter().flatten().enumerate() {
        match &m["content"] {
            Value::Array(parts) if parts.iter().all(|p| p["type"].is_string()) => {}
            Value::Null if m["tool_calls"].is_array() => {}
            other => bad.push(format!("messages[{i}].content is not text parts: {other}")),
        }
        if m["role"] == "developer" {
            bad.push(format!("messages[{i}] has the developer role"));
        }
        for c in m["tool_calls"].as_array().into_iter().flatten() {
            if c.get("function").is_some() || !c["function_call"].is_object() {
                bad.push(format!(
                    "messages[{i}] has a tool call that is not function_call: {c}"
                ));
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

/// One named SOLO event.
pub fn event(name: &str, data: &Value) -> String {
    format!("event:{name}\ndata:{data}\n\n")
}

/// The `metadata` event that opens an answer (id 1).
pub fn metadata(session_id: &str, prompt_completion_id: u64) -> String {
    format!(
        "id:1\n{}",
        event(
            "metadata",
            &json!({"model": "", "session_id": session_id, "prompt_completion_id": prompt_completion_id})
        )
    )
}

/// The `timing_cost` event that follows it (id 2).
pub fn timing_cost() -> String {
    "id:2\nevent:timing_cost\ndata:{\"name\":\"llm_raw_chat_v2\",\"preprocess_timing\":71}\n\n"
        .into()
}

/// An `output` event: a text delta, a reasoning delta (`""`, `null` or
/// text) and tool-call fragments (`null` or a list).
pub fn output(response: &str, reasoning: Value, tool_calls: Value) -> String {
    event(
        "output",
        &json!({"response": response, "reasoning_content": reasoning, "tool_calls": tool_calls}),
    )
}

/// The `tool_calls` list of one fragment of call 0 (SOLO sends the id and
/// name in the first fragment only, `""` in the later ones).
pub fn tool_fragment(id: &str, name: &str, arguments: &str) -> Value {
    json!([{"index": 0, "id": id, "type": "function", "function_call": {"name": name, "arguments": arguments}}])
}

/// The `output` events of one tool call streamed in two fragments.
pub fn tool_call_outputs(id: &str, name: &str, arguments: &str) -> [String; 2] {
    let half = arguments.len() / 2;
    let mid = (0..=half)
        .rev()
        .find(|i| arguments.is_char_boundary(*i))
        .unwrap_or(0);
    let (a, b) = arguments.split_at(mid);
    [
        output("", Value::Null, tool_fragment(id, name, a)),
        output("", Value::Null, tool_fragment("", "", b)),
    ]
}

/// The `extra_info` event (it repeats the whole reasoning).
pub fn extra_info(reasoning: &str) -> String {
    event("extra_info", &json!({ "reasoning_content": reasoning }))
}

/// A `token_usage` event.
pub fn token_usage(prompt_tokens: u64, completion_tokens: u64, reasoning_tokens: u64) -> String {
    event(
        "token_usage",
        &json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "reasoning_tokens": reasoning_tokens}),
    )
}

/// The `done` event.
pub fn done(finish_reason: &str) -> String {
    event("done", &json!({ "finish_reason": finish_reason }))
}

/// An in-band `error` event.
pub fn error(code: u64, message: &str) -> String {
    event(
        "error",
        &json!({"code": code, "message": message, "extra": null}),
    )
}

/// A SOLO answer: metadata, timing, reasoning, text in pieces, an optional
/// tool call in fragments, extra_info (repeats the reasoning), usage, done.
pub fn answer(text: &str, tool: Option<(&str, &str, &str)>, prompt_tokens: u64) -> String {
    let mut s = metadata("s-1", 0);
    s.push_str(&timing_cost());
    s.push_str(&output("", json!(REASONING), Value::Null));
    for piece in text.split_inclusive(' ') {
        s.push_str(&output(piece, json!(""), Value::Null));
    }
    let finish = match tool {
        Some((id, name, args)) => {
            s.extend(tool_call_outputs(id, name, args));
            "tool_calls"
        }
        None => "stop",
    };
    s.push_str(&extra_info(REASONING));
    s.push_str(&token_usage(prompt_tokens, 12, 3));
    s.push_str(&done(finish));
    s
}

/// A SOLO error inside a 200 stream, followed by the `done` that is not
/// success.
pub fn error_answer(code: u64, message: &str) -> String {
    format!(
        "id:1\nevent:metadata\ndata:{{\"model\":\"\"}}\n\n{}{}",
        error(code, message),
        done("stop")
    )
}

/// Checks a SOLO request as the real upstream would; returns the problems.
#[cfg(feature = "dev")]
pub fn check_request(r: &crate::upstream::Recorded) -> Vec<String> {
    let mut bad = Vec::new();
    if r.method != "POST" || r.path != PATH {
        bad.push(format!("{} {}", r.method, r.path));
    }
    bad.extend(body_problems(&r.body));
    bad
}

/// An SSE reply carrying `solo`.
#[cfg(feature = "dev")]
pub fn reply(solo: &str) -> crate::upstream::Reply {
    crate::upstream::Reply::sse().chunk(solo.as_bytes()).end()
}

/// Event names in a SOLO byte stream (None for an unnamed event).
#[cfg(feature = "dev")]
pub fn event_names(bytes: &[u8]) -> Vec<Option<String>> {
    shimgate_shim_api::sse::parse_all(bytes)
        .unwrap_or_default()
        .iter()
        .map(|e| {
            e.event
                .as_ref()
                .map(|n| String::from_utf8_lossy(n).into_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_the_events_a_solo_upstream_streams() {
        let s = answer("Hi there", Some(("c1", "glob", "{\"p\":1}")), 100);
        let names: Vec<&str> = s
            .split("\n\n")
            .filter_map(|f| f.lines().find_map(|l| l.strip_prefix("event:")))
            .collect();
        assert_eq!(
            names,
            [
                "metadata",
                "timing_cost",
                "output",
                "output",
                "output",
                "output",
                "output",
                "extra_info",
                "token_usage",
                "done"
            ]
        );
        assert!(s.starts_with("id:1\nevent:metadata\ndata:{\"model\":\"\",\"session_id\":\"s-1\",\"prompt_completion_id\":0}\n\n"));
        assert!(s.contains("event:output\ndata:{\"response\":\"\",\"reasoning_content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"\",\"type\":\"function\",\"function_call\":{\"name\":\"\",\"arguments\":\"\\\":1}\"}}]}\n\n"));
        assert!(s.ends_with("event:token_usage\ndata:{\"prompt_tokens\":100,\"completion_tokens\":12,\"total_tokens\":112,\"reasoning_tokens\":3}\n\nevent:done\ndata:{\"finish_reason\":\"tool_calls\"}\n\n"));
    }

    #[test]
    fn tool_arguments_split_on_a_char_boundary() {
        let [a, b] = tool_call_outputs("c", "f", "中a");
        assert!(a.contains("\"arguments\":\"\"") && b.contains("\"arguments\":\"中a\""));
    }

    #[test]
    fn the_agents_body_passes_and_openai_shapes_are_refused() {
        let good = body(&[
            text("user", "hi"),
            tool_turn("c", "glob", "{}", "ok")[0].clone(),
        ]);
        assert!(body_problems(good.to_string().as_bytes()).is_empty());
        let mut bad = good.clone();
        bad["config_name"] = json!("other");
        bad["messages"] = json!([{"role": "developer", "content": "plain"},
            {"role": "assistant", "content": null, "tool_calls": [{"function": {}}]}]);
        bad["tools"][0]["function"]["parameters"] = json!({});
        assert_eq!(body_problems(bad.to_string().as_bytes()).len(), 5);
        assert_eq!(body_problems(b"{"), ["the body is not JSON"]);
    }
}

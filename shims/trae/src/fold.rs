//! Folds a SOLO request body into an OpenAI chat body a compression proxy can
//! read and shrink, keeping nothing the proxy could misread.
//!
//! Kept: `model` (from `config_name` when absent), `stream` (added as `true`
//! when absent: the endpoint only streams), `messages`, `tools`,
//! `tool_choice` and the sampling fields in [`SAMPLING`]. Every other
//! top-level key (`config_name`, `function`, the Max-mode fields, unknown
//! keys) stays only in the original, which the return leg restores from.
//!
//! Messages: a content list of plain text parts becomes one string (parts
//! joined with `\n`, as billion-context itself joins them); a list with any
//! other part (an image, a text part with extra members) stays a list of
//! parts. Assistant `tool_calls[].function_call` becomes `function`; other
//! message members pass as they are. `tools[].function.parameters` given as
//! a JSON string becomes the object (left a string when it is not JSON).

use serde_json::{Map, Value};
use shimgate_shim_api::ShimError;

/// Top-level fields restored from the compressed body besides `messages`
/// and `tools`: what the request asks of the model. Both spellings of the
/// reasoning effort are kept as the agent wrote them (which one SOLO reads
/// is unverified).
pub const SAMPLING: &[&str] = &[
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "reasoning_effort_level",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "response_format",
];

/// Separator between text parts joined into one string.
pub const PART_JOIN: &str = "\n";

/// The OpenAI body for a parsed SOLO body.
pub fn fold_body(body: &Value) -> Result<Value, ShimError> {
    let obj = body
        .as_object()
        .ok_or_else(|| ShimError::new("trae body is not a JSON object"))?;
    if !obj.get("messages").is_some_and(Value::is_array) {
        return Err(ShimError::new("trae body has no messages list"));
    }
    let mut out = Map::with_capacity(obj.len());
    for (key, value) in obj {
        let folded = match key.as_str() {
            "messages" => fold_messages(value),
            "tools" => fold_tools(value),
            "tool_choice" => fold_tool_choice(value),
            "model" | "stream" => value.clone(),
            k if SAMPLING.contains(&k) => value.clone(),
            _ => continue,
        };
        out.insert(key.clone(), folded);
    }
    if !out.contains_key("model") {
        if let Some(name) = obj.get("config_name") {
            out.insert("model".into(), name.clone());
        }
    }
    out.entry("stream").or_insert(Value::Bool(true));
    Ok(Value::Object(out))
}

/// The answer shape of the body [`fold_body`] would make (`model`, from
/// `config_name` when absent; `stream`, `true` when absent), read without
/// parsing the conversation; `None` when unsure (not UTF-8, not JSON the
/// strict scanner accepts, an escaped key, no `messages` list): the caller
/// folds, which decides, refusals included.
pub fn shape(native: &[u8]) -> Option<Value> {
    std::str::from_utf8(native).ok()?;
    let (mut model, mut stream, mut config_name, mut messages) = (None, None, None, None);
    let mut escaped_key = false;
    // A repeated key keeps its last value, as the parsed body does.
    crate::json_scan::members(native, &mut |key, value| match key {
        b"\"model\"" => model = Some(value),
        b"\"stream\"" => stream = Some(value),
        b"\"config_name\"" => config_name = Some(value),
        b"\"messages\"" => messages = Some(value),
        _ => escaped_key |= key.contains(&b'\\'),
    })
    .ok()?;
    if escaped_key || messages?.first() != Some(&b'[') {
        return None;
    }
    let mut shape = Map::new();
    if let Some(m) = model.or(config_name) {
        shape.insert("model".into(), serde_json::from_slice(m).ok()?);
    }
    let stream = match stream {
        Some(s) => serde_json::from_slice(s).ok()?,
        None => Value::Bool(true),
    };
    shape.insert("stream".into(), stream);
    Some(Value::Object(shape))
}

fn fold_messages(messages: &Value) -> Value {
    match messages {
        Value::Array(list) => Value::Array(list.iter().map(fold_message).collect()),
        other => other.clone(),
    }
}

fn fold_message(message: &Value) -> Value {
    let Some(obj) = message.as_object() else {
        return message.clone();
    };
    let mut out = Map::with_capacity(obj.len());
    for (key, value) in obj {
        let folded = match key.as_str() {
            "content" => fold_content(value),
            "tool_calls" => fold_tool_calls(value),
            _ => value.clone(),
        };
        out.insert(key.clone(), folded);
    }
    Value::Object(out)
}

/// The text of a part that is exactly `{"type":"text","text":…}`.
pub fn plain_text_part(part: &Value) -> Option<&str> {
    let obj = part.as_object()?;
    if obj.len() != 2 || obj.get("type")?.as_str()? != "text" {
        return None;
    }
    obj.get("text")?.as_str()
}

/// The string a content list of plain text parts folds to; `None` when the
/// list holds anything else (or nothing).
pub fn joined_text(parts: &[Value]) -> Option<String> {
    let mut texts = parts.iter().map(plain_text_part);
    let first = texts.next()??;
    let mut joined = first.to_owned();
    for text in texts {
        joined.push_str(PART_JOIN);
        joined.push_str(text?);
    }
    Some(joined)
}

fn fold_content(content: &Value) -> Value {
    match content {
        Value::Array(parts) => match joined_text(parts) {
            Some(text) => Value::String(text),
            None => content.clone(),
        },
        other => other.clone(),
    }
}

fn fold_tool_calls(calls: &Value) -> Value {
    let Value::Array(list) = calls else {
        return calls.clone();
    };
    let renamed = list
        .iter()
        .map(|call| match call.as_object() {
            Some(obj) if !obj.contains_key("function") => Value::Object(
                obj.iter()
                    .map(|(k, v)| {
                        let key = if k == "function_call" { "function" } else { k };
                        (key.to_owned(), v.clone())
                    })
                    .collect(),
            ),
            _ => call.clone(),
        })
        .collect();
    Value::Array(renamed)
}

fn fold_tools(tools: &Value) -> Value {
    let Value::Array(list) = tools else {
        return tools.clone();
    };
    let parsed = list
        .iter()
        .map(|tool| {
            let mut tool = tool.clone();
            if let Some(params) = tool.pointer_mut("/function/parameters") {
                if let Some(object) = params.as_str().and_then(|s| serde_json::from_str(s).ok()) {
                    *params = object;
                }
            }
            tool
        })
        .collect();
    Value::Array(parsed)
}

fn fold_tool_choice(choice: &Value) -> Value {
    match choice.as_str() {
        Some("auto" | "required" | "none") | None => choice.clone(),
        Some(name) => serde_json::json!({"type": "function", "function": {"name": name}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn solo_only_and_unknown_fields_are_removed() {
        let body = json!({"model":"m","config_name":"m","function":"solo_work_lite","mode_type":1,
            "weird":true,"temperature":0.2,"messages":[]});
        let folded = fold_body(&body).unwrap();
        assert_eq!(
            folded,
            json!({"model":"m","temperature":0.2,"messages":[],"stream":true})
        );
    }

    #[test]
    fn model_comes_from_config_name_when_absent() {
        let folded = fold_body(&json!({"config_name":"glm","messages":[]})).unwrap();
        assert_eq!(folded["model"], "glm");
    }

    #[test]
    fn text_parts_become_a_string_and_images_stay_parts() {
        let body = json!({"messages":[
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
            {"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:x"}}]},
            {"role":"user","content":[{"type":"text","text":"c","cache_control":{}}]}]});
        let m = &fold_body(&body).unwrap()["messages"];
        assert_eq!(m[0]["content"], "a\nb");
        assert_eq!(m[1]["content"], body["messages"][1]["content"]);
        assert_eq!(m[2]["content"], body["messages"][2]["content"]);
    }

    #[test]
    fn function_call_becomes_function_and_parameters_an_object() {
        let body = json!({"messages":[{"role":"assistant","content":null,"tool_calls":[
            {"id":"c1","type":"function","function_call":{"name":"glob","arguments":"{}"}}]}],
            "tools":[{"type":"function","function":{"name":"glob","parameters":"{\"type\":\"object\"}"}}]});
        let f = fold_body(&body).unwrap();
        assert_eq!(
            f["messages"][0]["tool_calls"][0]["function"]["name"],
            "glob"
        );
        assert!(f["messages"][0]["content"].is_null());
        assert_eq!(
            f["tools"][0]["function"]["parameters"],
            json!({"type":"object"})
        );
    }

    #[test]
    fn tool_choice_name_becomes_an_openai_object() {
        assert_eq!(fold_tool_choice(&json!("auto")), json!("auto"));
        assert_eq!(fold_tool_choice(&json!("none")), json!("none"));
        assert_eq!(
            fold_tool_choice(&json!("glob")),
            json!({"type":"function","function":{"name":"glob"}})
        );
    }

    #[test]
    fn the_shape_is_what_the_fold_would_carry() {
        let bodies = [
            r#"{"model":"m","stream":false,"messages":[],"config_name":"c"}"#,
            r#"{"config_name":"glm","messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"messages":[],"model":null,"stream_options":{"include_usage":false}}"#,
            r#"{"model":"a","messages":[],"model":"b","stream":true}"#,
        ];
        for body in bodies {
            let want = shimgate_shim_api::answer_shape(
                &fold_body(&serde_json::from_str(body).unwrap()).unwrap(),
            );
            assert_eq!(shape(body.as_bytes()), Some(want), "{body}");
        }
    }

    #[test]
    fn the_shape_leaves_what_it_is_unsure_of_to_the_fold() {
        for body in [
            r#"{"model":"m"}"#,
            r#"{"messages":{}}"#,
            r#"[1]"#,
            r#"{"messages":[],"t":1e400}"#,
            r#"{"mod\u0065l":"m","messages":[]}"#,
            r#"{"messages":[]"#,
        ] {
            assert_eq!(shape(body.as_bytes()), None, "{body}");
        }
    }

    #[test]
    fn a_body_without_messages_is_refused() {
        assert!(fold_body(&json!({"model":"m"})).is_err());
        assert!(fold_body(&json!([1])).is_err());
    }
}

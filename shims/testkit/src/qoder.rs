//! The qoder wire: the plaintext ask an agent hands the ingress, the
//! envelope frames an upstream streams byte for byte as the provider sends
//! them (chunk JSON as a string in `body`, heartbeats, timing frames, error
//! envelopes, the three endings), and what an agent reads from the bare
//! OpenAI frames the ingress sends back.

use serde_json::{json, Value};

use crate::openai::Chunks;

/// The inference path with the query the real client sends.
pub const PATH: &str =
    "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&AgentId=agent_common&Encode=1";

/// The chunk fields of the scripted answers.
pub const CHUNKS: Chunks<'static> = Chunks {
    id: "chatcmpl-q1",
    created: 1,
    model: "qmodel_38max",
};

/// A fresh ask `request_id`, shaped as the client's (qoder answers
/// `103 Duplicate request` to a reused one).
pub fn request_id() -> String {
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        fastrand::u32(..),
        fastrand::u64(..) & 0xffff_ffff_ffff
    )
}

/// A plaintext ask as the agent hands it to the ingress, with a fresh
/// `request_id`.
pub fn ask(messages: &[Value]) -> Value {
    ask_with(&request_id(), "session-1", messages)
}

/// A plaintext ask with the given `request_id` (also its `chat_record_id`)
/// and `session_id`.
pub fn ask_with(request_id: &str, session_id: &str, messages: &[Value]) -> Value {
    json!({
        "request_id": request_id,
        "chat_record_id": request_id,
        "request_set_id": "set-1",
        "session_id": session_id,
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

/// One envelope frame whose `body` is `body` as a JSON string: the chunk
/// JSON, `""`, `"null"` or `"{}"` (heartbeats), or `"[DONE]"` (an ending).
pub fn envelope(body: &str) -> String {
    envelope_json(&Value::String(body.to_owned()))
}

/// One envelope frame with any JSON `body` (`null` is a heartbeat too).
pub fn envelope_json(body: &Value) -> String {
    format!(
        "data:{}\n\n",
        json!({"headers": {"Content-Type": ["application/json"]}, "body": body, "statusCodeValue": 200, "statusCode": "OK"})
    )
}

/// An error envelope (`statusCodeValue` other than 200).
pub fn error_envelope(status: u16, body: &str) -> String {
    format!(
        "data:{}\n\n",
        json!({"headers": {}, "body": body, "statusCodeValue": status, "statusCode": "ERR"})
    )
}

/// The timing-only `event:finish` frame that ends some answers.
pub fn finish_event(first_token_ms: u64, total_ms: u64, server_ms: u64) -> String {
    format!(
        "event:finish\ndata:{}\n\n",
        json!({"firstTokenDuration": first_token_ms, "totalDuration": total_ms, "serverDuration": server_ms})
    )
}

/// A `chat.completion.chunk` with a text delta.
pub fn text_chunk(text: &str) -> String {
    CHUNKS
        .delta(json!({ "content": text }), Value::Null)
        .to_string()
}

/// The role-only first chunk.
pub fn role_chunk() -> String {
    CHUNKS
        .delta(json!({"role": "assistant", "content": ""}), Value::Null)
        .to_string()
}

/// The finish chunk and the usage chunk.
pub fn finish_and_usage(prompt_tokens: u64) -> (String, String) {
    (
        CHUNKS.delta(json!({}), json!("stop")).to_string(),
        CHUNKS.usage(prompt_tokens, 5).to_string(),
    )
}

/// The frames of a whole answer: heartbeats, role, the text in word
/// pieces, finish, usage and `body:"[DONE]"` (after which the real gateway
/// holds the connection open).
pub fn answer_frames(text: &str, prompt_tokens: u64) -> Vec<String> {
    let mut frames = vec![envelope("null"), envelope(&role_chunk()), envelope("")];
    frames.extend(
        text.split_inclusive(' ')
            .map(|piece| envelope(&text_chunk(piece))),
    );
    let (finish, usage) = finish_and_usage(prompt_tokens);
    frames.extend([
        envelope("{}"),
        envelope(&finish),
        envelope(&usage),
        envelope("[DONE]"),
    ]);
    frames
}

/// A full answer as the upstream plays it: [`answer_frames`], one chunk
/// each, then the connection is held open (as the gateway does).
#[cfg(feature = "dev")]
pub fn answer(text: &str, prompt_tokens: u64) -> crate::upstream::Reply {
    answer_frames(text, prompt_tokens)
        .into_iter()
        .fold(crate::upstream::Reply::sse(), |r, frame| r.chunk(frame))
        .hold()
}

/// What an agent read from the bare OpenAI frames the ingress sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Read {
    /// The text deltas, joined.
    pub text: String,
    /// `[DONE]` frames seen (a good answer has exactly one).
    pub dones: usize,
    /// The data of every frame after the first `[DONE]`.
    pub after_done: Vec<String>,
    /// The `error` member of every error frame.
    pub errors: Vec<Value>,
}

/// Reads a bare OpenAI answer as the agent does. What no bare stream may
/// hold is an error: a body that is not SSE, a named event, data that is
/// not JSON, an envelope.
pub fn read(body: &[u8]) -> Result<Read, String> {
    let events = shimgate_shim_api::sse::parse_all(body)
        .map_err(|e| format!("the answer is not SSE ({e:?})"))?;
    let mut read = Read::default();
    for ev in events {
        let data = String::from_utf8_lossy(&ev.data);
        if let Some(name) = &ev.event {
            return Err(format!(
                "a named event {:?} reached the agent: {data}",
                String::from_utf8_lossy(name)
            ));
        }
        if read.dones > 0 {
            read.after_done.push(data.to_string());
        }
        if data == "[DONE]" {
            read.dones += 1;
            continue;
        }
        let chunk: Value = serde_json::from_str(&data)
            .map_err(|e| format!("a frame is not JSON ({e}): {data}"))?;
        if ["statusCodeValue", "headers", "body"]
            .iter()
            .any(|k| chunk.get(*k).is_some())
        {
            return Err(format!("an envelope reached the agent: {data}"));
        }
        if let Some(err) = chunk.get("error") {
            read.errors.push(err.clone());
        }
        if let Some(t) = chunk
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            read.text.push_str(t);
        }
    }
    Ok(read)
}

/// The text an agent read from bare OpenAI frames, whether it ended with
/// exactly one `[DONE]`, and the errors it carried; panics on what no bare
/// stream may hold (see [`read`]).
#[cfg(feature = "dev")]
#[allow(clippy::panic)]
pub fn read_answer(body: &[u8]) -> (String, bool, Vec<Value>) {
    match read(body) {
        Ok(r) => (r.text, r.dones == 1, r.errors),
        Err(why) => panic!("{why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_byte_for_byte_the_providers() {
        assert_eq!(
            envelope("{\"a\":1}"),
            "data:{\"headers\":{\"Content-Type\":[\"application/json\"]},\"body\":\"{\\\"a\\\":1}\",\"statusCodeValue\":200,\"statusCode\":\"OK\"}\n\n"
        );
        assert_eq!(
            envelope_json(&Value::Null),
            "data:{\"headers\":{\"Content-Type\":[\"application/json\"]},\"body\":null,\"statusCodeValue\":200,\"statusCode\":\"OK\"}\n\n"
        );
        assert_eq!(
            error_envelope(429, "{}"),
            "data:{\"headers\":{},\"body\":\"{}\",\"statusCodeValue\":429,\"statusCode\":\"ERR\"}\n\n"
        );
        assert_eq!(
            finish_event(414, 571, 88),
            "event:finish\ndata:{\"firstTokenDuration\":414,\"totalDuration\":571,\"serverDuration\":88}\n\n"
        );
    }

    #[test]
    fn every_ask_gets_a_fresh_request_id() {
        let (a, b) = (ask(&[]), ask(&[]));
        assert_ne!(a["request_id"], b["request_id"]);
        assert_eq!(a["request_id"], a["chat_record_id"]);
        assert!(a["tools"].is_array() && a["business"].is_object());
    }

    #[test]
    fn bare_frames_are_read_and_envelopes_refused() {
        let ok = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: {\"error\":{\"code\":\"X\"}}\n\ndata: [DONE]\n\n";
        let r = read(ok).unwrap_or_default();
        assert_eq!((r.text.as_str(), r.dones, r.errors.len()), ("Hi", 1, 1));
        let env =
            b"data:{\"headers\":{},\"body\":\"{}\",\"statusCodeValue\":200}\n\ndata: [DONE]\n\n";
        assert!(read(env).is_err_and(|e| e.contains("envelope")));
        assert!(read(b"event:output\ndata:{}\n\n").is_err_and(|e| e.contains("named")));
        let twice = read(b"data: [DONE]\n\ndata: [DONE]\n\n").unwrap_or_default();
        assert_eq!((twice.dones, twice.after_done.len()), (2, 1));
    }
}

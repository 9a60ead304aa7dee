//! The qoder wire for tests: an agent's plaintext ask, and a scripted
//! upstream answer in the envelope format (heartbeats, timing frames, the
//! three endings), byte for byte as the provider sends it.

use serde_json::{json, Value};

use super::upstream::Reply;

/// The inference path with the query the real client sends.
pub const PATH: &str =
    "/algo/api/v2/service/pro/sse/agent_chat_generation?FetchKeys=llm_model_result&AgentId=agent_common&Encode=1";

/// A plaintext ask as the agent hands it to the ingress.
pub fn ask(messages: &[Value]) -> Value {
    let id = format!(
        "{:08x}-0000-4000-8000-{:012x}",
        fastrand::u32(..),
        fastrand::u64(..) & 0xffff_ffff_ffff
    );
    json!({
        "request_id": id,
        "chat_record_id": id,
        "request_set_id": "set-1",
        "session_id": "session-1",
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
        serde_json::to_string(body).unwrap()
    )
}

/// An error envelope.
pub fn error_envelope(status: u16, body: &str) -> String {
    format!(
        "data:{{\"headers\":{{}},\"body\":{},\"statusCodeValue\":{status},\"statusCode\":\"ERR\"}}\n\n",
        serde_json::to_string(body).unwrap()
    )
}

/// A `chat.completion.chunk` with a text delta.
pub fn text_chunk(text: &str) -> String {
    json!({"id": "chatcmpl-q1", "object": "chat.completion.chunk", "created": 1, "model": "qmodel_38max",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    .to_string()
}

/// The role-only first chunk.
pub fn role_chunk() -> String {
    json!({"id": "chatcmpl-q1", "object": "chat.completion.chunk", "created": 1, "model": "qmodel_38max",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]})
    .to_string()
}

/// The finish chunk and the usage chunk.
pub fn finish_and_usage(prompt_tokens: u64) -> (String, String) {
    (
        json!({"id": "chatcmpl-q1", "object": "chat.completion.chunk", "created": 1, "model": "qmodel_38max",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        .to_string(),
        json!({"id": "chatcmpl-q1", "object": "chat.completion.chunk", "created": 1, "model": "qmodel_38max",
            "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5}})
        .to_string(),
    )
}

/// A full answer: role, heartbeats, the text in pieces, finish, usage,
/// `body:"[DONE]"`, then the connection is held open (as the gateway does).
pub fn answer(text: &str, prompt_tokens: u64) -> Reply {
    let mut r = Reply::sse()
        .chunk(envelope("null"))
        .chunk(envelope(&role_chunk()))
        .chunk(envelope(""));
    for piece in text.split_inclusive(' ') {
        r = r.chunk(envelope(&text_chunk(piece)));
    }
    let (finish, usage) = finish_and_usage(prompt_tokens);
    r.chunk(envelope("{}"))
        .chunk(envelope(&finish))
        .chunk(envelope(&usage))
        .chunk(envelope("[DONE]"))
        .hold()
}

/// The text an agent read from bare OpenAI frames, and whether it ended
/// with exactly one `[DONE]`.
pub fn read_answer(body: &[u8]) -> (String, bool, Vec<Value>) {
    let mut text = String::new();
    let mut done = 0;
    let mut errors = Vec::new();
    for data in super::sse_data(body) {
        if data == "[DONE]" {
            done += 1;
            continue;
        }
        let v: Value =
            serde_json::from_str(&data).unwrap_or_else(|e| panic!("bad frame {data:?}: {e}"));
        assert!(
            v.get("statusCodeValue").is_none(),
            "envelope reached the agent: {data}"
        );
        if let Some(err) = v.get("error") {
            errors.push(err.clone());
        }
        if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
    }
    (text, done == 1, errors)
}

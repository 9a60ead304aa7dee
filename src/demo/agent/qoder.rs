//! The qoder agent: hands the plaintext ask to the ingress and expects
//! bare OpenAI frames back (no envelope, no named event), the scripted
//! text, and exactly one `[DONE]` at the end.

use std::time::Duration;

use serde_json::{json, Value};
use shimgate_shim_api::sse::parse_all;

use super::{post, quote, Client};
use crate::demo::script;

/// A qoder agent with its conversation so far.
pub struct QoderAgent {
    client: Client,
    url: String,
    messages: Vec<Value>,
}

impl QoderAgent {
    /// An agent talking to the qoder shim at `shim` (`http://ADDR`).
    pub fn new(client: Client, shim: &str) -> Self {
        QoderAgent {
            client,
            url: format!("{shim}{}", script::QODER_PATH),
            messages: vec![json!({"role": "system", "content": script::SYSTEM_PROMPT})],
        }
    }

    /// Plays `turn`: one request; returns its latency.
    pub async fn turn(&mut self, turn: u32) -> Result<Vec<Duration>, String> {
        self.messages
            .push(json!({"role": "user", "content": script::user_message(turn)}));
        let body = serde_json::to_vec(&ask(&self.messages)).unwrap_or_default();
        let headers = [
            ("content-type", "application/json"),
            ("authorization", script::QODER_AUTH),
        ];
        let answer = post(&self.client, &self.url, &headers, body).await?;
        let text = read_bare(&answer.body)?;
        let want = script::qoder_answer(turn);
        if text != want {
            return Err(format!("text {text:?} instead of {want:?}"));
        }
        self.messages
            .push(json!({"role": "assistant", "content": text}));
        Ok(vec![answer.elapsed])
    }
}

/// The plaintext ask, as the agent hands it to the provider's encryptor.
fn ask(messages: &[Value]) -> Value {
    let id = format!(
        "{:08x}-0000-4000-8000-{:012x}",
        fastrand::u32(..),
        fastrand::u64(..) & 0xffff_ffff_ffff
    );
    json!({
        "request_id": id,
        "chat_record_id": id,
        "request_set_id": "demo-set",
        "session_id": "demo-session",
        "stream": true,
        "chat_task": "FREE_INPUT",
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
        "tools": [{"type": "function", "function": {"name": "read_file", "description": "read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}],
        "parameters": {"max_tokens": 4096, "temperature": 0.2},
    })
}

/// The text of a bare OpenAI stream, or why it is not one.
fn read_bare(body: &[u8]) -> Result<String, String> {
    let events = parse_all(body).map_err(|e| format!("the answer is not SSE ({e:?})"))?;
    let mut text = String::new();
    let mut done = 0;
    for ev in events {
        let data = String::from_utf8_lossy(&ev.data);
        if let Some(name) = &ev.event {
            return Err(format!(
                "a named event {:?} reached the agent: {}",
                String::from_utf8_lossy(name),
                quote(&ev.data)
            ));
        }
        if done > 0 {
            return Err(format!("a frame after [DONE]: {}", quote(&ev.data)));
        }
        if data == "[DONE]" {
            done += 1;
            continue;
        }
        let chunk: Value = serde_json::from_str(&data)
            .map_err(|e| format!("a frame is not JSON ({e}): {}", quote(&ev.data)))?;
        if ["statusCodeValue", "headers", "body"]
            .iter()
            .any(|k| chunk.get(*k).is_some())
        {
            return Err(format!(
                "an envelope reached the agent: {}",
                quote(&ev.data)
            ));
        }
        if let Some(err) = chunk.get("error") {
            return Err(format!("an error frame: {err}"));
        }
        if let Some(t) = chunk
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            text.push_str(t);
        }
    }
    if done != 1 {
        return Err("the stream did not end with [DONE]".into());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_frames_are_read_and_envelopes_are_refused() {
        let ok = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(read_bare(ok).unwrap(), "Hi");
        let env =
            b"data:{\"headers\":{},\"body\":\"{}\",\"statusCodeValue\":200}\n\ndata: [DONE]\n\n";
        assert!(read_bare(env).unwrap_err().contains("envelope"));
        let no_done = b"data: {\"choices\":[]}\n\n";
        assert!(read_bare(no_done).is_err());
        let twice = b"data: [DONE]\n\ndata: [DONE]\n\n";
        assert!(read_bare(twice).is_err());
    }
}

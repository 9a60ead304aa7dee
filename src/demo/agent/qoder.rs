//! The qoder agent: hands the plaintext ask to the ingress and expects
//! bare OpenAI frames back (no envelope, no named event), the scripted
//! text, and exactly one `[DONE]` at the end.

use std::time::Duration;

use serde_json::{json, Value};
use shimgate_testkit::qoder;

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
        // The plaintext ask, as the agent hands it to the provider's encryptor.
        let ask = qoder::ask_with(&qoder::request_id(), "demo-session", &self.messages);
        let body = serde_json::to_vec(&ask).unwrap_or_default();
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

/// The text of a bare OpenAI stream, or why it is not one.
fn read_bare(body: &[u8]) -> Result<String, String> {
    let read = qoder::read(body).map_err(|why| quote(why.as_bytes()))?;
    if let Some(frame) = read.after_done.first() {
        return Err(format!("a frame after [DONE]: {}", quote(frame.as_bytes())));
    }
    if let Some(err) = read.errors.first() {
        return Err(format!("an error frame: {err}"));
    }
    if read.dones != 1 {
        return Err("the stream did not end with [DONE]".into());
    }
    Ok(read.text)
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

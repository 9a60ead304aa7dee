//! The TRAE agent: sends SOLO bodies (text parts, `function_call` tool
//! turns, Max-mode fields) and expects SOLO events only, carrying the
//! scripted reasoning, text or tool call, and a `done`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use shimgate_shim_api::sse::parse_all;
use shimgate_testkit::trae;

use super::{post, quote, Client};
use crate::demo::script::{self, ToolCall};

/// A TRAE agent with its conversation so far.
pub struct TraeAgent {
    client: Client,
    url: String,
    messages: Vec<Value>,
}

/// What the agent read from one SOLO answer.
#[derive(Debug, Default, PartialEq)]
struct Solo {
    text: String,
    reasoning: String,
    calls: Vec<ToolCall>,
    finish: String,
}

impl TraeAgent {
    /// An agent talking to the trae shim at `shim` (`http://ADDR`).
    pub fn new(client: Client, shim: &str) -> Self {
        TraeAgent {
            client,
            url: format!("{shim}{}", shimgate_shim_trae::INFERENCE_PATH),
            messages: vec![trae::text("system", script::SYSTEM_PROMPT)],
        }
    }

    /// Plays `turn`: one request, or two when the model calls a tool first;
    /// returns their latencies.
    pub async fn turn(&mut self, turn: u32) -> Result<Vec<Duration>, String> {
        self.messages
            .push(trae::text("user", &script::user_message(turn)));
        let mut latencies = Vec::new();
        if script::calls_tool(turn) {
            let call = script::tool_call(turn);
            let want = Solo {
                reasoning: script::REASONING.into(),
                calls: vec![call.clone()],
                finish: "tool_calls".into(),
                ..Solo::default()
            };
            latencies.push(self.exchange(&want).await?);
            self.messages.extend(trae::tool_turn(
                &call.id,
                &call.name,
                &call.arguments,
                &script::tool_result(turn),
            ));
        }
        let text = script::trae_answer(turn, script::calls_tool(turn));
        let want = Solo {
            text: text.clone(),
            reasoning: script::REASONING.into(),
            finish: "stop".into(),
            ..Solo::default()
        };
        latencies.push(self.exchange(&want).await?);
        self.messages.push(trae::text("assistant", &text));
        Ok(latencies)
    }

    /// Sends the conversation and checks the answer against `want`.
    async fn exchange(&self, want: &Solo) -> Result<Duration, String> {
        let body = serde_json::to_vec(&trae::body(&self.messages)).unwrap_or_default();
        let headers = [
            ("content-type", "application/json"),
            ("authorization", script::TRAE_AUTH),
            ("x-ide-token", script::TRAE_IDE_TOKEN),
        ];
        let answer = post(&self.client, &self.url, &headers, body).await?;
        let got = read_solo(&answer.body)?;
        if &got != want {
            return Err(differences(want, &got));
        }
        Ok(answer.elapsed)
    }
}

/// What differs between the scripted answer and the one read.
fn differences(want: &Solo, got: &Solo) -> String {
    let mut d = Vec::new();
    if want.text != got.text {
        d.push(format!("text {:?} instead of {:?}", got.text, want.text));
    }
    if want.reasoning != got.reasoning {
        d.push(format!(
            "reasoning {:?} instead of {:?}",
            got.reasoning, want.reasoning
        ));
    }
    if want.calls != got.calls {
        d.push(format!(
            "tool calls {:?} instead of {:?}",
            got.calls, want.calls
        ));
    }
    if want.finish != got.finish {
        d.push(format!(
            "finish {:?} instead of {:?}",
            got.finish, want.finish
        ));
    }
    d.join("; ")
}

/// What a TRAE client makes of a SOLO stream, or why it is not one.
fn read_solo(body: &[u8]) -> Result<Solo, String> {
    let events = parse_all(body).map_err(|e| format!("the answer is not SSE ({e:?})"))?;
    let mut solo = Solo::default();
    let mut calls: BTreeMap<u64, ToolCall> = BTreeMap::new();
    let mut done = false;
    for ev in events {
        let Some(name) = &ev.event else {
            return Err(format!(
                "an unnamed (OpenAI) frame reached the agent: {}",
                quote(&ev.data)
            ));
        };
        let data: Value = serde_json::from_slice(&ev.data).unwrap_or(Value::Null);
        match name.as_ref() {
            b"output" => {
                if let Some(t) = data.get("response").and_then(Value::as_str) {
                    solo.text.push_str(t);
                }
                if let Some(r) = data.get("reasoning_content").and_then(Value::as_str) {
                    solo.reasoning.push_str(r);
                }
                for c in data
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
                    let call = calls.entry(index).or_insert_with(|| ToolCall {
                        id: String::new(),
                        name: String::new(),
                        arguments: String::new(),
                    });
                    let field =
                        |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
                    if call.id.is_empty() {
                        call.id = field(c.get("id"));
                    }
                    let f = c.get("function_call");
                    if call.name.is_empty() {
                        call.name = field(f.and_then(|f| f.get("name")));
                    }
                    call.arguments
                        .push_str(&field(f.and_then(|f| f.get("arguments"))));
                }
            }
            b"error" => return Err(format!("a SOLO error event: {}", quote(&ev.data))),
            b"done" => {
                solo.finish = data
                    .get("finish_reason")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                done = true;
                break;
            }
            _ => {}
        }
    }
    if !done {
        return Err("the stream ended without a done event".into());
    }
    if String::from_utf8_lossy(body).contains("chat.completion.chunk") {
        return Err("an OpenAI chunk reached the agent".into());
    }
    solo.calls = calls.into_values().collect();
    Ok(solo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solo_streams_are_read_and_openai_frames_are_refused() {
        let ok = b"event:output\ndata:{\"response\":\"Hi\",\"reasoning_content\":\"r\",\"tool_calls\":null}\n\n\
event:output\ndata:{\"response\":\"\",\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function_call\":{\"name\":\"glob\",\"arguments\":\"{\\\"a\"}}]}\n\n\
event:output\ndata:{\"response\":\"\",\"tool_calls\":[{\"index\":0,\"id\":\"\",\"function_call\":{\"name\":\"\",\"arguments\":\"\\\":1}\"}}]}\n\n\
event:done\ndata:{\"finish_reason\":\"tool_calls\"}\n\n";
        let s = read_solo(ok).unwrap();
        assert_eq!(s.text, "Hi");
        assert_eq!(s.reasoning, "r");
        assert_eq!(s.calls[0].arguments, "{\"a\":1}");
        assert_eq!(s.calls[0].name, "glob");
        assert_eq!(s.finish, "tool_calls");
        assert!(read_solo(b"data: {\"choices\":[]}\n\n").is_err());
        assert!(read_solo(b"event:output\ndata:{}\n\n").is_err());
    }
}

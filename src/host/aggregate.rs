//! Answers a `stream: false` return-leg request: the upstream wire always
//! streams, so the OpenAI frames are folded into one `chat.completion`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use shimgate_shim_api::sse::SseEvent;

/// Collects OpenAI chunks into one completion.
#[derive(Debug, Default)]
pub struct Aggregate {
    id: Option<String>,
    model: Option<String>,
    created: Option<Value>,
    content: String,
    reasoning: String,
    tools: BTreeMap<u64, (Option<String>, Option<String>, String)>,
    finish: Option<String>,
    usage: Option<Value>,
    error: Option<Value>,
}

impl Aggregate {
    /// Takes one frame of the return leg's output.
    pub fn event(&mut self, ev: &SseEvent) {
        if ev.data.as_ref() == b"[DONE]" {
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(&ev.data) else {
            return;
        };
        if let Some(err) = chunk.get("error") {
            self.error = Some(err.clone());
            return;
        }
        if self.id.is_none() {
            self.id = chunk.get("id").and_then(Value::as_str).map(str::to_owned);
        }
        if let Some(m) = chunk.get("model").and_then(Value::as_str) {
            self.model = Some(m.to_owned());
        }
        if self.created.is_none() {
            self.created = chunk.get("created").cloned();
        }
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(u.clone());
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return;
        };
        for choice in choices {
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(f.to_owned());
            }
            let Some(delta) = choice.get("delta") else {
                continue;
            };
            if let Some(t) = delta.get("content").and_then(Value::as_str) {
                self.content.push_str(t);
            }
            if let Some(t) = delta.get("reasoning_content").and_then(Value::as_str) {
                self.reasoning.push_str(t);
            }
            for (pos, call) in delta
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let index = call
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(pos as u64);
                let slot = self.tools.entry(index).or_default();
                if let Some(id) = call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    slot.0 = Some(id.to_owned());
                }
                let f = call.get("function");
                if let Some(n) = f
                    .and_then(|f| f.get("name"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                {
                    slot.1 = Some(n.to_owned());
                }
                if let Some(a) = f.and_then(|f| f.get("arguments")).and_then(Value::as_str) {
                    slot.2.push_str(a);
                }
            }
        }
    }

    /// An error frame the stream carried, if any.
    pub fn error(&self) -> Option<&Value> {
        self.error.as_ref()
    }

    /// The `chat.completion` object.
    pub fn finish(self) -> Value {
        let mut message = Map::new();
        message.insert("role".into(), json!("assistant"));
        message.insert(
            "content".into(),
            if self.content.is_empty() && !self.tools.is_empty() {
                Value::Null
            } else {
                json!(self.content)
            },
        );
        if !self.reasoning.is_empty() {
            message.insert("reasoning_content".into(), json!(self.reasoning));
        }
        if !self.tools.is_empty() {
            let calls: Vec<Value> = self
                .tools
                .into_iter()
                .map(|(_, (id, name, args))| {
                    json!({"id": id.unwrap_or_default(), "type": "function", "function": {"name": name.unwrap_or_default(), "arguments": args}})
                })
                .collect();
            message.insert("tool_calls".into(), Value::Array(calls));
        }
        let mut out = json!({
            "id": self.id.unwrap_or_else(|| "chatcmpl-shimgate".into()),
            "object": "chat.completion",
            "created": self.created.unwrap_or(json!(0)),
            "model": self.model.unwrap_or_default(),
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish.unwrap_or_else(|| "stop".into())}],
        });
        if let (Some(u), Some(m)) = (self.usage, out.as_object_mut()) {
            m.insert("usage".into(), u);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shimgate_shim_api::sse::parse_all;

    #[test]
    fn chunks_fold_into_one_completion() {
        let sse = concat!(
            "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\",\"reasoning_content\":\"hm\"}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t1\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5}}\n\n",
            "data: [DONE]\n\n",
        );
        let mut agg = Aggregate::default();
        for ev in parse_all(sse.as_bytes()).unwrap() {
            agg.event(&ev);
        }
        let v = agg.finish();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], "Hello");
        assert_eq!(v["choices"][0]["message"]["reasoning_content"], "hm");
        assert_eq!(
            v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            "{\"a\":1}"
        );
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["usage"]["prompt_tokens"], 5);
    }
}

//! SOLO streams built from arbitrary bytes, for the round-trip fuzz target.

use serde_json::{json, Value};

/// Builds a SOLO stream from arbitrary bytes (for the round-trip fuzz
/// target and its stable stand-in test): every byte picks the next event
/// (text, reasoning, tool-call fragments, usage, done, error, bookkeeping,
/// unknown events, id and retry lines, a bare `[DONE]`), later bytes fill it
/// in; the first byte also picks CRLF or LF line ends.
pub fn generate(bytes: &[u8]) -> Vec<u8> {
    let mut g = Gen { bytes, at: 0 };
    let crlf = g.byte() & 3 == 0;
    let mut out = String::new();
    let ev = |out: &mut String, name: Option<&str>, data: &str, id: Option<&str>| {
        if let Some(id) = id {
            out.push_str(&format!("id:{id}\n"));
        }
        if let Some(name) = name {
            out.push_str(&format!("event:{name}\n"));
        }
        out.push_str(&format!("data:{data}\n\n"));
    };
    while g.at < g.bytes.len() {
        let op = g.byte();
        let id = (op & 0x80 != 0).then(|| g.byte().to_string());
        let id = id.as_deref();
        let idx = u64::from(g.byte() % 3);
        let out_json = |response: Value, reasoning: Value, tools: Value| {
            json!({"response": response, "reasoning_content": reasoning, "tool_calls": tools})
                .to_string()
        };
        match op % 16 {
            0 | 1 => ev(
                &mut out,
                Some("output"),
                &out_json(json!(g.text()), Value::Null, Value::Null),
                id,
            ),
            2 => ev(
                &mut out,
                Some("output"),
                &out_json(json!(""), json!(g.text()), Value::Null),
                id,
            ),
            3 => ev(
                &mut out,
                Some("output"),
                &out_json(json!(g.text()), json!(g.text()), Value::Null),
                id,
            ),
            4 => {
                let call = json!([{"index": idx, "id": format!("call_{idx}"), "type": "function",
                    "function_call": {"name": format!("tool{idx}"), "arguments": g.text()}}]);
                ev(
                    &mut out,
                    Some("output"),
                    &out_json(json!(""), Value::Null, call),
                    id,
                );
            }
            5 => {
                let call = json!([{"index": idx, "id": "", "type": "function", "namespace": "ns",
                    "function_call": {"name": "", "arguments": g.text()}}]);
                ev(
                    &mut out,
                    Some("output"),
                    &out_json(json!(""), Value::Null, call),
                    id,
                );
            }
            6 => {
                let call = json!({"index": idx, "id": format!("c{idx}"), "type": "function",
                    "function_call": {"name": "f", "arguments": g.text()}});
                ev(
                    &mut out,
                    Some("output"),
                    &out_json(json!(g.text()), Value::Null, call),
                    id,
                );
            }
            7 => {
                let (p, c) = (u64::from(g.byte()), u64::from(g.byte()));
                let data = json!({"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c, "reasoning_tokens": c / 2});
                ev(&mut out, Some("token_usage"), &data.to_string(), id);
            }
            8 => {
                let reason =
                    ["stop", "tool_calls", "length", "content_filter"][usize::from(g.byte() % 4)];
                ev(
                    &mut out,
                    Some("done"),
                    &json!({ "finish_reason": reason }).to_string(),
                    id,
                );
            }
            9 => {
                let code =
                    [4008, 4022, 4001, 1001, 4050, 7777, 4_000_005][usize::from(g.byte() % 7)];
                let data = json!({"code": code, "message": g.text(), "extra": null});
                ev(&mut out, Some("error"), &data.to_string(), id);
            }
            10 => {
                let name = [
                    "metadata",
                    "timing_cost",
                    "extra_info",
                    "queue_begin",
                    "request_wait_in_queue",
                ][usize::from(g.byte() % 5)];
                ev(
                    &mut out,
                    Some(name),
                    &json!({ "v": g.text() }).to_string(),
                    id,
                );
            }
            11 => ev(
                &mut out,
                Some("mystery_event"),
                &g.text().replace(['\n', '\r'], " "),
                id,
            ),
            12 => ev(
                &mut out,
                None,
                &json!({ "nameless": g.byte() }).to_string(),
                id,
            ),
            13 => out.push_str(&format!("retry:{}\n", g.byte())),
            14 => ev(
                &mut out,
                Some("output"),
                r#"{"response":"","reasoning_content":"","tool_calls":null}"#,
                id,
            ),
            _ => {
                if g.byte() & 7 == 0 {
                    ev(&mut out, None, "[DONE]", id);
                } else {
                    ev(
                        &mut out,
                        Some("output"),
                        &format!("{{\"response\":{},\n\"x\":1}}", json!(g.text()))
                            .replace('\n', "\ndata:"),
                        id,
                    );
                }
            }
        }
    }
    if crlf {
        out = out.replace('\n', "\r\n");
    }
    out.into_bytes()
}

struct Gen<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Gen<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.bytes.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// A short text that exercises escaping: quotes, backslashes, line
    /// breaks, control characters, CJK and astral characters.
    fn text(&mut self) -> String {
        const ALPHABET: [&str; 16] = [
            "a", "Z", " ", "\"", "\\", "\n", "\r", "\t", "\u{1}", "中", "😀", "{", "}", ":", ",",
            "\u{2028}",
        ];
        let len = self.byte() % 8;
        (0..len)
            .map(|_| ALPHABET[usize::from(self.byte() % 16)])
            .collect()
    }
}

//! What the reference compressor does to one chat request, as a pure
//! function so it can be tested without sockets: past a size threshold the
//! older turns become one deterministic summary block, and a system preamble
//! is always added (as real compression proxies do).

use serde_json::{json, Value};

/// The system message every rewritten request starts with. Real proxies add
/// their own instructions too, which is why `compacted` runs ahead of
/// `folded` in shimgate's `/status`.
pub const PREAMBLE: &str = "[shimgate reference compressor] Older turns of this \
conversation may be replaced by a summary block; ask if you need their details.";

/// Turns kept verbatim at the end of a compressed request (a turn starts at
/// a user message and runs to the next one).
pub const DEFAULT_KEEP_TURNS: usize = 2;

/// Requests whose `max_tokens` is at most this pass untouched:
/// billion-context treats them as side calls (titles and the like).
pub use shimgate_shim_api::openai::SIDE_REQUEST_MAX_TOKENS;

/// Words taken from the start of each summarised message.
const SUMMARY_WORDS: usize = 4;

/// Cap on the snippet list inside the summary block, so the block stays
/// short however long the history gets.
const SUMMARY_MAX_CHARS: usize = 200;

/// When to compress and how much to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Compress once the request's message content passes this many characters.
    pub threshold_chars: usize,
    /// Turns kept verbatim (at least one: the current question).
    pub keep_turns: usize,
    /// Forward every request byte for byte, chat requests included (no
    /// preamble, no summary): a plain proxy on the compression path, which
    /// the load tool measures shimgate's two legs against.
    pub pass_through: bool,
}

/// What a rewrite did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rewrite {
    /// Message content characters before.
    pub before: usize,
    /// Message content characters after (preamble and summary included).
    pub after: usize,
    /// Messages replaced by the summary block (0: only the preamble was added).
    pub summarised: usize,
}

/// Whether `body` is a side request left alone (`max_tokens` or
/// `max_completion_tokens` at most [`SIDE_REQUEST_MAX_TOKENS`]).
pub fn is_side_request(body: &Value) -> bool {
    shimgate_shim_api::openai::is_tiny(body)
}

/// Rewrites a chat request in place. `None`: left untouched (a side
/// request, or no `messages` list), so the caller forwards the original bytes.
pub fn rewrite(body: &mut Value, policy: &Policy) -> Option<Rewrite> {
    if is_side_request(body) {
        return None;
    }
    let messages = body.get_mut("messages").and_then(Value::as_array_mut)?;
    let before = content_chars(messages);
    let summarised = if before > policy.threshold_chars {
        summarise(messages, policy.keep_turns.max(1))
    } else {
        0
    };
    messages.insert(0, json!({"role": "system", "content": PREAMBLE}));
    Some(Rewrite {
        before,
        after: content_chars(messages),
        summarised,
    })
}

/// Characters of message content: string content, or the `text` of content
/// parts (the same measure shimgate's exchange accounting uses).
pub fn content_chars(messages: &[Value]) -> usize {
    messages.iter().map(chars_of).sum()
}

fn chars_of(message: &Value) -> usize {
    match message.get("content") {
        Some(Value::String(s)) => s.chars().count(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(|t| t.chars().count())
            .sum(),
        _ => 0,
    }
}

fn text_of(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Replaces every non-system message before the last `keep_turns` turns by
/// one summary block; returns how many were replaced (0 when there is
/// nothing older, or the block would not be shorter than what it replaces).
fn summarise(messages: &mut Vec<Value>, keep_turns: usize) -> usize {
    let users: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| role(m) == "user")
        .map(|(i, _)| i)
        .collect();
    let Some(&cut) = users
        .len()
        .checked_sub(keep_turns)
        .and_then(|i| users.get(i))
    else {
        return 0;
    };
    let (older, recent) = messages.split_at(cut);
    let dropped: Vec<&Value> = older.iter().filter(|m| role(m) != "system").collect();
    if dropped.is_empty() {
        return 0;
    }
    let block = summary_block(&dropped);
    let dropped_chars: usize = dropped.iter().map(|m| chars_of(m)).sum();
    if chars_of(&block) >= dropped_chars {
        return 0;
    }
    let count = dropped.len();
    let mut kept: Vec<Value> = older
        .iter()
        .filter(|m| role(m) == "system")
        .cloned()
        .collect();
    kept.push(block);
    kept.extend(recent.iter().cloned());
    *messages = kept;
    count
}

/// `[summary of N earlier messages: first words / first words / …]`.
fn summary_block(dropped: &[&Value]) -> Value {
    let mut snippets = String::new();
    for m in dropped {
        let text = text_of(m);
        let words: Vec<&str> = text.split_whitespace().take(SUMMARY_WORDS).collect();
        let snippet = if words.is_empty() {
            tool_names(m).map_or_else(|| role(m).to_string(), |n| format!("called {n}"))
        } else {
            words.join(" ")
        };
        if !snippets.is_empty() {
            snippets.push_str(" / ");
        }
        snippets.push_str(&snippet);
        if snippets.chars().count() > SUMMARY_MAX_CHARS {
            snippets = snippets.chars().take(SUMMARY_MAX_CHARS).collect();
            snippets.push('…');
            break;
        }
    }
    json!({
        "role": "user",
        "content": format!("[summary of {} earlier messages: {snippets}]", dropped.len()),
    })
}

/// The names of the tools an assistant message called (OpenAI `function`
/// or SOLO `function_call`).
fn tool_names(message: &Value) -> Option<String> {
    let names: Vec<&str> = message
        .get("tool_calls")?
        .as_array()?
        .iter()
        .filter_map(|c| {
            c.get("function")
                .or_else(|| c.get("function_call"))
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
        })
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: Policy = Policy {
        threshold_chars: 1000,
        keep_turns: 2,
        pass_through: false,
    };

    fn msg(role: &str, content: &str) -> Value {
        json!({"role": role, "content": content})
    }

    fn conversation(turns: usize) -> Value {
        let mut m = vec![msg("system", "You are a coding agent.")];
        for t in 0..turns {
            m.push(msg(
                "user",
                &format!("turn {t} {}", "fix the parser ".repeat(10)),
            ));
            m.push(msg("assistant", &format!("answer {t} done")));
        }
        json!({"model": "m", "stream": true, "messages": m})
    }

    #[test]
    fn a_small_request_only_gets_the_preamble() {
        let mut body = conversation(2);
        let original = body.clone();
        let r = rewrite(&mut body, &POLICY).unwrap();
        assert_eq!(r.summarised, 0);
        assert_eq!(r.after, r.before + PREAMBLE.chars().count());
        let after = body["messages"].as_array().unwrap();
        assert_eq!(after[0]["content"], PREAMBLE);
        assert_eq!(after[1..], original["messages"].as_array().unwrap()[..]);
    }

    #[test]
    fn a_large_request_keeps_system_and_the_last_turns_verbatim() {
        let mut body = conversation(20);
        let original = body["messages"].as_array().unwrap().clone();
        let r = rewrite(&mut body, &POLICY).unwrap();
        assert_eq!(r.summarised, 36);
        assert!(r.after < r.before / 3, "{r:?}");
        let after = body["messages"].as_array().unwrap();
        assert_eq!(after[0]["content"], PREAMBLE);
        assert_eq!(after[1], original[0], "the agent's system message stays");
        let summary = after[2]["content"].as_str().unwrap();
        assert!(
            summary.starts_with("[summary of 36 earlier messages: turn 0 fix the / answer 0 done"),
            "{summary}"
        );
        assert_eq!(after[3..], original[original.len() - 4..]);
    }

    #[test]
    fn the_summary_is_deterministic_and_capped() {
        let mut a = conversation(200);
        let mut b = conversation(200);
        rewrite(&mut a, &POLICY);
        rewrite(&mut b, &POLICY);
        assert_eq!(a, b);
        let summary = a["messages"][2]["content"].as_str().unwrap();
        assert!(
            summary.chars().count() < SUMMARY_MAX_CHARS + 50,
            "{summary}"
        );
    }

    #[test]
    fn tiny_max_tokens_is_left_alone() {
        for key in ["max_tokens", "max_completion_tokens"] {
            let mut body = conversation(20);
            body[key] = json!(200);
            let original = body.clone();
            assert_eq!(rewrite(&mut body, &POLICY), None);
            assert_eq!(body, original);
        }
        let mut body = conversation(1);
        body["max_tokens"] = json!(201);
        assert!(rewrite(&mut body, &POLICY).is_some());
    }

    #[test]
    fn a_body_without_messages_is_left_alone() {
        let mut body = json!({"model": "m", "input": "hi"});
        assert_eq!(rewrite(&mut body, &POLICY), None);
    }

    #[test]
    fn the_kept_tail_starts_at_a_user_message_so_tool_results_keep_their_call() {
        let mut m = vec![msg("user", &"old question ".repeat(100))];
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "glob", "arguments": "{}"}}]}));
        m.push(msg("tool", &"src/lib.rs ".repeat(50)));
        m.push(msg("user", "second"));
        m.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{}"}}]}));
        m.push(msg("tool", "fn main() {}"));
        m.push(msg("user", "third"));
        let mut body = json!({"messages": m});
        let r = rewrite(&mut body, &POLICY).unwrap();
        assert_eq!(r.summarised, 3);
        let after = body["messages"].as_array().unwrap();
        let roles: Vec<&str> = after.iter().map(role).collect();
        assert_eq!(
            roles,
            ["system", "user", "user", "assistant", "tool", "user"]
        );
        assert!(after[1]["content"]
            .as_str()
            .unwrap()
            .contains("called glob"));
    }

    #[test]
    fn content_parts_count_as_content() {
        let m = [
            json!({"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "text", "text": "de"}]}),
        ];
        assert_eq!(content_chars(&m), 5);
    }

    #[test]
    fn odd_shapes_never_panic() {
        for body in [
            json!({"messages": []}),
            json!({"messages": [1, "x", null, {"role": 3}]}),
            json!({"messages": [{"role": "user", "content": {"a": 1}}]}),
            json!({"messages": [{"role": "assistant", "content": "x".repeat(5000)}]}),
        ] {
            let mut b = body;
            let _ = rewrite(&mut b, &POLICY);
        }
    }
}

//! The conversation the demo plays, shared by the scripted providers (which
//! answer it) and the agents (which check the answers), so both sides agree
//! on every byte without talking to each other.

/// The qoder inference path with the query the real client sends.
pub use shimgate_testkit::qoder::PATH as QODER_PATH;

/// The credential the qoder agent sends; the provider checks it arrives
/// (shimgate keeps it away from the compressor and adds it back upstream).
pub const QODER_AUTH: &str = "COSY.demo-payload.demo-signature";

/// The TRAE agent's credentials, checked the same way.
pub const TRAE_AUTH: &str = "Cloud-IDE-JWT demo-jwt";
/// The TRAE agent's second credential header.
pub const TRAE_IDE_TOKEN: &str = "demo-ide-token";

/// The agents' system prompt.
pub const SYSTEM_PROMPT: &str =
    "You are a coding agent in a Rust repository. Read files with the tools before you change them.";

/// The reasoning the TRAE provider streams before each answer.
pub const REASONING: &str = "Let me check what the user asked and what I already know.";

/// Sentences the user messages are made of (rotated per turn so every
/// message differs but the run is deterministic).
const ASKS: [&str; 8] = [
    "The tokenizer still splits string literals that contain escaped quotes into two tokens.",
    "Please keep the public API of the parser crate unchanged while you fix it.",
    "Run the unit tests for the lexer afterwards and tell me which ones changed.",
    "The error message for an unterminated string should point at the opening quote.",
    "Also look at the benchmark: the last change made parsing large files slower.",
    "Add a regression test named after the issue so it cannot come back unnoticed.",
    "Check that the fuzz target still builds with the new token kinds.",
    "When you are done, summarise the change in two sentences for the changelog.",
];

/// Sentences a tool result is made of.
const FILES: [&str; 6] = [
    "src/lexer.rs (412 lines, last changed in the string escape fix)",
    "src/parser/mod.rs (988 lines, entry points parse_file and parse_expr)",
    "src/parser/error.rs (156 lines, Span and ParseError)",
    "tests/lexer_strings.rs (230 lines, 41 tests)",
    "benches/parse_large.rs (88 lines, one criterion group)",
    "fuzz/fuzz_targets/lexer_tokens.rs (35 lines)",
];

/// The user message of `turn` (a few hundred characters, starting with the
/// `[turn N]` marker the providers read).
pub fn user_message(turn: u32) -> String {
    let mut text = format!("[turn {turn}]");
    for i in 0..4 {
        text.push(' ');
        text.push_str(ASKS[(turn as usize + i * 3) % ASKS.len()]);
    }
    text
}

/// The turn a user message belongs to (its `[turn N]` marker).
pub fn turn_of(text: &str) -> Option<u32> {
    text.strip_prefix("[turn ")?.split(']').next()?.parse().ok()
}

/// What the qoder provider answers on `turn`.
pub fn qoder_answer(turn: u32) -> String {
    format!(
        "Turn {turn}: I traced the escaped quote through the lexer, fixed the split and kept the parser API as it was; {} tests pass.",
        40 + turn
    )
}

/// Whether the TRAE provider answers `turn` with a tool call first.
pub fn calls_tool(turn: u32) -> bool {
    turn % 3 == 2
}

/// What the TRAE provider answers on `turn` (`after_tool`: the request
/// carries the tool's result).
pub fn trae_answer(turn: u32, after_tool: bool) -> String {
    if after_tool {
        format!("Turn {turn}: the listing shows the lexer and its tests; I updated both and the benchmark is back to normal.")
    } else {
        format!("Turn {turn}: done. The string literal stays one token now and the error points at the opening quote.")
    }
}

/// A tool call of the TRAE provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// JSON arguments, as a string.
    pub arguments: String,
}

/// The tool call of `turn`.
pub fn tool_call(turn: u32) -> ToolCall {
    ToolCall {
        id: format!("call_demo_{turn}"),
        name: "glob".into(),
        arguments: format!("{{\"pattern\":\"src/**/*.rs\",\"turn\":{turn}}}"),
    }
}

/// The tool's result the TRAE agent sends back (a few hundred characters).
pub fn tool_result(turn: u32) -> String {
    let mut text = format!("{} files match:", FILES.len());
    for i in 0..FILES.len() {
        text.push_str("\n- ");
        text.push_str(FILES[(turn as usize + i) % FILES.len()]);
    }
    text
}

/// The `prompt_tokens` a provider reports for the request `body` it
/// received: a quarter of the characters of its messages' text (content,
/// text parts and tool-call arguments) and of its tools' definitions, as a
/// real provider counts what it reads (the savings ledger's figures are
/// read off these).
pub fn prompt_tokens(body: &serde_json::Value) -> u64 {
    use serde_json::Value;
    let text = |v: &Value| -> usize {
        match v {
            Value::String(s) => s.chars().count(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .map(|t| t.chars().count())
                .sum(),
            _ => 0,
        }
    };
    let messages: usize = body
        .get("messages")
        .and_then(Value::as_array)
        .map_or(0, |list| {
            list.iter()
                .map(|m| {
                    let args: usize =
                        m.get("tool_calls")
                            .and_then(Value::as_array)
                            .map_or(0, |calls| {
                                calls
                                    .iter()
                                    .filter_map(|c| {
                                        c.pointer("/function/arguments")
                                            .or_else(|| c.pointer("/function_call/arguments"))
                                    })
                                    .map(text)
                                    .sum()
                            });
                    m.get("content").map_or(0, text) + args
                })
                .sum()
        });
    let tools = body
        .get("tools")
        .map_or(0, |t| t.to_string().chars().count());
    ((messages + tools) / 4) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_messages_carry_their_turn_and_a_few_hundred_chars() {
        for turn in [1, 7, 40, 1000] {
            let m = user_message(turn);
            assert_eq!(turn_of(&m), Some(turn));
            assert!((250..500).contains(&m.len()), "{}", m.len());
        }
        assert_eq!(turn_of("[summary of 3 earlier messages: …]"), None);
        assert_ne!(user_message(1), user_message(2));
    }
}

//! Facts of the OpenAI chat body that the compression proxy and shimgate
//! both act on, written once.

use serde_json::Value;

/// billion-context leaves requests with `max_tokens <= 200` alone (title
/// generation and the like): no prompt, tools or nudge, no compression.
pub const SIDE_REQUEST_MAX_TOKENS: u64 = 200;

/// Whether `body` asks for at most [`SIDE_REQUEST_MAX_TOKENS`]
/// (`max_tokens` or `max_completion_tokens`): a proxy's side request.
pub fn is_tiny(body: &Value) -> bool {
    ["max_tokens", "max_completion_tokens"]
        .iter()
        .filter_map(|k| body.get(*k).and_then(Value::as_u64))
        .any(|n| n <= SIDE_REQUEST_MAX_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn two_hundred_tokens_or_fewer_is_tiny() {
        assert!(is_tiny(&json!({"max_tokens": 200})));
        assert!(is_tiny(&json!({"max_completion_tokens": 50})));
        assert!(!is_tiny(&json!({"max_tokens": 201})));
        assert!(!is_tiny(&json!({})));
    }
}

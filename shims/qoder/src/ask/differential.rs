//! The written fold and restore ([`crate::written`]) held to the `Value`
//! ones: for every ask both refuse or both take it, make the same OpenAI
//! body, and restore (with a fixed id) to the same bytes when the ask was
//! canonical, to the same JSON otherwise; on the testkit's ask, the
//! qodercli ask, generated asks and mutations of them.

use serde_json::{json, Value};
use shimgate_shim_api::json::parse_keeping_numbers;
use shimgate_shim_api::json_scan;

use super::*;

/// The ask as `shimgate-testkit`'s `qoder::ask_with` writes it.
fn testkit_ask(messages: &[Value]) -> Value {
    json!({
        "request_id": "r-1",
        "chat_record_id": "r-1",
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

/// The ask qodercli sends (as `tests.rs`'s sample).
fn wires_ask() -> Value {
    json!({
        "agent_id": "agent_common",
        "chat_record_id": "3f9a",
        "messages": [
            {"role": "system", "content": "You are qoder."},
            {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}}]},
            {"role": "tool", "tool_call_id": "toolu_1", "content": "a.rs\nb.rs"}
        ],
        "model_config": {"key": "qmodel_38max", "source": "system", "is_reasoning": true},
        "parameters": {"max_tokens": 32000, "reasoning_effort": "high", "enable_thinking": true, "context_length": 200000, "temperature": 0.2},
        "request_id": "3f9a",
        "session_id": "sess-42",
        "system": "You are qoder.",
        "tools": [{"type": "function", "function": {"name": "list_dir", "parameters": {"type": "object"}}}],
        "version": "3"
    })
}

/// Proxy bodies made from a fold's OpenAI body: as it is, shortened
/// (contents tagged, a nudge and a tool added, sampling changed, the
/// system message changed or turned into parts), and without tools (an
/// effort that thinks).
fn proxies(openai: &Value) -> Vec<Value> {
    let mut shortened = openai.clone();
    if let Some(messages) = shortened["messages"].as_array_mut() {
        for m in messages.iter_mut() {
            if let Some(s) = m.get("content").and_then(Value::as_str) {
                m["content"] = json!(format!("<acp>{s}</acp> é\u{1}"));
            }
        }
        messages.push(json!({"role": "user", "content": "go on"}));
    }
    if let Some(body) = shortened.as_object_mut() {
        body.remove("temperature");
        body.insert("reasoning_effort".into(), json!("none"));
        body.insert("top_p".into(), json!(0.5));
        body.insert("stop".into(), json!(null));
        let tools = body.entry("tools").or_insert(json!([]));
        if let Some(tools) = tools.as_array_mut() {
            tools.push(json!({"type": "function", "function": {"name": "compress"}}));
        }
    }
    let mut parts = openai.clone();
    if let Some(messages) = parts["messages"].as_array_mut() {
        messages.insert(
            0,
            json!({"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b\"c"}]}),
        );
    }
    let mut bare = openai.clone();
    if let Some(body) = bare.as_object_mut() {
        body.remove("tools");
        body.insert("max_tokens".into(), json!(7));
        body.insert("reasoning_effort".into(), json!("low"));
    }
    vec![openai.clone(), shortened, parts, bare]
}

/// The written original restored from the proxy body's text, with `id`.
fn restore_written(original: &OriginalAsk, text: Vec<u8>, id: &str) -> Result<Vec<u8>, ShimError> {
    let body = OpenAiBody::parse(text)?;
    match &original.kept {
        Kept::Written(w) => written::restore(w, &body, id),
        Kept::Parsed(_) => restore_with_id(original, body.value(), id),
    }
}

/// Holds the written fold and restore of `native` to the `Value` ones;
/// returns whether the written fold took it.
fn same(native: &[u8]) -> bool {
    let shown = String::from_utf8_lossy(native).into_owned();
    let (new, old) = match (fold_body(native), fold(native)) {
        (Ok(new), Ok(old)) => (new, old),
        (Err(new), Err(old)) => {
            if new.0.contains("messages") || old.0.contains("messages") {
                assert_eq!(new, old, "{shown}");
            }
            return false;
        }
        (new, old) => panic!(
            "one fold took what the other refused: {:?} / {:?}\n{shown}",
            new.map(|f| f.openai),
            old.map(|f| f.openai)
        ),
    };
    assert_eq!(*new.openai, old.openai, "{shown}");
    assert!(serde_json::from_slice::<Value>(new.openai.as_bytes()).is_ok());
    assert_eq!(
        new.original.model_key(),
        old.original.model_key(),
        "{shown}"
    );
    assert_eq!(new.original.request_id(), old.original.request_id());
    assert_eq!(new.original.system_folded(), old.original.system_folded());
    assert_eq!(*new.original.ask(), *old.original.ask(), "{shown}");
    let canonical = std::str::from_utf8(native).is_ok()
        && json_scan::is_valid(native)
        && json_scan::is_canonical(native);
    for proxy in proxies(&old.openai) {
        let want = restore_with_id(&old.original, &proxy, "ID");
        let texts = [
            serde_json::to_vec(&proxy).unwrap(),
            serde_json::to_vec_pretty(&proxy).unwrap(),
        ];
        for text in texts {
            let got = restore_written(&new.original, text, "ID");
            match (&got, &want) {
                (Ok(got), Ok(want)) if canonical => {
                    assert_eq!(
                        String::from_utf8_lossy(got),
                        String::from_utf8_lossy(want),
                        "{shown}"
                    )
                }
                (Ok(got), Ok(want)) => assert_eq!(
                    parse_keeping_numbers(got).unwrap(),
                    parse_keeping_numbers(want).unwrap(),
                    "{shown}"
                ),
                (Err(_), Err(_)) => {}
                _ => panic!("one restore refused: {got:?} / {want:?}\n{shown}"),
            }
        }
    }
    new.original.is_written()
}

#[test]
fn the_testkit_and_wires_asks_fold_and_restore_the_same_from_their_bytes() {
    let messages = [
        json!({"role": "user", "content": "hi"}),
        json!({"role": "assistant", "content": "hello"}),
    ];
    for ask in [testkit_ask(&messages), wires_ask(), testkit_ask(&[])] {
        let text = serde_json::to_vec(&ask).unwrap();
        assert!(same(&text), "the written fold takes it");
        assert!(same(&serde_json::to_vec_pretty(&ask).unwrap()));
    }
}

#[test]
fn a_canonical_ask_restores_to_the_value_restores_bytes() {
    // No float: the text is what serde_json writes.
    let mut ask = wires_ask();
    ask["parameters"]["temperature"] = json!(1);
    let text = serde_json::to_vec(&ask).unwrap();
    assert!(json_scan::is_canonical(&text));
    assert!(same(&text));
}

#[test]
fn what_the_written_fold_is_unsure_of_goes_through_the_value_fold() {
    let base = String::from_utf8(serde_json::to_vec(&wires_ask()).unwrap()).unwrap();
    let unsure = [
        base.replacen("\"messages\"", "\"m\\u0065ssages\"", 1),
        base.replacen("{", "{\"system\":\"first\",", 1),
        base.replacen("\"temperature\":0.2", "\"temperature\":1e400", 1),
        base.replacen("\"version\":\"3\"", "\"version\":-1e999", 1),
    ];
    for text in unsure {
        assert!(!same(text.as_bytes()), "{text}");
    }
    for refused in [
        &b"[1]"[..],
        b"{\"messages\":{}}",
        b"{}",
        b"{\"a\":",
        b"{\"a\":\"\xff\"}",
    ] {
        assert!(!same(refused));
        assert!(fold_body(refused).is_err());
    }
}

/// Found by the `qoder_fold` fuzz target: a long decimal the `Value`
/// restore wrote through an f64 (which `serde_json`'s fast reader then read
/// as another f64) reaches the upstream as the agent wrote it.
#[test]
fn a_long_decimal_goes_upstream_as_the_agent_wrote_it() {
    let token = "2222222222222222222222222222222220.2";
    let base = String::from_utf8(serde_json::to_vec(&wires_ask()).unwrap()).unwrap();
    let text = base.replacen("\"version\":\"3\"", &format!("\"version\":{token}"), 1);
    let folded = fold_body(text.as_bytes()).unwrap();
    assert!(folded.original.is_written());
    let restored = restore_body(&folded.original, &folded.openai).unwrap();
    let restored = String::from_utf8(restored).unwrap();
    assert!(
        restored.contains(&format!("\"version\":{token}")),
        "{restored}"
    );
}

/// Found by the `qoder_fold` fuzz target: a long decimal among
/// `parameters` whose keys hold an escape is parsed and written by both
/// folds, to the same text (`serde_json`'s fast reader may read that text
/// back one unit in the last place away, which the target now allows).
#[test]
fn a_long_decimal_beside_an_escaped_parameters_key_folds_to_the_same_text() {
    let text = br#"{"messages":[{"role":"user","content":"hi"}],"parameters":{"enable\"_thinking":true,"temperature":0.218446744073709551616},"request_id":"r"}"#;
    let new = fold_body(text).unwrap();
    let old = fold(text).unwrap();
    assert_eq!(
        String::from_utf8_lossy(new.openai.as_bytes()),
        serde_json::to_string(&old.openai).unwrap()
    );
}

/// A random string with escapes, unicode and control bytes.
fn text(rng: &mut fastrand::Rng) -> String {
    const PIECES: [&str; 10] = [
        "a", "é", "😀", "\"", "\\", "\n", "\u{1}", "\u{2028}", " ", "/",
    ];
    (0..rng.usize(0..8))
        .map(|_| PIECES[rng.usize(..PIECES.len())])
        .collect()
}

fn message(rng: &mut fastrand::Rng) -> Value {
    let role = ["system", "user", "assistant", "tool", "developer"][rng.usize(..5)];
    match rng.u8(..5) {
        0 => {
            json!({"role": role, "content": null, "tool_calls": [{"id": text(rng), "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        }
        1 => {
            json!({"role": role, "content": [{"type": "text", "text": text(rng)}, {"type": "text", "text": text(rng)}]})
        }
        2 => json!({"content": text(rng)}),
        3 => json!("not a message"),
        _ => json!({"role": role, "content": text(rng), "n": rng.i64(..)}),
    }
}

/// A generated ask: each member present or not, in a shuffled order.
fn generated(rng: &mut fastrand::Rng) -> Value {
    let (id, system, name) = (text(rng), text(rng), text(rng));
    let pick =
        |rng: &mut fastrand::Rng, options: Vec<Value>| options[rng.usize(..options.len())].clone();
    let mut members: Vec<(&str, Value)> = vec![
        (
            "messages",
            Value::Array((0..rng.usize(0..5)).map(|_| message(rng)).collect()),
        ),
        ("request_id", json!(id)),
        (
            "chat_record_id",
            pick(rng, vec![json!(id), json!("other"), json!(null)]),
        ),
        (
            "model_config",
            pick(
                rng,
                vec![
                    json!({"key": "m1", "is_reasoning": true}),
                    json!({"key": ""}),
                    json!({"key": 5}),
                    json!({}),
                    json!("m"),
                ],
            ),
        ),
        (
            "system",
            pick(rng, vec![json!(system), json!(""), json!(3), json!(null)]),
        ),
        (
            "tools",
            pick(
                rng,
                vec![
                    json!([]),
                    json!([{"type": "function", "function": {"name": name}}]),
                    json!({}),
                ],
            ),
        ),
        (
            "parameters",
            pick(
                rng,
                vec![
                    json!({}),
                    json!({"max_tokens": 100, "reasoning_effort": "high", "enable_thinking": true, "seed": null}),
                    json!({"temperature": 0.5, "stop": ["x"], "context_length": 9}),
                    json!({"reasoning_effort": null, "enable_thinking": false, "top_p": 1.0, "extra": {"a": [1.5, "x\n"]}}),
                    json!({"enable_thinking": true, "reasoning_effort": 3, "max_tokens": 100}),
                    json!([1]),
                ],
            ),
        ),
        ("session_id", json!(text(rng))),
        ("stream", json!(true)),
        (
            "chat_context",
            json!({"text": text(rng), "extra": {"deep": [1, {"x": null}]}}),
        ),
    ];
    rng.shuffle(&mut members);
    let keep = rng.usize(3..=members.len());
    let mut ask = Map::new();
    for (key, value) in members.into_iter().take(keep) {
        ask.insert(key.into(), value);
    }
    Value::Object(ask)
}

/// `text` mutated: whitespace, an escaped character, a repeated or
/// escaped key (also in `parameters`), a number written otherwise or out
/// of range, or a byte cut or changed.
fn mutated(rng: &mut fastrand::Rng, text: &str) -> String {
    let at = |rng: &mut fastrand::Rng| {
        let mut i = rng.usize(..=text.len());
        while !text.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match rng.u8(..11) {
        8 => text.replacen(
            "\"enable_thinking\"",
            "\"enable_thinking\":0,\"enable_thinking\"",
            1,
        ),
        9 => text.replacen("\"max_tokens\"", "\"max_tok\\u0065ns\"", 1),
        10 => text
            .replacen("0.5", "5e-1", 1)
            .replacen(":100", ":100.0", 1),
        0 => text.replace(',', " ,\n\t"),
        1 => text.replace('é', "\\u00e9").replace("\\n", "\\u000A"),
        2 => text.replacen("\"system\"", "\"\\u0073ystem\"", 1),
        3 => format!("{},\"system\":\"again\"}}", text.trim_end_matches('}')),
        4 => text.replacen("100", "1e400", 1),
        5 => {
            let mut cut = text.to_string();
            let i = at(rng);
            if i < cut.len() {
                cut.remove(i);
            }
            cut
        }
        6 => {
            let i = at(rng);
            format!(
                "{}{}{}",
                &text[..i],
                ["\"", "{", "]", ",", "1"][rng.usize(..5)],
                &text[i..]
            )
        }
        _ => text.replace("\"tools\"", "\"tools\" "),
    }
}

#[test]
fn generated_and_mutated_asks_fold_and_restore_as_through_a_value() {
    let mut rng = fastrand::Rng::with_seed(24);
    let mut written = 0;
    for _ in 0..600 {
        let ask = generated(&mut rng);
        let text = serde_json::to_string(&ask).unwrap();
        written += usize::from(same(text.as_bytes()));
        for _ in 0..3 {
            same(mutated(&mut rng, &text).as_bytes());
        }
    }
    assert!(written > 300, "the written fold took {written} of 600");
}

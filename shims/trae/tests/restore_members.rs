//! The written restore as the return leg runs it (the proxy's body read
//! member by member, never parsed whole) held to the same restore reading
//! the parsed body (`restore::restore_written`): the same bytes, or the
//! same refusal, for bodies a proxy really sends: re-serialised compact or
//! pretty, keys reordered, a key with an escape, repeated keys, messages
//! rewritten and fewer, tool schemas changed or left alone, non-ASCII
//! escaped, tagged out-of-range numbers, and random edits of all those.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};
use shimgate_shim_api::{OpenAiBody, Shim};
use shimgate_shim_trae::{restore, TraeOriginal, TraeShim};
use shimgate_testkit::keys_reversed;

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Asserts both restores agree on `proxy` (when a strict reading takes
/// it, as the return leg requires); `true` when it was taken.
fn same_bytes(original: &TraeOriginal, proxy: &[u8]) -> bool {
    let TraeOriginal::Written { text, kept } = original else {
        panic!("the written fold takes these bodies");
    };
    let Ok(body) = OpenAiBody::parse(proxy.to_vec()) else {
        return false;
    };
    assert!(
        !TraeShim.restore_reads_whole(original),
        "a written original is restored by members"
    );
    let got = TraeShim.restore(original, &body);
    assert!(
        body.parsed().is_none() || body.member("messages").is_err(),
        "only a body with an escaped top-level key is parsed whole"
    );
    let parsed: Value = serde_json::from_slice(proxy).unwrap();
    let want = restore::restore_written(text, kept, &parsed);
    assert_eq!(
        got.as_ref().map(|b| String::from_utf8_lossy(b)),
        want.as_ref().map(|b| String::from_utf8_lossy(b)),
        "proxy body:\n{}",
        String::from_utf8_lossy(proxy)
    );
    true
}

/// A SOLO body with what restore rewrites: joined text parts, developer,
/// function calls with and without names, string schemas (compact, spaced,
/// escaped), a Max-mode field.
fn solo_body() -> Vec<u8> {
    let parts =
        json!([{"type": "text", "text": "part one"}, {"type": "text", "text": "part \"two\""}]);
    serde_json::to_vec(&json!({
        "model": "m",
        "config_name": "glm",
        "messages": [
            {"role": "developer", "content": parts},
            {"role": "user", "content": [{"type": "text", "text": "héllo 中文 \u{1}"}], "name": "u"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function_call": {"name": "glob", "arguments": "{\"p\":1}"}},
                {"id": "c2", "function_call": {"name": ""}},
            ]},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c3", "function_call": {"arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": parts},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]},
        ],
        "tools": [
            {"type": "function", "function": {"name": "glob", "parameters": "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"integer\"}}}"}},
            {"type": "function", "function": {"name": "spaced", "parameters": "{\"type\": \"object\", \"x\": [1, 2.5]}"}},
            {"type": "function", "function": {"name": "esc", "parameters": "{\"d\":\"\\u00e9\\/\"}"}},
            {"type": "function", "function": {"name": "bad", "parameters": "not json"}},
            {"type": "function"},
        ],
        "tool_choice": "glob",
        "temperature": 0.25,
        "max_tokens": 100,
        "stream": true,
        "function": "solo_work_remote",
        "x_unknown": {"a": [1, {"b": null}]},
    }))
    .unwrap()
}

/// What a proxy does to the messages: every string content tagged, the
/// first `keep` messages kept, a developer message and a call without a
/// name added.
fn rewrite_messages(openai: &mut Value, keep: usize) {
    let messages = openai["messages"].as_array_mut().unwrap();
    for m in messages.iter_mut() {
        if let Some(s) = m.get("content").and_then(Value::as_str) {
            m["content"] = json!(format!("<acp>{s}</acp>"));
        }
    }
    messages.truncate(keep);
    messages.push(json!({"role": "developer", "content": "be brief"}));
    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "n", "type": "function", "function": {"arguments": "{}"}},
        {"id": "y", "type": "function", "function": {"name": "glob", "arguments": "{\"p\":2}"}},
    ]}));
}

/// `text` with the first `from` replaced by `to`.
fn once(text: &str, from: &str, to: &str) -> String {
    text.replacen(from, to, 1)
}

/// Python's `json.dumps` default: every non-ASCII character escaped.
fn ascii_escaped(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// The proxy bodies a proxy might send for the fold's `openai`.
fn proxy_bodies(openai: &Value) -> Vec<String> {
    let compact = |v: &Value| serde_json::to_string(v).unwrap();
    let mut rewritten = openai.clone();
    rewrite_messages(&mut rewritten, 3);
    let mut schemas = openai.clone();
    if let Some(tools) = schemas["tools"].as_array_mut() {
        // One schema changed, one reordered (same value), one added.
        tools[0]["function"]["parameters"]["properties"]["q"] = json!({"type": "string"});
        if let Some(p) = tools.get_mut(1) {
            p["function"]["parameters"] = keys_reversed(&p["function"]["parameters"]);
        }
        tools.push(json!({"type": "function", "function": {"name": "compress", "parameters": {"type": "object", "n": 1.5e300}}}));
    }
    let no_tools = {
        let mut v = openai.clone();
        let o = v.as_object_mut().unwrap();
        o.remove("tools");
        v
    };
    let tag = {
        let folded =
            shimgate_shim_trae::fold_parsed(br#"{"messages":[],"temperature":1e400}"#).unwrap();
        folded.openai["temperature"].as_str().unwrap().to_string()
    };
    let mut tagged = openai.clone();
    tagged["top_p"] = json!(tag);
    tagged["messages"][0]["content"] = json!(tag);
    let base = compact(openai);
    let mut out = vec![
        base.clone(),
        serde_json::to_string_pretty(openai).unwrap(),
        compact(&keys_reversed(openai)),
        compact(&rewritten),
        serde_json::to_string_pretty(&keys_reversed(&rewritten)).unwrap(),
        compact(&schemas),
        compact(&no_tools),
        compact(&tagged),
        ascii_escaped(&base),
        base.replace('/', "\\/"),
        // A top-level key with an escape: the whole body is parsed.
        once(&base, "{", r#"{"x_\u0061":1,"#),
        once(&base, r#""messages""#, r#""m\u0065ssages""#),
        // Keys with an escape inside a message, a call, a tool.
        once(&base, r#""role""#, r#""r\u006fle""#),
        once(
            &compact(&rewritten),
            r#""arguments""#,
            r#""ar\u0067uments""#,
        ),
        once(
            &compact(&rewritten),
            r#""function":{"name""#,
            r#""function":{"n\u0061me""#,
        ),
        once(&base, r#""parameters""#, r#""p\u0061rameters""#),
        // Repeated keys: the last value, at the first place.
        once(
            &base,
            "{",
            r#"{"reasoning_effort":"low","top_p":0.5,"max_completion_tokens":9,"reasoning_effort":"high","#,
        ),
        once(&base, "{", r#"{"messages":[],"tools":{},"#),
        once(&base, r#""role":"#, r#""content":"dup","role":"#),
        once(
            &base,
            r#""type":"function","function":{"#,
            r#""type":"function","function":{"name":"x","#,
        ),
        // Sampling fields a proxy adds or changes, floats as JavaScript writes them.
        base.replacen(
            "}",
            r#","top_p":1,"stop":["\n"],"parallel_tool_calls":false}"#,
            1,
        ),
        base.replace("0.25", "2.5e-1"),
        // Refused: no messages list.
        once(&base, r#""messages":["#, r#""messages":{"x":["#).replace("]}", "]}}"),
        r#"{"messages":null}"#.to_string(),
        r#"{"model":"m"}"#.to_string(),
    ];
    out.retain(|t| !t.is_empty());
    out
}

fn originals() -> Vec<(Vec<u8>, TraeOriginal, Value)> {
    let mut bodies = vec![
        solo_body(),
        fixture("max_mode_request.json"),
        fixture("lite_request.json"),
    ];
    let pretty: Value = serde_json::from_slice(&solo_body()).unwrap();
    bodies.push(serde_json::to_vec_pretty(&pretty).unwrap());
    bodies
        .into_iter()
        .map(|native| {
            let folded = TraeShim.fold(&native).unwrap();
            let openai = folded.openai.value().clone();
            (native, folded.original, openai)
        })
        .collect()
}

#[test]
fn restoring_by_members_writes_the_bytes_of_the_parsed_restore() {
    for (_, original, openai) in originals() {
        for proxy in proxy_bodies(&openai) {
            same_bytes(&original, proxy.as_bytes());
        }
    }
}

#[test]
fn an_unchanged_schema_goes_back_as_the_agent_s_string() {
    let (native, original, openai) = originals().remove(0);
    let body = OpenAiBody::parse(serde_json::to_vec(&openai).unwrap()).unwrap();
    let restored: Value =
        serde_json::from_slice(&TraeShim.restore(&original, &body).unwrap()).unwrap();
    let sent: Value = serde_json::from_slice(&native).unwrap();
    for i in 0..3 {
        assert_eq!(
            restored["tools"][i]["function"]["parameters"],
            sent["tools"][i]["function"]["parameters"]
        );
    }
    assert_eq!(restored["messages"][0]["role"], "system");
    assert_eq!(
        restored["messages"][0]["content"],
        sent["messages"][0]["content"]
    );
}

#[test]
fn edited_proxy_bodies_restore_the_same_both_ways() {
    let mut rng = fastrand::Rng::with_seed(24);
    const NOISE: &[&str] = &[
        "\"",
        "\\",
        "\\u0065",
        "\\n",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "0",
        "1.0",
        " ",
        "\"x\":1,",
        "\"role\":\"developer\",",
        "null",
        "é",
    ];
    let originals = originals();
    let mut taken = 0;
    for _ in 0..3000 {
        let (_, original, openai) = &originals[rng.usize(..originals.len())];
        let bodies = proxy_bodies(openai);
        let mut body = bodies[rng.usize(..bodies.len())].clone().into_bytes();
        for _ in 0..rng.usize(1..3) {
            let at = rng.usize(..body.len());
            let noise = NOISE[rng.usize(..NOISE.len())].as_bytes();
            match rng.u8(..3) {
                0 => {
                    body.splice(at..at + 1, noise.iter().copied());
                }
                1 => {
                    body.remove(at);
                }
                _ => {
                    body.splice(at..at, noise.iter().copied());
                }
            }
        }
        taken += usize::from(same_bytes(original, &body));
    }
    assert!(taken > 300, "only {taken} edited bodies were JSON");
}

//! Fold and restore of SOLO request bodies: what the proxy sees, and what
//! goes upstream after it changed (or did not change) the OpenAI body.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};
use shimgate_shim_api::Shim;
use shimgate_shim_trae::{TraeOriginal, TraeShim};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// An original as restore takes it: the fold's own, or a parsed body.
trait AsOriginal {
    fn original(&self) -> TraeOriginal;
}

impl AsOriginal for TraeOriginal {
    fn original(&self) -> TraeOriginal {
        self.clone()
    }
}

impl AsOriginal for Value {
    fn original(&self) -> TraeOriginal {
        TraeOriginal::Parsed(self.clone())
    }
}

fn restored(original: &impl AsOriginal, openai: &Value) -> Value {
    serde_json::from_slice(
        &TraeShim
            .restore(&original.original(), &openai.into())
            .unwrap(),
    )
    .unwrap()
}

/// The tools' `parameters` strings parsed, for comparing schemas.
fn parsed_params(body: &Value) -> Vec<Value> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| serde_json::from_str(t["function"]["parameters"].as_str().unwrap()).unwrap())
        .collect()
}

#[test]
fn max_mode_body_survives_fold_then_restore_field_for_field() {
    let native = fixture("max_mode_request.json");
    let folded = TraeShim.fold(&native).unwrap();
    let back = restored(&folded.original, &folded.openai);
    let mut expected: Value = serde_json::from_slice(&native).unwrap();
    // The one intended change: SOLO refuses `developer`, so it goes as `system`.
    expected["messages"][1]["role"] = json!("system");
    assert_eq!(back, expected);
    // Key order is the agent's, and parameter strings are its own bytes.
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&back), keys(&expected));
    assert_eq!(
        back["tools"][0]["function"]["parameters"],
        expected["tools"][0]["function"]["parameters"]
    );
}

#[test]
fn fold_shows_the_proxy_an_openai_body_without_solo_fields() {
    let folded = TraeShim.fold(&fixture("max_mode_request.json")).unwrap();
    let o = folded.openai.as_object().unwrap();
    for solo_only in [
        "config_name",
        "function",
        "model_auto_selection",
        "model_selection_strategy",
        "mode_type",
        "context_window_size",
        "prompt_max_tokens",
        "session_extra",
    ] {
        assert!(!o.contains_key(solo_only), "{solo_only} reached the proxy");
    }
    for kept in [
        "model",
        "stream",
        "messages",
        "tools",
        "tool_choice",
        "temperature",
        "top_p",
        "stop",
        "max_tokens",
        "reasoning_effort_level",
    ] {
        assert!(o.contains_key(kept), "{kept} was dropped");
    }
    let m = &folded.openai["messages"];
    assert_eq!(m[0]["content"], "You are TRAE SOLO, a coding agent.");
    assert_eq!(m[2]["content"][1]["type"], "image_url");
    assert_eq!(m[3]["content"], "first part\nsecond part");
    assert!(m[5]["content"].is_null());
    assert_eq!(m[5]["tool_calls"][0]["function"]["name"], "glob");
    assert_eq!(m[6]["tool_call_id"], "call_glob_1");
    assert_eq!(
        folded.openai["tools"][0]["function"]["parameters"]["required"],
        json!(["pattern"])
    );
    assert_eq!(
        folded.openai["tool_choice"],
        json!({"type":"function","function":{"name":"glob"}})
    );
}

#[test]
fn proxy_injected_prompt_tools_and_nudge_survive_restore_in_solo_form() {
    let folded = TraeShim.fold(&fixture("max_mode_request.json")).unwrap();
    let mut openai = folded.openai.value().clone();
    // What billion-context does: tags, its prompt
    // appended to the first system message, its tools, a trailing nudge,
    // stream_options, text-part lists joined with "\n", `name` dropped.
    let messages = openai["messages"].as_array_mut().unwrap();
    for m in messages.iter_mut() {
        if let Some(s) = m["content"].as_str() {
            m["content"] = json!(format!("<acp tokens=\"6\" type=\"text\">m00001</acp>\n{s}"));
        }
        m.as_object_mut().unwrap().remove("name");
    }
    messages[0]["content"] = json!(format!(
        "{}\n\n---\n\nCompression Philosophy: …",
        messages[0]["content"].as_str().unwrap()
    ));
    messages.push(json!({"role":"user","content":"⚠️ Context limit reached — compress now."}));
    openai["tools"].as_array_mut().unwrap().push(json!({"type":"function","function":{"name":"compress",
        "description":"Compress a range","parameters":{"type":"object","properties":{"content":{"type":"array"}},"required":["content"]}}}));
    openai["stream_options"] = json!({"include_usage": true});
    let back = restored(&folded.original, &openai);
    let m = back["messages"].as_array().unwrap();
    assert_eq!(m.len(), 10);
    assert_eq!(
        m[9],
        json!({"role":"user","content":[{"type":"text","text":"⚠️ Context limit reached — compress now."}]})
    );
    assert!(m[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .ends_with("Compression Philosophy: …"));
    assert_eq!(m[1]["role"], "system");
    assert_eq!(m[5]["content"], Value::Null);
    assert_eq!(m[5]["tool_calls"][0]["function_call"]["name"], "glob");
    assert!(m[5]["tool_calls"][0].get("function").is_none());
    assert_eq!(m[6]["tool_call_id"], "call_glob_1");
    let tools = back["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 3);
    assert_eq!(tools[2]["function"]["name"], "compress");
    assert_eq!(
        parsed_params(&back)[2],
        json!({"type":"object","properties":{"content":{"type":"array"}},"required":["content"]})
    );
    assert!(
        back.get("stream_options").is_none(),
        "the proxy's stream_options went upstream"
    );
    for kept in [
        "config_name",
        "function",
        "model_auto_selection",
        "mode_type",
        "context_window_size",
        "prompt_max_tokens",
        "session_extra",
    ] {
        assert_eq!(back[kept], folded.original.value()[kept], "{kept}");
    }
}

#[test]
fn a_string_the_proxy_joined_from_text_parts_becomes_one_text_part() {
    let original = json!({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]});
    let tagged = json!({"model":"m","messages":[{"role":"user","content":"<acp>m1</acp>\na\nb"}]});
    assert_eq!(
        restored(&original, &tagged)["messages"][0]["content"],
        json!([{"type":"text","text":"<acp>m1</acp>\na\nb"}])
    );
    let untouched = TraeShim
        .fold(original.to_string().as_bytes())
        .unwrap()
        .openai;
    assert_eq!(restored(&original, &untouched), original);
}

#[test]
fn sampling_comes_from_the_compressed_body_and_survives_a_proxy_that_drops_it() {
    let original = json!({"model":"m","config_name":"m","temperature":0.2,"top_p":0.9,"max_tokens":64000,"messages":[]});
    let compressed =
        json!({"model":"other","temperature":0.7,"messages":[],"max_completion_tokens":10});
    let back = restored(&original, &compressed);
    assert_eq!(back["temperature"], 0.7, "the proxy's value wins");
    assert_eq!(
        back["top_p"], 0.9,
        "a dropped field keeps the agent's value"
    );
    assert_eq!(back["max_tokens"], 64000);
    assert_eq!(
        back["max_completion_tokens"], 10,
        "a sampling field the proxy added"
    );
    assert_eq!(back["model"], "m", "model is never taken from the proxy");
}

#[test]
fn tool_choice_forms_go_back_to_solo_strings() {
    for (solo, openai) in [
        (json!("auto"), json!("auto")),
        (json!("required"), json!("required")),
        (json!("none"), json!("none")),
        (
            json!("glob"),
            json!({"type":"function","function":{"name":"glob"}}),
        ),
    ] {
        let original = json!({"messages":[],"tool_choice":solo});
        let folded = TraeShim
            .fold(original.to_string().as_bytes())
            .unwrap()
            .openai;
        assert_eq!(folded["tool_choice"], openai);
        assert_eq!(restored(&original, &folded)["tool_choice"], solo);
    }
}

#[test]
fn a_changed_schema_is_sent_as_a_compact_json_string() {
    let original = json!({"messages":[],"tools":[{"type":"function","function":{"name":"t","parameters":"{ \"type\": \"object\" }"}}]});
    let changed = json!({"messages":[],"tools":[{"type":"function","function":{"name":"t","parameters":{"type":"object","x":1}}}]});
    assert_eq!(
        restored(&original, &changed)["tools"][0]["function"]["parameters"],
        "{\"type\":\"object\",\"x\":1}"
    );
    let same = TraeShim
        .fold(original.to_string().as_bytes())
        .unwrap()
        .openai;
    assert_eq!(
        restored(&original, &same)["tools"][0]["function"]["parameters"],
        "{ \"type\": \"object\" }"
    );
}

#[test]
fn tool_calls_without_a_name_are_not_sent() {
    let compressed = json!({"messages":[{"role":"assistant","content":null,"tool_calls":[
        {"id":"a","type":"function","function":{"name":"","arguments":"{}"}},
        {"id":"b","type":"function","function":{"name":"read","arguments":"{}"}}]},
        {"role":"assistant","content":"x","tool_calls":[{"id":"c","function":{"arguments":""}}]}]});
    let back = restored(&json!({"messages":[]}), &compressed);
    let calls = back["messages"][0]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["id"], "b");
    assert!(back["messages"][1].get("tool_calls").is_none());
}

#[test]
fn bad_bodies_are_refused_with_a_reason() {
    assert!(TraeShim.fold(b"not json").is_err());
    assert!(TraeShim.fold(b"{\"model\":\"m\"}").is_err());
    let original = json!({"messages":[]});
    assert!(TraeShim
        .restore(&original.original(), &json!({"model":"m"}).into())
        .is_err());
    assert!(TraeShim
        .restore(&json!([]).original(), &json!({"messages":[]}).into())
        .is_err());
}

#[test]
fn lite_body_round_trips_and_keeps_its_effort_spelling() {
    let native = fixture("lite_request.json");
    let folded = TraeShim.fold(&native).unwrap();
    assert_eq!(folded.openai["reasoning_effort"], "light");
    assert_eq!(folded.openai["max_tokens"], 100);
    let back = restored(&folded.original, &folded.openai);
    assert_eq!(back, serde_json::from_slice::<Value>(&native).unwrap());
}

#[test]
fn a_side_request_without_tools_goes_upstream_without_the_agents_tools() {
    let folded = TraeShim.fold(&fixture("max_mode_request.json")).unwrap();
    let summary = json!({"model":"glm-5.2","stream":false,"max_tokens":512,
        "messages":[{"role":"user","content":"Summarise the conversation above."}]});
    let back = restored(&folded.original, &summary);
    assert!(back.get("tools").is_none());
    assert!(back.get("tool_choice").is_none());
    assert_eq!(back["max_tokens"], 512);
    assert_eq!(
        back["temperature"], 0.2,
        "sampling the proxy left out stays the agent's"
    );
    assert_eq!(back["stream"], true, "SOLO only streams");
    assert_eq!(back["config_name"], "glm-5.2");
    assert_eq!(back["messages"].as_array().unwrap().len(), 1);
}

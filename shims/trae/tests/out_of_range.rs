//! Numbers outside f64's range (`1e400`): JSON by RFC 8259, refused by
//! `serde_json` and so by the proxy. Stream data holding one travels as
//! `x_solo.text` and reaches the agent byte for byte; a request holding one
//! folds, with the number carried as a tagged string that restore writes
//! back as the original token.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};
use shimgate_shim_api::sse::parse_all;
use shimgate_shim_api::Shim;
use shimgate_shim_trae::TraeShim;
use shimgate_testkit::check_openai;
use shimgate_testkit::trae::{compare, convert, digest, pieces, rebuild, round_trip, PROXIES};

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// What the `trae_convert` fuzz target checks, for one input.
fn replay_trae_convert(data: &[u8]) {
    let (&cut, solo) = data.split_first().unwrap();
    let whole = convert(pieces(solo, solo.len().max(1)));
    if let Err(why) = check_openai(&whole) {
        panic!("{why}\n{}", String::from_utf8_lossy(&whole));
    }
    let chunked = convert(pieces(solo, usize::from(cut % 17) + 1));
    assert_eq!(chunked, whole, "the output depends on the chunking");
    let _ = rebuild(pieces(&whole, usize::from(cut % 5) + 1));
}

fn round_trips(solo: &[u8]) {
    let upstream = digest(solo);
    for proxy in PROXIES {
        let agent = round_trip(solo, proxy);
        if let Err(why) = compare(&upstream, &digest(&agent), proxy) {
            panic!(
                "through {proxy:?}: {why}\n--- agent ---\n{}",
                String::from_utf8_lossy(&agent)
            );
        }
    }
}

/// `fuzz/seeds/trae_convert/oob_number_143e33333`: found after 2.35 M runs.
const FUZZ_143E33333: &str =
    "0369643a310a75343038656e743a6572726f720a646174613a3134336533333333330a0a";

#[test]
fn fuzz_input_with_an_out_of_range_number_gives_frames_serde_json_reads() {
    let input = unhex(FUZZ_143E33333);
    let seed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fuzz/seeds/trae_convert/oob_number_143e33333"
    );
    assert_eq!(std::fs::read(seed).unwrap(), input, "the committed seed");
    replay_trae_convert(&input);
    let out = convert(pieces(&input[1..], 4096));
    let carrier: Value = serde_json::from_slice(&parse_all(&out).unwrap()[0].data).unwrap();
    assert_eq!(
        carrier["x_solo"],
        json!({"event": null, "id": "1", "text": "143e33333"})
    );
}

#[test]
fn out_of_range_event_data_reaches_the_agent_byte_for_byte() {
    let input = unhex(FUZZ_143E33333);
    round_trips(&input[1..]);
    let agent = parse_all(&round_trip(&input[1..], PROXIES[0])).unwrap();
    assert_eq!(&agent[0].data[..], b"143e33333");
    assert_eq!(agent[0].id.as_deref(), Some(&b"1"[..]));
}

#[test]
fn every_event_kind_with_an_out_of_range_number_stays_well_formed_and_lossless() {
    let frames = [
        (
            "output",
            r#"{"response":"hi","reasoning_content":null,"x":1e400}"#,
        ),
        (
            "output",
            r#"{"response":"","tool_calls":[{"index":0,"id":"c","function_call":{"name":"f","arguments":"{}"},"n":-1e400}]}"#,
        ),
        ("metadata", r#"{"a":[1,{"b":9e99999}]}"#),
        (
            "token_usage",
            r#"{"prompt_tokens":1e400,"completion_tokens":2}"#,
        ),
        ("error", r#"{"code":4008,"message":"quota","extra":1E+400}"#),
        ("done", r#"{"finish_reason":"stop","t":1e400}"#),
    ];
    for (name, data) in frames {
        let solo = format!(
            "event: output\ndata: {{\"response\":\"a\"}}\n\nevent: {name}\ndata: {data}\n\n\
             event: done\ndata: {{\"finish_reason\":\"stop\"}}\n\n"
        );
        let out = convert(pieces(solo.as_bytes(), 4096));
        check_openai(&out).unwrap_or_else(|e| panic!("{name} {data}: {e}"));
        for size in [1, 3, 17] {
            assert_eq!(convert(pieces(solo.as_bytes(), size)), out, "{data}");
        }
        round_trips(solo.as_bytes());
    }
}

#[test]
fn in_range_extremes_still_travel_as_json() {
    let solo = "event: metadata\ndata: {\"a\":1e-400,\"b\":0e999999999999,\"c\":1.7976931348623157e308}\n\n\
                event: done\ndata: {\"finish_reason\":\"stop\"}\n\n";
    let out = convert(pieces(solo.as_bytes(), 4096));
    check_openai(&out).unwrap();
    let carrier: Value = serde_json::from_slice(&parse_all(&out).unwrap()[0].data).unwrap();
    assert!(carrier["x_solo"]["data"].is_object(), "{carrier}");
    round_trips(solo.as_bytes());
}

const OOB_BODY: &str = r#"{"model":"glm","config_name":"c","temperature":1e400,
    "messages":[{"role":"user","content":[{"type":"text","text":"1e400"}]}],
    "tools":[{"type":"function","function":{"name":"f","parameters":"{\"maximum\":1e400}"}}],
    "function":{"limits":[-2E+999,1.5]}}"#;

#[test]
fn a_request_with_out_of_range_numbers_folds_and_restore_writes_them_back() {
    let folded = TraeShim.fold(OOB_BODY.as_bytes()).unwrap();
    let temperature = folded.openai["temperature"].as_str().unwrap();
    assert!(temperature.ends_with(":1e400"), "{temperature}");
    assert_eq!(folded.openai["messages"][0]["content"], "1e400");
    let back = TraeShim.restore(&folded.original, &folded.openai).unwrap();
    let text = String::from_utf8(back).unwrap();
    assert!(text.contains(r#""temperature":1e400"#), "{text}");
    assert!(text.contains(r#""limits":[-2E+999,1.5]"#), "{text}");
    // The user's own "1e400" text and the schema string stay strings.
    assert!(text.contains(r#""text":"1e400""#), "{text}");
    assert!(
        text.contains(r#""parameters":"{\"maximum\":1e400}""#),
        "{text}"
    );
    assert!(!text.contains("shimgate"), "{text}");
}

#[test]
fn a_request_restored_after_compression_keeps_its_out_of_range_numbers() {
    let folded = TraeShim.fold(OOB_BODY.as_bytes()).unwrap();
    // What a proxy sends back: re-serialised, messages shortened.
    let mut openai: Value =
        serde_json::from_slice(&serde_json::to_vec(&folded.openai).unwrap()).unwrap();
    openai["messages"] = json!([{"role":"user","content":"short"}]);
    let text =
        String::from_utf8(TraeShim.restore(&folded.original, &openai.into()).unwrap()).unwrap();
    assert!(text.contains(r#""temperature":1e400"#), "{text}");
    assert!(text.contains(r#""limits":[-2E+999,1.5]"#), "{text}");
}

#[test]
fn a_forged_tag_is_not_turned_into_a_number() {
    let forged = r#"{"messages":[],"temperature":"shimgate:number:0000000000000000:1e400"}"#;
    let folded = TraeShim.fold(forged.as_bytes()).unwrap();
    let text =
        String::from_utf8(TraeShim.restore(&folded.original, &folded.openai).unwrap()).unwrap();
    assert!(
        text.contains(r#""temperature":"shimgate:number:0000000000000000:1e400""#),
        "{text}"
    );
}

#[test]
fn invalid_json_is_still_refused_not_repaired() {
    for bad in [
        r#"{"messages":[],1e400:1}"#,
        r#"{"messages":[],"a":1e400,}"#,
        r#"{"messages":[],"a":1e}"#,
        r#"{"messages":[],"a":1e400 2}"#,
    ] {
        assert!(TraeShim.fold(bad.as_bytes()).is_err(), "{bad}");
    }
}

//! What the return leg spends on the proxy's body before the upstream
//! request goes out, for a written original (issue 24, time to first
//! token): read by members (`OpenAiBody::parse`, the strict check, then
//! `TraeShim::restore`) against parsed whole (`OpenAiBody::parse_whole`,
//! then the restore reading the parse, `restore::restore_written`), on
//! the body `benches/trae.rs` restores (400 messages, 30 tools, 780 KiB),
//! as the fold wrote it and as a proxy re-serialises it pretty. The root
//! bench's `trae_restore` starts from a body already parsed, which is not
//! what the return leg gets.
//!
//! Run: `cargo bench -p shimgate-shim-trae --bench return_leg_restore`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use serde_json::{json, Value};
use shimgate_shim_api::{OpenAiBody, Shim};
use shimgate_shim_trae::{restore, TraeOriginal, TraeShim};

/// The body of `benches/trae.rs`.
fn solo_body() -> Vec<u8> {
    let filler = "Lorem ipsum dolor sit amet, 中文内容 consectetur adipiscing elit. ".repeat(40);
    let mut messages = vec![json!({"role":"system","content":[{"type":"text","text":filler}]})];
    for i in 0..133 {
        messages.push(
            json!({"role":"user","content":[{"type":"text","text":format!("[u{i}] {filler}")}]}),
        );
        messages.push(json!({"role":"assistant","content":null,"tool_calls":[{"id":format!("call_{i}"),"type":"function",
            "function_call":{"name":"read_file","arguments":format!("{{\"path\":\"src/f{i}.rs\"}}")}}]}));
        messages.push(json!({"role":"tool","tool_call_id":format!("call_{i}"),"content":[{"type":"text","text":filler}]}));
    }
    let tools: Vec<Value> = (0..30)
        .map(|i| {
            let params = json!({"type":"object","properties":{"path":{"type":"string","description":"file path"},
                "limit":{"type":"integer"}},"required":["path"]});
            json!({"type":"function","function":{"name":format!("tool_{i}"),"description":"Does a thing with a file",
                "parameters": params.to_string()}})
        })
        .collect();
    let body = json!({"messages":messages,"model":"glm-5.2","config_name":"glm-5.2","function":"solo_work_remote",
        "stream":true,"tools":tools,"temperature":0.2,
        "model_auto_selection":{"strategy":"max","fallback_to_advance_model":null,"entitlement_id":null},
        "model_selection_strategy":"max","mode_type":1,"context_window_size":1000000,"prompt_max_tokens":936000,
        "max_tokens":64000});
    serde_json::to_vec(&body).unwrap()
}

fn bench(c: &mut Criterion) {
    let native = solo_body();
    let folded = TraeShim.fold(&native).unwrap();
    let TraeOriginal::Written { text, kept } = &folded.original else {
        panic!("the written fold takes this body");
    };
    let compact = folded.openai.as_bytes().to_vec();
    let pretty = serde_json::to_vec_pretty(folded.openai.value()).unwrap();
    for (name, proxy) in [("as_folded", &compact), ("pretty", &pretty)] {
        let members = |p: &[u8]| {
            let body = OpenAiBody::parse(p.to_vec()).unwrap();
            TraeShim.restore(&folded.original, &body).unwrap()
        };
        let parsed = |p: &[u8]| {
            let body = OpenAiBody::parse_whole(p.to_vec()).unwrap();
            restore::restore_written(text, kept, body.value()).unwrap()
        };
        assert_eq!(members(proxy), parsed(proxy), "the same bytes both ways");
        let mut g = c.benchmark_group(format!("return_leg_restore/{name}"));
        g.throughput(Throughput::Bytes(proxy.len() as u64));
        g.bench_function("members", |b| b.iter(|| members(black_box(proxy))));
        g.bench_function("parsed", |b| b.iter(|| parsed(black_box(proxy))));
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);

//! Invariant: `json_scan::top_level_string` (the conversation id read off
//! a request body for the switch log) never panics on any bytes, and on a
//! JSON object `serde_json` reads whose top level names the key once, it
//! gives exactly the string `serde_json` gives for that key (`None` when
//! the value is not a string or the key is absent). Nested members of the
//! same name never count.
//!
//! And `json_scan::strict_member_spans` (the return leg's one walk over
//! the proxy's body, which checks UTF-8 first) takes exactly the UTF-8
//! objects `serde_json` reads, and finds in them the members
//! `json_scan::member_spans` finds, one per member `serde_json` saw.
//!
//! Run (stable toolchain), from the repository root:
//! `cargo fuzz run -s none json_top_level fuzz/corpus/json_top_level fuzz/seeds/json_top_level -- -dict=fuzz/dict/json_top_level.dict -max_total_time=60`

#![no_main]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use libfuzzer_sys::fuzz_target;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use shimgate_shim_api::json_scan::{member_spans, strict_member_spans, top_level_string};

const KEY: &str = "session_id";

/// An object's members in order, duplicates kept (a `Map` keeps one).
struct Members(Vec<(String, Value)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    out.push(entry);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V)
    }
}

fuzz_target!(|data: &[u8]| {
    let got = top_level_string(data, KEY);
    let strict = strict_member_spans(data);
    let object = matches!(serde_json::from_slice::<Value>(data), Ok(Value::Object(_)));
    if std::str::from_utf8(data).is_ok() {
        assert_eq!(
            strict.is_ok(),
            object,
            "input {:?}",
            String::from_utf8_lossy(data)
        );
    }
    let Ok(Members(members)) = serde_json::from_slice::<Members>(data) else {
        return;
    };
    if let Ok(Ok(spans)) = &strict {
        assert_eq!(
            Ok(spans),
            member_spans(data).as_ref(),
            "input {:?}",
            String::from_utf8_lossy(data)
        );
        assert_eq!(spans.len(), members.len());
    }
    let named: Vec<&Value> = members
        .iter()
        .filter(|(k, _)| k == KEY)
        .map(|(_, v)| v)
        .collect();
    if named.len() > 1 {
        return;
    }
    let want = named.first().and_then(|v| v.as_str()).map(str::to_owned);
    assert_eq!(got, want, "input {:?}", String::from_utf8_lossy(data));
});

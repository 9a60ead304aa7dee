//! The `x_qoder` extension: a model-server event the CLI acts on but that
//! no OpenAI chunk can hold (a sentinel, an error envelope, an `event:
//! error` frame), carried through a compression proxy inside a chunk and
//! rebuilt at the ingress exactly as the model server sent it.
//!
//! The carrier is a `chat.completion.chunk` with one choice whose delta is
//! `{"role":"assistant","content":""}`: the shape of the role frame that
//! billion-context passes byte for byte, where it drops every frame
//! without `choices` (a bare sentinel, an envelope, an error) and an
//! `event:` line. `x_qoder` is `{"event": NAME | null, "id": ID?, "data":
//! TEXT}`: the event's type (`null` = none), its last-event-id when it had
//! one, and its data as a JSON string (the raw text, sentinels are not
//! JSON; a byte that is not UTF-8 is carried as U+FFFD).

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use shimgate_shim_api::sse::SseEvent;

/// The name of the extension member.
pub const EXT_KEY: &str = "x_qoder";

/// The `id` of a carrier chunk (never a model's).
pub const CARRIER_ID: &str = "shimgate-qoder-model";

/// Appends the carrier of `event` (one `data:` line and a blank line).
pub fn put_carrier(out: &mut BytesMut, event: &SseEvent) {
    let text = |b: &Bytes| String::from_utf8_lossy(b).into_owned();
    let mut ext = serde_json::Map::new();
    ext.insert(
        "event".into(),
        event.event.as_ref().map_or(Value::Null, |e| json!(text(e))),
    );
    if let Some(id) = &event.id {
        ext.insert("id".into(), json!(text(id)));
    }
    ext.insert("data".into(), json!(text(&event.data)));
    let chunk = json!({
        "id": CARRIER_ID,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}],
        EXT_KEY: Value::Object(ext),
    });
    out.extend_from_slice(b"data: ");
    // Compact serde_json output escapes every control byte: one line.
    out.extend_from_slice(&serde_json::to_vec(&chunk).unwrap_or_default());
    out.extend_from_slice(b"\n\n");
}

/// The event a carrier chunk holds, or `None` when `data` is not one.
pub fn carried(data: &[u8]) -> Option<SseEvent> {
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(EXT_KEY.as_bytes()));
    KEY.find(data)?;
    let chunk: Value = serde_json::from_slice(data).ok()?;
    let ext = chunk.get(EXT_KEY)?;
    let bytes = |v: &Value| v.as_str().map(|s| Bytes::copy_from_slice(s.as_bytes()));
    Some(SseEvent {
        event: ext.get("event").and_then(bytes),
        data: ext.get("data").and_then(bytes)?,
        id: ext.get("id").and_then(bytes),
        retry: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_carrier_gives_back_the_event_it_carries() {
        for event in [
            SseEvent::data("[EXCEED_QUOTA]{\"reset\":\"2026-12-07 00:00:00\"}"),
            SseEvent::data("[NOT_EXCEED_QUOTA]"),
            SseEvent {
                event: Some(Bytes::from_static(b"error")),
                data: Bytes::from_static(b"{\"code\":\"105\",\"message\":\"login expired\"}"),
                id: Some(Bytes::from_static(b"7")),
                retry: None,
            },
            SseEvent::data("line one\nline two"),
        ] {
            let mut out = BytesMut::new();
            put_carrier(&mut out, &event);
            assert_eq!(out.iter().filter(|b| **b == b'\n').count(), 2, "one line");
            let text = out.strip_prefix(b"data: ").unwrap();
            let data = text.strip_suffix(b"\n\n").unwrap();
            assert_eq!(carried(data), Some(event.clone()));
            let chunk: Value = serde_json::from_slice(data).unwrap();
            assert_eq!(chunk["choices"][0]["delta"]["content"], "");
        }
    }

    #[test]
    fn an_ordinary_chunk_carries_nothing() {
        assert_eq!(
            carried(br#"{"choices":[{"delta":{"content":"x_qoder"}}]}"#),
            None
        );
        assert_eq!(carried(b"[DONE]"), None);
    }
}

//! The trae shim's two legs run over whole byte streams as the runtime runs
//! them, and the SOLO round trip through each proxy situation.

use bytes::{Bytes, BytesMut};
use serde_json::json;
use shimgate_shim_api::sse::SseParser;
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};
use shimgate_shim_trae::{ToOpenAi, ToSolo};

use super::bili;

/// Runs a translator over `chunks` as the runtime does: events until `End`
/// or `Error`, then `eof`, and `fail` when the end was an error nobody wrote.
pub fn run<T: StreamTranslator>(t: &mut T, chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    let mut out = BytesMut::new();
    let mut parser = SseParser::new();
    for chunk in chunks {
        parser.push(chunk);
        loop {
            match parser.next_event() {
                Ok(Some(ev)) => match t.event(&ev, &mut out) {
                    FrameClass::End | FrameClass::Error(_) => return out.to_vec(),
                    _ => {}
                },
                Ok(None) => break,
                Err(e) => {
                    t.fail(
                        &Failure::new(FailureCode::Transport, e.to_string()),
                        &mut out,
                    );
                    return out.to_vec();
                }
            }
        }
    }
    let _ = parser.finish();
    if let FrameClass::Error(f) = t.eof(&mut out) {
        t.fail(&f, &mut out);
    }
    out.to_vec()
}

/// `bytes` cut into pieces of `size` bytes (at least 1).
pub fn pieces(bytes: &[u8], size: usize) -> Vec<Bytes> {
    bytes
        .chunks(size.max(1))
        .map(Bytes::copy_from_slice)
        .collect()
}

/// The return leg over a SOLO stream given as `chunks`.
pub fn convert(chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    let request = json!({"model": "glm-5.2", "stream": true});
    run(
        &mut ToOpenAi::with_identity(&request, "chatcmpl-test", 1),
        chunks,
    )
}

/// [`convert`] with every frame read in full (no memo of repeated
/// bytes): the reference the memo is held to.
pub fn convert_unmemoized(chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    let request = json!({"model": "glm-5.2", "stream": true});
    run(
        &mut ToOpenAi::unmemoized(&request, "chatcmpl-test", 1),
        chunks,
    )
}

/// The ingress over an OpenAI stream given as `chunks`.
pub fn rebuild(chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    run(&mut ToSolo::new(), chunks)
}

/// [`rebuild`] with every frame read in full (no memo).
pub fn rebuild_unmemoized(chunks: impl IntoIterator<Item = Bytes>) -> Vec<u8> {
    run(&mut ToSolo::unmemoized(), chunks)
}

/// Which proxy sat between the two legs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// None: the ingress read the return leg's bytes.
    Direct,
    /// billion-context, as [`bili`] simulates it.
    Bili,
    /// A proxy that passes every byte but re-chunks them one by one.
    PassThrough,
}

/// Every proxy situation.
pub const PROXIES: [Proxy; 3] = [Proxy::Direct, Proxy::Bili, Proxy::PassThrough];

/// The SOLO stream the agent gets for an upstream SOLO stream.
pub fn round_trip(solo: &[u8], proxy: Proxy) -> Vec<u8> {
    let openai = convert(pieces(solo, 4096));
    match proxy {
        Proxy::Direct => rebuild(pieces(&openai, 4096)),
        Proxy::Bili => rebuild(pieces(&bili(&openai), 4096)),
        Proxy::PassThrough => rebuild(pieces(&openai, 1)),
    }
}

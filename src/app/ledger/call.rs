//! One agent call as the ledger follows it: a [`Turn`] opened by the
//! ingress, the [`Post`]s the compressor makes through the return leg for
//! it (or the one the direct path makes), and a [`Tap`] around each
//! upstream attempt's translator that reads what the provider reported.
//!
//! Nothing here waits or decides: each part books itself when the last
//! holder lets go of it (the attempt's translator when the chain drops it,
//! the post when its answer has streamed, the turn when the agent's answer
//! has), so a late usage frame is never lost to a race between the return
//! leg's stream and the agent's.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use serde_json::Value;
use shimgate_shim_api::sse::SseEvent;
use shimgate_shim_api::translate::{chars, Meter};
use shimgate_shim_api::{Failure, FrameClass, OpenAiBody, StreamTranslator};

use super::book::{Limits, PostResult, TurnRecord, Usage};
use super::Ledger;
use crate::chain::rest::Zone;

/// Characters of what a request asks the model to read: the text of its
/// `messages` (their string values, each escape read as the character it
/// stands for: a provider reads the text, not its JSON, and a build log
/// full of quotes would otherwise count a fifth more) and its `tools` as
/// JSON text (a tool's schema reaches the model as written). Both sides of
/// the compressor are measured the same way.
pub fn prompt_chars(body: &OpenAiBody) -> u64 {
    let count = |key: &str, measure: fn(&[u8]) -> u64| match body.member(key) {
        Ok(Some(raw)) => measure(raw),
        Ok(None) => 0,
        // A key spelled with an escape: read off the parse.
        Err(_) => body
            .value()
            .get(key)
            .map_or(0, |v| measure(v.to_string().as_bytes())),
    };
    count("messages", text_chars) + count("tools", chars)
}

/// Characters of the string values of a JSON text (keys left out), each
/// escape counted as the one character it stands for. A text that is not
/// JSON is counted as far as it reads.
pub fn text_chars(json: &[u8]) -> u64 {
    let mut total = 0u64;
    let mut i = 0;
    while i < json.len() {
        if json[i] != b'"' {
            i += 1;
            continue;
        }
        // A string: its characters, then whether a `:` makes it a key.
        let mut n = 0u64;
        i += 1;
        while let Some(&b) = json.get(i) {
            if b == b'"' {
                break;
            }
            if b == b'\\' {
                // `\uXXXX` is one character, any other escape one too.
                n += 1;
                i += if json.get(i + 1) == Some(&b'u') { 6 } else { 2 };
                continue;
            }
            n += u64::from((b as i8) >= -0x40);
            i += 1;
        }
        i += 1;
        let next = json
            .get(i..)
            .and_then(|rest| rest.iter().find(|b| !b.is_ascii_whitespace()));
        if next != Some(&b':') {
            total += n;
        }
    }
    total
}

/// Where a call's figures go when it is done: the ledger, with the zone
/// and bounds of the config it started under.
#[derive(Clone)]
pub(super) struct Booking {
    pub ledger: Arc<Ledger>,
    pub zone: Zone,
    pub limits: Limits,
}

/// One agent call: booked when the ingress and every post are done with it.
pub struct Turn {
    booking: Booking,
    /// The rid it is known by (empty for a direct call: no return leg).
    rid: String,
    shim: &'static str,
    conversation: String,
    /// The size of the agent's request: measured by the first return-leg
    /// request while it is upstream (off the way to the first token);
    /// `None` for a call sent as the agent sent it (then its tokens are
    /// the sent ones).
    agent_chars: Mutex<Option<u64>>,
    next_seq: AtomicU32,
    posts: Mutex<Vec<PostResult>>,
}

impl Turn {
    pub(super) fn new(
        booking: Booking,
        rid: String,
        shim: &'static str,
        conversation: String,
    ) -> Turn {
        Turn {
            booking,
            rid,
            shim,
            conversation,
            agent_chars: Mutex::default(),
            next_seq: AtomicU32::new(0),
            posts: Mutex::default(),
        }
    }

    /// A request sent upstream for this call: `side` when its shape says
    /// the compressor made it (a summary), `sent_chars` its size (0 until
    /// [`Post::measured`]).
    pub fn post(self: &Arc<Self>, side: bool, sent_chars: u64) -> Arc<Post> {
        Arc::new(Post {
            owner: Owner::Turn(self.clone()),
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            side: AtomicBool::new(side),
            sent_chars: AtomicU64::new(sent_chars),
            state: Mutex::default(),
        })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let posts = std::mem::take(self.posts.get_mut().unwrap_or_else(|p| p.into_inner()));
        let record = TurnRecord {
            shim: self.shim,
            conversation: std::mem::take(&mut self.conversation),
            agent_chars: *self
                .agent_chars
                .get_mut()
                .unwrap_or_else(|p| p.into_inner()),
            posts,
        };
        let b = &self.booking;
        b.ledger.done(&self.rid, &record, b.zone, b.limits);
    }
}

/// Who a post reports to.
enum Owner {
    Turn(Arc<Turn>),
    /// A post whose call is over (or unknown): the compressor's own,
    /// booked alone.
    Alone {
        booking: Booking,
        shim: &'static str,
        conversation: String,
    },
}

/// What the attempts of a post reported.
#[derive(Default)]
struct PostState {
    answered: bool,
    /// The usage of the attempt whose content went on.
    answer: Option<Usage>,
    /// The last attempt that saw no content: the answer after all when the
    /// chain committed without content (a long run of frames that are
    /// not content), else one that failed.
    last_other: Option<Usage>,
    failed_tokens: u64,
}

fn billed(u: &Usage) -> u64 {
    u.prompt
        .unwrap_or(0)
        .saturating_add(u.completion.unwrap_or(0))
}

/// One request sent upstream (each of its attempts gets a [`Tap`]).
pub struct Post {
    owner: Owner,
    seq: u32,
    side: AtomicBool,
    sent_chars: AtomicU64,
    state: Mutex<PostState>,
}

impl Post {
    pub(super) fn alone(
        booking: Booking,
        shim: &'static str,
        conversation: String,
        sent_chars: u64,
    ) -> Post {
        Post {
            owner: Owner::Alone {
                booking,
                shim,
                conversation,
            },
            seq: 0,
            side: AtomicBool::new(true),
            sent_chars: AtomicU64::new(sent_chars),
            state: Mutex::default(),
        }
    }

    /// What the return leg measured while the request was upstream: its
    /// size, and whether it is the compressor's own (a call with no agent
    /// call behind it stays the compressor's whatever its shape).
    pub fn measured(&self, side: bool, sent_chars: u64) {
        if matches!(self.owner, Owner::Turn(_)) {
            self.side.store(side, Ordering::Relaxed);
        }
        self.sent_chars.store(sent_chars, Ordering::Relaxed);
    }

    /// The size of the agent's request, measured by `measure` once per
    /// call (the first request to get here).
    pub fn agent_chars(&self, measure: impl FnOnce() -> Option<u64>) {
        if let Owner::Turn(turn) = &self.owner {
            let mut chars = turn.agent_chars.lock().unwrap_or_else(|p| p.into_inner());
            if chars.is_none() {
                *chars = measure();
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, PostState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chain committed an answer for this post.
    pub fn answered(&self) {
        self.state().answered = true;
    }

    /// An attempt ended: what it reported, and whether its content went on.
    fn attempt(&self, usage: Usage, content: bool) {
        let mut s = self.state();
        if content {
            s.answered = true;
            s.answer = Some(usage);
        } else {
            s.failed_tokens = s.failed_tokens.saturating_add(billed(&usage));
            s.last_other = Some(usage);
        }
    }

    /// `translator`, with what it reads reported to this post.
    pub fn tap(
        self: &Arc<Self>,
        translator: Box<dyn StreamTranslator>,
    ) -> Box<dyn StreamTranslator> {
        Box::new(Tap {
            inner: translator,
            post: self.clone(),
            content: false,
            seen: Usage::default(),
        })
    }
}

impl Drop for Post {
    fn drop(&mut self) {
        let mut s = std::mem::take(self.state.get_mut().unwrap_or_else(|p| p.into_inner()));
        if s.answered && s.answer.is_none() {
            if let Some(u) = s.last_other.take() {
                s.failed_tokens = s.failed_tokens.saturating_sub(billed(&u));
                s.answer = Some(u);
            }
        }
        let result = PostResult {
            seq: self.seq,
            side: *self.side.get_mut(),
            sent_chars: *self.sent_chars.get_mut(),
            answered: s.answered,
            answer: s.answer.unwrap_or_default(),
            failed_tokens: s.failed_tokens,
        };
        match &mut self.owner {
            Owner::Turn(turn) => turn
                .posts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(result),
            Owner::Alone {
                booking,
                shim,
                conversation,
            } => {
                let record = TurnRecord {
                    shim,
                    conversation: std::mem::take(conversation),
                    agent_chars: None,
                    posts: vec![result],
                };
                booking
                    .ledger
                    .done("", &record, booking.zone, booking.limits);
            }
        }
    }
}

/// A translator whose readings reach its post when the chain drops it:
/// the shim's own [`Meter`] first (the per-shim hook every wire fills),
/// else the `usage` of the bare OpenAI frames it wrote (what a return leg
/// always writes, so a wire whose translator meters nothing is still read).
struct Tap {
    inner: Box<dyn StreamTranslator>,
    post: Arc<Post>,
    content: bool,
    /// Usage read off the frames written.
    seen: Usage,
}

impl Tap {
    fn saw(&mut self, class: &FrameClass) {
        if *class == FrameClass::Content {
            self.content = true;
        }
    }
}

impl StreamTranslator for Tap {
    fn event(&mut self, event: &SseEvent, out: &mut BytesMut) -> FrameClass {
        let from = out.len();
        let class = self.inner.event(event, out);
        if let Some(written) = out.get(from..) {
            scan_usage(written, &mut self.seen);
        }
        self.saw(&class);
        class
    }

    fn classify(&mut self, event: &SseEvent, scratch: &mut BytesMut) -> FrameClass {
        let class = self.inner.classify(event, scratch);
        self.saw(&class);
        class
    }

    fn eof(&mut self, out: &mut BytesMut) -> FrameClass {
        self.inner.eof(out)
    }

    fn fail(&mut self, failure: &Failure, out: &mut BytesMut) {
        self.inner.fail(failure, out)
    }

    fn meter(&self) -> Meter {
        self.inner.meter()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        let m = self.inner.meter();
        let usage = Usage {
            prompt: m.prompt_tokens.or(self.seen.prompt),
            completion: m.completion_tokens.or(self.seen.completion),
            cached: m.cached_tokens.or(self.seen.cached),
            content_chars: m.content_chars,
        };
        self.post.attempt(usage, self.content);
    }
}

/// Reads the `usage` of bare OpenAI frames (`data: {…"usage":{…}}`) into
/// `into`, the last report winning; anything else is passed over.
pub fn scan_usage(frames: &[u8], into: &mut Usage) {
    static USAGE: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"usage\""));
    let finder = &*USAGE;
    if finder.find(frames).is_none() {
        return;
    }
    for line in frames.split(|b| *b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        if finder.find(data).is_none() {
            continue;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
            continue;
        };
        let Some(u) = chunk.get("usage").filter(|u| u.is_object()) else {
            continue;
        };
        let count = |v: Option<&Value>| v.and_then(Value::as_u64);
        into.prompt = count(u.get("prompt_tokens")).or(into.prompt);
        into.completion = count(u.get("completion_tokens")).or(into.completion);
        into.cached = count(u.pointer("/prompt_tokens_details/cached_tokens")).or(into.cached);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_read_off_bare_openai_frames_and_nothing_else() {
        let mut u = Usage::default();
        scan_usage(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"the word \\\"usage\\\"\"}}]}\n\n\
              data: {\"choices\":[],\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":9,\
              \"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\ndata: [DONE]\n\n",
            &mut u,
        );
        assert_eq!(
            (u.prompt, u.completion, u.cached),
            (Some(120), Some(9), Some(64))
        );
        for odd in [
            &b"data: {\"usage\":{\"prompt_tokens\":\"9\"}}\n\n"[..],
            b"data: {\"usage\":{\"prompt_tokens\":-9}}\n\n",
            b"data: {\"usage\":null}\n\n",
            b"data: {\"usage\":{\"prompt_tokens\":9}\n\n",
            b"event: token_usage\n\n",
        ] {
            let mut u = Usage::default();
            scan_usage(odd, &mut u);
            assert_eq!(u, Usage::default(), "{}", String::from_utf8_lossy(odd));
        }
    }

    #[test]
    fn a_body_is_measured_by_the_text_of_its_messages_and_its_tools() {
        let body = OpenAiBody::written(
            r#"{"model":"m","messages":[{"role":"user","content":"h\u00e9llo \"x\"\n"}],"tools":[{"a":1}],"stream":true}"#,
        );
        // "user", `héllo "x"` and its line end; the tools as written.
        assert_eq!(prompt_chars(&body), 4 + 10 + 9);
        // An escaped key is read off the parse, with the same count.
        let escaped = OpenAiBody::written(
            r#"{"m\u0065ssages":[{"role":"user","content":"héllo"}],"stream":true}"#,
        );
        assert_eq!(prompt_chars(&escaped), 4 + 5);
        assert_eq!(prompt_chars(&OpenAiBody::written("{}")), 0);
        // Keys are not text; a cut text counts what it holds, no panic.
        assert_eq!(
            text_chars(br#"{"key" : "value", "n": 12, "list": ["a", "bc"]}"#),
            8
        );
        for cut in [&br#"["abc"#[..], br#"["a\"#, br#"["\u12"#, b"\"", b""] {
            assert!(text_chars(cut) <= 3);
        }
    }
}

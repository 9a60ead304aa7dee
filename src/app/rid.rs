//! The rid registry: what the ingress remembers about an intercepted request
//! so the return leg can restore it after the compression proxy.
//!
//! Entries live 120 s and at most 256 are kept (oldest evicted), within a
//! byte budget. They are not removed on first use: agents resend after
//! `409 duplicate_request` and a proxy may POST the same return-leg URL
//! several times in one turn. Every listener shares one registry, so one
//! proxy instance serves both shims.
//!
//! An entry keeps the native body as received; the parsed original is only
//! borrowed (a weak reference to the ingress's copy), so finished requests
//! do not keep parsed trees alive. A return leg that comes after its
//! ingress finished parses the body again. The body the ingress sent the
//! proxy is borrowed the same way: the return leg reads it for the
//! exchange accounting while the ingress waits for the answer.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderMap;
use shimgate_shim_api::OpenAiBody;

/// How long an entry lives.
pub const RID_TTL: Duration = Duration::from_secs(120);
/// How many entries are kept.
pub const RID_CAPACITY: usize = 256;
/// How many bytes of native bodies idle entries may hold together (256 MiB):
/// 256 Max-mode requests of several MB each would otherwise pin gigabytes.
pub const RID_MAX_BYTES: usize = 256 * 1024 * 1024;

const OPEN: u8 = 0;
const CLAIMED: u8 = 1;
const ABANDONED: u8 = 2;

/// One intercepted request.
pub struct RidEntry {
    pub rid: String,
    pub shim: &'static str,
    pub created: Instant,
    /// The ingress's parsed original (`Shim::Original`, type-erased), while
    /// the ingress still holds it.
    pub original: Weak<dyn Any + Send + Sync>,
    /// The native body exactly as the agent sent it.
    pub native: Bytes,
    /// The agent's request headers (sent upstream with the restored body),
    /// shared with the ingress (and, when a call fails, its scrubbing).
    pub headers: Arc<HeaderMap>,
    /// The agent's request path and query.
    pub path_and_query: String,
    /// The body the ingress sent to the proxy (for accounting), while the
    /// ingress still holds it.
    pub sent: Weak<OpenAiBody>,
    /// The `Authorization` the proxy saw (the agent's proxy identity): a
    /// proxy that calls a fixed path and forwards only that header is
    /// served the newest live rid of it.
    pub identity: String,
    /// The agent sent the body in a transport encoding (`native` holds it
    /// decoded); the codec encodes the rebuilt request again.
    pub encoded: bool,
    /// Return-leg requests seen for this rid.
    pub return_hits: AtomicU32,
    /// The agent's conversation id (empty: none known).
    pub conversation: String,
    /// The config the call runs on when it is not the live one: a call
    /// the capture listener handed over, with the route to the host its
    /// client asked for (the return leg sends it there too).
    pub config: Option<Arc<crate::config::Config>>,
    /// The route that answered the return leg's last call, and the first
    /// one it tried when that was another (the agent's answer head names
    /// them).
    answered: Mutex<Option<(String, Option<String>)>>,
    state: AtomicU8,
}

impl RidEntry {
    /// A new open entry.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rid: String,
        shim: &'static str,
        original: &Arc<dyn Any + Send + Sync>,
        native: Bytes,
        headers: Arc<HeaderMap>,
        path_and_query: String,
        sent: &Arc<OpenAiBody>,
        identity: String,
        encoded: bool,
    ) -> Self {
        RidEntry {
            rid,
            shim,
            created: Instant::now(),
            original: Arc::downgrade(original),
            native,
            headers,
            path_and_query,
            sent: Arc::downgrade(sent),
            identity,
            encoded,
            return_hits: AtomicU32::new(0),
            conversation: String::new(),
            config: None,
            answered: Mutex::new(None),
            state: AtomicU8::new(OPEN),
        }
    }

    /// The return leg's call committed on `route` (after a switch from
    /// `switched_from`).
    pub fn set_answered(&self, route: &str, switched_from: Option<&str>) {
        *self.answered.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((route.to_string(), switched_from.map(str::to_owned)));
    }

    /// The route that answered, and the one it switched from.
    pub fn answered(&self) -> Option<(String, Option<String>)> {
        self.answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The return leg takes the request: from now on the ingress must not
    /// send it upstream itself. False when the ingress already gave up on
    /// the proxy and answered directly.
    pub fn claim(&self) -> bool {
        self.return_hits.fetch_add(1, Ordering::AcqRel);
        match self
            .state
            .compare_exchange(OPEN, CLAIMED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(seen) => seen == CLAIMED,
        }
    }

    /// The ingress gives up on the proxy and will send directly. False when
    /// the return leg already took the request (then its answer, success or
    /// error, is what the agent gets: a request is never sent twice).
    pub fn abandon(&self) -> bool {
        self.state
            .compare_exchange(OPEN, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Whether the return leg has seen this rid.
    pub fn reached(&self) -> bool {
        self.state.load(Ordering::Acquire) == CLAIMED
    }
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Arc<RidEntry>>,
    order: VecDeque<String>,
    /// Sum of `native.len()` over the entries.
    bytes: usize,
}

/// The shared registry.
#[derive(Default)]
pub struct RidRegistry {
    inner: Mutex<Inner>,
}

impl RidRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh random rid (128 bits, hex).
    pub fn new_rid() -> String {
        format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
    }

    /// Stores an entry, evicting expired ones and the oldest beyond
    /// capacity. An entry still in use (an ingress waiting on the proxy, a
    /// return leg running) is never evicted: with more than 256 calls in
    /// flight at once the registry holds them all, and shrinks back as they
    /// end.
    pub fn insert(&self, entry: RidEntry) -> Arc<RidEntry> {
        let entry = Arc::new(entry);
        let mut inner = self.lock();
        Self::expire(&mut inner);
        while inner.map.len() >= RID_CAPACITY || inner.bytes + entry.native.len() > RID_MAX_BYTES {
            let idle = inner
                .order
                .iter()
                .position(|rid| inner.map.get(rid).is_none_or(|e| !in_use(e)));
            let Some(at) = idle else { break };
            if let Some(old) = inner.order.remove(at) {
                if let Some(e) = inner.map.remove(&old) {
                    inner.bytes -= e.native.len();
                }
            }
        }
        inner.bytes += entry.native.len();
        inner.order.push_back(entry.rid.clone());
        inner.map.insert(entry.rid.clone(), entry.clone());
        entry
    }

    /// A live entry (younger than the TTL, or still in use).
    pub fn get(&self, rid: &str) -> Option<Arc<RidEntry>> {
        let inner = self.lock();
        inner.map.get(rid).filter(|e| is_live(e)).cloned()
    }

    /// The newest live entry whose proxy identity is `identity`.
    pub fn newest_for(&self, identity: &str) -> Option<Arc<RidEntry>> {
        let inner = self.lock();
        inner
            .order
            .iter()
            .rev()
            .filter_map(|rid| inner.map.get(rid))
            .find(|e| e.identity == identity && is_live(e))
            .cloned()
    }

    /// Live entries of one shim.
    pub fn live(&self, shim: &str) -> usize {
        let mut inner = self.lock();
        Self::expire(&mut inner);
        inner.map.values().filter(|e| e.shim == shim).count()
    }

    /// Drops the expired entries. `order` is oldest first, so only its
    /// front can hold any: the walk stops at the first entry younger than
    /// the TTL instead of looking up all 256 on every insert (entries made
    /// microseconds apart may sit out of order; one left behind goes at the
    /// next call).
    fn expire(inner: &mut Inner) {
        let Inner { map, order, bytes } = inner;
        let now = Instant::now();
        let mut at = 0;
        while let Some(rid) = order.get(at) {
            match map.get(rid) {
                Some(e) if now.saturating_duration_since(e.created) < RID_TTL => break,
                Some(e) if in_use(e) => at += 1,
                _ => {
                    if let Some(e) = order.remove(at).and_then(|rid| map.remove(&rid)) {
                        *bytes -= e.native.len();
                    }
                }
            }
        }
    }
}

/// Someone besides the registry holds the entry: an ingress waiting on the
/// proxy or relaying its answer, or a return leg at work.
fn in_use(e: &Arc<RidEntry>) -> bool {
    Arc::strong_count(e) > 1
}

fn is_live(e: &Arc<RidEntry>) -> bool {
    e.created.elapsed() < RID_TTL || in_use(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rid: &str) -> RidEntry {
        sized(rid, 0)
    }

    fn sized(rid: &str, bytes: usize) -> RidEntry {
        let original: Arc<dyn Any + Send + Sync> = Arc::new(());
        RidEntry::new(
            rid.into(),
            "trae",
            &original,
            Bytes::from(vec![b' '; bytes]),
            Arc::default(),
            "/".into(),
            &Arc::new(OpenAiBody::of_value(&serde_json::json!({}))),
            format!("id-{}", rid.len() % 2),
            false,
        )
    }

    #[test]
    fn oldest_is_evicted_at_capacity() {
        let r = RidRegistry::default();
        for i in 0..=RID_CAPACITY {
            r.insert(entry(&i.to_string()));
        }
        assert!(r.get("0").is_none());
        assert!(r.get("1").is_some());
        assert_eq!(r.live("trae"), RID_CAPACITY);
    }

    #[test]
    fn idle_entries_beyond_the_byte_budget_are_evicted() {
        let r = RidRegistry::default();
        let big = RID_MAX_BYTES / 4 + 1;
        for i in 0..4 {
            r.insert(sized(&i.to_string(), big));
        }
        assert!(
            r.get("0").is_none(),
            "the oldest went to stay within the budget"
        );
        assert!(r.get("3").is_some());
    }

    #[test]
    fn entries_in_use_are_not_evicted() {
        let r = RidRegistry::default();
        let held: Vec<_> = (0..RID_CAPACITY + 10)
            .map(|i| r.insert(entry(&i.to_string())))
            .collect();
        assert!(r.get("0").is_some(), "in use, so kept past capacity");
        assert_eq!(r.live("trae"), RID_CAPACITY + 10);
        drop(held);
        r.insert(entry("new"));
        assert_eq!(
            r.live("trae"),
            RID_CAPACITY,
            "idle ones go as new ones come"
        );
    }

    #[test]
    fn expired_entries_go_unless_in_use() {
        let r = RidRegistry::default();
        let old = |rid: &str| {
            let mut e = entry(rid);
            e.created = Instant::now()
                .checked_sub(RID_TTL + Duration::from_secs(1))
                .unwrap();
            e
        };
        r.insert(old("gone"));
        let held = r.insert(old("held"));
        r.insert(entry("young"));
        r.insert(entry("new"));
        assert!(r.get("gone").is_none(), "expired and idle");
        assert!(r.get("held").is_some(), "expired but in use");
        assert!(r.get("young").is_some() && r.get("new").is_some());
        drop(held);
        r.insert(entry("newer"));
        assert!(r.get("held").is_none(), "expired once let go");
        assert_eq!(r.live("trae"), 3);
    }

    #[test]
    fn entries_stay_after_use() {
        let r = RidRegistry::default();
        r.insert(entry("a"));
        assert!(r.get("a").unwrap().claim());
        assert!(
            r.get("a").unwrap().claim(),
            "a resend with the same rid works"
        );
    }

    #[test]
    fn the_newest_live_entry_of_an_identity_is_found() {
        let r = RidRegistry::default();
        for rid in ["a", "bb", "c", "dd"] {
            r.insert(entry(rid));
        }
        assert_eq!(r.newest_for("id-1").unwrap().rid, "c");
        assert_eq!(r.newest_for("id-0").unwrap().rid, "dd");
        assert!(r.newest_for("id-9").is_none());
    }

    #[test]
    fn claim_and_abandon_exclude_each_other() {
        let e = entry("a");
        assert!(e.abandon());
        assert!(!e.claim());
        let e = entry("b");
        assert!(e.claim());
        assert!(!e.abandon());
        assert!(e.reached());
    }
}

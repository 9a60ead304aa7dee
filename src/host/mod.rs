//! The runtime side of a shim: the ingress that takes the agent's inference
//! call over and sends it to the compression proxy, the return leg that
//! restores the native request and sends it upstream through the chain, and
//! the fallback that sends directly when the proxy path fails.
//!
//! [`Host`] is generic over a protocol crate's [`Shim`]; [`ShimHost`] erases
//! the type so the router can hold every shim in one list ([`all`]).

mod aggregate;
pub mod codec;
mod ingress;
pub mod openai_error;
pub mod passthrough;
mod proxy_answer;
mod return_leg;
pub mod translators;
mod while_waiting;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{json, Value};
use shimgate_shim_api::Shim;

use crate::app::exchange::Exchanges;
use crate::app::rid::{RID_CAPACITY, RID_TTL};
use crate::app::App;
use crate::config::Config;
use crate::http::body::Body;
use crate::registry;
use codec::Upstreaming;
use translators::RebuildStats;

/// A request extension: the config this inference call runs on instead of
/// the live one. The capture listener sets it for a call on a host the
/// shim has no configured routes for: the live config with one route to
/// that host (`capture:HOST`), so the call goes where its client sent it.
/// The ingress, the return leg (through the rid) and a pass-through of a
/// request the shim cannot read all use it.
#[derive(Clone)]
pub struct RunsOn(pub Arc<Config>);

/// A boxed response future.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// A shim as the router sees it.
pub trait ShimHost: Send + Sync {
    /// The shim's name (`qoder`, `trae`).
    fn name(&self) -> &'static str;
    /// Whether the request is the inference call this shim's ingress takes.
    fn is_inference(&self, method: &str, path_and_query: &str) -> bool;
    /// The headers that name the agent ([`Shim::identity_headers`]).
    fn identity_headers(&self) -> &'static [&'static str];
    /// Handles the agent's inference call.
    fn ingress(self: Arc<Self>, app: Arc<App>, req: Request<Incoming>) -> ResponseFuture;
    /// Handles `POST /{shim}/{rid}/chat/completions` from the proxy.
    fn return_leg(
        self: Arc<Self>,
        app: Arc<App>,
        rid: String,
        req: Request<Incoming>,
    ) -> ResponseFuture;
    /// A fresh return-leg translator for a captured stream, offline
    /// (`shimgate translate`).
    fn offline_return_leg(&self) -> Box<dyn shimgate_shim_api::StreamTranslator>;
    /// A fresh ingress translator for a captured stream, offline.
    fn offline_ingress(&self) -> Box<dyn shimgate_shim_api::StreamTranslator>;
    /// The shim-specific `/status` fields.
    fn status(&self, app: &App, config: &Config) -> serde_json::Map<String, Value>;
}

/// The hosted shims, by name.
pub struct Shims(Vec<Arc<dyn ShimHost>>);

impl Shims {
    /// The shim called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn ShimHost>> {
        self.0.iter().find(|h| h.name() == name).cloned()
    }

    /// Every shim, in listing order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<dyn ShimHost>> {
        self.0.iter()
    }
}

/// A host for every shim of the registry.
pub fn all() -> Shims {
    struct Build(Vec<Arc<dyn ShimHost>>);
    impl registry::Each for Build {
        fn shim<S: Shim + Default>(&mut self) {
            let upstream: Box<dyn Upstreaming> = if S::CODEC {
                Box::new(codec::ConfiguredCodec::new(S::NAME))
            } else if let Some(header) = S::ATTEMPT_ID_HEADER {
                let shim = S::default();
                Box::new(codec::FreshIds::new(
                    header,
                    Arc::new(move |body: &[u8], id: &str| shim.stamp_attempt(body, id)),
                ))
            } else {
                Box::new(codec::DirectJson)
            };
            self.0.push(Arc::new(Host::new(S::default(), upstream)));
        }
    }
    let mut b = Build(Vec::new());
    registry::each(&mut b);
    Shims(b.0)
}

const UNKNOWN: u8 = 0;
const YES: u8 = 1;
const NO: u8 = 2;

/// One shim, hosted.
pub struct Host<S: Shim> {
    shim: S,
    upstream: Box<dyn Upstreaming>,
    exchanges: Mutex<Exchanges>,
    /// Whether the last intercepted call reached the return leg.
    effective: AtomicU8,
    rebuild: Arc<RebuildStats>,
}

impl<S: Shim> Host<S> {
    /// Hosts `shim`, sending upstream with `upstream`.
    pub fn new(shim: S, upstream: Box<dyn Upstreaming>) -> Self {
        Host {
            shim,
            upstream,
            exchanges: Mutex::default(),
            effective: AtomicU8::new(UNKNOWN),
            rebuild: Arc::default(),
        }
    }

    fn set_effective(&self, yes: bool) {
        self.effective
            .store(if yes { YES } else { NO }, Ordering::Relaxed);
    }

    fn exchanges(&self) -> std::sync::MutexGuard<'_, Exchanges> {
        self.exchanges.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shim's reading of an upstream error answer's business code,
    /// for the chain ([`Shim::http_error`]).
    fn error_codes(self: &Arc<Self>) -> crate::chain::HttpErrorCodes {
        let h = self.clone();
        Arc::new(move |status, body| h.shim.http_error(status, body))
    }

    /// What the agent reads when the ingress sends a request upstream
    /// itself: the return leg's output if that is its wire, else the
    /// upstream's own events classified by the return leg (one
    /// translation, never two).
    fn agent_translator(
        &self,
        shape: &Value,
        original: &S::Original,
    ) -> Box<dyn shimgate_shim_api::StreamTranslator> {
        if self.shim.agent_reads_return_leg() {
            Box::new(self.shim.return_leg(shape))
        } else {
            Box::new(translators::Native::new(
                self.shim.return_leg(shape),
                self.shim.ingress(original),
            ))
        }
    }
}

impl<S: Shim> ShimHost for Host<S> {
    fn name(&self) -> &'static str {
        self.shim.name()
    }

    fn is_inference(&self, method: &str, path_and_query: &str) -> bool {
        self.shim.is_inference(method, path_and_query)
    }

    fn identity_headers(&self) -> &'static [&'static str] {
        self.shim.identity_headers()
    }

    fn ingress(self: Arc<Self>, app: Arc<App>, req: Request<Incoming>) -> ResponseFuture {
        Box::pin(ingress::handle(self, app, req))
    }

    fn return_leg(
        self: Arc<Self>,
        app: Arc<App>,
        rid: String,
        req: Request<Incoming>,
    ) -> ResponseFuture {
        Box::pin(return_leg::handle(self, app, rid, req))
    }

    fn offline_return_leg(&self) -> Box<dyn shimgate_shim_api::StreamTranslator> {
        Box::new(self.shim.return_leg(&json!({"stream": true})))
    }

    fn offline_ingress(&self) -> Box<dyn shimgate_shim_api::StreamTranslator> {
        Box::new(self.shim.ingress(&S::Original::default()))
    }

    fn status(&self, app: &App, config: &Config) -> serde_json::Map<String, Value> {
        let mut m = serde_json::Map::new();
        let effective = match self.effective.load(Ordering::Relaxed) {
            YES => json!(true),
            NO => json!(false),
            _ => Value::Null,
        };
        m.insert("effective".into(), effective);
        m.insert(
            "rids".into(),
            json!({
                "live": app.rids.live(self.name()),
                "capacity": RID_CAPACITY,
                "ttlMs": RID_TTL.as_millis() as u64,
            }),
        );
        let codec = self.upstream.status(config);
        if !codec.is_null() {
            m.insert("codec".into(), codec);
        }
        let (last, recent) = self.exchanges().to_json();
        m.insert("lastExchange".into(), last);
        m.insert("recentExchanges".into(), recent);
        let r = &self.rebuild;
        m.insert(
            "returnLeg".into(),
            json!({
                "openAiFrames": r.frames_in.load(Ordering::Relaxed),
                S::AGENT_FRAMES_KEY: r.frames_out.load(Ordering::Relaxed),
                "rebuildErrors": r.errors.load(Ordering::Relaxed),
                "emptyRebuilds": r.empty.load(Ordering::Relaxed),
            }),
        );
        m
    }
}

pub use shimgate_shim_api::answer_shape;

/// The agent headers that name its conversation, first found wins
/// (`docs/failover.md`, switches by conversation).
/// Names, not strings: a lookup by string parses the name on every call.
pub const CONVERSATION_HEADERS: [http::HeaderName; 3] = [
    http::HeaderName::from_static("x-session-id"),
    http::HeaderName::from_static("x-acp-session"),
    http::HeaderName::from_static("session-id"),
];

/// The agent's conversation id: its first conversation header, else the
/// wire's own field ([`Shim::conversation`]); empty when neither names one.
pub fn conversation_of<S: Shim>(shim: &S, headers: &http::HeaderMap, native: &[u8]) -> String {
    CONVERSATION_HEADERS
        .iter()
        .find_map(|n| headers.get(n)?.to_str().ok().filter(|v| !v.is_empty()))
        .map(str::to_owned)
        .or_else(|| shim.conversation(native))
        .unwrap_or_default()
}

/// The header that carries the rid to proxies that compress a fixed path.
pub const RID_HEADER: &str = "x-shimgate-rid";
/// The query parameter that carries the rid to such proxies.
pub const RID_QUERY: &str = "shimgate_rid";

/// Splits a return-leg path `…/{shim}/{rid}/chat/completions` (any prefix a
/// proxy may add is ignored).
pub fn return_leg_path(path: &str) -> Option<(&str, &str)> {
    let mut rev = path.trim_end_matches('/').rsplit('/');
    let (completions, chat, rid, shim) = (rev.next()?, rev.next()?, rev.next()?, rev.next()?);
    (completions == "completions" && chat == "chat" && !rid.is_empty() && !shim.is_empty())
        .then_some((shim, rid))
}

/// The rid of a return-leg call that came on a fixed path (`…/chat/completions`
/// with no rid segment): from [`RID_HEADER`], else the [`RID_QUERY`]
/// parameter, else `None` (the router then looks for the newest live rid of
/// the proxy identity in `Authorization`, see [`proxy_identity`]).
pub fn carried_rid(path: &str, query: Option<&str>, headers: &http::HeaderMap) -> Option<String> {
    if !path.trim_end_matches('/').ends_with("/chat/completions") {
        return None;
    }
    let plausible =
        |r: &str| !r.is_empty() && r.len() <= 64 && r.bytes().all(|b| b.is_ascii_alphanumeric());
    if let Some(r) = headers.get(RID_HEADER).and_then(|v| v.to_str().ok()) {
        if plausible(r) {
            return Some(r.to_string());
        }
    }
    let from_query = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix(RID_QUERY)?.strip_prefix('='));
    from_query.filter(|r| plausible(r)).map(str::to_owned)
}

/// The proxy identity a fixed-path return-leg call carries in
/// `Authorization` (`Bearer shimgate-<shim>-<hash>`, as the ingress sent it).
pub fn proxy_identity<'h>(path: &str, headers: &'h http::HeaderMap) -> Option<&'h str> {
    if !path.trim_end_matches('/').ends_with("/chat/completions") {
        return None;
    }
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .filter(|v| v.starts_with(crate::app::identity::IDENTITY_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rid_is_carried_by_header_or_query() {
        let mut h = http::HeaderMap::new();
        assert_eq!(
            carried_rid("/chat/completions", Some("shimgate_rid=ab12"), &h),
            Some("ab12".into())
        );
        h.insert(RID_HEADER, "ef56".parse().unwrap());
        assert_eq!(
            carried_rid("/chat/completions", Some("shimgate_rid=ab12"), &h),
            Some("ef56".into())
        );
        assert_eq!(carried_rid("/v1/models", None, &h), None);
    }

    #[test]
    fn only_a_shimgate_identity_names_a_proxy_identity() {
        let mut h = http::HeaderMap::new();
        h.insert("authorization", "Bearer sk-real-key".parse().unwrap());
        assert_eq!(proxy_identity("/chat/completions", &h), None);
        h.insert(
            "authorization",
            "Bearer shimgate-trae-0123abcd".parse().unwrap(),
        );
        assert_eq!(
            proxy_identity("/v1/chat/completions", &h),
            Some("shimgate-trae-0123abcd")
        );
        assert_eq!(proxy_identity("/v1/models", &h), None);
    }

    #[test]
    fn return_leg_paths_are_recognised_with_any_prefix() {
        assert_eq!(
            return_leg_path("/trae/ab12/chat/completions"),
            Some(("trae", "ab12"))
        );
        assert_eq!(
            return_leg_path("/v1/qoder/x/chat/completions"),
            Some(("qoder", "x"))
        );
        assert_eq!(return_leg_path("/v1/chat/completions"), None);
        assert_eq!(return_leg_path("/chat/completions"), None);
    }
}

//! How a shim's native request becomes an upstream request: trae sends the
//! restored body with the agent's own headers; qoder runs the rebuilt ask
//! through its codec, afresh for every attempt (`plain`: the JSON as is;
//! `exec`: a co-process; `cosy`: qoder's body encoding and the COSY
//! signature, re-made by the published rule — what a request that arrived
//! encoded always gets). Every attempt after the first carries a fresh ask
//! `request_id`: qoder refuses a reused one with 103. A wire that names its
//! request-id header (qoder's model server, `X-Request-ID`) gets a fresh
//! one on every attempt ([`FreshIds`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request};
use serde_json::{json, Value};
use shimgate_shim_api::{Failure, FailureCode};
use shimgate_shim_qoder::{ask, codec, cosy};

mod exec;

use crate::chain::{FixedOutbound, Outbound, OutboundFuture};
use crate::config::{Codec, Config, Route};
use crate::http::headers;
use exec::ExecCodec;

/// Builds the outbound request of a native body.
pub trait Upstreaming: Send + Sync + 'static {
    /// The outbound for `native`, sent to every route at `path_and_query`
    /// with the agent's `headers`.
    fn outbound(
        &self,
        config: &Config,
        native: Bytes,
        path_and_query: &str,
        headers: &HeaderMap,
        encoded: bool,
    ) -> Arc<dyn Outbound>;

    /// Whether the first attempt sends the agent's body as it came (no
    /// encoding, signature or co-process): only such a request may go
    /// upstream before the ingress has read it, since one it then cannot
    /// read has gone up as the agent sent it.
    fn sends_as_is(&self, config: &Config, encoded: bool) -> bool;

    /// What `/status` shows of it.
    fn status(&self, config: &Config) -> Value;
}

fn json_post(native: Bytes, path_and_query: &str, agent: &HeaderMap) -> FixedOutbound {
    let mut h = headers::for_upstream(agent);
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    FixedOutbound {
        method: Method::POST,
        path_and_query: path_and_query.to_string(),
        headers: h,
        body: native,
    }
}

/// trae: the body with the agent's headers, never through the proxy again.
pub struct DirectJson;

impl Upstreaming for DirectJson {
    fn outbound(
        &self,
        _: &Config,
        native: Bytes,
        path_and_query: &str,
        agent: &HeaderMap,
        _encoded: bool,
    ) -> Arc<dyn Outbound> {
        Arc::new(json_post(native, path_and_query, agent))
    }

    fn sends_as_is(&self, _: &Config, _encoded: bool) -> bool {
        true
    }

    fn status(&self, _: &Config) -> Value {
        Value::Null
    }
}

/// How a shim writes an attempt's id into its body (`Shim::stamp_attempt`):
/// the body with `id`, or `None` to send it as it is.
pub type Stamp = Arc<dyn Fn(&[u8], &str) -> Option<Vec<u8>> + Send + Sync>;

/// A wire whose provider refuses a request id it has seen
/// (`Shim::ATTEMPT_ID_HEADER`, qoder's model server): the body with the
/// agent's headers, and for every attempt a fresh random id in that header
/// and, through the shim, in the body. The agent's own id is never sent:
/// a compression proxy re-sends one request several times in its own tool
/// loop, and each of those, like each retry and switch, is a new request
/// to the provider.
pub struct FreshIds {
    header: HeaderName,
    stamp: Stamp,
}

impl FreshIds {
    /// Fresh ids in `header` (lowercase), stamped into bodies by `stamp`.
    pub fn new(header: &'static str, stamp: Stamp) -> Self {
        FreshIds {
            header: HeaderName::from_static(header),
            stamp,
        }
    }
}

impl Upstreaming for FreshIds {
    fn outbound(
        &self,
        _: &Config,
        native: Bytes,
        path_and_query: &str,
        agent: &HeaderMap,
        _encoded: bool,
    ) -> Arc<dyn Outbound> {
        Arc::new(FreshIdOutbound {
            post: json_post(native, path_and_query, agent),
            header: self.header.clone(),
            stamp: self.stamp.clone(),
        })
    }

    /// Only the id changes: a body the shim cannot stamp goes as it came.
    fn sends_as_is(&self, _: &Config, _encoded: bool) -> bool {
        true
    }

    fn status(&self, _: &Config) -> Value {
        Value::Null
    }
}

/// One request, sent with a fresh id each attempt.
struct FreshIdOutbound {
    post: FixedOutbound,
    header: HeaderName,
    stamp: Stamp,
}

impl Outbound for FreshIdOutbound {
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a> {
        Box::pin(async move {
            let id = uuid::Uuid::new_v4().hyphenated().to_string();
            let body = (self.stamp)(&self.post.body, &id)
                .map_or_else(|| self.post.body.clone(), Bytes::from);
            let mut headers = self.post.headers.clone();
            if let Ok(v) = HeaderValue::from_str(&id) {
                headers.insert(self.header.clone(), v);
            }
            post(route, &self.post.path_and_query, headers, body)
        })
    }
}

/// The codec `[shims.NAME] codec` names (for shims with `Shim::CODEC`,
/// i.e. qoder).
pub struct ConfiguredCodec {
    shim: &'static str,
    exec: Mutex<Option<Arc<ExecCodec>>>,
    cosy: Arc<CosyStats>,
}

/// What `/status` shows of the `cosy` codec.
#[derive(Debug, Default)]
struct CosyStats {
    signed: AtomicU64,
    refused: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ConfiguredCodec {
    /// The codec of the shim called `shim`.
    pub fn new(shim: &'static str) -> Self {
        ConfiguredCodec {
            shim,
            exec: Mutex::default(),
            cosy: Arc::default(),
        }
    }

    fn codec<'c>(&self, config: &'c Config) -> &'c Codec {
        config.shim(self.shim).map_or(&Codec::Plain, |s| &s.codec)
    }

    fn exec_for(&self, command: &[String]) -> Arc<ExecCodec> {
        let mut slot = self.exec.lock().unwrap_or_else(|p| p.into_inner());
        match slot.as_ref() {
            Some(c) if c.command() == command => c.clone(),
            _ => {
                // A reload changed the command: the old process is dropped
                // (and killed) once its last in-flight call ends.
                let c = Arc::new(ExecCodec::new(command.to_vec()));
                *slot = Some(c.clone());
                c
            }
        }
    }
}

impl Upstreaming for ConfiguredCodec {
    fn outbound(
        &self,
        config: &Config,
        native: Bytes,
        path_and_query: &str,
        agent: &HeaderMap,
        encoded: bool,
    ) -> Arc<dyn Outbound> {
        let ask = FreshAsk::new(native);
        let codec = if encoded {
            &Codec::Cosy
        } else {
            self.codec(config)
        };
        match codec {
            Codec::Plain => Arc::new(PlainOutbound {
                ask,
                path: path_and_query.to_string(),
                headers: json_post(Bytes::new(), path_and_query, agent).headers,
            }),
            Codec::Exec(command) => Arc::new(ExecOutbound {
                codec: self.exec_for(command),
                ask,
                path: path_and_query.to_string(),
            }),
            Codec::Cosy => Arc::new(CosyOutbound {
                ask,
                path: path_and_query.to_string(),
                signer: cosy::CosyRequest::parse(&headers::for_upstream(agent))
                    .map_err(|e| format!("the request's COSY headers: {e}")),
                stats: self.cosy.clone(),
            }),
        }
    }

    fn sends_as_is(&self, config: &Config, encoded: bool) -> bool {
        !encoded && matches!(self.codec(config), Codec::Plain)
    }

    fn status(&self, config: &Config) -> Value {
        let c = &self.cosy;
        let cosy = json!({
            "signed": c.signed.load(Ordering::Relaxed),
            "refused": c.refused.load(Ordering::Relaxed),
            "lastError": *c.last_error.lock().unwrap_or_else(|p| p.into_inner()),
        });
        let mut v = match self.codec(config) {
            Codec::Exec(command) => self.exec_for(command).status(),
            other => json!({"kind": other.kind()}),
        };
        v["cosy"] = cosy;
        v
    }
}

/// An ask as it goes to each attempt: as the return leg (or the agent)
/// wrote it for the first, with fresh ids for every later one.
struct FreshAsk {
    first: Bytes,
    attempts: AtomicU32,
}

impl FreshAsk {
    fn new(first: Bytes) -> Self {
        FreshAsk {
            first,
            attempts: AtomicU32::new(0),
        }
    }

    fn for_attempt(&self) -> Result<Bytes, Failure> {
        if self.attempts.fetch_add(1, Ordering::Relaxed) == 0 {
            return Ok(self.first.clone());
        }
        ask::with_fresh_ids(&self.first)
            .map(Bytes::from)
            .map_err(|e| Failure::new(FailureCode::Codec, e.to_string()))
    }
}

/// The ask JSON as is, with the agent's headers.
struct PlainOutbound {
    ask: FreshAsk,
    path: String,
    headers: HeaderMap,
}

impl Outbound for PlainOutbound {
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a> {
        Box::pin(async move {
            let body = self.ask.for_attempt()?;
            post(route, &self.path, self.headers.clone(), body)
        })
    }
}

/// The ask in qoder's body encoding, signed anew by the published COSY
/// rule: fresh payload `requestId`, the current `Cosy-Date`.
struct CosyOutbound {
    ask: FreshAsk,
    path: String,
    signer: Result<cosy::CosyRequest, String>,
    stats: Arc<CosyStats>,
}

impl CosyOutbound {
    fn refuse(&self, why: String) -> Failure {
        self.stats.refused.fetch_add(1, Ordering::Relaxed);
        *self
            .stats
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
        Failure::new(FailureCode::Codec, why)
    }
}

impl Outbound for CosyOutbound {
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a> {
        Box::pin(async move {
            let signer = self.signer.as_ref().map_err(|e| self.refuse(e.clone()))?;
            let body = codec::encode_body(&self.ask.for_attempt()?);
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut headers = signer
                .headers_for(&body, &self.path, now, &ask::fresh_uuid())
                .map_err(|e| self.refuse(format!("cannot sign the request: {e}")))?;
            headers.remove(header::CONTENT_LENGTH);
            self.stats.signed.fetch_add(1, Ordering::Relaxed);
            post(route, &self.path, headers, Bytes::from(body))
        })
    }
}

/// A POST of `body` to the route's base URL + `path`.
fn post(
    route: &Route,
    path: &str,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Request<Bytes>, Failure> {
    let uri = format!("{}{path}", route.url);
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(&uri)
        .body(body)
        .map_err(|e| {
            Failure::new(
                FailureCode::Unsupported,
                format!("bad upstream URL {uri}: {e}"),
            )
        })?;
    *req.headers_mut() = headers;
    Ok(req)
}

/// One rebuilt ask, encoded by the co-process afresh for every attempt.
struct ExecOutbound {
    codec: Arc<ExecCodec>,
    ask: FreshAsk,
    path: String,
}

impl Outbound for ExecOutbound {
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a> {
        Box::pin(async move {
            let ask: Value = serde_json::from_slice(&self.ask.for_attempt()?).map_err(|e| {
                Failure::new(FailureCode::Codec, format!("the ask is not JSON: {e}"))
            })?;
            let encoded = self
                .codec
                .encode(&ask, route, &self.path)
                .await
                .map_err(|e| Failure::new(FailureCode::Codec, e))?;
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(&encoded.url)
                .body(encoded.body)
                .map_err(|e| {
                    Failure::new(
                        FailureCode::Codec,
                        format!("codec url {:?}: {e}", encoded.url),
                    )
                })?;
            *req.headers_mut() = encoded.headers;
            Ok(req)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(codec: &str) -> Config {
        Config::from_toml(&format!(
            "[shims.qoder]\n{codec}\n[[shims.qoder.routes]]\nname = \"q\"\nurl = \"http://127.0.0.1:1\"\n"
        ))
        .unwrap()
    }

    #[tokio::test]
    async fn every_attempt_of_a_fresh_id_wire_has_its_own_id_in_header_and_body() {
        use shimgate_shim_api::Shim as _;
        let shim = shimgate_shim_qoder_model::QoderModelShim;
        let fresh = FreshIds::new(
            "x-request-id",
            Arc::new(move |b: &[u8], id: &str| shim.stamp_attempt(b, id)),
        );
        let mut agent = HeaderMap::new();
        agent.insert("x-request-id", HeaderValue::from_static("agent-1"));
        agent.insert("authorization", HeaderValue::from_static("Bearer tok"));
        let body = Bytes::from_static(
            br#"{"messages":[],"metadata":{"context":{"request_id":"agent-1"}}}"#,
        );
        let config = config("");
        let out = fresh.outbound(&config, body, "/model/v1/chat/completions", &agent, false);
        let route = config.shim("qoder").unwrap().routes[0].clone();
        let mut ids = Vec::new();
        for _ in 0..3 {
            let req = out.request(&route).await.unwrap();
            let id = req.headers()["x-request-id"].to_str().unwrap().to_owned();
            let v: Value = serde_json::from_slice(req.body()).unwrap();
            assert_eq!(v["metadata"]["context"]["request_id"], id.as_str());
            assert_eq!(
                req.headers()["authorization"],
                "Bearer tok",
                "passed on untouched"
            );
            assert_eq!(req.uri().path(), "/model/v1/chat/completions");
            ids.push(id);
        }
        assert!(!ids.contains(&"agent-1".to_owned()));
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 3, "a fresh id every attempt");
        let plain = fresh.outbound(
            &config,
            Bytes::from_static(b"not json"),
            "/x",
            &agent,
            false,
        );
        let req = plain.request(&route).await.unwrap();
        assert_eq!(
            &req.body()[..],
            b"not json",
            "a body it cannot stamp goes as it came"
        );
        assert_ne!(req.headers()["x-request-id"], "agent-1");
    }

    #[test]
    fn only_a_body_sent_as_it_came_may_go_up_before_it_is_read() {
        let qoder = ConfiguredCodec::new("qoder");
        assert!(qoder.sends_as_is(&config(""), false), "plain by default");
        assert!(qoder.sends_as_is(&config("codec = \"plain\""), false));
        assert!(!qoder.sends_as_is(&config(""), true), "encoded: cosy");
        assert!(!qoder.sends_as_is(&config("codec = \"cosy\""), false));
        let exec = "codec = \"exec\"\ncodec_command = [\"cat\"]";
        assert!(!qoder.sends_as_is(&config(exec), false));
        assert!(DirectJson.sends_as_is(&config(""), false));
    }
}

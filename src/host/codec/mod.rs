//! How a shim's native request becomes an upstream request: trae sends the
//! restored body with the agent's own headers; qoder runs the rebuilt ask
//! through its codec (`plain`: the JSON as is; `exec`: the co-process).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Method, Request};
use http_body_util::Full;
use serde_json::{json, Value};
use shimgate_shim_api::{Failure, FailureCode};

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
    ) -> Arc<dyn Outbound>;

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
    ) -> Arc<dyn Outbound> {
        Arc::new(json_post(native, path_and_query, agent))
    }

    fn status(&self, _: &Config) -> Value {
        Value::Null
    }
}

/// The codec `[shims.NAME] codec` names (for shims with `Shim::CODEC`,
/// i.e. qoder).
pub struct ConfiguredCodec {
    shim: &'static str,
    exec: Mutex<Option<Arc<ExecCodec>>>,
}

impl ConfiguredCodec {
    /// The codec of the shim called `shim`.
    pub fn new(shim: &'static str) -> Self {
        ConfiguredCodec {
            shim,
            exec: Mutex::default(),
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
    ) -> Arc<dyn Outbound> {
        match self.codec(config) {
            Codec::Plain => Arc::new(json_post(native, path_and_query, agent)),
            Codec::Exec(command) => Arc::new(ExecOutbound {
                codec: self.exec_for(command),
                ask: serde_json::from_slice(&native).unwrap_or(Value::Null),
                path: path_and_query.to_string(),
            }),
        }
    }

    fn status(&self, config: &Config) -> Value {
        match self.codec(config) {
            Codec::Plain => json!({"kind": "plain"}),
            Codec::Exec(command) => self.exec_for(command).status(),
        }
    }
}

/// One rebuilt ask, encoded by the co-process afresh for every attempt.
struct ExecOutbound {
    codec: Arc<ExecCodec>,
    ask: Value,
    path: String,
}

impl Outbound for ExecOutbound {
    fn request<'a>(&'a self, route: &'a Route) -> OutboundFuture<'a> {
        Box::pin(async move {
            let encoded = self
                .codec
                .encode(&self.ask, route, &self.path)
                .await
                .map_err(|e| Failure::new(FailureCode::Codec, e))?;
            let mut req = Request::builder()
                .method(Method::POST)
                .uri(&encoded.url)
                .body(Full::new(encoded.body))
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

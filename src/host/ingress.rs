//! The ingress: takes the agent's inference call over, folds it to OpenAI,
//! remembers the original under a fresh rid, and sends it to the
//! compression proxy at `{compressor}/{shim}/{rid}/chat/completions`.
//!
//! When the proxy is not configured, unreachable, or fails before the return
//! leg saw the rid, the original request goes upstream directly (`fallback`).
//! Once the return leg has the rid, its answer — success or error — is what
//! the agent gets: one request is never sent upstream twice.

use std::any::Any;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{HeaderMap, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use shimgate_shim_api::{OpenAiBody, Shim};
use tracing::{info_span, warn, Instrument};

use super::openai_error;
use super::proxy_answer::{self, Answer, Verdict};
use super::translators::Counting;
use super::while_waiting::while_waiting;
use super::{Host, RID_HEADER, RID_QUERY};
use crate::app::ledger::call::Turn;
use crate::app::rid::{RidEntry, RidRegistry};
use crate::app::stats::Counter;
use crate::app::{App, Live};
use crate::chain::is_housekeeping;
use crate::chain::{self, CallSpec, ChainResponse, TranslatorFactory};
use crate::config::Config;
use crate::http::body::ErrorCode;
use crate::http::body::{self, Body, BoxError, ChannelBody};
use crate::http::client::UpstreamBody;
use crate::http::headers::{self, Secrets};
use crate::http::read::{content_length, read_body, MAX_BODY_KEY};

/// Agent headers passed on to the proxy: only ones that help it keep a
/// session together (its conversation headers, unchanged). Credentials stay
/// with shimgate (the return leg adds them back from the rid entry); in
/// their place the proxy gets the agent's stable proxy identity as
/// `Authorization` (its session key; [`crate::app::identity`]), and the rid in
/// [`RID_HEADER`] (the path carries it too).
fn forwarded_to_proxy(agent: &HeaderMap, rid: &str, identity: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in agent {
        let n = name.as_str();
        if n == "user-agent" || (n.contains("session") && !n.contains("token")) {
            h.append(name.clone(), value.clone());
        }
    }
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    if let Ok(v) = HeaderValue::from_str(rid) {
        h.insert(RID_HEADER, v);
    }
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {identity}")) {
        h.insert(header::AUTHORIZATION, v);
    }
    h
}

/// The URL the ingress posts to: `{compressor}/{shim}/{rid}/chat/completions`,
/// or, for a proxy that only compresses one fixed path (a compressor URL
/// that already ends in `/chat/completions`, e.g. context-guardian's
/// `/v1/chat/completions`), that URL with the rid as a query parameter.
pub fn proxy_url(compressor: &str, shim: &str, rid: &str) -> String {
    if compressor.ends_with("/chat/completions") {
        format!("{compressor}?{RID_QUERY}={rid}")
    } else {
        format!("{compressor}/{shim}/{rid}/chat/completions")
    }
}

pub(super) async fn handle<S: Shim>(
    host: Arc<Host<S>>,
    app: Arc<App>,
    req: Request<Incoming>,
) -> Response<Body> {
    let received = std::time::Instant::now();
    let name = host.shim.name();
    let span = info_span!("ingress", shim = name, rid = tracing::field::Empty);
    async move {
        let stats = app.shim_stats(name);
        let mut live = app.live();
        if let Some(super::RunsOn(config)) = req.extensions().get() {
            live = Arc::new(Live {
                config: config.clone(),
                client: live.client.clone(),
                env: live.env.clone(),
            });
        }
        let declared = content_length(&req);
        let (parts, incoming) = req.into_parts();
        let native = match read_body(incoming, declared, live.config.max_body_bytes).await {
            Ok(b) => b,
            Err(e) => return e.into_response_of(Some(MAX_BODY_KEY)),
        };
        stats.touch();
        stats.bump(Counter::Intercepted);
        let path_and_query = parts
            .uri
            .path_and_query()
            .map_or_else(|| "/".to_string(), |p| p.as_str().to_string());
        // A body in a transport encoding (qoder's Encode=1) is read decoded.
        let (native, encoded) = match host.shim.decode(&path_and_query, &native) {
            Ok(None) => (native, None),
            Ok(Some(decoded)) => (Bytes::from(decoded), Some(native)),
            Err(e) => {
                let why = format!("the ingress could not read the request ({e})");
                return Box::pin(untouched(&host, &app, parts, native, received, why)).await;
            }
        };
        let conversation = super::conversation_of(&host.shim, &parts.headers, &native);
        let Some(compressor) = live.config.compressor_for(name).map(str::to_owned) else {
            // Direct mode: no proxy configured, so nothing failed. No proxy
            // will read a fold, so when the agent's bytes go up as they are,
            // what the answer's translators need is read while the request
            // is upstream, not before it leaves. A body the codec encodes,
            // signs or hands to a co-process (qoder's encoded wire, the
            // `cosy` and `exec` codecs) is read first: only a readable one
            // may go that way, and one that is not goes up untouched, in its
            // own encoding.
            let reading = if host.upstream.sends_as_is(&live.config, encoded.is_some()) {
                Reading::later(native.clone())
            } else {
                match host.shim.shape(&native) {
                    Ok((shape, original)) => Reading::known(shape, Arc::new(original)),
                    Err(e) => {
                        let why = format!("the ingress could not fold the request ({e})");
                        let body = encoded.unwrap_or(native);
                        return Box::pin(untouched(&host, &app, parts, body, received, why)).await;
                    }
                }
            };
            stats.bump(Counter::Fallback);
            host.set_effective(false);
            let reading = Arc::new(reading);
            let agent = Agent {
                native,
                encoded: encoded.is_some(),
                path_and_query,
                headers: Arc::new(parts.headers),
                received,
                conversation,
            };
            return direct(&host, &app, &live.config, reading, agent, None).await;
        };
        let folded = match host.shim.fold(&native) {
            Ok(f) => f,
            Err(e) => {
                let why = format!("the ingress could not fold the request ({e})");
                let body = encoded.unwrap_or(native);
                return Box::pin(untouched(&host, &app, parts, body, received, why)).await;
            }
        };
        // Kept under the rid (up to 120 s) and for the whole answer: in
        // bytes of their own, not as slices of the connection's read
        // buffer, which they would pin for as long (hyper then reads into a
        // second one).
        let agent = Agent {
            native: Bytes::copy_from_slice(&native),
            encoded: encoded.is_some(),
            path_and_query,
            headers: Arc::new(headers::owned(&parts.headers)),
            received,
            conversation,
        };
        let taken = Intercepted {
            original: Arc::new(folded.original),
            openai: Arc::new(folded.openai),
            agent,
        };
        // Boxed, as the fallbacks above: the direct path's handler is then
        // not sized (allocated and copied on every call) for the proxy's.
        Box::pin(via_proxy(&host, &app, &live, &compressor, taken)).await
    }
    .instrument(span)
    .await
}

/// Sends the folded request to the compression proxy under a fresh rid and
/// relays its answer; falls back to [`direct`] when the proxy fails before
/// the return leg saw the rid.
async fn via_proxy<S: Shim>(
    host: &Arc<Host<S>>,
    app: &Arc<App>,
    live: &Live,
    compressor: &str,
    taken: Intercepted<S>,
) -> Response<Body> {
    let name = host.shim.name();
    let stats = app.shim_stats(name);
    let config = &live.config;
    let rid = RidRegistry::new_rid();
    tracing::Span::current().record("rid", rid.as_str());
    let identity = app
        .identity
        .of(name, host.shim.identity_headers(), &taken.agent.headers);
    let original: Arc<dyn Any + Send + Sync> = taken.original.clone();
    let mut entry = RidEntry::new(
        rid.clone(),
        name,
        &original,
        taken.agent.native.clone(),
        taken.agent.headers.clone(),
        taken.agent.path_and_query.clone(),
        &taken.openai,
        identity.clone(),
        taken.agent.encoded,
    );
    entry.conversation = taken.agent.conversation.clone();
    if !Arc::ptr_eq(config, &app.config()) {
        entry.config = Some(config.clone());
    }
    let entry = app.rids.insert(entry);
    // The savings ledger follows the call until the agent has its answer.
    let turn = app
        .ledger
        .open_turn(config, &rid, name, &taken.agent.conversation);
    let url = proxy_url(compressor, name, &rid);
    // The shim wrote the body as text: sent as it is.
    let body = taken.openai.bytes();
    let attempt = match Request::post(&url).body(body) {
        Ok(mut r) => {
            *r.headers_mut() = forwarded_to_proxy(&taken.agent.headers, &rid, &identity);
            // The proxy must reach the return leg within the first-byte
            // timeout. Once it has, the answer comes from our own chain,
            // which holds the head until content and may be retrying or
            // honouring a Retry-After: wait for it with no further limit
            // (the chain's own timeouts bound it).
            let wait = config.timeouts.first_byte;
            let answer = live.client.request(r);
            tokio::pin!(answer);
            match tokio::time::timeout(wait, &mut answer).await {
                Ok(r) => r.map_err(|e| crate::http::error_chain(&e)),
                Err(_) if entry.reached() => answer.await.map_err(|e| crate::http::error_chain(&e)),
                Err(_) => Err(format!("no answer within {} ms", wait.as_millis())),
            }
        }
        Err(e) => Err(format!("bad compressor URL {url}: {e}")),
    };
    match proxy_answer::judge(attempt, &entry, config.timeouts.first_byte).await {
        Verdict::Usable(answer) => {
            host.set_effective(true);
            let pin = Pin { entry, _turn: turn };
            relay(host, app, config, &taken.original, answer, Some(pin)).await
        }
        Verdict::Failed { why, answer } => {
            if entry.abandon() {
                stats.bump(Counter::Fallback);
                host.set_effective(false);
                let why =
                    format!("{why} before the return leg saw rid {rid}; sent upstream directly");
                warn!("{why}");
                stats.error(why);
                let shape = taken.openai.answer_shape();
                let reading = Arc::new(Reading::known(shape, taken.original));
                return direct(host, app, config, reading, taken.agent, Some(turn)).await;
            }
            // The return leg took the request meanwhile: its answer, through
            // the proxy, is the agent's.
            host.set_effective(true);
            match answer {
                Some(answer) => {
                    let pin = Pin { entry, _turn: turn };
                    relay(host, app, config, &taken.original, answer, Some(pin)).await
                }
                None => {
                    stats.error(format!("{why} after the return leg took rid {rid}"));
                    body::error_response(ErrorCode::CompressorFailed, &why)
                }
            }
        }
    }
}

/// An error status from the proxy: the return leg's own error (it carries,
/// in `error.native`, what the agent would have got directly) is given to
/// the agent in its own wire; anything else passes on unchanged.
async fn proxy_error<S: Shim>(
    host: &Arc<Host<S>>,
    app: &Arc<App>,
    parts: http::response::Parts,
    incoming: UpstreamBody,
) -> Response<Body> {
    let limited = http_body_util::Limited::new(incoming, openai_error::MAX_ERROR_BODY);
    let bytes = match limited.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            return body::error_response(
                ErrorCode::CompressorFailed,
                &format!("the compression proxy's error answer broke off: {e}"),
            )
        }
    };
    if let Some(answer) = openai_error::agent_answer(&bytes) {
        let what = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or_default();
        app.shim_stats(host.shim.name()).error(format!(
            "the upstream refused the request before any content ({} through the proxy): {what}",
            parts.status
        ));
        return answer;
    }
    let mut headers = parts.headers;
    headers::strip_hop_by_hop(&mut headers);
    headers.remove(header::CONTENT_LENGTH);
    let mut out = Response::new(body::full(bytes));
    *out.status_mut() = parts.status;
    *out.headers_mut() = headers;
    out
}

/// What the agent's answer keeps alive while it streams: the rid (the
/// proxy may still call the return leg, its own tool loop) and the
/// ledger's turn (booked once the answer is over).
struct Pin {
    entry: Arc<RidEntry>,
    /// Held, never read: it books when the last holder lets go.
    _turn: Arc<Turn>,
}

/// Passes the proxy's answer to the agent: SSE through the shim's ingress
/// translator, anything else unchanged.
async fn relay<S: Shim>(
    host: &Arc<Host<S>>,
    app: &Arc<App>,
    config: &Config,
    original: &Arc<S::Original>,
    answer: Answer,
    pin: Option<Pin>,
) -> Response<Body> {
    let Answer {
        parts,
        read,
        body: incoming,
    } = answer;
    if !parts.status.is_success() {
        return proxy_error(host, app, parts, incoming).await;
    }
    if !proxy_answer::is_sse(&parts.headers) {
        let mut headers = parts.headers;
        headers::strip_hop_by_hop(&mut headers);
        let mut out = Response::new(incoming.map_err(|e| Box::new(e) as BoxError).boxed());
        *out.status_mut() = parts.status;
        *out.headers_mut() = headers;
        return out;
    }
    let translator = Box::new(Counting::new(
        host.shim.ingress(original),
        host.rebuild.clone(),
    ));
    let entry_answered = pin.as_ref().and_then(|p| p.entry.answered());
    let (tx, mut body) = ChannelBody::channel();
    let ctx = app.chain_ctx();
    let idle = config.timeouts.idle;
    let stats = app.shim_stats(host.shim.name());
    // Run by the agent's body itself, in its connection's task: no hand-off
    // between tasks per relayed chunk.
    body.fed_by(Box::pin(async move {
        // While the answer streams, the proxy may still call the return
        // leg (its own tool loop): keep the rid alive until the end, and
        // the ledger's turn with it.
        let _pin = pin;
        let _streaming = ctx.state.stream_started();
        if let Err(f) = chain::relay(&ctx, idle, (read, incoming), translator, &tx).await {
            if f.code != shimgate_shim_api::FailureCode::Aborted {
                stats.error(format!(
                    "the answer from the compression proxy broke off: {f}"
                ));
            }
        }
    }));
    let mut out = Response::new(body::streaming(body));
    *out.headers_mut() = chain::sse_headers("");
    out.headers_mut().remove(chain::ROUTE_HEADER);
    name_the_route(out.headers_mut(), entry_answered);
    out
}

/// The route that answered the return leg (and the one it switched
/// from), in the agent's answer head as a direct answer names them.
fn name_the_route(headers: &mut HeaderMap, answered: Option<(String, Option<String>)>) {
    let Some((route, from)) = answered else {
        return;
    };
    if let Ok(v) = HeaderValue::from_str(&route) {
        headers.insert(chain::ROUTE_HEADER, v);
    }
    if let Some(v) = from.and_then(|f| HeaderValue::from_str(&f).ok()) {
        headers.insert(chain::SWITCHED_FROM_HEADER, v);
    }
}

/// Sends the agent's request upstream through the chain as it came, the
/// answer translated once so the agent gets what the proxy path would
/// give. The request is read ([`Reading`]) while it is upstream, if it was
/// not already. The savings ledger books it as its own call (`turn`: the
/// one the proxy path had opened, when it fell back).
async fn direct<S: Shim>(
    host: &Arc<Host<S>>,
    app: &Arc<App>,
    config: &Arc<Config>,
    reading: Arc<Reading<S>>,
    agent: Agent,
    turn: Option<Arc<Turn>>,
) -> Response<Body> {
    let name = host.shim.name();
    let housekeeping = is_housekeeping(&agent.native);
    let secrets = Secrets::of(agent.headers.clone());
    let turn = turn.unwrap_or_else(|| app.ledger.direct_turn(config, name, &agent.conversation));
    let post = turn.post(false, 0);
    let native = agent.native.clone();
    let outbound = host.upstream.outbound(
        config,
        agent.native,
        &agent.path_and_query,
        &agent.headers,
        agent.encoded,
    );
    let (h, a, r, p) = (host.clone(), app.clone(), reading.clone(), post.clone());
    let factory: TranslatorFactory = Arc::new(move || {
        let (shape, original) = r.get(&h, &a)?;
        Some(p.tap(h.agent_translator(shape, original)))
    });
    let mut spec = CallSpec::new(config, name, "fallback", outbound, agent.received);
    spec.translator = Some(factory);
    spec.error_codes = Some(host.error_codes());
    spec.last_http_error = S::AGENT_READS_HTTP_ERRORS;
    spec.housekeeping = housekeeping;
    spec.secrets = secrets;
    spec.conversation = agent.conversation;
    let ctx = app.chain_ctx();
    let call = chain::call(&ctx, spec);
    let resp = while_waiting(call, || {
        reading.get(host, app);
        // Sent as the agent sent it: its size matters only for an answer
        // that reports no usage.
        post.measured(false, shimgate_shim_api::translate::chars(&native));
    })
    .await;
    match &resp {
        ChainResponse::Failed(e) => app.shim_stats(name).error(e.message()),
        ChainResponse::Stream { .. } => post.answered(),
        _ => {}
    }
    resp.into_response()
}

/// What the answer's translators need of a request: the [`Shim::shape`]
/// of it (its answer shape, and the original the ingress translator gets),
/// read once. A fold already has it, and so does a body the codec does not
/// send as it came ([`super::codec::Upstreaming::sends_as_is`]); in direct
/// mode any other is read while the request is upstream. One the shim
/// cannot read then has gone upstream as the agent sent it, so its answer
/// passes as the upstream sent it, and the reason is the shim's
/// `lastError`.
struct Reading<S: Shim> {
    /// The body to read, when it is not read yet.
    native: Bytes,
    read: OnceLock<Option<(Value, Arc<S::Original>)>>,
}

impl<S: Shim> Reading<S> {
    fn known(shape: Value, original: Arc<S::Original>) -> Self {
        Reading {
            native: Bytes::new(),
            read: OnceLock::from(Some((shape, original))),
        }
    }

    fn later(native: Bytes) -> Self {
        Reading {
            native,
            read: OnceLock::new(),
        }
    }

    /// The shape and the original, read on the first call; `None` when
    /// the shim cannot read the request.
    fn get(&self, host: &Host<S>, app: &App) -> Option<(&Value, &S::Original)> {
        let read = self
            .read
            .get_or_init(|| match host.shim.shape(&self.native) {
                Ok((shape, original)) => Some((shape, Arc::new(original))),
                Err(e) => {
                    let why = format!(
                        "the ingress could not fold the request ({e}): it went upstream as sent, \
                     and its answer passed through untouched"
                    );
                    warn!("{why}");
                    app.shim_stats(host.shim.name()).error(why);
                    None
                }
            });
        read.as_ref().map(|(shape, original)| (shape, &**original))
    }
}

/// An intercepted request, folded for the proxy.
struct Intercepted<S: Shim> {
    original: Arc<S::Original>,
    openai: Arc<OpenAiBody>,
    agent: Agent,
}

/// The request as the agent sent it, as the direct path needs it.
struct Agent {
    /// The body as fold read it (decoded, when it came encoded).
    native: Bytes,
    /// It came in a transport encoding: the codec encodes it again.
    encoded: bool,
    path_and_query: String,
    /// Shared with the rid entry and the call's [`Secrets`].
    headers: Arc<HeaderMap>,
    received: std::time::Instant,
    /// Its conversation id ([`super::conversation_of`]).
    conversation: String,
}

/// A request the shim cannot read goes upstream byte for byte: counted as
/// a fallback, `why` in `lastError`.
async fn untouched<S: Shim>(
    host: &Host<S>,
    app: &Arc<App>,
    parts: http::request::Parts,
    native: Bytes,
    received: std::time::Instant,
    why: String,
) -> Response<Body> {
    let name = host.shim.name();
    let stats = app.shim_stats(name);
    stats.bump(Counter::Fallback);
    host.set_effective(false);
    let why = format!("{why}: passed through untouched");
    warn!("{why}");
    stats.error(why);
    crate::host::passthrough::forward_raw(app, name, "fallback", parts, native, received).await
}

//! The return leg: `POST /{shim}/{rid}/chat/completions` from the
//! compression proxy. It compares the body with what the ingress sent
//! (exchange accounting), restores the native request on the original,
//! sends it upstream through the chain, and streams the answer back as bare
//! OpenAI frames (or one aggregated `chat.completion` for `stream: false`).

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
#[cfg(test)]
use serde_json::Value;
use shimgate_shim_api::sse::SseParser;
use shimgate_shim_api::{OpenAiBody, Shim};
use tracing::{info_span, warn, Instrument};

use super::aggregate::Aggregate;
use super::openai_error::{self, ErrorContext};
use super::while_waiting::while_waiting;
use super::Host;
use crate::app::exchange;
use crate::app::ledger::call::{prompt_chars, Post};
use crate::app::rid::RidEntry;
use crate::app::stats::Counter;
use crate::app::App;
use crate::chain::is_housekeeping;
use crate::chain::{self, CallSpec, ChainResponse, TranslatorFactory};
use crate::http::body::ErrorCode;
use crate::http::body::{self, Body};
use crate::http::headers::Secrets;
use crate::http::read::{content_length, linger, read_body};

/// Whether a return-leg body is a side request: not streamed, or a tiny
/// `max_tokens` (bili leaves those alone: titles and the like). Side
/// requests are counted apart so `folded` stays the proof of compressing
/// the agent's own turns. (The runtime reads it off the text:
/// `is_side_request_text`.)
#[cfg(test)]
pub fn is_side_request(body: &Value) -> bool {
    let streamed = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    !streamed || shimgate_shim_api::openai::is_tiny(body)
}

/// [`is_side_request`] of a body's text, read member by member.
fn is_side_request_text(body: &OpenAiBody) -> bool {
    !streamed(body)
        || ["max_tokens", "max_completion_tokens"].iter().any(|k| {
            body.get(k)
                .and_then(|v| v.as_u64())
                .is_some_and(|n| n <= shimgate_shim_api::openai::SIDE_REQUEST_MAX_TOKENS)
        })
}

/// The body's `stream` (absent: not streamed).
fn streamed(body: &OpenAiBody) -> bool {
    body.get("stream")
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

/// How the return leg's 413 names its bound ([`return_leg_limit`]).
const RETURN_LEG_BOUND: &str = "limits.max_body_bytes + 4 MiB + an eighth, what a proxy may add";

/// What a proxy may add to a body that was within `limits.max_body_bytes`
/// when the ingress took it: billion-context adds a ~8 KB system prompt, its
/// tools, a nudge of up to ~9 KB and a tag to every message; 4 MiB plus an
/// eighth of the limit covers that with room to spare, so a request the
/// ingress accepted is never refused on its way back.
pub fn return_leg_limit(max_body_bytes: u64) -> u64 {
    max_body_bytes
        .saturating_add(4 * 1024 * 1024)
        .saturating_add(max_body_bytes / 8)
}

fn gone(rid: &str, why: &str) -> Response<Body> {
    body::error_response(ErrorCode::RidGone,
        &format!("rid {rid} {why} (entries live 120 s, the newest 256 are kept); the ingress answers the agent directly"),
    )
}

pub(super) async fn handle<S: Shim>(
    host: Arc<Host<S>>,
    app: Arc<App>,
    rid: String,
    req: Request<Incoming>,
) -> Response<Body> {
    let received = std::time::Instant::now();
    let name = host.shim.name();
    let span = info_span!("return_leg", shim = name, rid = %rid);
    async move {
        app.shim_stats(name).touch();
        let taken = match take(&host, &app, &rid, req).await {
            Ok(t) => t,
            Err(refused) => return refused,
        };
        // The accounting waits until the request is upstream: it is not
        // on the way to the first token, and it is done before the answer
        // goes back (so `/status` has it when the agent has the answer).
        let forwarded = forward(&host, &app, &taken, received);
        while_waiting(forwarded, || {
            account(&host, &app, &rid, &taken);
            measure(&host, &taken);
        })
        .await
    }
    .instrument(span)
    .await
}

/// A return-leg request the rid registry knows, read and parsed.
struct Taken<S: Shim> {
    entry: Arc<RidEntry>,
    original: Arc<S::Original>,
    /// The body as the proxy sent it (checked; read where needed).
    openai: OpenAiBody,
    config: Arc<crate::config::Config>,
    /// The savings ledger's record of this request.
    post: Arc<Post>,
}

/// Claims the rid and reads the proxy's body, or the answer refusing it
/// (405, 410, 413, 400 with the reason).
async fn take<S: Shim>(
    host: &Arc<Host<S>>,
    app: &Arc<App>,
    rid: &str,
    req: Request<Incoming>,
) -> Result<Taken<S>, Response<Body>> {
    let name = host.shim.name();
    // A refusal before the body is read lets the client finish sending it
    // (read and dropped, bounded), so the answer reaches it.
    if req.method() != Method::POST {
        linger(req.into_body());
        return Err(body::error_response(
            ErrorCode::MethodNotAllowed,
            "the return leg takes POST",
        ));
    }
    let Some(entry) = app.rids.get(rid).filter(|e| e.shim == name) else {
        linger(req.into_body());
        return Err(gone(rid, "is unknown or expired"));
    };
    // The ingress's parsed copy while it is alive, else parse again.
    let kept = entry
        .original
        .upgrade()
        .and_then(|o| o.downcast::<S::Original>().ok());
    let original = match kept {
        Some(o) => o,
        None => match host.shim.fold(&entry.native) {
            Ok(f) => Arc::new(f.original),
            Err(_) => {
                linger(req.into_body());
                return Err(gone(rid, "no longer parses"));
            }
        },
    };
    if !entry.claim() {
        linger(req.into_body());
        return Err(gone(
            rid,
            "was already answered directly because the proxy failed first",
        ));
    }
    // A captured call runs on the config it came with (its route to the
    // host its client asked for).
    let config = entry.config.clone().unwrap_or_else(|| app.config());
    let declared = content_length(&req);
    let limit = return_leg_limit(config.max_body_bytes);
    let bytes = read_body(req.into_body(), declared, limit)
        .await
        .map_err(|e| e.into_response_of(Some(RETURN_LEG_BOUND)))?;
    // Parsed whole where restore rewrites the body from its parse, else
    // only checked (restore reads the members it takes).
    let openai = if host.shim.restore_reads_whole(&original) {
        OpenAiBody::parse_whole(bytes)
    } else {
        OpenAiBody::parse(bytes)
    }
    .map_err(|e| body::error_response(ErrorCode::BadRequest, &e.0))?;
    let side = is_side_request_text(&openai);
    let post = app
        .ledger
        .post(&config, rid, (name, &entry.conversation), side);
    Ok(Taken {
        entry,
        original,
        openai,
        config,
        post,
    })
}

/// Counts what the proxy did to the request: its body against
/// the one the ingress sent (the ingress's copy while it is alive, else
/// folded again from the native body).
fn account<S: Shim>(host: &Host<S>, app: &App, rid: &str, t: &Taken<S>) {
    let stats = app.shim_stats(host.shim.name());
    if is_side_request_text(&t.openai) {
        stats.bump(Counter::SideRequests);
        return;
    }
    let before = match t.entry.sent.upgrade() {
        Some(sent) => exchange::summarize_text(&sent),
        None => match host.shim.fold(&t.entry.native) {
            Ok(f) => exchange::summarize_text(&f.openai),
            Err(_) => return,
        },
    };
    let ex = exchange::compare(rid, &before, &exchange::summarize_text(&t.openai));
    if ex.changed {
        stats.bump(Counter::Compacted);
        if ex.content_shrank() {
            stats.bump(Counter::Folded);
            stats.saved((ex.before_content - ex.after_content) as u64);
        }
    }
    host.exchanges().push(ex);
}

/// The savings ledger's measures of the request, taken while it is
/// upstream: its size, whether it is the compressor's own (a side request
/// by its shape, when the agent's own request was not one: an agent that
/// asks for a short title itself is answered, not charged), and, once per
/// call, the size of the agent's request.
fn measure<S: Shim>(host: &Host<S>, t: &Taken<S>) {
    let sent = t.entry.sent.upgrade();
    let agent_side = sent.as_deref().is_some_and(is_side_request_text);
    t.post.measured(
        is_side_request_text(&t.openai) && !agent_side,
        prompt_chars(&t.openai),
    );
    t.post.agent_chars(|| match &sent {
        Some(s) => Some(prompt_chars(s)),
        None => host
            .shim
            .fold(&t.entry.native)
            .ok()
            .map(|f| prompt_chars(&f.openai)),
    });
}

/// Restores the native request, sends it upstream through the chain and
/// answers the proxy: the stream, one aggregated completion for `stream:
/// false`, or an OpenAI-shaped error before content.
async fn forward<S: Shim>(
    host: &Arc<Host<S>>,
    app: &Arc<App>,
    t: &Taken<S>,
    received: std::time::Instant,
) -> Response<Body> {
    let name = host.shim.name();
    let stats = app.shim_stats(name);
    let (entry, config) = (&t.entry, &t.config);
    let native = match host.shim.restore(&t.original, &t.openai) {
        Ok(b) => Bytes::from(b),
        Err(e) => {
            let why = format!(
                "the return leg could not restore the request ({e}): sent the original unchanged"
            );
            warn!("{why}");
            stats.error(why);
            entry.native.clone()
        }
    };
    stats.bump(Counter::Forwarded);
    // The proxy's body is read once: the parsed copy says it.
    let housekeeping = chain::is_housekeeping_text(&t.openai) || is_housekeeping(&entry.native);
    let outbound = host.upstream.outbound(
        config,
        native,
        &entry.path_and_query,
        &entry.headers,
        entry.encoded,
    );
    let streamed = streamed(&t.openai);
    // Translators read only these; the messages are not kept for the
    // length of the stream.
    let request = Arc::new(t.openai.answer_shape());
    let (h, shape, post) = (host.clone(), request.clone(), t.post.clone());
    let factory: TranslatorFactory =
        Arc::new(move || Some(post.tap(Box::new(h.shim.return_leg(&shape)))));
    let secrets = Secrets::of(entry.headers.clone());
    let mut spec = CallSpec::new(config, name, "return", outbound, received);
    spec.translator = Some(factory);
    spec.error_codes = Some(host.error_codes());
    spec.last_http_error = S::AGENT_READS_HTTP_ERRORS;
    spec.housekeeping = housekeeping;
    spec.secrets = secrets.clone();
    spec.conversation = entry.conversation.clone();
    let resp = chain::call(&app.chain_ctx(), spec).await;
    if let ChainResponse::Stream {
        route,
        switched_from,
        ..
    } = &resp
    {
        t.post.answered();
        // The agent's answer head names them (a side request, such as a
        // proxy's summary, is not the agent's answer).
        if !is_side_request_text(&t.openai) {
            entry.set_answered(route, switched_from.as_deref());
        }
    }
    match &resp {
        ChainResponse::Failed(e) => stats.error(secrets.scrub(&e.message())),
        ChainResponse::Verbatim {
            failure: Some((f, route)),
            ..
        } => {
            stats.error(secrets.scrub(&format!("{route}: {f}")));
        }
        _ => {}
    }
    if !matches!(resp, ChainResponse::Stream { .. }) {
        // Before content, a failure is an HTTP error the proxy can act on.
        let agent = || host.agent_translator(&request, &t.original);
        let cx = ErrorContext {
            routes: config.shim(name).map_or(&[], |s| s.routes.as_slice()),
            secrets: &secrets,
            agent_translator: &agent,
        };
        return openai_error::for_proxy(resp, &cx);
    }
    if streamed {
        return resp.into_response();
    }
    aggregate(resp).await
}

/// Folds a streamed answer into one `chat.completion` JSON.
async fn aggregate(resp: ChainResponse) -> Response<Body> {
    let mut parser = SseParser::new();
    let mut agg = Aggregate::default();
    let mut feed = |chunk: Bytes| {
        parser.push(chunk);
        while let Ok(Some(ev)) = parser.next_event() {
            agg.event(&ev);
        }
    };
    match resp {
        ChainResponse::Stream { mut body, .. } => {
            while let Some(Ok(chunk)) = body.recv().await {
                feed(chunk);
            }
        }
        other => return other.into_response(),
    }
    if let Some(err) = agg.error() {
        return body::json_response(StatusCode::BAD_GATEWAY, &serde_json::json!({"error": err}));
    }
    body::json_response(StatusCode::OK, &agg.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn side_requests_are_unstreamed_or_tiny() {
        assert!(is_side_request(&json!({"stream": false})));
        assert!(is_side_request(&json!({})));
        assert!(is_side_request(&json!({"stream": true, "max_tokens": 200})));
        assert!(!is_side_request(
            &json!({"stream": true, "max_tokens": 201})
        ));
        assert!(!is_side_request(&json!({"stream": true})));
    }

    #[test]
    fn side_requests_read_off_the_text_as_off_the_parse() {
        for body in [
            json!({"stream": false}),
            json!({}),
            json!({"stream": true, "max_tokens": 200}),
            json!({"stream": true, "max_completion_tokens": 20}),
            json!({"stream": true, "max_tokens": 201}),
            json!({"stream": true}),
            json!({"stream": "yes"}),
        ] {
            let text = OpenAiBody::of_value(&body);
            assert_eq!(
                is_side_request_text(&text),
                is_side_request(&body),
                "{body}"
            );
        }
    }
}

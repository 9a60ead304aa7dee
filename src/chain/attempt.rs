//! One attempt on one route: send, read the head, and either fail (so the
//! chain can retry or switch) or commit at the first content frame and
//! stream the rest.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{self, HeaderValue};
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use shimgate_shim_api::failure::{classify_http, classify_text};
use shimgate_shim_api::sse::SseParser;
use shimgate_shim_api::translate::Meter;
use shimgate_shim_api::{Failure, FailureCode, FrameClass, StreamTranslator};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use super::{policy, BodyTx, CallSpec, ChainCtx};
use crate::config::Route;
use crate::http::client::{ClientError, UpstreamBody};
use crate::http::{error_chain, headers};

/// Frames held back before the first content frame, at most. Role deltas,
/// heartbeats and metadata are tiny; past 1 MiB without content the answer
/// is committed anyway rather than buffered further.
pub const HOLD_LIMIT: usize = 1024 * 1024;

/// An error body is read up to this size to classify it and pass it on.
const ERROR_BODY_LIMIT: usize = 1024 * 1024;

/// An upstream error answer kept whole so it can be passed on verbatim.
pub struct Verbatim {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// The outcome of an attempt before anything reached the client.
// Moved once per attempt; boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum PreCommit {
    /// The answer is committed; stream it with [`stream`].
    Committed(Committed),
    /// The attempt failed; nothing was sent.
    Failed {
        failure: Failure,
        /// The whole upstream error answer, when it was an HTTP error.
        verbatim: Option<Verbatim>,
        /// The translated frames so far, and the upstream's own bytes up to
        /// the error, when it was an in-band error.
        held: Option<InBand>,
        /// Whether the request may have reached the upstream although no
        /// answer came back (a reset or timeout after it was written).
        unsent: bool,
    },
    /// The client went away.
    Aborted,
}

/// An in-band error before content: what the translator wrote and what
/// the upstream sent, up to the error frame.
pub struct InBand {
    pub translated: BytesMut,
    pub native: Bytes,
}

/// A committed answer, ready to stream.
pub struct Committed {
    status: StatusCode,
    headers: HeaderMap,
    mode: Mode,
    /// Time the upstream took from our send to its first content (or head,
    /// for a raw answer): the part of the call that is not our overhead.
    pub upstream_time: Duration,
}

// Boxing the SSE state would cost an allocation per call to save stack
// space in a value that lives once per stream.
#[allow(clippy::large_enum_variant)]
enum Mode {
    Sse {
        held: BytesMut,
        parser: SseParser,
        translator: Box<dyn StreamTranslator>,
        body: UpstreamBody,
    },
    Raw {
        body: UpstreamBody,
    },
}

impl Committed {
    fn sse(
        held: BytesMut,
        parser: SseParser,
        translator: Box<dyn StreamTranslator>,
        body: UpstreamBody,
        upstream_time: Duration,
    ) -> PreCommit {
        PreCommit::Committed(Committed {
            status: StatusCode::OK,
            headers: sse_headers(""),
            mode: Mode::Sse {
                held,
                parser,
                translator,
                body,
            },
            upstream_time,
        })
    }

    /// Puts the frames held back so far (the first content among them) in
    /// the client's body before its head goes out, so hyper writes both at
    /// once instead of waiting for the streaming task's first turn. Left
    /// held (and sent by [`stream`]) when the channel has no room.
    pub fn release_held(&mut self, tx: &BodyTx) {
        if let Mode::Sse { held, .. } = &mut self.mode {
            if held.is_empty() {
                return;
            }
            if let Ok(permit) = tx.try_reserve() {
                permit.send(Ok(held.split().freeze()));
            }
        }
    }

    /// The response head for the client: it names the route that
    /// answered (`x-shimgate-route`) and, after a switch, the first one
    /// tried (`x-shimgate-switched-from`), so a tool beside the agent can
    /// say so.
    pub fn head(&self, route: &str, switched_from: Option<&str>) -> (StatusCode, HeaderMap) {
        let mut h = self.headers.clone();
        if let Ok(v) = HeaderValue::from_str(route) {
            h.insert(ROUTE_HEADER, v);
        }
        if let Some(v) = switched_from.and_then(|f| HeaderValue::from_str(f).ok()) {
            h.insert(SWITCHED_FROM_HEADER, v);
        }
        (self.status, h)
    }
}

/// Streams a whole SSE body through a translator (no holding back: the
/// answer is already committed), starting with the chunks already `read`
/// from it. Used where no failover applies, such as
/// relaying the compression proxy's answer to the agent.
pub async fn relay(
    ctx: &ChainCtx,
    idle: Duration,
    (read, body): (Vec<Bytes>, UpstreamBody),
    translator: Box<dyn StreamTranslator>,
    tx: &BodyTx,
) -> Result<(), Failure> {
    let mut parser = SseParser::new();
    for chunk in read {
        parser.push(chunk);
    }
    let committed = Committed {
        status: StatusCode::OK,
        headers: HeaderMap::new(),
        mode: Mode::Sse {
            held: BytesMut::new(),
            parser,
            translator,
            body,
        },
        upstream_time: Duration::ZERO,
    };
    stream(ctx, idle, committed, tx).await.0
}

/// The answer head's name of the route that answered.
pub const ROUTE_HEADER: &str = "x-shimgate-route";
/// The answer head's name of the first route tried, after a switch.
pub const SWITCHED_FROM_HEADER: &str = "x-shimgate-switched-from";

/// Headers of a translated SSE answer.
pub fn sse_headers(route: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(route) {
        h.insert(ROUTE_HEADER, v);
    }
    h
}

fn failed(failure: Failure) -> PreCommit {
    PreCommit::Failed {
        failure,
        verbatim: None,
        held: None,
        unsent: false,
    }
}

/// A failure before the request left: it surely never reached the upstream.
fn unsent(failure: Failure) -> PreCommit {
    PreCommit::Failed {
        failure,
        verbatim: None,
        held: None,
        unsent: true,
    }
}

/// Sends the request and reads until the answer commits or fails.
pub async fn pre_commit(ctx: &ChainCtx, spec: &CallSpec, route: &Route) -> PreCommit {
    let req = match request(spec, route).await {
        Ok(r) => r,
        Err(f) => return unsent(f),
    };
    let timeouts = spec.timeouts();
    let sent_at = std::time::Instant::now();
    let resp = match tokio::time::timeout(timeouts.first_byte, ctx.client.request(req)).await {
        Err(_) => {
            return failed(Failure::new(
                FailureCode::Timeout,
                format!(
                    "no response head within {} ms",
                    timeouts.first_byte.as_millis()
                ),
            ))
        }
        // A failed connect (or first write) never sent the request.
        Ok(Err(e)) if e.never_sent() => return unsent(client_failure(&e)),
        Ok(Err(e)) => return failed(client_failure(&e)),
        Ok(Ok(r)) => r,
    };
    ctx.state
        .latency
        .first_byte(spec.shim)
        .observe(sent_at.elapsed());
    let (parts, body) = resp.into_parts();
    let translator = spec.translator.as_ref().map(|make| make());
    // A request its caller could not read is a pass-through from here on.
    let unread = matches!(translator, Some(None));
    // A pass-through request gets whatever came back, any status; 3xx is
    // never a failure.
    let judged = !spec.passthrough && !unread && !parts.status.is_redirection();
    let codes = spec.error_codes.as_deref();
    if judged && !parts.status.is_success() {
        return error_answer(parts, body, timeouts.idle, codes).await;
    }
    let is_sse = headers::is_event_stream(&parts.headers);
    match translator.flatten() {
        Some(translator) if is_sse => {
            hold_until_content(translator, body, timeouts.idle, sent_at).await
        }
        // An event stream was asked for: a 2xx without one (a maintenance
        // page, a JSON error) is a failure, not an answer.
        Some(_) if judged => not_a_stream(parts, body, timeouts.idle, codes).await,
        _ => {
            let mut headers = parts.headers;
            headers::strip_hop_by_hop(&mut headers);
            PreCommit::Committed(Committed {
                status: parts.status,
                headers,
                mode: Mode::Raw { body },
                upstream_time: sent_at.elapsed(),
            })
        }
    }
}

/// The attempt's upstream request: the outbound's, with the route's
/// header overrides.
async fn request(spec: &CallSpec, route: &Route) -> Result<Request<Bytes>, Failure> {
    // A proxy setting shimgate cannot speak fails the attempt rather than
    // letting it go direct.
    if let Some(broken) = &route.via.broken {
        return Err(Failure::new(FailureCode::Transport, broken.to_string()));
    }
    let mut req = spec.outbound.request(route).await?;
    if let Some(p) = &route.via.proxy {
        req.extensions_mut()
            .insert(crate::http::client::Through(p.clone()));
    }
    for (name, value) in &route.headers {
        req.headers_mut().insert(name.clone(), value.clone());
    }
    if spec.translator.is_some() {
        // The SSE is parsed here, so it must arrive uncompressed.
        req.headers_mut().insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    Ok(req)
}

/// The shim's business-code reading of an error body, when it has one.
type Codes<'a> = Option<&'a (dyn Fn(u16, &[u8]) -> Option<Failure> + Send + Sync)>;

/// An HTTP error answer, kept whole to be passed on verbatim: classified by
/// the shim's business-code table first (the same as its in-band errors:
/// TRAE `4008` on a 429 is `QUOTA`), then from its status and words.
async fn error_answer(
    parts: http::response::Parts,
    body: UpstreamBody,
    idle: Duration,
    codes: Codes<'_>,
) -> PreCommit {
    let bytes = read_bounded(body, ERROR_BODY_LIMIT, idle).await;
    let text = String::from_utf8_lossy(&bytes);
    let status = parts.status.as_u16();
    let known = codes.and_then(|c| c(status, &bytes));
    let code = known
        .as_ref()
        .map_or_else(|| classify_http(status, &text), |f| f.code);
    let mut failure = Failure::new(code, summary(&text)).with_status(status);
    let (upstream_code, in_body) = known.map_or((None, None), |f| (f.upstream_code, f.retry_after));
    failure.upstream_code = upstream_code;
    failure.retry_after = if code == FailureCode::Quota {
        // The latest reset the headers or the body state (capped later:
        // `rest::quota_rest`).
        let body = policy::body_reset(&text, std::time::SystemTime::now()).max(in_body);
        let (reset, source) = match (policy::stated_reset(&parts.headers), body) {
            (Some(h), Some(b)) if b > h => (Some(b), "a reset in the body"),
            (Some(h), _) => (Some(h), "Retry-After / x-ratelimit-reset"),
            (None, b) => (b, "a reset in the body"),
        };
        failure.stated_by = reset.map(|_| source);
        reset
    } else {
        policy::retry_after(&parts.headers).or(in_body)
    };
    failed_whole(failure, parts, bytes)
}

/// A failed attempt whose answer is kept whole (hop-by-hop headers
/// dropped), for a client that gets the upstream's own answer.
fn failed_whole(failure: Failure, parts: http::response::Parts, body: Bytes) -> PreCommit {
    let mut headers = parts.headers;
    headers::strip_hop_by_hop(&mut headers);
    PreCommit::Failed {
        failure,
        verbatim: Some(Verbatim {
            status: parts.status,
            headers,
            body,
        }),
        held: None,
        unsent: false,
    }
}

/// A 2xx answer that is not the event stream the call asked for:
/// classified by the shim's business-code table, else from its text
/// (default `SERVER`, retryable), kept whole.
async fn not_a_stream(
    parts: http::response::Parts,
    body: UpstreamBody,
    idle: Duration,
    codes: Codes<'_>,
) -> PreCommit {
    let bytes = read_bounded(body, ERROR_BODY_LIMIT, idle).await;
    let text = String::from_utf8_lossy(&bytes);
    let known = codes.and_then(|c| c(parts.status.as_u16(), &bytes));
    let kind = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("no content-type")
        .to_owned();
    let code = known
        .as_ref()
        .map_or_else(|| classify_text(&text), |f| f.code);
    let mut failure = Failure::new(
        code,
        format!(
            "{} {kind} where an event stream was asked for: {}",
            parts.status,
            summary(&text)
        ),
    )
    .with_status(parts.status.as_u16());
    if let Some(known) = known {
        failure.upstream_code = known.upstream_code;
        failure.retry_after = known.retry_after;
    }
    failed_whole(failure, parts, bytes)
}

/// Reads an SSE answer, holding its frames back, until the first content
/// frame (commit), an error or its end.
async fn hold_until_content(
    mut translator: Box<dyn StreamTranslator>,
    mut body: UpstreamBody,
    idle: Duration,
    sent_at: std::time::Instant,
) -> PreCommit {
    let mut parser = SseParser::new();
    let mut held = BytesMut::new();
    // The upstream's own bytes until commit (refcounted, not copied): an
    // in-band error is passed on in the agent's wire from these.
    let mut native: Vec<Bytes> = Vec::new();
    loop {
        let data = match next_before_content(&mut body, idle).await {
            Ok(Some(data)) => data,
            Ok(None) => continue,
            Err(f) if f.code == FailureCode::EmptyResponse => {
                // The translator may know why it ended (a quota sentinel
                // before the end): then it is the upstream's own error.
                return match ended_without_content(translator.as_mut(), &mut held) {
                    Some(failure) => PreCommit::Failed {
                        failure,
                        verbatim: None,
                        unsent: false,
                        held: Some(InBand {
                            translated: held,
                            native: Bytes::from(native.concat()),
                        }),
                    },
                    None => failed(f),
                };
            }
            Err(f) => return failed(f),
        };
        native.push(data.clone());
        parser.push(data);
        match held_events(&mut parser, translator.as_mut(), &mut held) {
            Held::More => {}
            Held::Content => {
                return Committed::sse(held, parser, translator, body, sent_at.elapsed())
            }
            Held::InBand(failure) => {
                return PreCommit::Failed {
                    failure,
                    verbatim: None,
                    unsent: false,
                    held: Some(InBand {
                        translated: held,
                        native: Bytes::from(native.concat()),
                    }),
                }
            }
            Held::Failed(failure) => return failed(failure),
        }
        if held.len() > HOLD_LIMIT {
            // Nothing but non-content so far, yet too much to hold: commit.
            return Committed::sse(held, parser, translator, body, sent_at.elapsed());
        }
    }
}

/// The next data frame of an answer with no content yet (`None`: a frame
/// that is not data); its end, a break or silence is a failure.
async fn next_before_content(
    body: &mut UpstreamBody,
    idle: Duration,
) -> Result<Option<Bytes>, Failure> {
    match tokio::time::timeout(idle, body.frame()).await {
        Err(_) => Err(Failure::new(
            FailureCode::Timeout,
            format!("no data for {} ms before any content", idle.as_millis()),
        )),
        Ok(None) => Err(Failure::new(
            FailureCode::EmptyResponse,
            "the upstream closed the stream with no content",
        )),
        Ok(Some(Err(e))) => Err(Failure::new(
            FailureCode::Transport,
            format!(
                "upstream body broke before any content: {}",
                error_chain(&e)
            ),
        )),
        Ok(Some(Ok(frame))) => Ok(frame.into_data().ok()),
    }
}

/// The upstream ended its answer before any content: the error the
/// translator reads in that end ([`StreamTranslator::eof`]; the
/// model-server wire's `[EXCEED_QUOTA]` then the end is `QUOTA`), which
/// is the upstream's own in-band error; `None` when it reads an end
/// frame or a cut (an empty answer).
fn ended_without_content(
    translator: &mut dyn StreamTranslator,
    held: &mut BytesMut,
) -> Option<Failure> {
    match translator.eof(held) {
        class if class.is_cut() => None,
        FrameClass::Error(failure) => Some(failure),
        _ => None,
    }
}

/// What the events parsed so far say, before any content.
enum Held {
    /// Nothing decisive yet: read on.
    More,
    /// The first content frame: commit.
    Content,
    /// An in-band error, to be passed on as the upstream sent it.
    InBand(Failure),
    /// A broken stream, or an end with no content.
    Failed(Failure),
}

fn held_events(
    parser: &mut SseParser,
    translator: &mut dyn StreamTranslator,
    held: &mut BytesMut,
) -> Held {
    loop {
        let event = match parser.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => return Held::More,
            Err(e) => {
                return Held::Failed(Failure::new(
                    FailureCode::Server,
                    format!("upstream stream: {e}"),
                ))
            }
        };
        match translator.event(&event, held) {
            FrameClass::NotContent => {}
            FrameClass::Content => return Held::Content,
            FrameClass::Error(failure) => return Held::InBand(failure),
            FrameClass::End => {
                return Held::Failed(Failure::new(
                    FailureCode::EmptyResponse,
                    "the answer ended with no content",
                ))
            }
        }
    }
}

/// Streams a committed answer to the client. `Err` carries the failure that
/// ended it (already reported to the client in-band, or `ABORTED`).
pub async fn stream(
    ctx: &ChainCtx,
    idle: Duration,
    committed: Committed,
    tx: &BodyTx,
) -> (Result<(), Failure>, Meter) {
    match committed.mode {
        Mode::Raw { body } => (stream_raw(ctx, idle, body, tx).await, Meter::default()),
        Mode::Sse {
            held,
            parser,
            mut translator,
            body,
        } => {
            let end = stream_sse(ctx, idle, (held, parser, translator.as_mut()), body, tx).await;
            (end, translator.meter())
        }
    }
}

/// What a streaming loop waits for: the upstream's next chunk, or the
/// client leaving, shimgate stopping, the upstream's silence.
enum Wait {
    Chunk(Option<Result<http_body::Frame<Bytes>, ClientError>>),
    Gone,
    Stop,
    Silent,
}

/// The waits of one stream, set up once (made afresh for every chunk they
/// cost a waiter and a timer entry each, more than relaying the chunk) and
/// checked cheaply on every wake-up: the chunk first; the client leaving is
/// the closed channel (a fed body closes it and hands its feed to a fresh
/// task, whose first poll sees it, so no waiter is needed); shimgate
/// stopping is the token's flag, its waiter registered on the first poll
/// only (the task reading a stream, and so its waker, does not change
/// while it streams); the silence timer is pushed back at each chunk and
/// read as a flag once armed.
struct Waits<'a, 'p> {
    tx: &'a BodyTx,
    token: &'a CancellationToken,
    stop: Pin<&'p mut WaitForCancellationFuture<'a>>,
    silence: Pin<&'p mut tokio::time::Sleep>,
    armed: bool,
    idle: Duration,
}

impl Waits<'_, '_> {
    /// What comes next; the upstream's silence counts from now.
    async fn next(&mut self, body: &mut UpstreamBody) -> Wait {
        self.silence
            .as_mut()
            .reset(tokio::time::Instant::now() + self.idle);
        std::future::poll_fn(|cx| self.poll(body, cx)).await
    }

    fn poll(&mut self, body: &mut UpstreamBody, cx: &mut Context<'_>) -> Poll<Wait> {
        if let Poll::Ready(next) = http_body::Body::poll_frame(Pin::new(&mut *body), cx) {
            return Poll::Ready(Wait::Chunk(next));
        }
        if self.tx.is_closed() {
            return Poll::Ready(Wait::Gone);
        }
        if self.token.is_cancelled() {
            return Poll::Ready(Wait::Stop);
        }
        if !self.armed {
            self.armed = true;
            let _ = self.stop.as_mut().poll(cx);
            let _ = self.silence.as_mut().poll(cx);
        }
        if self.silence.is_elapsed() {
            return Poll::Ready(Wait::Silent);
        }
        Poll::Pending
    }
}

/// A raw answer, byte for byte.
async fn stream_raw(
    ctx: &ChainCtx,
    idle: Duration,
    mut body: UpstreamBody,
    tx: &BodyTx,
) -> Result<(), Failure> {
    let stop = ctx.hard_stop.cancelled();
    tokio::pin!(stop);
    let silence = tokio::time::sleep(idle);
    tokio::pin!(silence);
    let mut waits = Waits {
        tx,
        token: &ctx.hard_stop,
        stop,
        silence,
        armed: false,
        idle,
    };
    loop {
        let next = match waits.next(&mut body).await {
            Wait::Chunk(next) => Ok(next),
            // hyper ends a response as soon as it wrote `content-length`
            // bytes, which can be before we saw the upstream body end:
            // that client read everything, it did not go away.
            Wait::Gone => {
                return if http_body::Body::is_end_stream(&body) {
                    Ok(())
                } else {
                    Err(aborted())
                };
            }
            Wait::Stop => {
                let _ = tx.send(Err("shimgate is shutting down".into())).await;
                return Err(Failure::new(
                    FailureCode::Server,
                    "shimgate shut down mid-stream",
                ));
            }
            Wait::Silent => Err(()),
        };
        match next {
            Err(()) => {
                let _ = tx.send(Err("upstream went idle".into())).await;
                return Err(Failure::new(
                    FailureCode::Timeout,
                    "upstream went idle mid-body",
                ));
            }
            Ok(None) => return Ok(()),
            Ok(Some(Err(e))) => {
                let f = Failure::new(FailureCode::Transport, error_chain(&e));
                let _ = tx.send(Err(Box::new(e))).await;
                return Err(f);
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    if tx.send(Ok(data)).await.is_err() {
                        return Err(aborted());
                    }
                }
            }
        }
    }
}

/// A translated SSE answer: the frames held back first, then the rest as
/// the translator writes it.
async fn stream_sse(
    ctx: &ChainCtx,
    idle: Duration,
    (held, mut parser, translator): (BytesMut, SseParser, &mut dyn StreamTranslator),
    mut body: UpstreamBody,
    tx: &BodyTx,
) -> Result<(), Failure> {
    let mut out = held;
    let stop = ctx.hard_stop.cancelled();
    tokio::pin!(stop);
    let silence = tokio::time::sleep(idle);
    tokio::pin!(silence);
    let mut waits = Waits {
        tx,
        token: &ctx.hard_stop,
        stop,
        silence,
        armed: false,
        idle,
    };
    loop {
        let end = translate_events(&mut parser, translator, &mut out);
        // All frames of one upstream read go out as one write.
        if !out.is_empty() && tx.send(Ok(out.split().freeze())).await.is_err() {
            return Err(aborted());
        }
        if let Some(end) = end {
            if end.is_ok() {
                let_go(body);
            }
            return end;
        }
        let next = match waits.next(&mut body).await {
            Wait::Gone => return Err(aborted()),
            Wait::Stop => Err(Failure::new(
                FailureCode::Server,
                "shimgate shut down before the stream ended",
            )),
            Wait::Silent => Err(Failure::new(
                FailureCode::Timeout,
                format!("upstream sent nothing for {} ms", idle.as_millis()),
            )),
            Wait::Chunk(None) => Ok(None),
            Wait::Chunk(Some(Err(e))) => Err(Failure::new(
                FailureCode::Transport,
                format!("upstream broke mid-stream: {}", error_chain(&e)),
            )),
            Wait::Chunk(Some(Ok(frame))) => Ok(Some(frame)),
        };
        match next {
            Ok(Some(frame)) => {
                if let Ok(data) = frame.into_data() {
                    parser.push(data);
                }
            }
            Ok(None) => {
                let result = at_eof(translator, &mut out);
                if !out.is_empty() && tx.send(Ok(out.split().freeze())).await.is_err() {
                    return Err(aborted());
                }
                return result;
            }
            Err(f) => {
                translator.fail(&f, &mut out);
                let _ = tx.send(Ok(out.split().freeze())).await;
                return Err(f);
            }
        }
    }
}

/// After the answer's end, the upstream's body may still hold its own end
/// (the chunked body's last chunk, written after the end frame): read to
/// there, the connection goes back to the pool for the next call instead
/// of being closed (a new connection, and a TLS handshake on an https
/// route, for every answer). Usually the end has arrived: one look without
/// waiting reads it. Else it is read in a task of its own, for at most
/// [`LET_GO_TIME`] and [`LET_GO_BYTES`] (an upstream may hold the body
/// open after the end frame; then the connection is closed as before).
fn let_go(mut body: UpstreamBody) {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..4 {
        if http_body::Body::is_end_stream(&body) {
            return;
        }
        match http_body::Body::poll_frame(Pin::new(&mut body), &mut cx) {
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(_) => return,
            Poll::Pending => break,
        }
    }
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(crate::http::read::drain(body, LET_GO_BYTES, LET_GO_TIME));
    }
}

/// How long the rest of an ended answer's body is read for (see
/// [`let_go`]): its last chunk follows the end frame at once.
const LET_GO_TIME: Duration = Duration::from_secs(1);

/// How much of it, at most: anything more is not the body's end.
const LET_GO_BYTES: u64 = 64 * 1024;

/// Translates the events parsed so far into `out`; `Some` when the answer
/// ended (its end frame, an in-band error, a broken stream).
fn translate_events(
    parser: &mut SseParser,
    translator: &mut dyn StreamTranslator,
    out: &mut BytesMut,
) -> Option<Result<(), Failure>> {
    loop {
        match parser.next_event() {
            Ok(Some(ev)) => match translator.event(&ev, out) {
                FrameClass::End => return Some(Ok(())),
                FrameClass::Error(f) => return Some(Err(f)),
                FrameClass::Content | FrameClass::NotContent => {}
            },
            Ok(None) => return None,
            Err(e) => {
                let f = Failure::new(FailureCode::Server, format!("upstream stream: {e}"));
                translator.fail(&f, out);
                return Some(Err(f));
            }
        }
    }
}

/// The upstream closed the body: a clean end only if the translator saw
/// (or can write) the answer's end.
fn at_eof(translator: &mut dyn StreamTranslator, out: &mut BytesMut) -> Result<(), Failure> {
    match translator.eof(out) {
        FrameClass::End => Ok(()),
        // A cut: the translator wrote nothing; close the output.
        FrameClass::Error(f) if f.code == FailureCode::Transport => {
            translator.fail(&f, out);
            Err(f)
        }
        // The upstream's own error, read in how it ended: closed already.
        FrameClass::Error(f) => Err(f),
        FrameClass::Content | FrameClass::NotContent => {
            let f = Failure::new(
                FailureCode::Transport,
                "upstream closed before its end frame",
            );
            translator.fail(&f, out);
            Err(f)
        }
    }
}

fn aborted() -> Failure {
    Failure::new(FailureCode::Aborted, "the client went away")
}

/// Reads at most `limit` bytes of a body (what arrives within the idle timeout).
async fn read_bounded(mut body: UpstreamBody, limit: usize, idle: Duration) -> Bytes {
    let mut buf = BytesMut::new();
    while buf.len() < limit {
        match tokio::time::timeout(idle, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    let room = limit - buf.len();
                    buf.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            _ => break,
        }
    }
    buf.freeze()
}

/// A short reason from an error body: whitespace collapsed, at most 300 chars.
fn summary(text: &str) -> String {
    let collapsed = headers::redact(&text.split_whitespace().collect::<Vec<_>>().join(" "));
    let mut out: String = collapsed.chars().take(300).collect();
    if collapsed.chars().count() > 300 {
        out.push('…');
    }
    out
}

fn client_failure(e: &ClientError) -> Failure {
    let text = error_chain(e);
    let code = if text.contains("timed out") || text.contains("timeout") {
        FailureCode::Timeout
    } else {
        FailureCode::Transport
    };
    Failure::new(code, text)
}

//! The [`Shim`] trait: what a protocol crate gives the runtime.
//!
//! A shim folds its native request into an OpenAI chat body the compression
//! proxy can shrink, restores the native request from the shrunken body, and
//! provides the two stream translations: native upstream SSE to bare OpenAI
//! SSE (the return leg, read by the proxy) and bare OpenAI SSE to what the
//! agent reads (the ingress). It never sees sockets, retries or routes.

use serde_json::Value;

use crate::body::OpenAiBody;
pub use crate::error::ShimError;
use crate::failure::Failure;
pub use crate::shape::{answer_shape, SHAPE_KEYS};
use crate::translate::StreamTranslator;

/// A native request folded into OpenAI form. In the [`Shim`] contract the
/// OpenAI body is [`OpenAiBody`], JSON text the shim writes straight from
/// the native bytes (`B`, a `Value` by default, is what a shim's own
/// helpers may build it as).
#[derive(Debug, Clone)]
pub struct Folded<O, B = Value> {
    /// The OpenAI chat body sent to the compression proxy.
    pub openai: B,
    /// What the shim keeps to restore from (the native body, as the shim
    /// reads it again: its bytes and where its parts sit, or parsed).
    pub original: O,
}

/// One protocol the runtime can put in front of a compression proxy.
///
/// Every hook is pure: bytes and JSON in, bytes and JSON out.
pub trait Shim: Send + Sync + 'static {
    /// What the runtime keeps under a rid between the ingress and the return
    /// leg (the native body, parsed). Its default (an empty original) is
    /// what `shimgate translate` hands the ingress translator offline.
    type Original: Send + Sync + Default + 'static;
    /// Return leg: native upstream SSE to bare OpenAI SSE.
    type ReturnLeg: StreamTranslator;
    /// Ingress: bare OpenAI SSE (as the proxy relays it) to the agent's wire.
    type Ingress: StreamTranslator;

    /// The shim's name: its config section (`[shims.NAME]`), the return-leg
    /// path segment, the `/status` key (`NAMEShim`) and the metric label.
    const NAME: &'static str;

    /// Its listener when the config names none.
    const DEFAULT_LISTEN: &'static str;

    /// Whether it listens when the config does not say (`enabled`).
    const ENABLED_BY_DEFAULT: bool = true;

    /// Whether its rebuilt request goes upstream through a codec the user
    /// picks (`[shims.NAME] codec`: `plain`, `exec`, `cosy`), as qoder's
    /// encoded, signed asks do. Default: the body is sent as is.
    const CODEC: bool = false;

    /// The `/status` name of the count of frames rebuilt for the agent
    /// (`returnLeg.<key>`). Default: `agentFrames`.
    const AGENT_FRAMES_KEY: &'static str = "agentFrames";

    /// The shim whose listener serves this one and whose `[shims.HOST]`
    /// section holds its settings, for a second wire of one provider
    /// (qoder's model server rides on `qoder`: the same port, the same
    /// `enabled`, `listen` and `compressor`). It has no listener and no
    /// section of its own; everything else (its return legs, chain,
    /// counters, `/status` section, metric labels) is its own, under
    /// [`Shim::NAME`]. Default: `None`, a listener and section of its own.
    const RIDES_ON: Option<&'static str> = None;

    /// The key of its routes in its config section: `routes`
    /// (`[[shims.NAME.routes]]`), or for a shim that rides on another a key
    /// of the host's section (`[[shims.qoder.model_routes]]`).
    const ROUTES_KEY: &'static str = "routes";

    /// The routes it uses when the config names none, as `(name, base
    /// URL)` (the provider's own public hosts). Default: none (a call then
    /// answers `502 NO_ROUTES`).
    const DEFAULT_ROUTES: &'static [(&'static str, &'static str)] = &[];

    /// The request header that names one upstream attempt, for a provider
    /// that refuses a request id it has seen before (qoder's model server:
    /// `x-request-id`, a reuse is `103 Duplicate request`). Every attempt
    /// (the first, each retry and switch, and each of a proxy's own
    /// re-sends) then gets a fresh random id in this header, and the body
    /// gets it too through [`Shim::stamp_attempt`]. Lowercase. Default:
    /// `None`, the request goes up as it is.
    const ATTEMPT_ID_HEADER: Option<&'static str> = None;

    /// Whether the agent gets the provider's own HTTP error answer when
    /// every route failed and the last try ended in one (a `401` saying
    /// the login expired, a `429` or `403` saying the request is queued):
    /// its status, `Content-Type`, `Retry-After` and body as the provider
    /// sent them, instead of shimgate's `502 AUTO_ROUTES_EXHAUSTED` (or
    /// `429`) with the route list. For a wire whose client acts on those
    /// answers (the Qoder CLI fetches a fresh token on a 401 and asks
    /// again; it waits out a queue). The route list stays in `/status`
    /// and the log. Default: `false`.
    const AGENT_READS_HTTP_ERRORS: bool = false;

    /// The body of one upstream attempt whose id is `id` (the wire's own
    /// copy of the request id in the body, kept equal to the header's), or
    /// `None` to send `body` as it is (it holds no such copy, or is not
    /// JSON the shim can stamp). Called for every attempt when
    /// [`Shim::ATTEMPT_ID_HEADER`] is set. Default: `None`.
    fn stamp_attempt(&self, body: &[u8], id: &str) -> Option<Vec<u8>> {
        let _ = (body, id);
        None
    }

    /// [`Shim::NAME`], for callers holding a value.
    fn name(&self) -> &'static str {
        Self::NAME
    }

    /// Whether a request is the inference call the ingress takes over
    /// (everything else passes through untouched).
    fn is_inference(&self, method: &str, path: &str) -> bool;

    /// The request body as [`Shim::fold`] reads it, for a body the agent
    /// sent in a transport encoding (qoder's `Encode=1`). `Ok(None)`: the
    /// body is read as it is; `Ok(Some(decoded))`: fold reads `decoded`
    /// and the runtime encodes the rebuilt request again on the way up;
    /// `Err`: the body claims an encoding it does not have (the runtime
    /// passes the request through untouched, with the reason in
    /// `lastError`). Default: `Ok(None)`.
    fn decode(&self, path_and_query: &str, body: &[u8]) -> Result<Option<Vec<u8>>, ShimError> {
        let _ = (path_and_query, body);
        Ok(None)
    }

    /// Folds the native request body into an OpenAI chat body, written as
    /// JSON text for the proxy (the runtime sends it as it is and reads the
    /// parts it needs off the text).
    fn fold(&self, native: &[u8]) -> Result<Folded<Self::Original, OpenAiBody>, ShimError>;

    /// What the ingress needs to answer a request itself when no proxy
    /// will read a fold (direct mode: the agent's bytes go upstream as
    /// they are): the [`answer_shape`] of the OpenAI body [`Shim::fold`]
    /// would make, which the return-leg translator reads, and the original
    /// the ingress translator gets. It must refuse exactly what `fold`
    /// refuses (the runtime then passes the request through untouched), so
    /// a shim that reads the shape without folding falls back to `fold` on
    /// anything it is unsure of. Default: `fold`, and the shape of its body.
    fn shape(&self, native: &[u8]) -> Result<(Value, Self::Original), ShimError> {
        let folded = self.fold(native)?;
        Ok((folded.openai.answer_shape(), folded.original))
    }

    /// Restores the native request body from the original and the
    /// (compressed) OpenAI body: only `messages`, `tools` and sampling fields
    /// come from `openai`, everything else from the original. Called once per
    /// return-leg request. `openai` is the proxy's text, checked; a shim
    /// reads what it takes from it (the parts it rewrites), and may leave
    /// the rest unread.
    fn restore(&self, original: &Self::Original, openai: &OpenAiBody)
        -> Result<Vec<u8>, ShimError>;

    /// Whether [`Shim::restore`] of `original` reads the proxy's body as one
    /// whole `Value`. The return leg then parses the body once, the parse
    /// being its check; for a restore that reads members (`false`) the body
    /// is only checked, with the strict scan, and never parsed whole.
    /// Default: `true`.
    fn restore_reads_whole(&self, _original: &Self::Original) -> bool {
        true
    }

    /// A fresh return-leg translator for one upstream attempt. `request` is
    /// the OpenAI body the proxy sent (for `stream_options` and the like).
    fn return_leg(&self, request: &Value) -> Self::ReturnLeg;

    /// A fresh ingress translator for one answer relayed by the proxy.
    fn ingress(&self, original: &Self::Original) -> Self::Ingress;

    /// The class of an upstream error answer (a non-2xx, or a 2xx that is
    /// not the stream asked for) by the provider's own business code in its
    /// body, read with the same table as the shim's in-band errors, the code
    /// as `upstream_code` and any wait the body states as `retry_after`.
    /// Called once per such answer, before the runtime's own rules: `None`
    /// (the body names no code the shim knows) leaves it to the status and
    /// the words. `status` is the HTTP status.
    ///
    /// Default: `None`.
    fn http_error(&self, status: u16, body: &[u8]) -> Option<Failure> {
        let _ = (status, body);
        None
    }

    /// Whether the agent reads exactly what the return leg writes (bare
    /// OpenAI frames). When the ingress sends a request upstream itself (no
    /// proxy, or the proxy failed), the runtime then streams the return
    /// leg's output to the agent as is; otherwise it streams the upstream's
    /// own events, classified by the return leg. Either way no answer is
    /// translated twice.
    ///
    /// Default: `false` (the agent reads the upstream's native events).
    fn agent_reads_return_leg(&self) -> bool {
        false
    }

    /// The conversation the native request belongs to, from the wire's own
    /// field, for a request whose headers name none (`x-session-id` and
    /// its kin come first): switches are logged under it. Default: none.
    fn conversation(&self, native: &[u8]) -> Option<String> {
        let _ = native;
        None
    }

    /// The request headers that name the agent, most stable first: the
    /// runtime gives the compression proxy one `Authorization` per agent,
    /// a keyed hash of the first of these the request carries, so the
    /// proxy keeps one session per conversation (it keys its sessions on
    /// `Authorization`). A header that changes per request (a signature)
    /// does not belong here; an account id that outlives token refreshes
    /// goes first.
    ///
    /// Default: `authorization`, `x-api-key`, `cookie`.
    fn identity_headers(&self) -> &'static [&'static str] {
        &["authorization", "x-api-key", "cookie"]
    }
}

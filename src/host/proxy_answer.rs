//! What the compression proxy answered the ingress, judged before the
//! agent sees a byte of it: until the return leg has seen the
//! rid, a proxy answer that is not the expected stream — an error status, a
//! 2xx that is not SSE (garbage, JSON), a stream that ends or stalls before
//! the proxy called the return leg — is a proxy failure, and the ingress
//! sends the request upstream itself. Once the return leg has the rid, the
//! proxy's answer is the agent's, whatever it is: one request is never
//! both sent directly and answered through the proxy.

use std::time::Duration;

use bytes::Bytes;
use http::header;
use http_body_util::BodyExt;

use crate::app::rid::RidEntry;
use crate::http::client::UpstreamBody;

/// Bytes of a proxy stream read, at most, while waiting for it to reach
/// the return leg: a proxy writes nothing of its own before its upstream
/// answers, so more than this is not an answer to this request.
pub const WAIT_READ_LIMIT: usize = 1024 * 1024;

/// The proxy's answer, with what was read of its body while judging it.
pub struct Answer {
    pub parts: http::response::Parts,
    /// Body chunks already read (in order, before `body`).
    pub read: Vec<Bytes>,
    pub body: UpstreamBody,
}

/// The verdict on the proxy's answer.
pub enum Verdict {
    /// The return leg has the rid: relay this.
    Usable(Answer),
    /// The proxy failed before the return leg saw the rid (`answer`, if
    /// any, is what it sent, for the case the return leg takes the rid
    /// meanwhile).
    Failed { why: String, answer: Option<Answer> },
}

pub use crate::http::headers::is_event_stream as is_sse;

/// Judges `attempt` (the proxy's response, or why there is none) for the
/// rid of `entry`, reading the body on, within `wait` per read, while the
/// return leg has not seen the rid.
pub async fn judge(
    attempt: Result<http::Response<UpstreamBody>, String>,
    entry: &RidEntry,
    wait: Duration,
) -> Verdict {
    let resp = match attempt {
        Ok(r) => r,
        Err(e) => {
            return Verdict::Failed {
                why: format!("the compression proxy is unreachable: {e}"),
                answer: None,
            }
        }
    };
    let (parts, body) = resp.into_parts();
    let answer = Answer {
        parts,
        read: Vec::new(),
        body,
    };
    if entry.reached() {
        return Verdict::Usable(answer);
    }
    let status = answer.parts.status;
    if !status.is_success() {
        return failed(format!("the compression proxy answered {status}"), answer);
    }
    if !is_sse(&answer.parts.headers) {
        let kind = answer
            .parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("no content-type")
            .to_owned();
        return failed(
            format!("the compression proxy answered {status} {kind}, not an event stream"),
            answer,
        );
    }
    read_until_reached(answer, entry, wait).await
}

fn failed(why: String, answer: Answer) -> Verdict {
    Verdict::Failed {
        why,
        answer: Some(answer),
    }
}

/// A stream head before the return leg saw the rid: reads on until it
/// does, or the stream ends, stalls or grows past [`WAIT_READ_LIMIT`].
async fn read_until_reached(mut answer: Answer, entry: &RidEntry, wait: Duration) -> Verdict {
    let mut read = 0;
    loop {
        if entry.reached() {
            return Verdict::Usable(answer);
        }
        let why = match tokio::time::timeout(wait, answer.body.frame()).await {
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    read += data.len();
                    answer.read.push(data);
                }
                if read <= WAIT_READ_LIMIT {
                    continue;
                }
                format!(
                    "the compression proxy streamed {read} bytes without calling the return leg"
                )
            }
            Ok(None) => {
                "the compression proxy ended its stream before it called the return leg".into()
            }
            Ok(Some(Err(e))) => {
                format!("the compression proxy's stream broke before it called the return leg: {e}")
            }
            Err(_) => format!(
                "the compression proxy sent nothing for {} ms and never called the return leg",
                wait.as_millis()
            ),
        };
        if entry.reached() {
            return Verdict::Usable(answer);
        }
        return failed(why, answer);
    }
}

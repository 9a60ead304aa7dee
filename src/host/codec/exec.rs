//! The qoder `exec` codec: a long-running co-process (for example a Node
//! script holding the provider's own encryptor) that turns a rebuilt ask into
//! an upstream request. One JSON line in, one JSON line out:
//!
//! ```text
//! in : {"ask":{…},"route":{"name":"…","url":"…"},"path":"/algo/…?Encode=1"}
//! out: {"url":"https://…","headers":{"Authorization":"…"},"body":"<base64>"}
//!   or {"error":"why"}
//! ```
//!
//! It is started on first use and restarted if it dies; requests are
//! serialised (one line out, one line back). It is called for every attempt,
//! so each retry is signed afresh.

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::config::Route;

/// How long the codec may take to answer one line.
pub const CODEC_TIMEOUT: Duration = Duration::from_secs(15);

/// An answer line longer than this is refused (the encoded body of a 32 MiB
/// request, base64'd, fits comfortably).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// What the codec produced for one attempt.
pub struct Encoded {
    pub url: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

struct Proc {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// The co-process and its bookkeeping.
pub struct ExecCodec {
    command: Vec<String>,
    proc: tokio::sync::Mutex<Option<Proc>>,
    starts: AtomicU64,
    calls: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl ExecCodec {
    /// A codec for `command` (not started yet).
    pub fn new(command: Vec<String>) -> Self {
        ExecCodec {
            command,
            proc: tokio::sync::Mutex::new(None),
            starts: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    /// The command it runs.
    pub fn command(&self) -> &[String] {
        &self.command
    }

    /// `/status.qoderShim.codec` details (the program name, never arguments,
    /// which may carry secrets).
    pub fn status(&self) -> Value {
        let program = self
            .command
            .first()
            .map(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map_or(p.clone(), |f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        json!({
            "kind": "exec",
            "program": program,
            "starts": self.starts.load(Ordering::Relaxed),
            "calls": self.calls.load(Ordering::Relaxed),
            "lastError": self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        })
    }

    fn note_error(&self, message: &str) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.to_string());
    }

    fn spawn(&self) -> Result<Proc, String> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| "codec_command is empty".to_string())?;
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start codec {program:?}: {e}"))?;
        let stdin = child.stdin.take().ok_or("codec has no stdin")?;
        let stdout = child.stdout.take().ok_or("codec has no stdout")?;
        self.starts.fetch_add(1, Ordering::Relaxed);
        Ok(Proc {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// Encodes one attempt.
    pub async fn encode(&self, ask: &Value, route: &Route, path: &str) -> Result<Encoded, String> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let mut result = self.exchange(ask, route, path).await;
        if let Err(Broken::Stale(_)) = &result {
            // A process that was already running died before answering
            // (it may have exited between calls): encoding is a pure
            // function of the ask, so asking a fresh process once is safe.
            result = self.exchange(ask, route, path).await;
        }
        let result = result.map_err(Broken::into_message);
        if let Err(e) = &result {
            self.note_error(e);
        }
        result
    }

    async fn exchange(&self, ask: &Value, route: &Route, path: &str) -> Result<Encoded, Broken> {
        let mut line = serde_json::to_vec(&json!({
            "ask": ask,
            "route": {"name": route.name, "url": route.url},
            "path": path,
        }))
        .map_err(|e| Broken::Fatal(e.to_string()))?;
        line.push(b'\n');
        let mut guard = self.proc.lock().await;
        let alive = match guard.as_mut() {
            Some(p) => matches!(p.child.try_wait(), Ok(None)),
            None => false,
        };
        if !alive {
            *guard = Some(self.spawn().map_err(Broken::Fatal)?);
        }
        // Only a process that was already running may have died meanwhile.
        let broken = |m: String| {
            if alive {
                Broken::Stale(m)
            } else {
                Broken::Fatal(m)
            }
        };
        let Some(proc) = guard.as_mut() else {
            return Err(Broken::Fatal("codec did not start".into()));
        };
        let answer = tokio::time::timeout(CODEC_TIMEOUT, async {
            proc.stdin.write_all(&line).await?;
            proc.stdin.flush().await?;
            let mut reply = String::new();
            let n = (&mut proc.stdout)
                .take(MAX_LINE as u64)
                .read_line(&mut reply)
                .await?;
            Ok::<_, std::io::Error>((n, reply))
        })
        .await;
        let reply = match answer {
            Err(_) => {
                // A wedged codec is killed and restarted on the next call.
                *guard = None;
                return Err(Broken::Fatal(format!(
                    "codec gave no answer within {} s",
                    CODEC_TIMEOUT.as_secs()
                )));
            }
            Ok(Err(e)) => {
                *guard = None;
                return Err(broken(format!("codec pipe broke: {e}")));
            }
            Ok(Ok((0, _))) => {
                *guard = None;
                return Err(broken("codec exited without answering".into()));
            }
            Ok(Ok((_, reply))) => reply,
        };
        drop(guard);
        parse_answer(&reply).map_err(Broken::Fatal)
    }
}

/// Why an exchange with the co-process failed.
enum Broken {
    /// A process that was running before this call died: worth one retry.
    Stale(String),
    /// Anything else.
    Fatal(String),
}

impl Broken {
    fn into_message(self) -> String {
        match self {
            Broken::Stale(m) | Broken::Fatal(m) => m,
        }
    }
}

use tokio::io::AsyncReadExt as _;

fn parse_answer(line: &str) -> Result<Encoded, String> {
    let v: Value =
        serde_json::from_str(line.trim()).map_err(|e| format!("codec answer is not JSON: {e}"))?;
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        let text = err.as_str().map_or_else(|| err.to_string(), str::to_owned);
        return Err(format!("codec refused: {text}"));
    }
    let url = v
        .get("url")
        .and_then(Value::as_str)
        .ok_or("codec answer has no url")?
        .to_string();
    let mut headers = HeaderMap::new();
    if let Some(map) = v.get("headers").and_then(Value::as_object) {
        for (k, val) in map {
            let text = val.as_str().map_or_else(|| val.to_string(), str::to_owned);
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|_| format!("codec header name {k:?} is invalid"))?;
            let value = HeaderValue::from_str(&text)
                .map_err(|_| format!("codec header {k:?} has an invalid value"))?;
            headers.insert(name, value);
        }
    }
    let body = match v.get("body").and_then(Value::as_str) {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("codec body is not base64: {e}"))?,
        None => return Err("codec answer has no body".into()),
    };
    Ok(Encoded {
        url,
        headers,
        body: Bytes::from(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_answer_is_parsed() {
        let e = parse_answer(
            r#"{"url":"http://x/a","headers":{"Authorization":"Bearer s"},"body":"aGk="}"#,
        )
        .unwrap();
        assert_eq!(e.url, "http://x/a");
        assert_eq!(&e.body[..], b"hi");
        assert_eq!(e.headers["authorization"], "Bearer s");
    }

    #[test]
    fn an_error_answer_is_an_error() {
        let e = parse_answer(r#"{"error":"no key"}"#).err().unwrap();
        assert_eq!(e, "codec refused: no key");
    }
}

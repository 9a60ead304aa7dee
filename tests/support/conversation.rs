//! An agent having a long conversation on one wire: every turn it resends
//! the whole history plus a new user message of about 4,000 characters (or,
//! in a tool turn, its call of a tool and the tool's output), with its
//! conversation header (`x-session-id`), reads the answer in its own wire
//! and checks it, and appends what it read to the history.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use shimgate_testkit::trae::{digest, End};

use super::client;
use super::model::{content_chars, Wire};
use super::{cosy_check, qoder, trae};

/// One turn as the agent saw it.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Message content characters the agent sent.
    pub sent_chars: usize,
    /// The size of the request body the agent sent.
    pub sent_bytes: usize,
    pub status: StatusCode,
    /// The answer text it read.
    pub text: String,
    /// The error it read in its own wire (a SOLO `error` event's data, or
    /// qoder's error frame), if the turn failed.
    pub error: Option<Value>,
    /// What was wrong with the answer's wire.
    pub problems: Vec<String>,
}

/// One agent conversation.
pub struct Conversation {
    pub wire: Wire,
    /// qoder only: send as the real client does (`Encode=1` body, COSY
    /// signature) instead of the plaintext ask.
    pub signed: bool,
    session: String,
    credential: String,
    messages: Vec<Value>,
    pub turns: Vec<Turn>,
}

impl Conversation {
    /// A conversation with a system prompt and a first task, under the
    /// conversation id `session` and the agent credential `credential`.
    pub fn new(wire: Wire, session: &str, credential: &str) -> Conversation {
        let mut c = Conversation {
            wire,
            signed: false,
            session: session.into(),
            credential: credential.into(),
            messages: Vec::new(),
            turns: Vec::new(),
        };
        c.push(
            "system",
            "You are a careful coding agent. Keep answers short.",
        );
        c.push("user", "Start task: summarise the notes that follow.");
        c
    }

    fn push(&mut self, role: &str, text: &str) {
        self.messages.push(match self.wire {
            Wire::Trae => trae::text(role, text),
            Wire::Qoder | Wire::QoderModel | Wire::OpenAi => json!({"role": role, "content": text}),
        });
    }

    /// The same conversation as the real qoder client sends it.
    pub fn signed(mut self) -> Conversation {
        self.signed = true;
        self
    }

    /// Sends one more turn to the shim listener at `base`.
    pub async fn turn(&mut self, base: &str) -> Turn {
        let n = self.turns.len() + 1;
        self.push("user", &filler(n, 4000));
        self.send(base).await
    }

    /// Sends one more turn in which the agent hands back a tool's output:
    /// a short user request, the assistant's call of `tool` and the
    /// tool's `output` (what an agent sends after running the tool).
    pub async fn tool_turn(&mut self, base: &str, tool: &str, output: &str) -> Turn {
        let n = self.turns.len() + 1;
        self.push(
            "user",
            &format!("Step {n}: run `{tool}` again and fix what fails."),
        );
        let id = format!("call_{tool}_{n}");
        match self.wire {
            Wire::Trae => self
                .messages
                .extend(trae::tool_turn(&id, tool, "{}", output)),
            Wire::Qoder | Wire::QoderModel | Wire::OpenAi => self.messages.extend([
                json!({"role": "assistant", "content": "", "tool_calls": [{"id": id, "type": "function", "function": {"name": tool, "arguments": "{}"}}]}),
                json!({"role": "tool", "tool_call_id": id, "content": output}),
            ]),
        }
        self.send(base).await
    }

    async fn send(&mut self, base: &str) -> Turn {
        let sent_chars = content_chars(&self.messages);
        let turn = match self.wire {
            Wire::Trae => self.trae_turn(base, sent_chars).await,
            Wire::Qoder => self.qoder_turn(base, sent_chars).await,
            Wire::QoderModel => self.model_server_turn(base, sent_chars).await,
            Wire::OpenAi => panic!("the agent speaks a provider wire"),
        };
        if turn.error.is_none() {
            let text = turn.text.clone();
            self.push("assistant", &text);
        }
        self.turns.push(turn.clone());
        turn
    }

    async fn trae_turn(&self, base: &str, sent_chars: usize) -> Turn {
        let body = serde_json::to_vec(&trae::body(&self.messages)).unwrap();
        let sent_bytes = body.len();
        let auth = format!("Cloud-IDE-JWT {}", self.credential);
        let resp = client::send(
            Method::POST,
            &format!("{base}{}", trae::PATH),
            &[
                ("content-type", "application/json"),
                ("authorization", &auth),
                ("x-ide-token", &self.credential),
                ("x-session-id", &self.session),
            ],
            body,
        )
        .await;
        let mut problems = Vec::new();
        let names = trae::event_names(&resp.body);
        if names.iter().any(Option::is_none) {
            problems.push(format!(
                "an unnamed (OpenAI) event reached the TRAE agent: {}",
                resp.text()
            ));
        }
        let d = digest(&resp.body);
        let error = match &d.end {
            End::Error(seen) => Some(json!(format!("{:?}", seen.data))),
            End::Done(_) => None,
            End::Cut => {
                problems.push(format!("the stream was cut: {}", resp.text()));
                None
            }
        };
        Turn {
            sent_chars,
            sent_bytes,
            status: resp.status,
            text: d.text,
            error,
            problems,
        }
    }

    async fn qoder_turn(&self, base: &str, sent_chars: usize) -> Turn {
        let ask = serde_json::to_vec(&qoder::ask(&self.messages)).unwrap();
        let mut headers: Vec<(String, String)> = vec![
            ("content-type".into(), "application/json".into()),
            ("cosy-user".into(), self.credential.clone()),
            ("x-session-id".into(), self.session.clone()),
        ];
        let body = if self.signed {
            let encoded = cosy_check::encode(&ask);
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let id = format!("{:032x}", fastrand::u128(..));
            headers = cosy_check::client_headers(&self.credential, &id, &encoded, qoder::PATH, now);
            headers.push(("x-session-id".into(), self.session.clone()));
            encoded
        } else {
            ask
        };
        let sent_bytes = body.len();
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let resp = client::send(
            Method::POST,
            &format!("{base}{}", qoder::PATH),
            &pairs,
            body,
        )
        .await;
        let (text, done, errors) = qoder::read_answer(&resp.body);
        let mut problems = Vec::new();
        if !done {
            problems.push(format!("not exactly one [DONE]: {}", resp.text()));
        }
        Turn {
            sent_chars,
            sent_bytes,
            status: resp.status,
            text,
            error: errors.into_iter().next(),
            problems,
        }
    }
}

impl Conversation {
    /// A turn as the Qoder CLI sends it on the model-server wire (its body,
    /// a fresh `X-Request-ID`, the Bearer token), read as the CLI reads it.
    async fn model_server_turn(&self, base: &str, sent_chars: usize) -> Turn {
        use shimgate_testkit::qoder_model as qm;
        let id = qm::request_id();
        let body = serde_json::to_vec(&qm::request(&self.messages, &id, &self.session)).unwrap();
        let sent_bytes = body.len();
        let headers = qm::headers(&self.credential, &id, &self.session);
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let resp = client::send(Method::POST, &format!("{base}{}", qm::PATH), &pairs, body).await;
        let read = qm::read_answer(&resp.body);
        let mut problems = Vec::new();
        if resp.status.is_success() && read.error.is_none() && (!read.done || read.finish.is_none())
        {
            problems.push(format!("no finish or no [DONE]: {}", resp.text()));
        }
        if let Some(bad) = &read.unparsable {
            problems.push(format!("a data line the CLI cannot parse: {bad}"));
        }
        let error = match (&read.error, resp.status.is_success()) {
            (Some(e), _) => Some(e.clone()),
            (None, false) => {
                Some(json!({"kind": "http", "status": resp.status.as_u16(), "body": resp.text()}))
            }
            (None, true) => None,
        };
        Turn {
            sent_chars,
            sent_bytes,
            status: resp.status,
            text: read.text,
            error,
            problems,
        }
    }
}

/// About `chars` characters of varied notes for turn `n`.
pub fn filler(n: usize, chars: usize) -> String {
    const WORDS: [&str; 12] = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima",
    ];
    let mut s = format!("[note {n}] ");
    let mut i = n;
    while s.len() < chars {
        s.push_str(WORDS[i % WORDS.len()]);
        s.push(' ');
        i = i.wrapping_mul(7).wrapping_add(3);
    }
    s
}

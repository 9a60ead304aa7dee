//! The savings book, pure: what one agent call cost and saved in tokens
//! ([`price`]), and the figures per day and per conversation it adds to
//! ([`Book`]), bounded by `[savings] days` and `conversations`. The wall
//! clock and the zone are inputs, so the day boundary is tested without
//! waiting for midnight.
//!
//! The provider reports what it was sent (its `prompt_tokens`); what the
//! agent's own request would have cost is never sent, so it is estimated
//! the one way that needs no tokenizer of the provider's: the provider's
//! own tokens per character of what it was sent, on the same call, times
//! the characters the agent sent ([`METHOD`]).

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::chain::rest::Zone;
use crate::clock::{epoch_ms, iso8601};

/// How the figures are made, named wherever they are shown (`/status`
/// `savings.method`, the panel, the docs): `sentTokens` is the provider's
/// own `prompt_tokens` for what it was sent; `agentTokens` is that call's
/// tokens per character sent times the characters the agent sent
/// (characters of the `messages` and `tools` JSON, before and after the
/// compressor); a call whose answer reported no usage is estimated with
/// the shim's recent tokens per character ([`Ratio`]), and counted in
/// `estimatedCalls`.
pub const METHOD: &str = "provider-ratio";

/// Characters a token before any provider reported usage: the usual rule
/// of thumb for English text and code (a provider's first report replaces
/// it).
pub const CHARS_PER_TOKEN: f64 = 4.0;

/// How much of the old ratio a new report keeps (a moving average over
/// roughly the last five reports: a provider's tokenizer does not change,
/// but what the agent sends, code or prose, does).
const RATIO_KEEP: f64 = 0.8;

/// What an answer said of its size: the provider's usage, where reported,
/// and the characters of answer content (for an estimate where it was not).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt: Option<u64>,
    pub completion: Option<u64>,
    pub cached: Option<u64>,
    pub content_chars: u64,
}

impl Usage {
    /// The prompt tokens, when the provider really reported some (a
    /// `prompt_tokens` of 0 for a request with content is no report).
    fn reported_prompt(&self) -> Option<u64> {
        self.prompt.filter(|n| *n > 0)
    }
}

/// One request the return leg (or the direct path) sent upstream.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PostResult {
    /// Its order among the requests of the agent's call.
    pub seq: u32,
    /// A side request by its shape (a summary, a title): the compressor's.
    pub side: bool,
    /// Characters of `messages` and `tools` of what was sent.
    pub sent_chars: u64,
    /// An attempt answered it (content reached the compressor).
    pub answered: bool,
    /// The usage of the attempt that answered.
    pub answer: Usage,
    /// Tokens the provider reported for attempts that did not answer
    /// (an empty answer that still carried usage): billed, yet spent
    /// whether or not a compressor was in the way.
    pub failed_tokens: u64,
}

/// One agent call and every request it made upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    pub shim: &'static str,
    pub conversation: String,
    /// Characters of the agent's own request (`messages` and `tools` as the
    /// ingress folded it); `None` when it went upstream as sent (direct):
    /// then the agent's tokens are the sent ones.
    pub agent_chars: Option<u64>,
    pub posts: Vec<PostResult>,
}

/// A shim's recent provider tokens per character (a decaying sum), for
/// calls whose answer reported no usage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ratio {
    pub tokens: f64,
    pub chars: f64,
}

impl Default for Ratio {
    fn default() -> Self {
        Ratio {
            tokens: 0.0,
            chars: 0.0,
        }
    }
}

impl Ratio {
    /// Tokens per character: the recent reports', else 1 / [`CHARS_PER_TOKEN`].
    pub fn per_char(&self) -> f64 {
        let r = self.tokens / self.chars;
        if r.is_finite() && r > 0.0 {
            r
        } else {
            1.0 / CHARS_PER_TOKEN
        }
    }

    fn learn(&mut self, tokens: u64, chars: u64) {
        self.tokens = self.tokens * RATIO_KEEP + tokens as f64;
        self.chars = self.chars * RATIO_KEEP + chars as f64;
    }

    /// `chars` at this ratio, rounded.
    fn estimate(&self, chars: u64) -> u64 {
        (chars as f64 * self.per_char()).round() as u64
    }
}

/// Token figures of a day, a conversation or a call. Only sums are kept;
/// `savedTokens` and `netTokens` are derived (and may be negative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Figures {
    /// Agent calls answered.
    pub calls: u64,
    /// What the agent's requests would have cost as it sent them (estimated).
    pub agent_tokens: u64,
    /// What the provider counted for the requests that answered the agent.
    pub sent_tokens: u64,
    /// Of those, read from the provider's cache (where the wire reports it).
    pub cached_tokens: u64,
    /// The answers' completion tokens (the same with or without compression).
    pub completion_tokens: u64,
    /// The compressor's own calls: summaries, titles, its tool-loop rounds.
    pub side_calls: u64,
    /// Their prompt and completion tokens.
    pub side_tokens: u64,
    /// Tokens reported for attempts that failed before answering.
    pub failed_tokens: u64,
    /// Calls (agent or side) whose provider reported no usage: estimated.
    pub estimated_calls: u64,
}

impl Figures {
    /// `agentTokens - sentTokens`: what compression took off the prompts.
    pub fn saved(&self) -> i64 {
        signed(self.agent_tokens) - signed(self.sent_tokens)
    }

    /// `savedTokens - sideTokens`: what it saved net of its own calls.
    pub fn net(&self) -> i64 {
        self.saved() - signed(self.side_tokens)
    }

    /// Adds `o` (saturating: a corrupt file's huge numbers stay numbers).
    pub fn add(&mut self, o: &Figures) {
        let fields = [
            (&mut self.calls, o.calls),
            (&mut self.agent_tokens, o.agent_tokens),
            (&mut self.sent_tokens, o.sent_tokens),
            (&mut self.cached_tokens, o.cached_tokens),
            (&mut self.completion_tokens, o.completion_tokens),
            (&mut self.side_calls, o.side_calls),
            (&mut self.side_tokens, o.side_tokens),
            (&mut self.failed_tokens, o.failed_tokens),
            (&mut self.estimated_calls, o.estimated_calls),
        ];
        for (mine, theirs) in fields {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        *self == Figures::default()
    }

    /// The `/status` members, the derived ones included.
    pub fn to_json(self) -> Map<String, Value> {
        let mut m = match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        m.insert("savedTokens".into(), json!(self.saved()));
        m.insert("netTokens".into(), json!(self.net()));
        m
    }
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What `turn` cost and saved, at the shim's `ratio` (which learns from
/// it). The request that answered the agent is the last one of the call
/// that is not a side request by its shape: a compressor that posts
/// several times for one call (billion-context's tool loop: it asks the
/// model, runs the `compress` the model called, and asks again) was
/// answered by its last round; the earlier rounds are its own cost.
pub fn price(turn: &TurnRecord, ratio: &mut Ratio) -> Figures {
    let answer = turn
        .posts
        .iter()
        .filter(|p| !p.side && p.answered)
        .max_by_key(|p| p.seq)
        .map(|p| p.seq);
    let mut f = Figures::default();
    for p in &turn.posts {
        f.failed_tokens = f.failed_tokens.saturating_add(p.failed_tokens);
        if !p.answered {
            continue;
        }
        let completion = p
            .answer
            .completion
            .unwrap_or_else(|| ratio.estimate(p.answer.content_chars));
        let reported = p.answer.reported_prompt();
        if reported.is_none() {
            f.estimated_calls += 1;
        }
        if Some(p.seq) != answer {
            let prompt = reported.unwrap_or_else(|| ratio.estimate(p.sent_chars));
            f.side_calls += 1;
            f.side_tokens = f
                .side_tokens
                .saturating_add(prompt.saturating_add(completion));
            continue;
        }
        let sent = reported.unwrap_or_else(|| ratio.estimate(p.sent_chars));
        let agent = match (turn.agent_chars, reported) {
            (None, _) => sent,
            // The same call's own tokens per character, in integers: equal
            // characters give equal tokens, more give more (never a wrong
            // sign from rounding).
            (Some(chars), Some(n)) if p.sent_chars > 0 => {
                let exact = u128::from(chars) * u128::from(n);
                let half = u128::from(p.sent_chars) / 2;
                u64::try_from((exact + half) / u128::from(p.sent_chars)).unwrap_or(u64::MAX)
            }
            // Nothing measurable was sent (no messages, no tools): what
            // the agent's characters would have cost comes on top.
            (Some(chars), Some(_)) => sent.saturating_add(ratio.estimate(chars)),
            (Some(chars), None) => ratio.estimate(chars),
        };
        if let (Some(n), Some(_)) = (reported, turn.agent_chars) {
            if p.sent_chars > 0 {
                ratio.learn(n, p.sent_chars);
            }
        }
        f.calls += 1;
        f.agent_tokens = agent;
        f.sent_tokens = sent;
        f.cached_tokens = p.answer.cached.unwrap_or(0).min(sent);
        f.completion_tokens = completion;
    }
    f
}

/// The local day `t` falls on in `zone`.
pub fn local_day(t: SystemTime, zone: Zone) -> NaiveDate {
    const DAY_MS: i64 = 86_400_000;
    let ms = i64::try_from(epoch_ms(t)).unwrap_or(i64::MAX);
    let local = ms.saturating_add(i64::from(zone.offset(t)) * 1000);
    // 719,163 days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
    let days = local.div_euclid(DAY_MS) + 719_163;
    i32::try_from(days)
        .ok()
        .and_then(NaiveDate::from_num_days_from_ce_opt)
        .unwrap_or(NaiveDate::MAX)
}

/// How much the book keeps (`[savings]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Days kept, today included.
    pub days: u32,
    /// Conversations kept one by one; older and further ones are summed.
    pub conversations: usize,
}

/// One conversation's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConversationFigures {
    pub first_ms: u64,
    pub last_ms: u64,
    pub figures: Figures,
}

/// Conversations no longer kept one by one, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Older {
    pub conversations: u64,
    pub figures: Figures,
}

/// The figures per day (in the zone) and per conversation (shim and id).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Book {
    pub days: BTreeMap<NaiveDate, Figures>,
    pub conversations: HashMap<(String, String), ConversationFigures>,
    pub older: Older,
    pub ratios: BTreeMap<String, Ratio>,
}

impl Book {
    /// Books `turn`, done at `now`: its figures go to the day `now` is in
    /// `zone` and to its conversation. Returns them (the metrics add
    /// them too); nothing is booked for a call that cost nothing.
    pub fn book(
        &mut self,
        turn: &TurnRecord,
        now: SystemTime,
        zone: Zone,
        limits: Limits,
    ) -> Figures {
        let ratio = self.ratios.entry(turn.shim.to_owned()).or_default();
        let f = price(turn, ratio);
        if f.is_empty() {
            return f;
        }
        let day = local_day(now, zone);
        self.days.entry(day).or_default().add(&f);
        let at = epoch_ms(now);
        let c = self
            .conversations
            .entry((turn.shim.to_owned(), turn.conversation.clone()))
            .or_insert(ConversationFigures {
                first_ms: at,
                last_ms: at,
                figures: Figures::default(),
            });
        c.last_ms = c.last_ms.max(at);
        c.figures.add(&f);
        self.prune(day, zone, limits);
        f
    }

    /// Drops days before the `limits.days` that end with `today`, and sums
    /// into [`Older`] the conversations last seen before them or past
    /// `limits.conversations` (the least recent first).
    pub fn prune(&mut self, today: NaiveDate, zone: Zone, limits: Limits) {
        let keep = i64::from(limits.days.max(1)) - 1;
        let first = today
            .checked_sub_signed(chrono::TimeDelta::days(keep))
            .unwrap_or(NaiveDate::MIN);
        self.days.retain(|d, _| *d >= first);
        let stale: Vec<_> = self
            .conversations
            .iter()
            .filter(|(_, c)| local_day(from_ms(c.last_ms), zone) < first)
            .map(|(k, _)| k.clone())
            .collect();
        for k in stale {
            self.retire(&k);
        }
        if self.conversations.len() > limits.conversations {
            let mut by_age: Vec<_> = self
                .conversations
                .iter()
                .map(|(k, c)| (c.last_ms, k.clone()))
                .collect();
            by_age.sort();
            let over = self.conversations.len() - limits.conversations;
            for (_, k) in by_age.into_iter().take(over) {
                self.retire(&k);
            }
        }
    }

    fn retire(&mut self, key: &(String, String)) {
        if let Some(c) = self.conversations.remove(key) {
            self.older.conversations += 1;
            self.older.figures.add(&c.figures);
        }
    }

    /// The `/status` `savings` members (without `file`): `today`, `days`
    /// newest first, `conversations` most recent first, `olderConversations`
    /// and `totals` (all kept days).
    pub fn status(&self, now: SystemTime, zone: Zone, limits: Limits) -> Map<String, Value> {
        let today = local_day(now, zone);
        let day = |d: &NaiveDate, f: &Figures| {
            let mut m = f.to_json();
            m.insert("date".into(), json!(d.to_string()));
            Value::Object(m)
        };
        let mut totals = Figures::default();
        for f in self.days.values() {
            totals.add(f);
        }
        let mut convs: Vec<_> = self.conversations.iter().collect();
        convs.sort_by(|a, b| b.1.last_ms.cmp(&a.1.last_ms).then(a.0.cmp(b.0)));
        let conversations: Vec<Value> = convs
            .into_iter()
            .map(|((shim, id), c)| {
                let mut m = c.figures.to_json();
                m.insert("shim".into(), json!(shim));
                m.insert("id".into(), json!(id));
                m.insert("firstAt".into(), json!(iso8601(from_ms(c.first_ms))));
                m.insert("lastAt".into(), json!(iso8601(from_ms(c.last_ms))));
                Value::Object(m)
            })
            .collect();
        let mut older = self.older.figures.to_json();
        older.insert("conversations".into(), json!(self.older.conversations));
        let mut m = Map::new();
        m.insert("method".into(), json!(METHOD));
        m.insert("zone".into(), json!(zone.name()));
        m.insert(
            "keep".into(),
            json!({"days": limits.days, "conversations": limits.conversations}),
        );
        m.insert(
            "today".into(),
            day(&today, self.days.get(&today).unwrap_or(&Figures::default())),
        );
        m.insert(
            "days".into(),
            self.days.iter().rev().map(|(d, f)| day(d, f)).collect(),
        );
        m.insert("conversations".into(), Value::Array(conversations));
        m.insert("olderConversations".into(), Value::Object(older));
        m.insert("totals".into(), Value::Object(totals.to_json()));
        m
    }
}

/// The instant `ms` after the epoch.
pub fn from_ms(ms: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(ms)
}

#[cfg(test)]
mod tests;

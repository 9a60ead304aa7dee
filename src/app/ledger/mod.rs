//! What compression saved, in tokens: per agent call, the size of the
//! agent's own request (at the ingress, before the compressor), what went
//! upstream after it and what the provider reported for it, and the
//! compressor's own calls (summaries, titles, its tool-loop rounds) as a
//! cost; summed per day (in the `[ordering] zone`) and per conversation,
//! kept across restarts in the state dir (`store`), shown in `/status`
//! (`savings`), `/metrics` (`shimgate_tokens_*`) and the panel.
//!
//! - `book`: pure rules (what a call cost, which of its requests answered
//!   the agent, the estimate, the bounds);
//! - `call`: a call followed from the ingress through the return leg to the
//!   provider's usage report;
//! - `store`: the savings file.

pub mod book;
pub mod call;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::Notify;

use crate::chain::rest::Zone;
use crate::config::Config;
use book::{Book, Figures, Limits, TurnRecord};
use call::{Booking, Post, Turn};
use store::Store;

/// The writer saves at most this often (a busy gateway books every call).
const DEBOUNCE: Duration = Duration::from_secs(1);
/// After a booking the writer waits this long, so the other calls that end
/// together are in the same save.
const SETTLE: Duration = Duration::from_millis(20);

/// The wall clock the ledger books by (a test's moves with tokio's paused
/// clock).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// Token counters since start, per shim, for `/metrics`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    pub agent: u64,
    pub sent: u64,
    /// Of calls whose compressed request cost less than the agent's.
    pub saved: u64,
    /// Of calls whose compressed request cost more than the agent's.
    pub added: u64,
    pub cached: u64,
    pub side_calls: u64,
    pub side_tokens: u64,
}

/// The ledger every listener books into.
pub struct Ledger {
    book: Mutex<Book>,
    /// Calls in flight by rid (the return leg finds its call by it).
    turns: Mutex<HashMap<String, Weak<Turn>>>,
    totals: Mutex<BTreeMap<&'static str, Totals>>,
    store: Store,
    /// A booking happened (the writer saves).
    changed: Notify,
    clock: Clock,
}

impl Ledger {
    /// The ledger of `config`: its savings file read (`[savings] file`).
    pub fn open(config: &Config) -> Arc<Ledger> {
        Ledger::with_clock(config, Arc::new(SystemTime::now))
    }

    /// [`Ledger::open`] booking by `clock`.
    pub fn with_clock(config: &Config, clock: Clock) -> Arc<Ledger> {
        let path = config.savings.file.then(|| {
            config
                .state_dir
                .join(store::file_name(config.source.as_deref()))
        });
        let (store, mut book) = Store::open(path);
        let limits = limits(config);
        book.prune(
            book::local_day(clock(), config.ordering.zone),
            config.ordering.zone,
            limits,
        );
        Arc::new(Ledger {
            book: Mutex::new(book),
            turns: Mutex::default(),
            totals: Mutex::default(),
            store,
            changed: Notify::new(),
            clock,
        })
    }

    fn booking(self: &Arc<Self>, config: &Config) -> Booking {
        Booking {
            ledger: self.clone(),
            zone: config.ordering.zone,
            limits: limits(config),
        }
    }

    /// The agent's call `rid` goes to the compressor. Held by the ingress
    /// until the agent has its answer; the return leg measures it.
    pub fn open_turn(
        self: &Arc<Self>,
        config: &Config,
        rid: &str,
        shim: &'static str,
        conversation: &str,
    ) -> Arc<Turn> {
        let turn = Arc::new(Turn::new(
            self.booking(config),
            rid.to_owned(),
            shim,
            conversation.to_owned(),
        ));
        self.lock_turns()
            .insert(rid.to_owned(), Arc::downgrade(&turn));
        turn
    }

    /// A call the ingress sends upstream itself, as the agent sent it.
    pub fn direct_turn(
        self: &Arc<Self>,
        config: &Config,
        shim: &'static str,
        conversation: &str,
    ) -> Arc<Turn> {
        Arc::new(Turn::new(
            self.booking(config),
            String::new(),
            shim,
            conversation.to_owned(),
        ))
    }

    /// A return-leg request for `rid` (`side` by its shape): part of the
    /// agent's call while it runs, else the compressor's own (booked alone
    /// as a side call). Its size comes later ([`Post::measured`]).
    pub fn post(
        self: &Arc<Self>,
        config: &Config,
        rid: &str,
        (shim, conversation): (&'static str, &str),
        side: bool,
    ) -> Arc<Post> {
        // Upgraded under the lock, used after it: a turn that ends here
        // books (and takes this lock) only once it is released.
        let turn = self.lock_turns().get(rid).and_then(Weak::upgrade);
        match turn {
            Some(t) => t.post(side, 0),
            None => Arc::new(Post::alone(
                self.booking(config),
                shim,
                conversation.to_owned(),
                0,
            )),
        }
    }

    fn lock_turns(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<Turn>>> {
        self.turns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A call is over: its figures are booked.
    fn done(&self, rid: &str, record: &TurnRecord, zone: Zone, limits: Limits) {
        if !rid.is_empty() {
            let mut turns = self.lock_turns();
            if turns.get(rid).is_some_and(|w| w.strong_count() == 0) {
                turns.remove(rid);
            }
        }
        let f = self.lock_book().book(record, (self.clock)(), zone, limits);
        if f.is_empty() {
            return;
        }
        let mut totals = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        let t = totals.entry(record.shim).or_default();
        let saved = f.saved();
        t.agent = t.agent.saturating_add(f.agent_tokens);
        t.sent = t.sent.saturating_add(f.sent_tokens);
        if saved >= 0 {
            t.saved = t.saved.saturating_add(saved.unsigned_abs());
        } else {
            t.added = t.added.saturating_add(saved.unsigned_abs());
        }
        t.cached = t.cached.saturating_add(f.cached_tokens);
        t.side_calls = t.side_calls.saturating_add(f.side_calls);
        t.side_tokens = t.side_tokens.saturating_add(f.side_tokens);
        drop(totals);
        self.changed.notify_one();
    }

    /// Counters since start for `shim`.
    pub fn totals(&self, shim: &str) -> Totals {
        self.totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(shim)
            .copied()
            .unwrap_or_default()
    }

    /// The `/status` `savings` section.
    pub fn status(&self, config: &Config) -> Value {
        let mut m = self
            .lock_book()
            .status((self.clock)(), config.ordering.zone, limits(config));
        m.insert("file".into(), self.store.status());
        Value::Object(m)
    }

    /// The figures of today (in `zone`), summed.
    pub fn today(&self, zone: Zone) -> Figures {
        let now = (self.clock)();
        self.lock_book()
            .days
            .get(&book::local_day(now, zone))
            .copied()
            .unwrap_or_default()
    }

    /// Writes the book now (a no-op without a file).
    pub async fn save(&self) {
        if !self.store.is_on() {
            return;
        }
        let now = (self.clock)();
        let bytes = store::to_bytes(&self.lock_book(), now);
        self.store.write(bytes, now).await;
    }

    /// Saves after each booking, at most once per [`DEBOUNCE`]; runs until
    /// aborted (shutdown saves once more).
    pub async fn writer(self: Arc<Self>) {
        if !self.store.is_on() {
            return;
        }
        loop {
            self.changed.notified().await;
            tokio::time::sleep(SETTLE).await;
            self.save().await;
            tokio::time::sleep(DEBOUNCE - SETTLE).await;
        }
    }
}

fn limits(config: &Config) -> Limits {
    Limits {
        days: config.savings.days,
        conversations: config.savings.conversations,
    }
}

#[cfg(test)]
mod tests;

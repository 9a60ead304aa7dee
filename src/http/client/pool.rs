//! Idle keep-alive connections, by origin: a finished answer's connection
//! is put back and the next call to the same upstream takes it instead of
//! connecting (and shaking hands for TLS) again.
//!
//! No task watches an idle connection: one is checked when it is taken (a
//! peer that closed it, or sent bytes nobody asked for, has it dropped
//! there), and a sweep every [`SWEEP_EVERY`] drops the ones idle past the
//! timeout or closed by their peer, so a quiet gateway holds no sockets in
//! CLOSE_WAIT for long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::connect::{Io, Origin};

/// How often idle connections are looked over.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// At most this many idle connections are kept per origin; beyond it the
/// longest idle is closed. A burst of 2,000 streams leaves at most this
/// many sockets open afterwards, and the next burst connects the rest anew.
pub const MAX_IDLE_PER_ORIGIN: usize = 256;

struct Idle {
    io: Io,
    since: Instant,
}

/// The idle connections of one client.
pub struct Pool {
    idle: Mutex<HashMap<Origin, Vec<Idle>>>,
    timeout: Duration,
    sweeping: std::sync::atomic::AtomicBool,
}

impl Pool {
    pub fn new(timeout: Duration) -> Arc<Pool> {
        Arc::new(Pool {
            idle: Mutex::default(),
            timeout,
            sweeping: false.into(),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, HashMap<Origin, Vec<Idle>>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A usable idle connection to `origin`, the most recently used first.
    pub fn take(&self, origin: &Origin) -> Option<Io> {
        let now = Instant::now();
        loop {
            let idle = self.idle().get_mut(origin)?.pop()?;
            if now.duration_since(idle.since) < self.timeout && still_open(&idle.io) {
                return Some(idle.io);
            }
        }
    }

    /// Puts a connection whose answer was read to its end back.
    pub fn put(self: &Arc<Self>, origin: &Origin, io: Io) {
        let now = Instant::now();
        let mut idle = self.idle();
        let list = idle.entry(origin.clone()).or_default();
        list.retain(|i| now.duration_since(i.since) < self.timeout);
        if list.len() >= MAX_IDLE_PER_ORIGIN {
            list.remove(0);
        }
        list.push(Idle { io, since: now });
        drop(idle);
        self.start_sweeping();
    }

    /// How many idle connections are kept (all origins).
    pub fn idle_count(&self) -> usize {
        self.idle().values().map(Vec::len).sum()
    }

    /// Drops the connections idle too long or closed by their peer.
    pub fn sweep(&self) {
        let now = Instant::now();
        let mut idle = self.idle();
        for list in idle.values_mut() {
            list.retain_mut(|i| now.duration_since(i.since) < self.timeout && still_open(&i.io));
        }
        idle.retain(|_, list| !list.is_empty());
    }

    /// Starts the sweep with the first connection put back (a client that
    /// is never used, or used outside a runtime, has none). It holds the
    /// pool weakly and ends with it.
    fn start_sweeping(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.sweeping.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            self.sweeping.store(false, Ordering::Relaxed);
            return;
        };
        let pool: Weak<Pool> = Arc::downgrade(self);
        let first = Instant::now() + SWEEP_EVERY;
        rt.spawn(async move {
            let mut tick = tokio::time::interval_at(first, SWEEP_EVERY);
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else { return };
                pool.sweep();
            }
        });
    }
}

/// Whether an idle connection can carry a request: nothing to read on its
/// socket (a read would wait). Its peer's close (EOF, a reset, a TLS close
/// alert) or bytes it sent unasked mean it cannot. Asked of the socket
/// itself (a peek that takes nothing), not of the runtime's readiness,
/// which learns of a close only when the reactor next runs.
fn still_open(io: &Io) -> bool {
    let tcp = match io {
        Io::Tcp(s) => s,
        Io::Tls(s) => s.get_ref().0,
    };
    crate::os::nothing_to_read(tcp)
}

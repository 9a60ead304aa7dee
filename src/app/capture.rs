//! What the capture listener did, host by host (`/status` `capture`,
//! `/metrics`, the panel's capture card), and the one rule it decides by:
//! a host whose clients refused shimgate's certificate
//! `[capture] tunnel_after_refusals` times in a row is tunnelled
//! (untouched) instead, until a reload or restart, so a client that does
//! not trust the local CA keeps working, uncompressed.
//!
//! The hosts of the intercept list always have a row; other hosts (the
//! tunnels) get one each up to [`MAX_OTHER_HOSTS`], the rest are summed in
//! `others`: any `CONNECT` names a host, and the table must stay small.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::clock::iso8601;
use crate::config::capture::CaptureConfig;

/// Hosts not on the intercept list kept one by one.
pub const MAX_OTHER_HOSTS: usize = 64;

/// How one `CONNECT` (or absolute-form request) was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Decrypted: TLS with a leaf of the local CA.
    Intercepted,
    /// A byte tunnel: the host is not on the intercept list, or it was
    /// tunnelled after refusals, or the CA cannot sign for it.
    Tunnelled,
    /// A loopback target: a direct tunnel, never decrypted, never through
    /// an upstream proxy.
    Loopback,
}

/// What happened on one host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostBook {
    pub intercepted: u64,
    pub tunnelled: u64,
    pub loopback: u64,
    /// Requests on a decrypted host sent to the real host unchanged.
    pub forwarded: u64,
    /// Inference calls handed to a shim.
    pub handed: u64,
    /// Absolute-form (plain proxy) requests for the host.
    pub absolute: u64,
    /// Handshakes the client refused (it does not trust the CA).
    pub client_refusals: u64,
    /// Refusals since the last handshake it completed.
    pub refusals_in_a_row: u32,
    /// The last refusal's reason (what TLS said) and when.
    pub last_refusal: Option<(String, SystemTime)>,
    /// Tunnelled instead of decrypted since, and why.
    pub tunnelling: Option<(SystemTime, String)>,
    /// The last failure to reach the host (no secret: proxies are shown
    /// without their user info).
    pub last_error: Option<String>,
}

impl HostBook {
    /// A refusal (`reason`) at `now`: `true` when it makes the host a
    /// tunnel (the `threshold`-th in a row; 0 never does).
    pub fn refused(&mut self, reason: &str, now: SystemTime, threshold: u32) -> bool {
        self.client_refusals += 1;
        self.refusals_in_a_row = self.refusals_in_a_row.saturating_add(1);
        self.last_refusal = Some((reason.to_owned(), now));
        let trips =
            threshold > 0 && self.refusals_in_a_row >= threshold && self.tunnelling.is_none();
        if trips {
            self.tunnelling = Some((
                now,
                format!(
                    "its client refused shimgate's certificate {} times in a row ({reason}): tunnelled untouched until a reload or restart; give the client the local CA (docs/capture.md)",
                    self.refusals_in_a_row
                ),
            ));
        }
        trips
    }

    /// A handshake the client completed: the refusals in a row end.
    pub fn accepted(&mut self) {
        self.refusals_in_a_row = 0;
    }

    fn json(&self, host: &str, listed: bool) -> Value {
        let mode = match (&self.tunnelling, listed) {
            (Some(_), _) | (None, false) => "tunnel",
            (None, true) => "intercept",
        };
        json!({
            "host": host,
            "listed": listed,
            "mode": mode,
            "intercepted": self.intercepted,
            "tunnelled": self.tunnelled,
            "loopback": self.loopback,
            "forwarded": self.forwarded,
            "handed": self.handed,
            "absolute": self.absolute,
            "clientRefusals": self.client_refusals,
            "refusalsInARow": self.refusals_in_a_row,
            "lastRefusal": self.last_refusal.as_ref().map(|(why, at)| json!({"reason": why, "at": iso8601(*at)})),
            "tunnelledSince": self.tunnelling.as_ref().map(|(at, _)| iso8601(*at)),
            "why": self.tunnelling.as_ref().map(|(_, why)| why),
            "lastError": self.last_error,
        })
    }

    fn add(&mut self, other: &HostBook) {
        self.intercepted += other.intercepted;
        self.tunnelled += other.tunnelled;
        self.loopback += other.loopback;
        self.forwarded += other.forwarded;
        self.handed += other.handed;
        self.absolute += other.absolute;
        self.client_refusals += other.client_refusals;
    }
}

#[derive(Debug, Default)]
struct Book {
    hosts: BTreeMap<String, HostBook>,
    /// Hosts past [`MAX_OTHER_HOSTS`], summed.
    others: HostBook,
    /// Calls handed to each shim.
    handed: BTreeMap<&'static str, u64>,
    /// The implicit routes calls went to (`capture:HOST`), per shim.
    routes: BTreeMap<&'static str, Vec<String>>,
    /// Origin-form requests refused (a web page, or a client that took
    /// the proxy for a server).
    not_proxy_requests: u64,
}

/// The capture listener's books.
#[derive(Debug, Default)]
pub struct CaptureBook {
    book: Mutex<Book>,
    /// The bound address, or why it could not bind.
    listening: Mutex<Option<Result<SocketAddr, String>>>,
    /// The proxy setting (`env` or `system`) that names the capture
    /// listener itself, ignored for shimgate's own connections.
    ignored: Mutex<Option<&'static str>>,
}

impl CaptureBook {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `host`'s row (lowercase; a new row for a host off the
    /// list only while there is room, else the `others` row).
    fn on<R>(&self, host: &str, listed: bool, f: impl FnOnce(&mut HostBook) -> R) -> R {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let mut book = self.book();
        let book = &mut *book;
        if !book.hosts.contains_key(&host) {
            let others = book.hosts.len();
            if !listed && others >= MAX_OTHER_HOSTS {
                return f(&mut book.others);
            }
        }
        f(book.hosts.entry(host).or_default())
    }

    /// The listener is up at `addr`, or could not bind (`Err`).
    pub fn listening(&self, at: Result<SocketAddr, String>) {
        *self.listening.lock().unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// The bound address.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.listening
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|r| r.as_ref().ok().copied())
    }

    /// The proxy setting of `source` names this listener (`None`: none does).
    pub fn ignoring(&self, source: Option<&'static str>) {
        *self.ignored.lock().unwrap_or_else(|p| p.into_inner()) = source;
    }

    /// Whether `host` is tunnelled after refusals.
    pub fn tripped(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.book()
            .hosts
            .get(&host)
            .is_some_and(|h| h.tunnelling.is_some())
    }

    /// One connection to `host`, taken as `taken`.
    pub fn connected(&self, host: &str, listed: bool, taken: Taken) {
        self.on(host, listed, |h| match taken {
            Taken::Intercepted => h.intercepted += 1,
            Taken::Tunnelled => h.tunnelled += 1,
            Taken::Loopback => h.loopback += 1,
        });
    }

    /// The client completed the handshake for `host`.
    pub fn accepted(&self, host: &str) {
        self.on(host, true, HostBook::accepted);
    }

    /// The client refused shimgate's certificate for `host`; `Some(why)`
    /// when that made the host a tunnel (the caller logs it).
    pub fn refused(&self, host: &str, reason: &str, threshold: u32) -> Option<String> {
        self.on(host, true, |h| {
            h.refused(reason, SystemTime::now(), threshold)
                .then(|| h.tunnelling.as_ref().map(|(_, why)| why.clone()))
                .flatten()
        })
    }

    /// A request on a decrypted host forwarded unchanged.
    pub fn forwarded(&self, host: &str) {
        self.on(host, true, |h| h.forwarded += 1);
    }

    /// An absolute-form request for `host`.
    pub fn absolute(&self, host: &str, listed: bool) {
        self.on(host, listed, |h| h.absolute += 1);
    }

    /// An inference call on `host` handed to `shim`, on `route` when it
    /// runs on the implicit route (`capture:HOST`).
    pub fn handed(&self, host: &str, shim: &'static str, route: Option<&str>) {
        self.on(host, true, |h| h.handed += 1);
        let mut book = self.book();
        *book.handed.entry(shim).or_default() += 1;
        if let Some(route) = route {
            let routes = book.routes.entry(shim).or_default();
            if !routes.iter().any(|r| r == route) {
                routes.push(route.to_owned());
            }
        }
    }

    /// `host` could not be reached (`why` names no secret).
    pub fn failed(&self, host: &str, listed: bool, why: String) {
        self.on(host, listed, |h| h.last_error = Some(why));
    }

    /// An origin-form request refused.
    pub fn not_a_proxy_request(&self) {
        self.book().not_proxy_requests += 1;
    }

    /// A reload: hosts tunnelled after refusals are decrypted again.
    pub fn reset_tunnelling(&self) {
        for h in self.book().hosts.values_mut() {
            h.tunnelling = None;
            h.refusals_in_a_row = 0;
        }
    }

    /// The `/status` `capture` section.
    pub fn status(&self, config: &CaptureConfig) -> Value {
        let book = self.book();
        let listed = |h: &str| config.intercepts(h);
        let mut rows: Vec<Value> = config
            .intercept
            .iter()
            .map(|h| book.hosts.get(h).cloned().unwrap_or_default().json(h, true))
            .collect();
        rows.extend(
            book.hosts
                .iter()
                .filter(|(h, _)| !listed(h))
                .map(|(h, b)| b.json(h, false)),
        );
        let mut totals = book.others.clone();
        for b in book.hosts.values() {
            totals.add(b);
        }
        let listening = self.listening.lock().unwrap_or_else(|p| p.into_inner());
        json!({
            "listen": config.listen.map(|a| a.to_string()),
            "listening": matches!(*listening, Some(Ok(_))),
            "addr": listening.as_ref().and_then(|r| r.as_ref().ok()).map(|a| a.to_string()),
            "startError": listening.as_ref().and_then(|r| r.as_ref().err()),
            "intercept": config.intercept,
            "tunnelAfterRefusals": config.tunnel_after_refusals,
            "ignoredProxySetting": *self.ignored.lock().unwrap_or_else(|p| p.into_inner()),
            "connections": {
                "intercepted": totals.intercepted,
                "tunnelled": totals.tunnelled,
                "loopback": totals.loopback,
            },
            "requests": {
                "handed": totals.handed,
                "forwarded": totals.forwarded,
                "absolute": totals.absolute,
                "notProxyRequests": book.not_proxy_requests,
            },
            "clientRefusals": totals.client_refusals,
            "handed": book.handed,
            "implicitRoutes": book.routes,
            "hosts": rows,
            "others": {
                "tunnelled": book.others.tunnelled,
                "absolute": book.others.absolute,
            },
        })
    }

    /// What `/metrics` reads: connections by how they were taken,
    /// requests by kind, calls handed per shim, refusals per listed host,
    /// hosts tunnelled after refusals.
    pub fn metrics(&self, config: &CaptureConfig) -> CaptureMetrics {
        let book = self.book();
        let mut totals = book.others.clone();
        for b in book.hosts.values() {
            totals.add(b);
        }
        CaptureMetrics {
            listening: self.addr().is_some(),
            connections: [
                ("intercepted", totals.intercepted),
                ("tunnelled", totals.tunnelled),
                ("loopback", totals.loopback),
            ],
            requests: [
                ("handed", totals.handed),
                ("forwarded", totals.forwarded),
                ("absolute", totals.absolute),
                ("not_proxy_request", book.not_proxy_requests),
            ],
            handed: crate::registry::names()
                .map(|s| (s, book.handed.get(s).copied().unwrap_or(0)))
                .collect(),
            refusals: config
                .intercept
                .iter()
                .map(|h| {
                    (
                        h.clone(),
                        book.hosts.get(h).map_or(0, |b| b.client_refusals),
                    )
                })
                .collect(),
            tunnelling: book
                .hosts
                .values()
                .filter(|h| h.tunnelling.is_some())
                .count() as u64,
        }
    }
}

/// The capture listener's values for one `/metrics` scrape.
#[derive(Debug, Default)]
pub struct CaptureMetrics {
    pub listening: bool,
    pub connections: [(&'static str, u64); 3],
    pub requests: [(&'static str, u64); 4],
    pub handed: Vec<(&'static str, u64)>,
    /// Per host of the intercept list (a bounded label set).
    pub refusals: Vec<(String, u64)>,
    pub tunnelling: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_is_tunnelled_after_the_threshold_of_refusals_in_a_row() {
        let now = SystemTime::UNIX_EPOCH;
        let mut h = HostBook::default();
        assert!(!h.refused("closed", now, 3));
        assert!(!h.refused("closed", now, 3));
        h.accepted();
        assert!(
            !h.refused("closed", now, 3),
            "a handshake in between resets the run"
        );
        assert!(!h.refused("closed", now, 3));
        assert!(h.refused("alert unknown_ca", now, 3), "the third in a row");
        assert!(!h.refused("closed", now, 3), "tripped once");
        assert_eq!(h.client_refusals, 6, "every refusal counts");
        assert!(h
            .tunnelling
            .as_ref()
            .unwrap()
            .1
            .contains("3 times in a row"));
        let mut never = HostBook::default();
        for _ in 0..10 {
            assert!(!never.refused("closed", now, 0), "0: never");
        }
    }

    #[test]
    fn a_reload_decrypts_a_tunnelled_host_again() {
        let book = CaptureBook::default();
        for _ in 0..2 {
            assert_eq!(
                book.refused("API2.qoder.sh", "closed", 2).is_some(),
                book.tripped("api2.qoder.sh")
            );
        }
        assert!(book.tripped("api2.qoder.sh"));
        book.reset_tunnelling();
        assert!(!book.tripped("api2.qoder.sh"));
        let config = CaptureConfig::default();
        let st = book.status(&config);
        let row = &st["hosts"][0];
        assert_eq!(row["host"], "api2.qoder.sh");
        assert_eq!(row["clientRefusals"], 2);
        assert_eq!(row["mode"], "intercept");
    }

    #[test]
    fn hosts_off_the_list_are_kept_up_to_the_cap_then_summed() {
        let book = CaptureBook::default();
        for i in 0..MAX_OTHER_HOSTS + 10 {
            book.connected(&format!("h{i}.example"), false, Taken::Tunnelled);
        }
        book.connected("api2.qoder.sh", true, Taken::Intercepted);
        let st = book.status(&CaptureConfig::default());
        let rows = st["hosts"].as_array().unwrap();
        assert_eq!(
            rows.len(),
            CaptureConfig::default().intercept.len() + MAX_OTHER_HOSTS
        );
        assert_eq!(st["others"]["tunnelled"], 10);
        assert_eq!(
            st["connections"]["tunnelled"],
            (MAX_OTHER_HOSTS + 10) as u64
        );
        assert_eq!(st["connections"]["intercepted"], 1);
    }
}

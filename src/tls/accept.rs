//! The listener side of TLS: a connection whose first byte is a TLS
//! handshake gets here (`server::conn`). Its ClientHello is read first,
//! then the name it asks for (SNI) is decided on ([`decide`]): loopback
//! (`localhost`, or no name on a connection to a loopback address, which
//! gets a leaf for that address) and the names of `[ca] names` the CA may
//! sign for are answered with their leaf; any other name is refused with
//! a handshake alert. Every outcome is counted by reason ([`Outcome`], in
//! `/status` and `/metrics`) and logged with the name asked for, never a
//! key.
//!
//! The CA is read (or made, on first use) when the first TLS connection
//! arrives, off the runtime's thread; its files are looked at again at
//! most once a second, so a CA rotated while shimgate runs is picked up
//! without a restart.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::server::{Acceptor, ClientHello, ResolvesServerCert, ServerConfig};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::{self, AlertDescription};
use tokio_rustls::server::TlsStream;
use tokio_rustls::LazyConfigAcceptor;
use tracing::{info, warn};

use super::ca::{self, Authority, CaFiles};
use super::leaf::{self, Leaves};
use super::names::{self, LeafName, Permitted};
use crate::clock::iso8601;
use crate::config::Config;

/// How often the CA's files are looked at for a rotation.
const RECHECK: Duration = Duration::from_secs(1);

/// How a TLS connection's start ended: the one list `/status`,
/// `/metrics` and the log name them by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Handshake done.
    Ok,
    /// The client asked for a name that is neither loopback nor in `[ca] names`.
    UnknownName,
    /// A name of `[ca] names` the CA's constraints do not permit.
    NotInCa,
    /// No name (SNI) on a connection to an address the CA cannot sign for.
    NoName,
    /// The client refused shimgate's certificate (it does not trust the
    /// CA): an alert about it, or the connection closed after it was sent.
    ClientRefused,
    /// Any other handshake failure (not TLS, no common protocol or cipher, reset).
    Protocol,
    /// Not done within `[limits] header_read_timeout_ms`.
    Timeout,
    /// No usable CA (it could not be read or made, or it has ended).
    NoCa,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::UnknownName,
        Outcome::NotInCa,
        Outcome::NoName,
        Outcome::ClientRefused,
        Outcome::Protocol,
        Outcome::Timeout,
        Outcome::NoCa,
    ];

    /// The spelling in `/status`, `/metrics` and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::UnknownName => "unknown_name",
            Outcome::NotInCa => "not_in_ca",
            Outcome::NoName => "no_name",
            Outcome::ClientRefused => "client_refused",
            Outcome::Protocol => "protocol",
            Outcome::Timeout => "timeout",
            Outcome::NoCa => "no_ca",
        }
    }

    fn index(self) -> usize {
        Outcome::ALL.iter().position(|o| *o == self).unwrap_or(0)
    }

    /// What the log says of a refusal, with what to do.
    fn advice(self) -> &'static str {
        match self {
            Outcome::Ok => "TLS handshake done",
            Outcome::UnknownName => "TLS refused: the client asked for a name that is not loopback and not in [ca] names",
            Outcome::NotInCa => "TLS refused: [ca] names lists this name but the local CA cannot sign for it (`shimgate ca rotate` makes one that may; then give clients the new PEM)",
            Outcome::NoName => "TLS refused: no name (SNI) asked for, on an address the local CA cannot sign for (loopback only)",
            Outcome::ClientRefused => "TLS: the client refused shimgate's certificate: give it the local CA (`shimgate ca path`; NODE_EXTRA_CA_CERTS for Node clients such as the Qoder CLI)",
            Outcome::Protocol => "TLS handshake failed",
            Outcome::Timeout => "TLS handshake not done within [limits] header_read_timeout_ms",
            Outcome::NoCa => "TLS refused: no usable local CA",
        }
    }
}

/// Which leaf a connection gets, or why none: from the name it asked for
/// (`sni`), the address it came to (`local`), the names shimgate answers
/// (`wanted`: loopback and `[ca] names`) and what the CA may sign.
pub fn decide(
    sni: Option<&str>,
    local: Option<IpAddr>,
    wanted: &Permitted,
    ca_permits: impl Fn(&LeafName) -> bool,
) -> Result<LeafName, Outcome> {
    let name = match sni {
        None => match local.map(|ip| ip.to_canonical()) {
            Some(ip) if names::LOOPBACK_RANGES.iter().any(|r| names::ip_in(ip, *r)) => {
                LeafName::Ip(ip)
            }
            _ => return Err(Outcome::NoName),
        },
        Some(sni) => LeafName::Dns(sni.trim_end_matches('.').to_ascii_lowercase()),
    };
    if !wanted.permits(&name) {
        return Err(Outcome::UnknownName);
    }
    if !ca_permits(&name) {
        return Err(Outcome::NotInCa);
    }
    Ok(name)
}

/// What decides a connection's leaf: the name the client asks for (a
/// listener's own connection, with the address it came to), or the host
/// the capture listener decrypts.
#[derive(Clone, Copy)]
enum Asked<'a> {
    Sni(Option<IpAddr>),
    Named(&'a str),
}

/// The certificate resolver of a refusal: none, so rustls ends the
/// handshake with an alert.
#[derive(Debug)]
struct Refuse;

impl ResolvesServerCert for Refuse {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}

/// The wall clock leaves are minted and renewed by (a test sets its own).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The CA in use and when its files were last looked at.
struct Current {
    authority: Arc<Authority>,
    stamp: Stamp,
    checked: Instant,
}

/// What tells a rotated CA from the one loaded: its files' times and sizes.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(files: &CaFiles) -> Stamp {
    [files.root(), files.intermediate(), files.key()]
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok()?;
            Some((m.modified().ok()?, m.len()))
        })
        .collect()
}

/// TLS for every listener of one shimgate: the CA, the leaves, the counts.
pub struct Tls {
    files: CaFiles,
    names: Vec<String>,
    wanted: Permitted,
    current: Mutex<Option<Current>>,
    /// One load (or make) at a time; the last failure and when, so a CA
    /// that cannot be read is tried again at most once a [`RECHECK`].
    loading: tokio::sync::Mutex<Option<(Instant, String)>>,
    leaves: Leaves,
    counts: [AtomicU64; Outcome::ALL.len()],
    clock: Clock,
    refuse: Option<Arc<ServerConfig>>,
}

impl Tls {
    /// TLS for `config`'s state dir and `[ca] names` (nothing is read yet).
    pub fn new(config: &Config) -> Tls {
        let refuse = rustls::ServerConfig::builder_with_provider(leaf::provider())
            .with_safe_default_protocol_versions()
            .ok()
            .map(|b| Arc::new(b.with_no_client_auth().with_cert_resolver(Arc::new(Refuse))));
        Tls {
            files: CaFiles::in_state_dir(&config.state_dir),
            names: config.ca.names.clone(),
            wanted: Permitted::for_names(&config.ca.names),
            current: Mutex::new(None),
            loading: tokio::sync::Mutex::new(None),
            leaves: Leaves::default(),
            counts: Default::default(),
            clock: Arc::new(SystemTime::now),
            refuse,
        }
    }

    /// The same with another wall clock.
    pub fn with_clock(mut self, clock: Clock) -> Tls {
        self.clock = clock;
        self
    }

    /// The root certificate clients are given.
    pub fn root_pem(&self) -> PathBuf {
        self.files.root()
    }

    /// At start: reads the CA if there is one and says what it is, whether
    /// it matches `[ca] names`, and whether it ends soon. Makes none.
    pub fn at_start(&self) {
        if !self.files.any_exists() {
            info!(
                dir = %self.files.dir.display(),
                "local CA: none yet; made on the first TLS connection or by `shimgate ca path`"
            );
            return;
        }
        match ca::load(&self.files) {
            Ok(a) => {
                self.report(&a, false);
                self.install(Arc::new(a));
            }
            Err(e) => warn!("local CA: {e}"),
        }
    }

    /// Logs what a CA is, and what is wrong with it.
    fn report(&self, a: &Authority, made: bool) {
        info!(
            fingerprint = %a.root.fingerprint,
            not_after = %iso8601(a.not_after()),
            root = %a.files.root().display(),
            "{}",
            if made { "local CA made" } else { "local CA" }
        );
        if let Some(text) = a.permitted.compare(&self.wanted).describe() {
            warn!("local CA: {text}");
        }
        if let Some(left) = a.ending((self.clock)()) {
            warn!(
                days_left = left.as_secs() / 86_400,
                "local CA ends at {}: `shimgate ca rotate` makes a new one (then give clients the new PEM)",
                iso8601(a.not_after())
            );
        }
        if a.key_exposed {
            warn!(key = %a.files.key().display(), "the local CA's key file may be read by other users");
        }
    }

    fn install(&self, authority: Arc<Authority>) {
        let stamp = stamp(&self.files);
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current
            .as_ref()
            .is_some_and(|c| c.authority.root.fingerprint != authority.root.fingerprint)
        {
            self.leaves.clear();
        }
        *current = Some(Current {
            authority,
            stamp,
            checked: Instant::now(),
        });
    }

    /// The CA in use when its files have not changed since it was read.
    fn fresh(&self) -> Option<Arc<Authority>> {
        let mut guard = self.current.lock().unwrap_or_else(|p| p.into_inner());
        let current = guard.as_mut()?;
        if current.checked.elapsed() >= RECHECK {
            if stamp(&self.files) != current.stamp {
                return None;
            }
            current.checked = Instant::now();
        }
        Some(current.authority.clone())
    }

    /// The CA: the one in use, else read (or made) off the runtime's thread.
    async fn authority(&self) -> Result<Arc<Authority>, String> {
        if let Some(a) = self.fresh() {
            return Ok(a);
        }
        let mut failed = self.loading.lock().await;
        if let Some(a) = self.fresh() {
            return Ok(a);
        }
        if let Some((at, why)) = failed.as_ref() {
            if at.elapsed() < RECHECK {
                return Err(why.clone());
            }
        }
        let (files, names, now) = (self.files.clone(), self.names.clone(), (self.clock)());
        let loaded = tokio::task::spawn_blocking(move || ca::ensure(&files, &names, now))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()));
        match loaded {
            Ok((a, made)) => {
                self.report(&a, made);
                let a = Arc::new(a);
                self.install(a.clone());
                *failed = None;
                Ok(a)
            }
            Err(why) => {
                *failed = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    /// Completes the TLS handshake of a connection whose first byte said
    /// TLS, by `deadline`; `None` when it was refused or failed (counted
    /// and logged).
    pub async fn accept(
        &self,
        tcp: TcpStream,
        deadline: tokio::time::Instant,
    ) -> Option<TlsStream<TcpStream>> {
        let local = tcp.local_addr().ok().map(|a| a.ip());
        self.accept_io(tcp, Asked::Sni(local), deadline).await.ok()
    }

    /// Completes the handshake of a stream the capture listener decrypts
    /// for `name` (the host of its `CONNECT`, whatever name the client
    /// asks for: the leaf is for the host it is connected to), by
    /// `deadline`. Counted and logged as [`Tls::accept`] does; a failure
    /// says why ([`Outcome`]) and what was seen.
    pub async fn accept_as<IO>(
        &self,
        io: IO,
        name: &str,
        deadline: tokio::time::Instant,
    ) -> Result<TlsStream<IO>, (Outcome, String)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        self.accept_io(io, Asked::Named(name), deadline).await
    }

    /// Whether the CA in use (read or made now, if need be) may sign for
    /// `name` and shimgate answers it: the capture listener tunnels a
    /// host it cannot present a leaf for rather than break its client.
    pub async fn can_sign(&self, name: &str) -> Result<(), String> {
        let authority = self.authority().await?;
        let name = LeafName::Dns(name.trim_end_matches('.').to_ascii_lowercase());
        if !self.wanted.permits(&name) {
            return Err(format!("{name} is not in [ca] names"));
        }
        if !authority.permits(&name) {
            return Err(format!(
                "the local CA cannot sign for {name} (`shimgate ca rotate` makes one that may)"
            ));
        }
        Ok(())
    }

    async fn accept_io<IO>(
        &self,
        io: IO,
        asked: Asked<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<TlsStream<IO>, (Outcome, String)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let result = match tokio::time::timeout_at(deadline, self.handshake(io, asked)).await {
            Ok(r) => r,
            Err(_) => Err((Outcome::Timeout, String::new())),
        };
        match result {
            Ok(stream) => {
                self.counts[Outcome::Ok.index()].fetch_add(1, Ordering::Relaxed);
                Ok(stream)
            }
            Err((outcome, detail)) => {
                let n = self.counts[outcome.index()].fetch_add(1, Ordering::Relaxed) + 1;
                // The first of each reason, then at 2, 4, 8 …: a client
                // retrying without end does not flood the log.
                if n.is_power_of_two() {
                    warn!(reason = outcome.as_str(), count = n, detail = %detail, "{}", outcome.advice());
                }
                Err((outcome, detail))
            }
        }
    }

    async fn handshake<IO>(
        &self,
        io: IO,
        asked: Asked<'_>,
    ) -> Result<TlsStream<IO>, (Outcome, String)>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let start = LazyConfigAcceptor::new(Acceptor::default(), io)
            .await
            .map_err(|e| (Outcome::Protocol, e.to_string()))?;
        let sni: Option<String> = start.client_hello().server_name().map(shown);
        let (sni, local) = match asked {
            Asked::Sni(local) => (sni, local),
            // The capture listener's host, on no address of ours.
            Asked::Named(name) => (Some(shown(name)), None),
        };
        let asked = match (&sni, local) {
            (Some(name), _) => format!("name {name}"),
            (None, Some(ip)) => format!("no name, to {ip}"),
            (None, None) => "no name".to_owned(),
        };
        let chosen = match self.authority().await {
            Err(why) => Err((Outcome::NoCa, why)),
            Ok(authority) => decide(sni.as_deref(), local, &self.wanted, |n| {
                authority.permits(n)
            })
            .map_err(|o| (o, asked.clone()))
            .and_then(|name| {
                self.leaves
                    .get(&authority, &name, (self.clock)())
                    .map_err(|why| (Outcome::NoCa, why))
            }),
        };
        match chosen {
            Ok(leaf) => start
                .into_stream(leaf.config.clone())
                .await
                .map_err(|e| (classify(&e), format!("{asked}: {e}"))),
            Err(refusal) => {
                if let Some(refuse) = &self.refuse {
                    // Ends with an alert; the error is the refusal itself.
                    let _ = start.into_stream(refuse.clone()).await;
                }
                Err(refusal)
            }
        }
    }

    /// The `tls` section of `/status`: the CA (no key), the names answered,
    /// handshakes by outcome, the leaves.
    pub fn status(&self) -> Value {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|c| c.authority.clone());
        let now = (self.clock)();
        let ca = current.map(|a| {
            let mismatch = a.permitted.compare(&self.wanted).describe();
            json!({
                "fingerprint": a.root.fingerprint,
                "notAfter": iso8601(a.not_after()),
                "endsSoon": a.ending(now).is_some(),
                "permitted": a.permitted.shown(),
                "namesMatch": mismatch.is_none(),
                "mismatch": mismatch,
                "keyOwnerOnly": !a.key_exposed,
            })
        });
        let refused: serde_json::Map<String, Value> = Outcome::ALL[1..]
            .iter()
            .map(|o| (o.as_str().to_owned(), json!(self.count(*o))))
            .collect();
        let (minted, renewed) = self.leaves.counts();
        json!({
            "ca": ca,
            "rootPem": self.files.root().display().to_string(),
            "names": self.wanted.shown(),
            "handshakes": {"ok": self.count(Outcome::Ok), "refused": refused},
            "leaves": {"held": self.leaves.held(), "minted": minted, "renewed": renewed},
        })
    }

    /// Connections that ended with `outcome` so far.
    pub fn count(&self, outcome: Outcome) -> u64 {
        self.counts[outcome.index()].load(Ordering::Relaxed)
    }
}

/// A name from a ClientHello as the log and `/status` may show it: at most
/// 100 printable characters.
fn shown(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(100)
        .collect()
}

/// What a failed handshake says of its cause, once shimgate has sent its
/// certificate: the client's alert about it, or the client closing the
/// connection then (Node, the Qoder CLI's TLS stack, closes without an
/// alert when it does not trust the certificate); anything else.
fn classify(e: &std::io::Error) -> Outcome {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return Outcome::ClientRefused;
    }
    let refused_cert = matches!(
        e.get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
                | AlertDescription::UnknownCA
                | AlertDescription::CertificateUnknown
                | AlertDescription::UnsupportedCertificate
                | AlertDescription::CertificateExpired
                | AlertDescription::CertificateRevoked
                | AlertDescription::DecryptError
        ))
    );
    if refused_cert {
        Outcome::ClientRefused
    } else {
        Outcome::Protocol
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted() -> Permitted {
        Permitted::for_names(&["qoder.sh".into(), "trae.cn".into()])
    }

    fn decided(sni: Option<&str>, local: &str, ca_has_trae: bool) -> Result<LeafName, Outcome> {
        let ca = Permitted::for_names(&if ca_has_trae {
            vec!["qoder.sh".to_owned(), "trae.cn".to_owned()]
        } else {
            vec!["qoder.sh".to_owned()]
        });
        decide(sni, Some(local.parse().unwrap()), &wanted(), |n| {
            ca.permits(n)
        })
    }

    #[test]
    fn loopback_and_configured_names_get_a_leaf_others_an_alert() {
        let ip = |s: &str| LeafName::Ip(s.parse().unwrap());
        let dns = |s: &str| LeafName::Dns(s.into());
        assert_eq!(decided(None, "127.0.0.1", true), Ok(ip("127.0.0.1")));
        assert_eq!(decided(None, "::1", true), Ok(ip("::1")));
        assert_eq!(decided(None, "::ffff:127.0.0.1", true), Ok(ip("127.0.0.1")));
        assert_eq!(decided(None, "192.168.1.5", true), Err(Outcome::NoName));
        assert_eq!(
            decided(Some("localhost"), "127.0.0.1", true),
            Ok(dns("localhost"))
        );
        assert_eq!(
            decided(Some("API2-V2.qoder.sh."), "127.0.0.1", true),
            Ok(dns("api2-v2.qoder.sh"))
        );
        assert_eq!(
            decided(Some("example.com"), "127.0.0.1", true),
            Err(Outcome::UnknownName)
        );
        assert_eq!(
            decided(Some("qoder.sh.evil.test"), "127.0.0.1", true),
            Err(Outcome::UnknownName)
        );
        assert_eq!(
            decided(Some("trae.cn"), "127.0.0.1", false),
            Err(Outcome::NotInCa)
        );
        assert_eq!(
            decided(Some("api.trae.cn"), "127.0.0.1", true),
            Ok(dns("api.trae.cn"))
        );
        assert_eq!(
            decide(None, None, &wanted(), |_| true),
            Err(Outcome::NoName)
        );
    }

    #[test]
    fn every_outcome_has_one_spelling() {
        let mut names: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Outcome::ALL.len());
        for (i, o) in Outcome::ALL.iter().enumerate() {
            assert_eq!(o.index(), i);
        }
    }
}

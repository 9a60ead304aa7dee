//! Upstream proxies (`docs/networks.md`): which proxy a route's
//! connections go through, and the handshake that opens a tunnel there.
//!
//! The handshakes are hyper-util's (`Tunnel` for HTTP CONNECT, `SocksV5`
//! for SOCKS5 with RFC 1929 user/password), the same connectors reqwest
//! runs, driven over a dialer of ours that yields the TCP stream; the
//! tunnel's stream is then ours again (TLS, the pool). The environment's
//! setting is hyper-util's `Matcher` (`HTTPS_PROXY`, `HTTP_PROXY`,
//! `ALL_PROXY`, `NO_PROXY` in either case, then the Windows or macOS
//! system setting).
//!
//! A proxy that fails fails the connection with a reason naming the proxy
//! (`host:port`, never its user info) and what it answered; there is no
//! falling back to a direct connection. hyper-util's errors name neither
//! the proxy nor the status it answered, so the dialer keeps the first
//! bytes the proxy sent ([`Trace`]) to say it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use base64::Engine;
use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tower_service::Service;

/// How a proxy is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// HTTP `CONNECT` for every route (https and http alike).
    Http,
    /// SOCKS5, the name resolved here.
    Socks5,
    /// SOCKS5, the name sent to the proxy unresolved.
    Socks5h,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Socks5 => "socks5",
            Scheme::Socks5h => "socks5h",
        }
    }
}

/// The proxy's credentials, as its handshake sends them.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Auth {
    /// `Proxy-Authorization` for an HTTP proxy (marked sensitive).
    Basic(HeaderValue),
    /// RFC 1929 user and password for SOCKS5.
    UserPass(String, String),
}

/// One proxy. Shown (`Display`, `Debug`) as `scheme://host:port`: its
/// credentials are never printed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProxyUrl {
    pub scheme: Scheme,
    /// The host as written (an IPv6 literal without brackets).
    pub host: Arc<str>,
    pub port: u16,
    auth: Option<Auth>,
}

impl ProxyUrl {
    /// Parses a proxy URL as the config writes it:
    /// `http://user:pass@host:port`, `socks5://…`, `socks5h://…`. The
    /// error says what is wrong without repeating the URL (it may hold a
    /// password).
    pub fn parse(text: &str) -> Result<ProxyUrl, String> {
        let uri: Uri = text
            .trim()
            .parse()
            .map_err(|_| "not a proxy URL (scheme://[user:password@]host:port)".to_string())?;
        let scheme = match uri.scheme_str() {
            Some(s) if s.eq_ignore_ascii_case("http") => Scheme::Http,
            Some(s) if s.eq_ignore_ascii_case("socks5") => Scheme::Socks5,
            Some(s) if s.eq_ignore_ascii_case("socks5h") => Scheme::Socks5h,
            Some(s) => {
                return Err(format!(
                    "unsupported proxy scheme {s:?} (http://, socks5:// or socks5h://, or \"none\")"
                ))
            }
            None => {
                return Err(
                    "not a proxy URL: no scheme (http://, socks5:// or socks5h://)".to_string(),
                )
            }
        };
        if uri
            .path_and_query()
            .is_some_and(|p| !matches!(p.as_str(), "" | "/"))
        {
            return Err("a proxy URL has no path: scheme://[user:password@]host:port".to_string());
        }
        let authority = uri
            .authority()
            .ok_or_else(|| "not a proxy URL: no host".to_string())?;
        let userinfo = authority.as_str().rsplit_once('@').map(|(u, _)| u);
        let auth = userinfo.map(|info| {
            let (user, pass) = info.split_once(':').unwrap_or((info, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            credentials(scheme, decode(user), decode(pass))
        });
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err("not a proxy URL: no host".to_string());
        }
        let port = authority.port_u16().unwrap_or(match scheme {
            Scheme::Http => 80,
            Scheme::Socks5 | Scheme::Socks5h => 1080,
        });
        Ok(ProxyUrl {
            scheme,
            host: host.into(),
            port,
            auth: auth.transpose()?,
        })
    }

    /// `host:port`, as the reasons name the proxy.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The proxy the environment's matcher chose for a destination.
    fn of_intercept(found: &hyper_util::client::proxy::matcher::Intercept) -> Result<Self, String> {
        let uri = found.uri();
        let scheme = match uri.scheme_str() {
            Some("http") => Scheme::Http,
            Some("socks5") => Scheme::Socks5,
            Some("socks5h") => Scheme::Socks5h,
            other => {
                return Err(format!(
                    "unsupported proxy scheme {:?} (http://, socks5:// or socks5h://)",
                    other.unwrap_or("")
                ))
            }
        };
        let mut proxy = ProxyUrl::parse(&format!(
            "{}://{}",
            scheme.as_str(),
            uri.authority().map_or("", |a| a.as_str())
        ))?;
        proxy.auth = match (found.basic_auth(), found.raw_auth()) {
            (Some(basic), _) => Some(Auth::Basic(basic.clone())),
            (None, Some((user, pass))) => Some(credentials(scheme, user.into(), pass.into())?),
            (None, None) => None,
        };
        Ok(proxy)
    }
}

/// Credentials as the scheme's handshake sends them.
fn credentials(scheme: Scheme, user: String, pass: String) -> Result<Auth, String> {
    match scheme {
        Scheme::Http => {
            let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
            let mut value = HeaderValue::from_str(&format!("Basic {token}"))
                .map_err(|_| "the proxy's user info is not a header value".to_string())?;
            value.set_sensitive(true);
            Ok(Auth::Basic(value))
        }
        Scheme::Socks5 | Scheme::Socks5h => {
            if user.len() > 255 || pass.len() > 255 {
                return Err("a SOCKS5 user or password is at most 255 bytes".to_string());
            }
            Ok(Auth::UserPass(user, pass))
        }
    }
}

impl std::fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.addr())
    }
}

impl std::fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// A `proxy` key's value: a proxy, or `"none"` (direct).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxySetting {
    Direct,
    Via(Arc<ProxyUrl>),
}

impl ProxySetting {
    /// `"none"` or a proxy URL.
    pub fn parse(text: &str) -> Result<ProxySetting, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(ProxySetting::Direct);
        }
        ProxyUrl::parse(text).map(|p| ProxySetting::Via(Arc::new(p)))
    }
}

/// Where a route's proxy setting came from (`/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The route's own `proxy`.
    Route,
    /// `[upstream] proxy`.
    Upstream,
    /// `HTTPS_PROXY` and the like.
    Env,
    /// The Windows or macOS system setting.
    System,
    /// The route's host is written as a loopback one: direct whatever the
    /// upstream, environment or system say.
    Loopback,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Route => "route",
            Source::Upstream => "upstream",
            Source::Env => "env",
            Source::System => "system",
            Source::Loopback => "loopback",
        }
    }
}

/// The proxy in effect for a route's connections.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Via {
    /// `None`: direct.
    pub proxy: Option<Arc<ProxyUrl>>,
    /// `None`: nothing was set anywhere.
    pub source: Option<Source>,
    /// The environment names a proxy shimgate cannot speak (an `https://`
    /// one): the route's attempts fail with this rather than go direct.
    pub broken: Option<Arc<str>>,
}

impl Via {
    /// `scheme://host:port` or `"none"`.
    pub fn shown(&self) -> String {
        match (&self.proxy, &self.broken) {
            (Some(p), _) => p.to_string(),
            (None, Some(_)) => "unusable".to_string(),
            (None, None) => "none".to_string(),
        }
    }
}

/// The environment's (or else the system's) proxy setting, read once per
/// config load (a reload reads it again).
pub struct Environment {
    matcher: Matcher,
    source: Source,
    /// shimgate's own capture listener: a setting that names it is
    /// ignored, or shimgate's connections would loop through itself (a
    /// user who points the OS's proxy or `HTTPS_PROXY` at it for their
    /// clients sets it for shimgate too).
    own: Option<std::net::SocketAddr>,
}

/// The variables `Matcher::from_env` reads.
const ENV_VARS: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

impl Environment {
    /// Reads the proxy variables; when none is set, the system setting
    /// (Windows registry, macOS settings; nothing elsewhere).
    pub fn read() -> Environment {
        let set = ENV_VARS
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
        if set {
            Environment {
                matcher: Matcher::from_env(),
                source: Source::Env,
                own: None,
            }
        } else {
            Environment {
                matcher: Matcher::from_system(),
                source: Source::System,
                own: None,
            }
        }
    }

    /// No proxy anywhere (tests).
    pub fn none() -> Environment {
        Environment {
            matcher: Matcher::builder().build(),
            source: Source::Env,
            own: None,
        }
    }

    /// The same setting, with a proxy at `own` (the capture listener)
    /// ignored.
    pub fn excluding(mut self, own: Option<std::net::SocketAddr>) -> Environment {
        self.own = own;
        self
    }

    /// Where the setting came from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Whether the setting names the excluded listener (for an `https`
    /// or an `http` destination): said in the log and `/status`.
    pub fn names_own(&self) -> bool {
        let Some(own) = self.own else {
            return false;
        };
        ["https://example.com/", "http://example.com/"]
            .iter()
            .filter_map(|u| u.parse::<Uri>().ok())
            .filter_map(|u| self.matcher.intercept(&u))
            .filter_map(|found| ProxyUrl::of_intercept(&found).ok())
            .any(|p| names_listener(&p, own))
    }

    fn via(&self, url: &Uri) -> Via {
        let Some(found) = self.matcher.intercept(url) else {
            return Via::default();
        };
        match ProxyUrl::of_intercept(&found) {
            Ok(p) if self.own.is_some_and(|own| names_listener(&p, own)) => Via {
                proxy: None,
                source: Some(self.source),
                broken: None,
            },
            Ok(p) => Via {
                proxy: Some(Arc::new(p)),
                source: Some(self.source),
                broken: None,
            },
            Err(e) => Via {
                proxy: None,
                source: Some(self.source),
                broken: Some(format!("the {} proxy setting: {e}", self.source.as_str()).into()),
            },
        }
    }
}

/// The proxy a route's connections take: its own `proxy`, else (unless
/// its host is written as a loopback one) `[upstream] proxy`, else the
/// environment's or the system's.
pub fn resolve(
    route: Option<&ProxySetting>,
    upstream: Option<&ProxySetting>,
    env: &Environment,
    url: &str,
) -> Via {
    let of = |setting: &ProxySetting, source| Via {
        proxy: match setting {
            ProxySetting::Direct => None,
            ProxySetting::Via(p) => Some(p.clone()),
        },
        source: Some(source),
        broken: None,
    };
    if let Some(s) = route {
        return of(s, Source::Route);
    }
    let Ok(uri) = url.parse::<Uri>() else {
        return Via::default();
    };
    if uri.host().is_some_and(is_loopback) {
        return Via {
            source: Some(Source::Loopback),
            ..Via::default()
        };
    }
    if let Some(s) = upstream {
        return of(s, Source::Upstream);
    }
    env.via(&uri)
}

/// Whether `proxy` is the listener at `listen` (a loopback host on its
/// port; port 0 names nothing).
pub fn names_listener(proxy: &ProxyUrl, listen: std::net::SocketAddr) -> bool {
    listen.port() != 0 && proxy.port == listen.port() && is_loopback(&proxy.host)
}

/// A host written as a loopback one: `localhost`, `127.x.x.x`, `[::1]`
/// (judged as written, never resolved).
pub fn is_loopback(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What the dialer saw: its own failure to reach the proxy, and the first
/// bytes the proxy answered (for the reason a failed handshake gives).
#[derive(Default)]
struct Trace {
    dial: Option<String>,
    answer: Vec<u8>,
}

/// How much of the proxy's answer is kept for the reason.
const TRACE_BYTES: usize = 256;

type Shared = Arc<Mutex<Trace>>;

fn lock(t: &Shared) -> std::sync::MutexGuard<'_, Trace> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// hyper-util's inner connector: a TCP connection to the proxy itself.
#[derive(Clone)]
struct Dial {
    host: Arc<str>,
    port: u16,
    trace: Shared,
}

type Dialing = Pin<Box<dyn Future<Output = io::Result<TokioIo<Traced>>> + Send>>;

impl Service<Uri> for Dial {
    type Response = TokioIo<Traced>;
    type Error = io::Error;
    type Future = Dialing;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _proxy: Uri) -> Dialing {
        let dial = self.clone();
        Box::pin(async move {
            match super::connect::tcp_to(&dial.host, dial.port).await {
                Ok(tcp) => Ok(TokioIo::new(Traced {
                    tcp,
                    trace: dial.trace,
                })),
                Err(e) => {
                    lock(&dial.trace).dial = Some(e.to_string());
                    Err(e)
                }
            }
        })
    }
}

/// The proxy connection during the handshake: keeps what the proxy sent.
struct Traced {
    tcp: TcpStream,
    trace: Shared,
}

impl AsyncRead for Traced {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.tcp).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            let mut trace = lock(&this.trace);
            let room = TRACE_BYTES.saturating_sub(trace.answer.len());
            let new = &buf.filled()[before..];
            trace.answer.extend_from_slice(&new[..new.len().min(room)]);
        }
        polled
    }
}

impl AsyncWrite for Traced {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// A TCP stream to `host:port` through `proxy`, the handshake done.
pub async fn tunnel(proxy: &ProxyUrl, host: &str, port: u16) -> io::Result<TcpStream> {
    let trace = Shared::default();
    let dial = Dial {
        host: proxy.host.clone(),
        port: proxy.port,
        trace: trace.clone(),
    };
    let proxy_uri = uri_of(&proxy.host, proxy.port)?;
    let opened = match proxy.scheme {
        Scheme::Http => {
            let mut tunnel = Tunnel::new(proxy_uri, dial);
            if let Some(Auth::Basic(value)) = &proxy.auth {
                tunnel = tunnel.with_auth(value.clone());
            }
            tunnel
                .call(uri_of(host, port)?)
                .await
                .map_err(|e| e.to_string())
        }
        Scheme::Socks5 | Scheme::Socks5h => {
            let target = if proxy.scheme == Scheme::Socks5 {
                resolve_here(host, port).await?
            } else {
                uri_of(host, port)?
            };
            let mut socks = SocksV5::new(proxy_uri, dial).local_dns(false);
            if let Some(Auth::UserPass(user, pass)) = &proxy.auth {
                socks = socks.with_auth(user.clone(), pass.clone());
            }
            socks.call(target).await.map_err(|e| e.to_string())
        }
    };
    match opened {
        Ok(io) => {
            tracing::debug!(%proxy, host, port, "a tunnel through the proxy is open");
            let tcp = io.into_inner().tcp;
            tcp.set_nodelay(true)?;
            Ok(tcp)
        }
        Err(e) => Err(io::Error::other(failure(proxy, &lock(&trace), &e))),
    }
}

/// `http://host:port` (hyper-util reads only the host and port).
fn uri_of(host: &str, port: u16) -> io::Result<Uri> {
    let text = if host.contains(':') {
        format!("http://[{host}]:{port}")
    } else {
        format!("http://{host}:{port}")
    };
    text.parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}:{port}: {e}")))
}

/// `socks5://`: the name resolved here, the proxy given an address.
async fn resolve_here(host: &str, port: u16) -> io::Result<Uri> {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return uri_of(host, port);
    }
    let addr = tokio::net::lookup_host((host, port))
        .await?
        .next()
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{host} resolved to no address"),
            )
        })?;
    uri_of(&addr.ip().to_string(), port)
}

/// The reason a handshake failed: the proxy, and what it answered.
fn failure(proxy: &ProxyUrl, trace: &Trace, error: &str) -> String {
    let addr = proxy.addr();
    if let Some(dial) = &trace.dial {
        return format!("proxy {addr} could not be reached: {dial}");
    }
    if proxy.scheme == Scheme::Http {
        if let Some(status) = status_line(&trace.answer) {
            return format!("proxy {addr} answered {status}");
        }
    }
    let what = error
        .strip_prefix("SOCKS error: ")
        .or_else(|| error.strip_prefix("tunnel error: "))
        .unwrap_or(error);
    format!("proxy {addr} ({}) failed: {what}", proxy.scheme.as_str())
}

/// `407 Proxy Authentication Required` from `HTTP/1.1 407 Proxy …\r\n`.
fn status_line(answer: &[u8]) -> Option<String> {
    let line = answer.split(|b| *b == b'\n').next()?;
    let line = String::from_utf8_lossy(line);
    let rest = line.trim_end().strip_prefix("HTTP/")?;
    let (_, status) = rest.split_once(' ')?;
    let status: String = status
        .chars()
        .filter(|c| !c.is_control())
        .take(80)
        .collect();
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_is_shown_without_its_credentials() {
        let p =
            ProxyUrl::parse("http://alice:s3cret@127.0.0.1:7890").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.to_string(), "http://127.0.0.1:7890");
        assert_eq!(format!("{p:?}"), "http://127.0.0.1:7890");
        assert!(matches!(p.auth, Some(Auth::Basic(_))));
        let s =
            ProxyUrl::parse("socks5h://bob:p%40ss@[::1]:1080").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.to_string(), "socks5h://[::1]:1080");
        assert!(matches!(&s.auth, Some(Auth::UserPass(u, p)) if u == "bob" && p == "p@ss"));
    }

    #[test]
    fn a_bad_proxy_url_says_why_without_repeating_it() {
        let e = ProxySetting::parse("ftp://u:secret@h:1").unwrap_err();
        assert!(e.starts_with("unsupported proxy scheme \"ftp\""), "{e}");
        assert!(!e.contains("secret"));
        assert!(ProxySetting::parse("127.0.0.1:7890").is_err());
        assert!(ProxySetting::parse("http://h:1/path").is_err());
        assert_eq!(ProxySetting::parse("none"), Ok(ProxySetting::Direct));
    }

    #[test]
    fn loopback_routes_skip_all_but_their_own_proxy() {
        let global = ProxySetting::parse("http://127.0.0.1:7890").unwrap_or_else(|e| panic!("{e}"));
        let env = Environment::none();
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://[::1]:9/x",
            "http://LocalHost:1",
        ] {
            let via = resolve(None, Some(&global), &env, url);
            assert_eq!(
                (via.proxy, via.source),
                (None, Some(Source::Loopback)),
                "{url}"
            );
            let own = resolve(Some(&global), Some(&global), &env, url);
            assert_eq!(own.source, Some(Source::Route));
            assert!(own.proxy.is_some());
        }
        let far = resolve(None, Some(&global), &env, "https://api2.qoder.sh");
        assert_eq!(far.source, Some(Source::Upstream));
        assert_eq!(far.shown(), "http://127.0.0.1:7890");
        let none = resolve(None, None, &env, "https://api2.qoder.sh");
        assert_eq!((none.shown(), none.source), ("none".to_string(), None));
    }

    #[test]
    fn the_environment_matcher_honours_no_proxy() {
        let env = Environment {
            matcher: Matcher::builder()
                .all("socks5://u:pw@127.0.0.1:1080")
                .no("internal.example")
                .build(),
            source: Source::Env,
            own: None,
        };
        let via = resolve(None, None, &env, "https://api.example.com/v1");
        assert_eq!(via.shown(), "socks5://127.0.0.1:1080");
        assert_eq!(via.source, Some(Source::Env));
        let skipped = resolve(None, None, &env, "https://internal.example/v1");
        assert_eq!(skipped.proxy, None);
    }

    #[test]
    fn a_setting_that_names_the_capture_listener_is_ignored() {
        let own: std::net::SocketAddr = "127.0.0.1:47000".parse().unwrap();
        let env = Environment {
            matcher: Matcher::builder().all("http://localhost:47000").build(),
            source: Source::Env,
            own: None,
        };
        assert_eq!(
            resolve(None, None, &env, "https://api2.qoder.sh").shown(),
            "http://localhost:47000"
        );
        let env = env.excluding(Some(own));
        assert!(env.names_own());
        let via = resolve(None, None, &env, "https://api2.qoder.sh");
        assert_eq!((via.proxy, via.source), (None, Some(Source::Env)));
        let other = Environment {
            matcher: Matcher::builder().all("http://127.0.0.1:7890").build(),
            source: Source::Env,
            own: Some(own),
        };
        assert!(!other.names_own());
        assert!(resolve(None, None, &other, "https://api2.qoder.sh")
            .proxy
            .is_some());
    }

    #[test]
    fn the_status_line_is_read_from_the_answer() {
        assert_eq!(
            status_line(b"HTTP/1.1 407 Proxy Authentication Required\r\nServer: x\r\n"),
            Some("407 Proxy Authentication Required".to_string())
        );
        assert_eq!(status_line(b"\x05\x00"), None);
    }
}

//! Opening a connection to an upstream: the name resolved, each address
//! tried in turn within the connect timeout (or a tunnel through the
//! route's proxy, `proxy.rs`), TCP_NODELAY, and TLS (rustls, ALPN
//! `http/1.1`) for an `https` route.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::proxy::ProxyUrl;

/// Where a connection goes, and through which proxy: what the pool keys
/// its idle connections by (a route through a proxy never reuses a direct
/// connection, nor one through another proxy).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    pub tls: bool,
    /// The host as the URI has it (an IPv6 literal without its brackets).
    pub host: Arc<str>,
    pub port: u16,
    /// `None`: direct.
    pub proxy: Option<Arc<ProxyUrl>>,
}

impl Origin {
    /// The origin of `uri`; `None` when it has no host or its scheme is
    /// neither `http` nor `https`.
    pub fn of(uri: &http::Uri) -> Option<Origin> {
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return None,
        };
        let host = uri.host()?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Some(Origin {
            tls,
            host: host.into(),
            port,
            proxy: None,
        })
    }
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        if self.host.contains(':') {
            write!(f, "{scheme}://[{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "{scheme}://{}:{}", self.host, self.port)?;
        }
        match &self.proxy {
            Some(p) => write!(f, " through proxy {p}"),
            None => Ok(()),
        }
    }
}

/// Which roots verify an upstream's certificate (`[upstream] roots`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Roots {
    /// The OS's verifier (`rustls-platform-verifier`): a root the user or
    /// their company installed is trusted.
    #[default]
    System,
    /// Mozilla's list, compiled in.
    Bundled,
}

/// The certificates of a PEM file (`[upstream] ca_file`); an error names
/// what is wrong with it.
pub fn pem_roots(path: &std::path::Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{} is not PEM certificates: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// An open connection, plain or TLS.
pub enum Io {
    Tcp(TcpStream),
    // Boxed: a rustls session is some KiB, a plain socket a few words.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// The TLS side of the client: one rustls configuration for every route.
/// A configuration rustls refused (it never refuses ring's defaults) is
/// kept as its error, met by the first `https` connect.
#[derive(Clone)]
pub struct Tls(Result<TlsConnector, Arc<str>>);

impl Tls {
    /// Trusts the webpki roots (Mozilla's list, compiled in).
    pub fn webpki() -> Tls {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        Tls::with_roots(roots)
    }

    /// The trust `[upstream] roots` and `ca_file` ask for: the OS's
    /// verifier or the bundled roots, with `extra` roots added to either.
    pub fn for_roots(roots: Roots, extra: Vec<CertificateDer<'static>>) -> Tls {
        match roots {
            Roots::Bundled => {
                let mut store = RootCertStore::empty();
                store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
                store.add_parsable_certificates(extra);
                Tls::with_roots(store)
            }
            Roots::System => Tls::system(extra),
        }
    }

    /// The OS's verifier, with `extra` roots beside the OS's own. An OS
    /// verifier that cannot take extra roots (Wine's certificate chain
    /// engine refuses the exclusive-root store Windows accepts) would
    /// leave every https route dead; shimgate then says so once and
    /// verifies against the bundled roots and `extra` instead, as
    /// `roots = "bundled"` does.
    fn system(extra: Vec<CertificateDer<'static>>) -> Tls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = if extra.is_empty() {
            rustls_platform_verifier::Verifier::new(provider.clone())
        } else {
            rustls_platform_verifier::Verifier::new_with_extra_roots(
                extra.clone(),
                provider.clone(),
            )
        };
        let verifier = match verifier {
            Ok(v) => v,
            Err(e) if !extra.is_empty() => {
                tracing::warn!(error = %e, "the system's certificate verifier cannot take [upstream] ca_file's roots; verifying against the bundled roots and ca_file instead");
                return Tls::for_roots(Roots::Bundled, extra);
            }
            Err(e) => return Tls(Err(format!("the system's certificate verifier: {e}").into())),
        };
        let built = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("no TLS configuration: {e}"))
            .map(|b| {
                let mut config = b
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                TlsConnector::from(Arc::new(config))
            });
        Tls(built.map_err(Into::into))
    }

    /// Trusts `roots` only (tests bring their own authority).
    pub fn with_roots(roots: RootCertStore) -> Tls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let built = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| {
                let mut config = b.with_root_certificates(roots).with_no_client_auth();
                config.alpn_protocols = vec![b"http/1.1".to_vec()];
                TlsConnector::from(Arc::new(config))
            });
        Tls(built.map_err(|e| format!("no TLS configuration: {e}").into()))
    }
}

/// Connects to `origin` within `timeout` (resolution, TCP and TLS together).
pub async fn connect(origin: &Origin, tls: &Tls, timeout: Duration) -> io::Result<Io> {
    match tokio::time::timeout(timeout, open(origin, tls)).await {
        Ok(io) => io,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("connect timed out after {} ms", timeout.as_millis()),
        )),
    }
}

async fn open(origin: &Origin, tls: &Tls) -> io::Result<Io> {
    let tcp = match &origin.proxy {
        Some(proxy) => super::proxy::tunnel(proxy, &origin.host, origin.port).await?,
        None => tcp_to(&origin.host, origin.port).await?,
    };
    if !origin.tls {
        return Ok(Io::Tcp(tcp));
    }
    let name = ServerName::try_from(origin.host.to_string())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let connector = tls
        .0
        .as_ref()
        .map_err(|e| io::Error::other(e.to_string()))?;
    let stream = connector.connect(name, tcp).await?;
    Ok(Io::Tls(Box::new(stream)))
}

/// The first address of the host's that accepts, in the resolver's order.
pub async fn tcp_to(host: &str, port: u16) -> io::Result<TcpStream> {
    let addrs: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port)).await?.collect(),
    };
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{host} resolved to no address"),
    );
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Tcp(s) => s.is_write_vectored(),
            Io::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

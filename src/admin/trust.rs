//! Loopback trust (DESIGN §7): which requests may read or steer the admin
//! surface. Every web page the user opens can reach a loopback port, so
//! the rules are checked here, before any admin endpoint runs, and assume
//! no help from the browser:
//!
//! - **Host** (DNS rebinding): a page on `rebind.attacker.test` resolved
//!   to 127.0.0.1 sends that name in `Host`; only loopback literals,
//!   `localhost` and `[admin] allowed_hosts` are answered (an absent
//!   `Host` too: no browser sends a request without one). On a listener
//!   bound to a non-loopback address any IP literal is answered as well:
//!   rebinding needs a name, and the token guards that listener.
//! - **Origin** (cross-site requests): a no-cors `POST` or a form post from
//!   another origin needs no preflight, so a state-changing request (any
//!   method but `GET`/`HEAD`) carrying an `Origin` other than the
//!   listener's own (`http://` + Host, `https://` + Host over TLS), or a
//!   `Sec-Fetch-Site` other than
//!   `same-origin`/`none`, is refused (tower-http's `CsrfLayer` rule,
//!   without its Origin-equals-Host shortcut for foreign hosts, which the
//!   Host rule already refused). curl and scripts send neither header.
//! - **Token** on a listener bound to a non-loopback address
//!   (`allow_remote`): `Authorization: Bearer <token>`, the panel's
//!   cookie, or `?token=` on `GET /ui` (which then sets the cookie).
//!
//! Pure functions of the request head and the listener, so a table test
//! walks every case; `admin::serve` acts on the answer.

use std::net::IpAddr;

use http::{header, HeaderMap, HeaderValue, Method};

use crate::app::admin::{AdminToken, Refused};

/// The panel's cookie holding the admin token on a remote listener.
pub const TOKEN_COOKIE: &str = "shimgate_token";

/// What the rules need to know of the listener a request came to.
#[derive(Debug, Clone, Copy)]
pub struct Guard<'a> {
    /// Bound to a non-loopback address: the token is required.
    pub remote: bool,
    /// `[admin] allowed_hosts`, lowercase.
    pub allowed_hosts: &'a [String],
    /// The token (`Err`: it could not be read; every request is refused).
    pub token: Option<&'a Result<AdminToken, String>>,
}

/// The request as the rules see it.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    pub method: &'a Method,
    pub headers: &'a HeaderMap,
    /// The query string, for the panel's `?token=`.
    pub query: Option<&'a str>,
    /// The request is `GET /ui` (the only place `?token=` is taken).
    pub panel: bool,
    /// It came over TLS: the listener's own origin is `https://` + Host.
    pub tls: bool,
}

/// A request the rules let through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grant {
    /// The token came as `?token=`: the answer sets the panel's cookie to it.
    pub set_cookie: Option<String>,
}

/// A request the rules refused, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub why: Refused,
    pub message: String,
}

/// Checks a request against every rule: Host first (a rebinding page
/// learns nothing, not even whether it needs a token), then the token,
/// then Origin.
pub fn check(asked: Asked<'_>, guard: Guard<'_>) -> Result<Grant, Refusal> {
    let host = asked.headers.get(header::HOST);
    host_allowed(host, guard).map_err(|message| Refusal {
        why: Refused::Host,
        message,
    })?;
    let grant = match guard.token {
        Some(token) if guard.remote => {
            token_presented(asked, token).map_err(|message| Refusal {
                why: Refused::Token,
                message,
            })?
        }
        _ => Grant::default(),
    };
    if !matches!(*asked.method, Method::GET | Method::HEAD) {
        same_origin(asked.headers, host, asked.tls).map_err(|message| Refusal {
            why: Refused::Origin,
            message,
        })?;
    }
    Ok(grant)
}

/// The Host rule.
fn host_allowed(host: Option<&HeaderValue>, guard: Guard<'_>) -> Result<(), String> {
    let Some(value) = host else {
        return Ok(());
    };
    let refuse = || {
        let shown = String::from_utf8_lossy(value.as_bytes());
        let shown: String = shown.chars().take(100).collect();
        format!(
            "the admin surface answers Host 127.0.0.1, [::1] or localhost (any port) and [admin] allowed_hosts only, not {shown:?}"
        )
    };
    let text = value.to_str().map_err(|_| refuse())?.to_ascii_lowercase();
    let authority: http::uri::Authority = text.parse().map_err(|_| refuse())?;
    if text.contains('@') {
        return Err(refuse());
    }
    let name = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']');
    let loopback = match name.parse::<IpAddr>() {
        Ok(ip) => ip.to_canonical().is_loopback() || guard.remote,
        Err(_) => name == "localhost",
    };
    let listed = guard
        .allowed_hosts
        .iter()
        .any(|allowed| *allowed == text || *allowed == name);
    if loopback || listed {
        Ok(())
    } else {
        Err(refuse())
    }
}

/// The Origin rule for state-changing requests: the listener's own origin
/// is `http://` + Host, or `https://` + Host on a TLS connection.
fn same_origin(headers: &HeaderMap, host: Option<&HeaderValue>, tls: bool) -> Result<(), String> {
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.as_bytes();
        if !site.eq_ignore_ascii_case(b"same-origin") && !site.eq_ignore_ascii_case(b"none") {
            return Err(format!(
                "a request from another site (Sec-Fetch-Site: {}) cannot change shimgate",
                String::from_utf8_lossy(site)
            ));
        }
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let scheme: &[u8] = if tls { b"https://" } else { b"http://" };
    let own = host.map(|h| [scheme, h.as_bytes()].concat());
    if own.is_some_and(|own| own.eq_ignore_ascii_case(origin.as_bytes())) {
        return Ok(());
    }
    let shown: String = String::from_utf8_lossy(origin.as_bytes())
        .chars()
        .take(100)
        .collect();
    Err(format!(
        "a request from another origin ({shown}) cannot change shimgate: only its own pages and tools without an Origin (curl, scripts) can"
    ))
}

/// The token rule: `Authorization: Bearer`, the cookie, or the panel's
/// `?token=`.
fn token_presented(asked: Asked<'_>, token: &Result<AdminToken, String>) -> Result<Grant, String> {
    let token = token.as_ref().map_err(|e| {
        format!("admin requests on this listener need the admin token, and it is unavailable: {e}")
    })?;
    let bearer = asked
        .headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .any(|t| token.matches(t.trim()));
    if bearer || cookie_values(asked.headers).any(|t| token.matches(t)) {
        return Ok(Grant::default());
    }
    let from_query = asked
        .panel
        .then(|| query_value(asked.query?, "token"))
        .flatten();
    match from_query {
        Some(t) if token.matches(&t) => Ok(Grant { set_cookie: Some(t) }),
        _ => Err(
            "admin requests on this listener need Authorization: Bearer <token> (the token is in [admin] token_file; the panel takes ?token= once)"
                .into(),
        ),
    }
}

/// Every value of the panel's cookie among the request's cookies.
fn cookie_values(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(name, _)| *name == TOKEN_COOKIE)
        .map(|(_, value)| value)
}

/// One query parameter's value (`%XX` decoded; tokens are hex, so no `+`).
pub fn query_value(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| super::routes::percent_decode(v))
}

/// The `Set-Cookie` value that keeps the panel's token (never sent to
/// another site, never readable by script).
pub fn token_cookie(token: &str) -> String {
    format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_bytes(v.as_bytes()).unwrap(),
            );
        }
        h
    }

    fn ask(method: &Method, pairs: &[(&str, &str)]) -> Result<Grant, Refused> {
        let h = headers(pairs);
        let asked = Asked {
            method,
            headers: &h,
            query: None,
            panel: false,
            tls: false,
        };
        let guard = Guard {
            remote: false,
            allowed_hosts: &["shimgate.lan".to_string(), "box:8080".to_string()],
            token: None,
        };
        check(asked, guard).map_err(|r| r.why)
    }

    #[test]
    fn loopback_names_and_allowed_hosts_are_served() {
        for host in [
            "127.0.0.1:47001",
            "127.0.0.1",
            "127.8.9.10:1",
            "[::1]:47011",
            "[::1]",
            "localhost",
            "LocalHost:47001",
            "shimgate.lan",
            "shimgate.lan:47001",
            "box:8080",
        ] {
            assert_eq!(
                ask(&Method::GET, &[("host", host)]),
                Ok(Grant::default()),
                "{host}"
            );
        }
        assert!(
            ask(&Method::GET, &[]).is_ok(),
            "no Host at all (HTTP/1.0 tools)"
        );
    }

    #[test]
    fn foreign_hosts_are_refused() {
        for host in [
            "rebind.attacker.test",
            "rebind.attacker.test:47001",
            "127.0.0.1.evil.test",
            "localhost.evil.test:47001",
            "evil.localhost",
            "10.0.0.7:47001",
            "[2001:db8::1]:47001",
            "box:9090",
            "user@127.0.0.1",
            "",
            "127.0.0.1:47001/x",
        ] {
            assert_eq!(
                ask(&Method::GET, &[("host", host)]),
                Err(Refused::Host),
                "{host}"
            );
        }
    }

    #[test]
    fn state_changes_from_another_origin_are_refused() {
        let own = [("host", "127.0.0.1:47001")];
        for (name, value) in [
            ("origin", "http://127.0.0.1:5173"),
            ("origin", "http://evil.example"),
            ("origin", "null"),
            ("origin", "https://127.0.0.1:47001"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            let pairs = [own[0], (name, value)];
            for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS] {
                assert_eq!(
                    ask(&method, &pairs),
                    Err(Refused::Origin),
                    "{method} {name}: {value}"
                );
            }
            assert!(
                ask(&Method::GET, &pairs).is_ok(),
                "a read is not a state change"
            );
        }
    }

    #[test]
    fn own_origin_and_tools_without_one_may_change_state() {
        for pairs in [
            vec![("host", "127.0.0.1:47001")],
            vec![
                ("host", "127.0.0.1:47001"),
                ("origin", "http://127.0.0.1:47001"),
            ],
            vec![
                ("host", "localhost:47001"),
                ("origin", "http://LOCALHOST:47001"),
            ],
            vec![
                ("host", "127.0.0.1:47001"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![("host", "127.0.0.1:47001"), ("sec-fetch-site", "none")],
        ] {
            assert!(ask(&Method::POST, &pairs).is_ok(), "{pairs:?}");
        }
        assert_eq!(
            ask(&Method::POST, &[("origin", "http://127.0.0.1:47001")]),
            Err(Refused::Origin),
            "an Origin without a Host is nobody's own"
        );
    }

    /// Over TLS the listener's own origin is `https://` + Host: the panel
    /// loaded over TLS may change state, a page on the plain origin of the
    /// same port may not (another origin), and the other rules hold.
    #[test]
    fn over_tls_the_own_origin_is_https() {
        let over_tls = |method: &Method, pairs: &[(&str, &str)]| {
            let h = headers(pairs);
            let asked = Asked {
                method,
                headers: &h,
                query: None,
                panel: false,
                tls: true,
            };
            let guard = Guard {
                remote: false,
                allowed_hosts: &[],
                token: None,
            };
            check(asked, guard).map_err(|r| r.why)
        };
        let host = ("host", "127.0.0.1:47001");
        assert!(over_tls(
            &Method::POST,
            &[host, ("origin", "https://127.0.0.1:47001")]
        )
        .is_ok());
        assert!(over_tls(
            &Method::POST,
            &[
                ("host", "localhost:47001"),
                ("origin", "https://LOCALHOST:47001")
            ]
        )
        .is_ok());
        assert!(over_tls(&Method::POST, &[host]).is_ok(), "curl over TLS");
        for origin in [
            "http://127.0.0.1:47001",
            "https://127.0.0.1:5173",
            "https://evil.example",
            "null",
        ] {
            assert_eq!(
                over_tls(&Method::POST, &[host, ("origin", origin)]),
                Err(Refused::Origin),
                "{origin}"
            );
        }
        assert_eq!(
            over_tls(&Method::POST, &[host, ("sec-fetch-site", "cross-site")]),
            Err(Refused::Origin)
        );
        assert_eq!(
            over_tls(&Method::GET, &[("host", "rebind.attacker.test:47001")]),
            Err(Refused::Host),
            "the Host rule holds over TLS"
        );
    }

    fn remote(pairs: &[(&str, &str)], query: Option<&str>, panel: bool) -> Result<Grant, Refused> {
        let h = headers(pairs);
        let file = std::env::temp_dir().join(format!("shimgate-trust-{}", std::process::id()));
        std::fs::write(&file, TOKEN).unwrap();
        let token = AdminToken::load_or_create(&file);
        let _ = std::fs::remove_file(&file);
        let asked = Asked {
            method: &Method::GET,
            headers: &h,
            query,
            panel,
            tls: false,
        };
        let guard = Guard {
            remote: true,
            allowed_hosts: &[],
            token: Some(&token),
        };
        check(asked, guard).map_err(|r| r.why)
    }

    #[test]
    fn a_remote_listener_needs_the_token() {
        let host = ("host", "192.168.1.5:47001");
        assert_eq!(remote(&[host], None, false), Err(Refused::Token));
        let wrong = format!("Bearer {TOKEN}x");
        assert_eq!(
            remote(&[host, ("authorization", &wrong)], None, false),
            Err(Refused::Token)
        );
        let right = format!("Bearer {TOKEN}");
        assert!(remote(&[host, ("authorization", &right)], None, false).is_ok());
        let cookie = format!("a=b; {TOKEN_COOKIE}={TOKEN}");
        assert!(remote(&[host, ("cookie", &cookie)], None, false).is_ok());
        let query = format!("lang=zh&token={TOKEN}");
        assert_eq!(
            remote(&[host], Some(&query), true),
            Ok(Grant {
                set_cookie: Some(TOKEN.into())
            })
        );
        assert_eq!(
            remote(&[host], Some(&query), false),
            Err(Refused::Token),
            "?token= only on the panel's page"
        );
        assert_eq!(
            remote(
                &[("host", "rebind.attacker.test"), ("authorization", &right)],
                None,
                false
            ),
            Err(Refused::Host),
            "a name still needs to be allowed"
        );
    }

    #[test]
    fn an_unavailable_token_refuses_everything() {
        let h = headers(&[("authorization", "Bearer anything-at-all-here")]);
        let token = Err("cannot read".to_string());
        let asked = Asked {
            method: &Method::GET,
            headers: &h,
            query: None,
            panel: false,
            tls: false,
        };
        let guard = Guard {
            remote: true,
            allowed_hosts: &[],
            token: Some(&token),
        };
        assert_eq!(check(asked, guard).map_err(|r| r.why), Err(Refused::Token));
    }
}

//! `[ca]`: the host names the local certificate authority may sign for,
//! besides loopback (which it always may). The list becomes the CA's
//! critical name constraints when the CA is made, so a name is checked
//! here as strictly as a verifier will read it: a lowercase DNS name of at
//! least two labels (one label would permit a whole top-level domain),
//! written without a leading dot or a wildcard, each covering itself and
//! its subdomains.

use super::raw::RawCa;
use super::ConfigError;

/// The names the CA may sign for when `[ca] names` is not set: the hosts
/// of qoder (international and CN) and of TRAE (international and CN,
/// whose inference hosts lie under `mchost.guru`, `trae.ai` and
/// `trae.cn`).
pub const DEFAULT_CA_NAMES: [&str; 5] = [
    "qoder.sh",
    "qoder.com.cn",
    "mchost.guru",
    "trae.ai",
    "trae.cn",
];

/// The longest DNS name (RFC 1035).
const MAX_NAME: usize = 253;
/// The longest DNS label (RFC 1035).
const MAX_LABEL: usize = 63;

/// `[ca]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaConfig {
    /// DNS names (lowercase, each covering its subdomains) the CA may sign
    /// for besides `localhost`, 127.0.0.0/8 and ::1; in the order written,
    /// without duplicates.
    pub names: Vec<String>,
}

impl Default for CaConfig {
    fn default() -> Self {
        CaConfig {
            names: DEFAULT_CA_NAMES.iter().map(|n| (*n).to_owned()).collect(),
        }
    }
}

/// Checks `[ca]`.
pub fn check(raw: RawCa) -> Result<CaConfig, ConfigError> {
    let Some(names) = raw.names else {
        return Ok(CaConfig::default());
    };
    let mut out: Vec<String> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let checked = check_name(name)
            .map_err(|why| ConfigError::at(format!("ca.names[{i}]"), format!("{name:?} {why}")))?;
        if !out.contains(&checked) {
            out.push(checked);
        }
    }
    Ok(CaConfig { names: out })
}

/// One name of `[ca] names`, lowercased, or why it is not one.
pub fn check_name(name: &str) -> Result<String, String> {
    let lower = name.trim().to_ascii_lowercase();
    if lower.starts_with('.') {
        return Err(format!(
            "starts with a dot: write {:?}, which covers its subdomains too",
            lower.trim_start_matches('.')
        ));
    }
    if lower.contains('*') {
        return Err("is a wildcard: write the domain itself, which covers its subdomains".into());
    }
    if lower.parse::<std::net::IpAddr>().is_ok() {
        return Err("is an IP address: the CA signs for loopback addresses only, always".into());
    }
    if lower == "localhost" || lower.ends_with(".localhost") {
        return Err("is a loopback name: localhost is always permitted, leave it out".into());
    }
    if lower.is_empty() || lower.len() > MAX_NAME {
        return Err(format!("is not a DNS name (1 to {MAX_NAME} characters)"));
    }
    let labels: Vec<&str> = lower.trim_end_matches('.').split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.len() <= MAX_LABEL
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if !labels.iter().all(label_ok) {
        return Err(
            "is not a DNS name (letters, digits and hyphens; IDNs in their xn-- form)".into(),
        );
    }
    if labels.len() < 2 {
        return Err(
            "has one label: it would let the CA sign for a whole top-level domain; name the domain (e.g. \"qoder.sh\")"
                .into(),
        );
    }
    Ok(labels.join("."))
}

/// Whether DNS name `name` is `base` or below it (RFC 5280 §4.2.1.10: a
/// subtree `example.com` covers `example.com` and `www.example.com`, not
/// `badexample.com`). Compared case-insensitively, a trailing dot ignored.
pub fn dns_in(name: &str, base: &str) -> bool {
    let name = name.trim_end_matches('.');
    let base = base.trim_end_matches('.');
    if name.len() < base.len() || base.is_empty() {
        return false;
    }
    // Bytes, not chars: a name with a multi-byte character is never a
    // match, and never splits inside one.
    let (head, tail) = name.as_bytes().split_at(name.len() - base.len());
    tail.eq_ignore_ascii_case(base.as_bytes()) && (head.is_empty() || head.ends_with(b"."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercased_and_deduplicated() {
        let c = check(RawCa {
            names: Some(vec![
                "Qoder.SH".into(),
                "qoder.sh".into(),
                "api.example.com.".into(),
            ]),
        })
        .unwrap();
        assert_eq!(c.names, ["qoder.sh", "api.example.com"]);
        assert_eq!(check(RawCa { names: None }).unwrap(), CaConfig::default());
        assert!(check(RawCa {
            names: Some(vec![])
        })
        .unwrap()
        .names
        .is_empty());
    }

    #[test]
    fn names_a_verifier_would_read_wider_are_refused() {
        for (name, why) in [
            (".qoder.sh", "starts with a dot"),
            ("*.qoder.sh", "wildcard"),
            ("sh", "one label"),
            ("com.", "one label"),
            ("127.0.0.1", "IP address"),
            ("::1", "IP address"),
            ("localhost", "loopback name"),
            ("a.localhost", "loopback name"),
            ("", "not a DNS name"),
            ("bad_name.com", "not a DNS name"),
            ("-a.com", "not a DNS name"),
            ("a..com", "not a DNS name"),
            ("exa mple.com", "not a DNS name"),
        ] {
            let e = check_name(name).unwrap_err();
            assert!(e.contains(why), "{name:?}: {e}");
        }
    }
}

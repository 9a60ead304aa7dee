//! What the local CA may sign for: loopback (the name `localhost`, the
//! addresses 127.0.0.0/8 and ::1) and the DNS names of `[ca] names`, each
//! covering itself and its subdomains as RFC 5280's name constraints read
//! a DNS subtree. The same rules serve three readers: the constraints
//! written into a new CA, the check of a CA read back from disk against
//! the config, and a listener deciding which names it answers.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The subtree rule, kept with the config's check of `[ca] names`.
pub use crate::config::ca::dns_in;

/// The loopback name every CA permits.
pub const LOCALHOST: &str = "localhost";

/// The loopback ranges every CA permits: 127.0.0.0/8 and ::1/128.
pub const LOOPBACK_RANGES: [(IpAddr, u8); 2] = [
    (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)), 8),
    (IpAddr::V6(Ipv6Addr::LOCALHOST), 128),
];

/// The name a leaf is minted for: one DNS name or one IP address, its
/// only subject alternative name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeafName {
    Dns(String),
    Ip(IpAddr),
}

impl fmt::Display for LeafName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeafName::Dns(name) => f.write_str(name),
            LeafName::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Permitted subtrees: DNS names and IP ranges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permitted {
    /// Lowercase, no leading dot; each covers its subdomains.
    pub dns: Vec<String>,
    /// Network address and prefix length.
    pub ips: Vec<(IpAddr, u8)>,
}

impl Permitted {
    /// Loopback and the `[ca] names` (already checked by the config).
    pub fn for_names(names: &[String]) -> Permitted {
        let mut dns = vec![LOCALHOST.to_owned()];
        dns.extend(names.iter().filter(|n| *n != LOCALHOST).cloned());
        Permitted {
            dns,
            ips: LOOPBACK_RANGES.to_vec(),
        }
    }

    /// Whether a leaf for `name` falls inside these subtrees.
    pub fn permits(&self, name: &LeafName) -> bool {
        match name {
            LeafName::Dns(n) => self.permits_dns(n),
            LeafName::Ip(ip) => self.ips.iter().any(|range| ip_in(*ip, *range)),
        }
    }

    /// Whether the DNS name `name` falls inside these subtrees.
    pub fn permits_dns(&self, name: &str) -> bool {
        self.dns.iter().any(|base| dns_in(name, base))
    }

    /// The subtrees as rcgen writes them into a certificate.
    pub fn subtrees(&self) -> Vec<rcgen::GeneralSubtree> {
        let dns = self
            .dns
            .iter()
            .map(|n| rcgen::GeneralSubtree::DnsName(n.clone()));
        let ips = self.ips.iter().map(|(ip, prefix)| {
            rcgen::GeneralSubtree::IpAddress(rcgen::CidrSubnet::from_addr_prefix(*ip, *prefix))
        });
        dns.chain(ips).collect()
    }

    /// The subtrees as a user reads them: `localhost`, `qoder.sh`, …,
    /// `127.0.0.0/8`, `::1/128`.
    pub fn shown(&self) -> Vec<String> {
        let ips = self.ips.iter().map(|(ip, p)| format!("{ip}/{p}"));
        self.dns.iter().cloned().chain(ips).collect()
    }

    /// How `self` (a CA's constraints) differs from `wanted` (what the
    /// config asks for now).
    pub fn compare(&self, wanted: &Permitted) -> Mismatch {
        Mismatch {
            missing: wanted
                .dns
                .iter()
                .filter(|n| !self.dns.contains(n))
                .cloned()
                .collect(),
            extra: self
                .dns
                .iter()
                .filter(|n| !wanted.dns.contains(n))
                .cloned()
                .collect(),
            ips_differ: {
                let (mut a, mut b) = (self.ips.clone(), wanted.ips.clone());
                a.sort();
                b.sort();
                a != b
            },
        }
    }
}

/// Where a CA's constraints and the config's names part.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mismatch {
    /// Configured names the CA cannot sign for.
    pub missing: Vec<String>,
    /// Names the CA may sign for that the config no longer lists (shimgate
    /// refuses them; the CA still permits them).
    pub extra: Vec<String>,
    /// The CA's IP ranges are not loopback's (a CA shimgate did not make).
    pub ips_differ: bool,
}

impl Mismatch {
    /// Nothing differs.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && !self.ips_differ
    }

    /// What a user is told, with what to do; `None` when nothing differs.
    pub fn describe(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!(
                "[ca] names lists {} but the CA cannot sign for {}: shimgate refuses TLS for {} until `shimgate ca rotate` makes a CA that may (then give clients the new PEM)",
                self.missing.join(", "),
                if self.missing.len() == 1 { "it" } else { "them" },
                if self.missing.len() == 1 { "it" } else { "them" },
            ));
        }
        if !self.extra.is_empty() {
            parts.push(format!(
                "the CA may still sign for {}, which [ca] names no longer lists: shimgate refuses TLS for {} now; `shimgate ca rotate` makes a narrower CA (then give clients the new PEM)",
                self.extra.join(", "),
                if self.extra.len() == 1 { "it" } else { "them" },
            ));
        }
        if self.ips_differ {
            parts.push("the CA's IP ranges are not loopback's (127.0.0.0/8, ::1): it was not made by this shimgate; `shimgate ca rotate` makes one that is".into());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// Whether `ip` is inside `(network, prefix)`; an IPv4-mapped IPv6
/// address counts as its IPv4 address.
pub fn ip_in(ip: IpAddr, (net, prefix): (IpAddr, u8)) -> bool {
    match (ip.to_canonical(), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permitted() -> Permitted {
        Permitted::for_names(&["qoder.sh".into(), "trae.cn".into()])
    }

    #[test]
    fn a_dns_subtree_covers_itself_and_its_subdomains_only() {
        assert!(dns_in("qoder.sh", "qoder.sh"));
        assert!(dns_in("api2.qoder.sh", "qoder.sh"));
        assert!(dns_in("a.b.QODER.sh.", "qoder.sh"));
        assert!(!dns_in("evilqoder.sh", "qoder.sh"));
        assert!(!dns_in("qoder.sh.evil.com", "qoder.sh"));
        assert!(!dns_in("sh", "qoder.sh"));
        assert!(!dns_in("anything", ""));
    }

    #[test]
    fn loopback_and_the_configured_names_are_permitted() {
        let p = permitted();
        for ok in [
            LeafName::Dns("localhost".into()),
            LeafName::Dns("api2-v2.qoder.sh".into()),
            LeafName::Dns("trae.cn".into()),
            LeafName::Ip("127.0.0.1".parse().unwrap()),
            LeafName::Ip("127.8.9.10".parse().unwrap()),
            LeafName::Ip("::1".parse().unwrap()),
            LeafName::Ip("::ffff:127.0.0.1".parse().unwrap()),
        ] {
            assert!(p.permits(&ok), "{ok}");
        }
        for refused in [
            LeafName::Dns("example.com".into()),
            LeafName::Dns("qoder.sh.example.com".into()),
            LeafName::Dns("trae.ai".into()),
            LeafName::Ip("128.0.0.1".parse().unwrap()),
            LeafName::Ip("10.0.0.1".parse().unwrap()),
            LeafName::Ip("::2".parse().unwrap()),
        ] {
            assert!(!p.permits(&refused), "{refused}");
        }
        assert_eq!(
            p.shown(),
            ["localhost", "qoder.sh", "trae.cn", "127.0.0.0/8", "::1/128"]
        );
    }

    #[test]
    fn a_mismatch_names_both_sides_and_what_to_do() {
        let ca = permitted();
        assert!(ca.compare(&permitted()).is_empty());
        assert_eq!(ca.compare(&permitted()).describe(), None);
        let wanted = Permitted::for_names(&["qoder.sh".into(), "trae.ai".into()]);
        let m = ca.compare(&wanted);
        assert_eq!(m.missing, ["trae.ai"]);
        assert_eq!(m.extra, ["trae.cn"]);
        let text = m.describe().unwrap();
        assert!(text.contains("cannot sign for it"), "{text}");
        assert!(text.contains("shimgate ca rotate"), "{text}");
    }
}

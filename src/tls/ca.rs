//! The local certificate authority on disk: made once per user in the
//! state dir, read back at every use, replaced only when asked (`shimgate
//! ca rotate`), never silently: clients trust the root a user gave them.
//!
//! Root → intermediate → leaf, ECDSA P-256. The root and the intermediate
//! both carry critical name constraints (loopback and `[ca] names`):
//! verifiers apply a self-signed root's constraints unevenly (RFC 5280 does
//! not oblige them to), an intermediate's they all apply. The root's key
//! signs the intermediate and is dropped: what is on disk can sign nothing
//! the constraints do not permit, and nothing ever under another root. The
//! intermediate's key is written owner-only; leaf keys never reach the
//! disk (`leaf.rs`).
//!
//! The folder, `<state dir>/ca`: `root.pem` (the file clients are given),
//! `intermediate.pem`, `intermediate.key`. A new one is written in a
//! folder beside it and renamed into place, so a reader sees a whole CA
//! or none, and two processes making one at once end up sharing one.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, NameConstraints, SanType, SerialNumber,
};
use tokio_rustls::rustls::pki_types::pem::PemObject as _;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::names::{LeafName, Permitted};
use crate::app::secret_file;

/// The CA's folder under the state dir.
pub const DIR: &str = "ca";
/// The root certificate: the file clients are given.
pub const ROOT_FILE: &str = "root.pem";
/// The intermediate certificate, sent with every leaf.
pub const INTERMEDIATE_FILE: &str = "intermediate.pem";
/// The intermediate's private key (owner-only).
pub const KEY_FILE: &str = "intermediate.key";

/// How long a new CA is valid: about a year (then `shimgate ca rotate`).
pub const AUTHORITY_LIFETIME: Duration = Duration::from_secs(365 * 86_400);
/// A CA this close to its end is reported (log, `ca show`, `/status`).
pub const EXPIRY_WARNING: Duration = Duration::from_secs(30 * 86_400);
/// Certificates start this long before they are made, so a clock a little
/// behind (a VM resumed, a client on another clock) still accepts them.
pub const BACKDATE: Duration = Duration::from_secs(3_600);

/// The organisation every certificate of the CA names (no common name on
/// a leaf: its only name is its subject alternative name).
pub const ORGANISATION: &str = "shimgate local CA";

/// Where a CA's files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaFiles {
    pub dir: PathBuf,
}

impl CaFiles {
    /// The CA of the state dir `state_dir`.
    pub fn in_state_dir(state_dir: &Path) -> CaFiles {
        CaFiles {
            dir: state_dir.join(DIR),
        }
    }

    pub fn root(&self) -> PathBuf {
        self.dir.join(ROOT_FILE)
    }

    pub fn intermediate(&self) -> PathBuf {
        self.dir.join(INTERMEDIATE_FILE)
    }

    pub fn key(&self) -> PathBuf {
        self.dir.join(KEY_FILE)
    }

    /// Whether any file of a CA is there (a partial one is reported as
    /// unusable, never replaced silently).
    pub fn any_exists(&self) -> bool {
        [self.root(), self.intermediate(), self.key()]
            .iter()
            .any(|p| p.exists())
    }
}

/// Why a CA cannot be made or used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA in {} cannot be used: {why}; `shimgate ca rotate` makes a new one (then give clients the new PEM)", dir.display())]
    Unusable { dir: PathBuf, why: String },
    #[error("cannot make a certificate: {0}")]
    Make(#[from] rcgen::Error),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CaError + 'a {
    move |source| CaError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// What a certificate of the CA says, read back from its DER.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// SHA-256 of the DER, `AB:CD:…` (as `openssl x509 -fingerprint -sha256` shows it).
    pub fingerprint: String,
    /// SHA-1 of the DER, hex without colons: the thumbprint Windows' and
    /// macOS's stores name a certificate by.
    pub sha1: String,
    pub subject: String,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    /// Its permitted subtrees; `None` without name constraints.
    pub permitted: Option<Permitted>,
    /// The name constraints are marked critical.
    pub constraints_critical: bool,
    pub is_ca: bool,
    pub der: Vec<u8>,
}

/// Reads a certificate's facts.
pub fn facts(der: &[u8]) -> Result<CertFacts, String> {
    let (_, x509) =
        x509_parser::parse_x509_certificate(der).map_err(|e| format!("not a certificate: {e}"))?;
    let when = |t: &x509_parser::time::ASN1Time| {
        UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap_or(0))
    };
    let validity = x509.validity();
    let constraints = x509
        .name_constraints()
        .map_err(|e| format!("unreadable name constraints: {e}"))?;
    let (permitted, constraints_critical) = match constraints {
        Some(ext) => (
            Some(permitted_of(
                ext.value.permitted_subtrees.as_deref().unwrap_or(&[]),
            )),
            ext.critical,
        ),
        None => (None, false),
    };
    Ok(CertFacts {
        fingerprint: colon_hex(&digest(&ring::digest::SHA256, der)),
        sha1: hex_upper(&digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, der)),
        subject: x509.subject().to_string(),
        not_before: when(&validity.not_before),
        not_after: when(&validity.not_after),
        permitted,
        constraints_critical,
        is_ca: x509.is_ca(),
        der: der.to_vec(),
    })
}

fn permitted_of(subtrees: &[x509_parser::extensions::GeneralSubtree<'_>]) -> Permitted {
    use x509_parser::extensions::GeneralName;
    let mut p = Permitted::default();
    for subtree in subtrees {
        match &subtree.base {
            GeneralName::DNSName(n) => p.dns.push(n.to_ascii_lowercase()),
            GeneralName::IPAddress(b) if b.len() == 8 => {
                let addr = IpAddr::from([b[0], b[1], b[2], b[3]]);
                let prefix = b[4..].iter().map(|m| m.count_ones()).sum::<u32>();
                p.ips.push((addr, prefix as u8));
            }
            GeneralName::IPAddress(b) if b.len() == 32 => {
                let mut octets = [0u8; 16];
                octets.copy_from_slice(&b[..16]);
                let prefix = b[16..].iter().map(|m| m.count_ones()).sum::<u32>();
                p.ips.push((IpAddr::from(octets), prefix as u8));
            }
            _ => {}
        }
    }
    p
}

fn digest(alg: &'static ring::digest::Algorithm, data: &[u8]) -> Vec<u8> {
    ring::digest::digest(alg, data).as_ref().to_vec()
}

fn hex_upper(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect()
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `der` as PEM with `label` (`CERTIFICATE`, `PRIVATE KEY`), 64 columns.
pub fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The signing side of a CA: the intermediate and its key, in memory.
pub struct Authority {
    pub files: CaFiles,
    pub root: CertFacts,
    pub intermediate: CertFacts,
    intermediate_der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
    /// What both certificates' constraints permit (the same in a CA
    /// shimgate made): what a leaf may be for.
    pub permitted: Permitted,
    /// The key file may be read by users other than its owner (its mode
    /// on Unix; outside the profile folder on Windows).
    pub key_exposed: bool,
}

impl std::fmt::Debug for Authority {
    /// Fingerprints only: never the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority")
            .field("dir", &self.files.dir)
            .field("root", &self.root.fingerprint)
            .field("intermediate", &self.intermediate.fingerprint)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// Whether both the root's and the intermediate's constraints permit
    /// `name` (a leaf outside them would be refused by the client anyway).
    pub fn permits(&self, name: &LeafName) -> bool {
        let within = |c: &CertFacts| c.permitted.as_ref().is_some_and(|p| p.permits(name));
        within(&self.root) && within(&self.intermediate)
    }

    /// The end of the CA: the earlier of the root's and the intermediate's.
    pub fn not_after(&self) -> SystemTime {
        self.root.not_after.min(self.intermediate.not_after)
    }

    /// Time left when the CA ends within [`EXPIRY_WARNING`] of `now`
    /// (zero once it has ended).
    pub fn ending(&self, now: SystemTime) -> Option<Duration> {
        let left = self
            .not_after()
            .duration_since(now)
            .unwrap_or(Duration::ZERO);
        (left < EXPIRY_WARNING).then_some(left)
    }

    /// The intermediate, sent after each leaf.
    pub fn intermediate_der(&self) -> &CertificateDer<'static> {
        &self.intermediate_der
    }

    /// Signs a leaf for `name` (its only name) with `key`'s public key,
    /// valid from `not_before` to `not_after`.
    pub fn sign_leaf(
        &self,
        name: &LeafName,
        key: &KeyPair,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Result<CertificateDer<'static>, CaError> {
        let mut p = CertificateParams::default();
        p.distinguished_name = organisation_only();
        p.subject_alt_names = vec![match name {
            LeafName::Dns(n) => SanType::DnsName(n.clone().try_into()?),
            LeafName::Ip(ip) => SanType::IpAddress(*ip),
        }];
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        p.not_before = not_before.into();
        p.not_after = not_after.into();
        p.serial_number = Some(random_serial()?);
        Ok(p.signed_by(key, &self.issuer)?.der().clone())
    }
}

/// A DN with the organisation alone.
fn organisation_only() -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, ORGANISATION);
    dn
}

/// 16 random bytes, positive as DER integers must be, never zero.
fn random_serial() -> Result<SerialNumber, CaError> {
    let mut bytes =
        secret_file::random_bytes().map_err(io("draw a serial for", Path::new("a certificate")))?;
    bytes[0] = (bytes[0] & 0x7f) | 0x01;
    Ok(SerialNumber::from_slice(&bytes[..16]))
}

/// A CA freshly made: its files' contents.
struct Made {
    root_pem: String,
    intermediate_pem: String,
    key_pem: String,
}

/// Makes a root and an intermediate for `names`, valid from `now`
/// (backdated by [`BACKDATE`]) for [`AUTHORITY_LIFETIME`]; the root's key
/// is dropped when this returns.
fn generate(names: &[String], now: SystemTime) -> Result<Made, CaError> {
    let permitted = Permitted::for_names(names);
    let constraints = NameConstraints {
        permitted_subtrees: permitted.subtrees(),
        excluded_subtrees: Vec::new(),
    };
    let not_before = now.checked_sub(BACKDATE).unwrap_or(now);
    let not_after = now + AUTHORITY_LIFETIME;
    let stamp = crate::clock::iso8601(now);
    let ca = |common: String, path_len: u8| -> Result<CertificateParams, CaError> {
        let mut p = CertificateParams::default();
        let mut dn = organisation_only();
        dn.push(DnType::CommonName, common);
        p.distinguished_name = dn;
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(path_len));
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        p.name_constraints = Some(constraints.clone());
        p.not_before = not_before.into();
        p.not_after = not_after.into();
        p.serial_number = Some(random_serial()?);
        Ok(p)
    };
    let root_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let root_params = ca(format!("shimgate local CA {stamp}"), 1)?;
    let root = root_params.self_signed(&root_key)?;
    // The root's key lives only inside this issuer, dropped below.
    let root_issuer = Issuer::new(root_params, root_key);
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut inter_params = ca(format!("shimgate local CA intermediate {stamp}"), 0)?;
    // Only server certificates, whatever a verifier makes of the rest.
    inter_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    inter_params.use_authority_key_identifier_extension = true;
    let intermediate = inter_params.signed_by(&key, &root_issuer)?;
    drop(root_issuer);
    Ok(Made {
        root_pem: pem("CERTIFICATE", root.der()),
        intermediate_pem: pem("CERTIFICATE", intermediate.der()),
        key_pem: pem("PRIVATE KEY", key.serialized_der()),
    })
}

/// Writes `made` into a new folder beside `files.dir`; returns it.
fn write_beside(files: &CaFiles, made: &Made) -> Result<PathBuf, CaError> {
    let parent = files.dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io("create", parent))?;
    let tag =
        secret_file::hex(&secret_file::random_bytes().map_err(io("draw a name in", parent))?[..6]);
    let tmp = parent.join(format!(".{DIR}.new.{}.{tag}", std::process::id()));
    std::fs::create_dir(&tmp).map_err(io("create", &tmp))?;
    let written = (|| {
        let root = tmp.join(ROOT_FILE);
        std::fs::write(&root, &made.root_pem).map_err(io("write", &root))?;
        let inter = tmp.join(INTERMEDIATE_FILE);
        std::fs::write(&inter, &made.intermediate_pem).map_err(io("write", &inter))?;
        let key = tmp.join(KEY_FILE);
        secret_file::write(&key, made.key_pem.trim_end()).map_err(io("write", &key))
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    Ok(tmp)
}

/// The CA in `files`, made for `names` if there is none. `true` when it
/// was made now. A CA that is there but unusable is an error, never
/// replaced: clients may trust it.
pub fn ensure(
    files: &CaFiles,
    names: &[String],
    now: SystemTime,
) -> Result<(Authority, bool), CaError> {
    if files.any_exists() {
        return load(files).map(|a| (a, false));
    }
    let tmp = write_beside(files, &generate(names, now)?)?;
    let made_here = std::fs::rename(&tmp, &files.dir).is_ok();
    if !made_here {
        // Another process put its CA there first: use that one.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    load(files).map(|a| (a, made_here))
}

/// Replaces the CA in `files` (if any) with a new one for `names`.
pub fn rotate(files: &CaFiles, names: &[String], now: SystemTime) -> Result<Authority, CaError> {
    let tmp = write_beside(files, &generate(names, now)?)?;
    if files.dir.exists() {
        let old = tmp.with_file_name(format!(
            ".{DIR}.old.{}",
            tmp.file_name().and_then(|n| n.to_str()).unwrap_or("x")
        ));
        std::fs::rename(&files.dir, &old).map_err(io("move aside", &files.dir))?;
        if let Err(e) = std::fs::rename(&tmp, &files.dir) {
            let _ = std::fs::rename(&old, &files.dir);
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(io("put in place", &files.dir)(e));
        }
        let _ = std::fs::remove_dir_all(&old);
    } else {
        std::fs::rename(&tmp, &files.dir).map_err(io("put in place", &files.dir))?;
    }
    load(files)
}

/// The first certificate of a PEM file.
fn read_cert(path: &Path, dir: &Path) -> Result<Vec<u8>, CaError> {
    let text = std::fs::read(path).map_err(io("read", path))?;
    CertificateDer::from_pem_slice(&text)
        .map(|c| c.to_vec())
        .map_err(|e| CaError::Unusable {
            dir: dir.to_path_buf(),
            why: format!("{} holds no certificate ({e:?})", path.display()),
        })
}

/// Reads the CA in `files` and checks it is one shimgate can use: both
/// certificates CAs with critical name constraints, the intermediate
/// signed by the root, the key the intermediate's.
pub fn load(files: &CaFiles) -> Result<Authority, CaError> {
    let unusable = |why: String| CaError::Unusable {
        dir: files.dir.clone(),
        why,
    };
    let root_der = read_cert(&files.root(), &files.dir)?;
    let inter_der = read_cert(&files.intermediate(), &files.dir)?;
    let key_path = files.key();
    let key_text = std::fs::read(&key_path).map_err(io("read", &key_path))?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_text)
        .map_err(|_| unusable(format!("{} holds no private key", key_path.display())))?;
    let key = KeyPair::try_from(&key_der)
        .map_err(|e| unusable(format!("{}: {e}", key_path.display())))?;
    let root = facts(&root_der).map_err(|e| unusable(format!("{ROOT_FILE}: {e}")))?;
    let intermediate =
        facts(&inter_der).map_err(|e| unusable(format!("{INTERMEDIATE_FILE}: {e}")))?;
    for (name, c) in [(ROOT_FILE, &root), (INTERMEDIATE_FILE, &intermediate)] {
        if !c.is_ca || c.permitted.is_none() || !c.constraints_critical {
            return Err(unusable(format!(
                "{name} is not a CA certificate with critical name constraints (not made by shimgate)"
            )));
        }
    }
    check_chain(&root_der, &inter_der, &key).map_err(unusable)?;
    let intermediate_der = CertificateDer::from(inter_der);
    let issuer = Issuer::from_ca_cert_der(&intermediate_der, key)?;
    let permitted = narrower(&root, &intermediate);
    Ok(Authority {
        permitted,
        key_exposed: secret_file::readable_by_others(&key_path),
        files: files.clone(),
        root,
        intermediate,
        intermediate_der,
        issuer,
    })
}

/// The subtrees both certificates permit.
fn narrower(root: &CertFacts, intermediate: &CertFacts) -> Permitted {
    let root = root.permitted.clone().unwrap_or_default();
    let inter = intermediate.permitted.clone().unwrap_or_default();
    Permitted {
        dns: inter
            .dns
            .into_iter()
            .filter(|n| root.dns.contains(n))
            .collect(),
        ips: inter
            .ips
            .into_iter()
            .filter(|r| root.ips.contains(r))
            .collect(),
    }
}

/// The intermediate is signed by the root, and `key` is its key.
fn check_chain(root_der: &[u8], inter_der: &[u8], key: &KeyPair) -> Result<(), String> {
    use rcgen::PublicKeyData as _;
    let (_, root) = x509_parser::parse_x509_certificate(root_der).map_err(|e| e.to_string())?;
    let (_, inter) = x509_parser::parse_x509_certificate(inter_der).map_err(|e| e.to_string())?;
    inter
        .verify_signature(Some(root.public_key()))
        .map_err(|_| format!("{INTERMEDIATE_FILE} is not signed by {ROOT_FILE}"))?;
    if inter.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err(format!("{KEY_FILE} is not the key of {INTERMEDIATE_FILE}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["qoder.sh".into(), "trae.cn".into()]
    }

    #[test]
    fn a_new_ca_is_constrained_and_keeps_no_root_key() {
        let tmp = tempfile::tempdir().unwrap();
        let files = CaFiles::in_state_dir(tmp.path());
        let now = SystemTime::now();
        let (a, made) = ensure(&files, &names(), now).unwrap();
        assert!(made);
        let mut entries: Vec<String> = std::fs::read_dir(&files.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        entries.sort();
        assert_eq!(
            entries,
            [KEY_FILE, INTERMEDIATE_FILE, ROOT_FILE],
            "no root key on disk"
        );
        let key = std::fs::read_to_string(files.key()).unwrap();
        assert_eq!(
            key.matches("PRIVATE KEY-----").count(),
            2,
            "one key: the intermediate's"
        );
        assert!(!secret_file::readable_by_others(&files.key()));
        let wanted = Permitted::for_names(&names());
        for c in [&a.root, &a.intermediate] {
            assert!(c.is_ca && c.constraints_critical, "{c:?}");
            assert_eq!(c.permitted.as_ref().unwrap(), &wanted);
        }
        assert!(a.permits(&LeafName::Dns("api2.qoder.sh".into())));
        assert!(!a.permits(&LeafName::Dns("example.com".into())));
        let year = a.root.not_after.duration_since(now).unwrap();
        assert!(year > Duration::from_secs(364 * 86_400) && year <= AUTHORITY_LIFETIME);
        assert_eq!(a.ending(now), None);
        assert!(a.ending(now + Duration::from_secs(340 * 86_400)).is_some());
        assert!(!format!("{a:?}").contains("PRIVATE"));
        let (again, made) = ensure(&files, &names(), now).unwrap();
        assert!(!made, "an existing CA is kept");
        assert_eq!(again.root.fingerprint, a.root.fingerprint);
    }

    #[test]
    fn rotate_makes_a_new_root_and_an_unusable_ca_is_never_replaced_silently() {
        let tmp = tempfile::tempdir().unwrap();
        let files = CaFiles::in_state_dir(tmp.path());
        let (a, _) = ensure(&files, &names(), SystemTime::now()).unwrap();
        let b = rotate(&files, &names(), SystemTime::now()).unwrap();
        assert_ne!(a.root.fingerprint, b.root.fingerprint);
        assert_eq!(load(&files).unwrap().root.fingerprint, b.root.fingerprint);
        // Another CA's intermediate beside this root: refused, kept.
        let other = tempfile::tempdir().unwrap();
        let other_files = CaFiles::in_state_dir(other.path());
        ensure(&other_files, &names(), SystemTime::now()).unwrap();
        std::fs::copy(other_files.intermediate(), files.intermediate()).unwrap();
        let e = ensure(&files, &names(), SystemTime::now())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not signed by"), "{e}");
        assert!(e.contains("shimgate ca rotate"), "{e}");
        assert!(files.root().exists());
    }

    #[test]
    fn a_leaf_names_only_its_subject_alternative_name() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, _) = ensure(
            &CaFiles::in_state_dir(tmp.path()),
            &names(),
            SystemTime::now(),
        )
        .unwrap();
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let now = SystemTime::now();
        let der = a
            .sign_leaf(
                &LeafName::Ip("127.0.0.1".parse().unwrap()),
                &key,
                now,
                now + Duration::from_secs(86_400),
            )
            .unwrap();
        let (_, leaf) = x509_parser::parse_x509_certificate(&der).unwrap();
        assert_eq!(leaf.subject().to_string(), format!("O={ORGANISATION}"));
        assert!(!leaf.is_ca());
        assert_eq!(
            leaf.issuer(),
            &x509_parser::parse_x509_certificate(&a.intermediate.der)
                .unwrap()
                .1
                .subject()
                .clone()
        );
    }
}

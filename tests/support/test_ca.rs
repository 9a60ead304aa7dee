//! A certificate authority made for one test, so a real client (the Qoder
//! CLI) can speak TLS to loopback servers that pose as its hosts: an ECDSA
//! P-256 root, and leaves minted on demand for any host name or IP address
//! (cached per name). The client trusts it through `NODE_EXTRA_CA_CERTS`,
//! pointed at [`TestCa::write_bundle`]'s file, which can carry other roots
//! after this one (shimgate's own CA, once its listeners speak TLS): Node
//! reads every certificate in the file.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tokio_rustls::rustls::{self, pki_types};
use tokio_rustls::TlsAcceptor;

/// The test's authority: its root (PEM) and a signer for leaves.
pub struct TestCa {
    root_pem: String,
    issuer: Issuer<'static, KeyPair>,
    acceptors: Mutex<HashMap<String, TlsAcceptor>>,
}

impl TestCa {
    /// A fresh authority (a new key each time: nothing outlives the test).
    pub fn new() -> Arc<TestCa> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        // A name of its own: a verifier finds a leaf's issuer by name, and
        // a bundle may hold several of these roots.
        params.distinguished_name.push(
            DnType::CommonName,
            format!("shimgate test CA {:016x}", fastrand::u64(..)),
        );
        let root = params.self_signed(&key).unwrap();
        Arc::new(TestCa {
            root_pem: pem("CERTIFICATE", root.der()),
            issuer: Issuer::new(params, key),
            acceptors: Mutex::default(),
        })
    }

    /// The root, PEM.
    pub fn root_pem(&self) -> &str {
        &self.root_pem
    }

    /// Writes a CA bundle for `NODE_EXTRA_CA_CERTS`: this root, then each
    /// of `more` (PEM text, one or several certificates each).
    pub fn write_bundle(&self, path: &Path, more: &[&str]) {
        let mut text = self.root_pem.clone();
        for extra in more {
            text.push_str(extra.trim_end());
            text.push('\n');
        }
        std::fs::write(path, text).unwrap();
    }

    /// A TLS acceptor whose certificate (signed by this root) names
    /// `names` (host names or IP addresses); cached per name list. It
    /// offers only HTTP/1.1.
    pub fn acceptor(&self, names: &[&str]) -> TlsAcceptor {
        let key = names.join(",");
        let mut cache = self.acceptors.lock().unwrap();
        if let Some(found) = cache.get(&key) {
            return found.clone();
        }
        let acceptor = self.mint(names);
        cache.insert(key, acceptor.clone());
        acceptor
    }

    fn mint(&self, names: &[&str]) -> TlsAcceptor {
        let leaf_key = KeyPair::generate().unwrap();
        let sans: Vec<String> = names
            .iter()
            .map(|n| n.trim_start_matches('[').trim_end_matches(']').to_owned())
            .collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "shimgate tests");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params.signed_by(&leaf_key, &self.issuer).unwrap();
        let private = pki_types::PrivateKeyDer::Pkcs8(pki_types::PrivatePkcs8KeyDer::from(
            leaf_key.serialize_der(),
        ));
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], private)
        .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

/// DER as PEM (64-character lines).
fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

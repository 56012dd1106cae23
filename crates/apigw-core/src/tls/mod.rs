//! TLS for both sides of the gateway: the serving configuration of the front door (with the
//! optional client-certificate verifiers for users and front proxies), the per-backend client
//! configuration (trust the APIService `caBundle`, verify `<service>.<namespace>.svc`, present
//! the proxy client certificate), and certificate files that reload when they change.
//!
//! One crypto provider (ring) is used everywhere; configs are built with it explicitly.

mod client;
mod reload;
mod server;

pub use client::{any_server_cert, backend_client_config, ProxyClientCert, Trust};
pub use reload::ReloadingCert;
pub use server::{optional_client_verifier, server_config, PeerVerifier, SwappableClientVerifier};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

/// Problems reading certificates and keys; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{what}: no PEM certificate found")]
    NoCertificate { what: String },
    #[error("{what}: no PEM private key found")]
    NoKey { what: String },
    #[error("{what}: bad PEM: {}", pem_message(source))]
    Pem { what: String, source: pem::Error },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
}

/// A PEM error for people: the markers it names as text, not as byte arrays.
pub fn pem_message(e: &pem::Error) -> String {
    match e {
        pem::Error::MissingSectionEnd { end_marker } => format!(
            "no \"-----END {}-----\" line: the section is cut short",
            String::from_utf8_lossy(end_marker).trim_end()
        ),
        pem::Error::IllegalSectionStart { line } => format!(
            "malformed BEGIN line {:?}",
            String::from_utf8_lossy(line).trim_end()
        ),
        other => other.to_string(),
    }
}

/// The crypto provider every config in apigw is built with.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs the process-wide default provider; harmless when already installed.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// Every certificate in a PEM file (a chain, or a bundle of CAs).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs(&read(path)?, &path.display().to_string())
}

/// Every certificate in PEM bytes; `what` names the source in errors.
pub fn parse_certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what: what.to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what: what.to_string(),
        });
    }
    Ok(certs)
}

/// The first private key (PKCS#8, SEC1 or PKCS#1) in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    parse_key(&read(path)?, &path.display().to_string())
}

/// The first private key (PKCS#8, SEC1 or PKCS#1) in PEM bytes; `what` names the source in
/// errors. Other sections (certificates, parameters) are skipped.
pub fn parse_key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    match PrivateKeyDer::from_pem_slice(pem) {
        Ok(key) => Ok(key),
        Err(pem::Error::NoItemsFound) => Err(TlsError::NoKey {
            what: what.to_string(),
        }),
        Err(source) => Err(TlsError::Pem {
            what: what.to_string(),
            source,
        }),
    }
}

/// A certificate chain and its key, checked to belong together.
pub fn load_certified_key(
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::sign::CertifiedKey>, TlsError> {
    let chain = load_certs(cert)?;
    let der = load_key(key)?;
    let ck = rustls::sign::CertifiedKey::from_der(chain, der, &provider()).map_err(|e| {
        TlsError::Invalid {
            what: format!("{} with {}", cert.display(), key.display()),
            message: e.to_string(),
        }
    })?;
    Ok(Arc::new(ck))
}

/// A root store holding every certificate of `certs`.
pub fn root_store(
    certs: &[CertificateDer<'static>],
    what: &str,
) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert.clone()).map_err(|e| TlsError::Invalid {
            what: what.to_string(),
            message: e.to_string(),
        })?;
    }
    Ok(roots)
}

/// The CN and every O of a certificate's subject.
pub fn subject(der: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
    use x509_parser::prelude::{FromDer as _, X509Certificate};
    let (_, cert) = X509Certificate::from_der(der.as_ref()).ok()?;
    let subject = cert.subject();
    let cn = subject
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let orgs = subject
        .iter_organization()
        .filter_map(|a| a.as_str().ok())
        .map(str::to_string)
        .collect();
    Some((cn, orgs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    fn cert_and_key() -> (String, String) {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
            .expect("params")
            .self_signed(&key)
            .expect("self-signed");
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn reads_every_certificate_and_skips_other_sections() {
        let (cert, key) = cert_and_key();
        let bundle = format!("{key}{cert}# comment\n{cert}");
        let certs = parse_certs(bundle.as_bytes(), "bundle.pem").expect("certs");
        assert_eq!(certs.len(), 2);
        // The key is found after a certificate in the same file.
        let combined = format!("{cert}{key}");
        assert!(matches!(
            parse_key(combined.as_bytes(), "combined.pem"),
            Ok(PrivateKeyDer::Pkcs8(_))
        ));
    }

    #[test]
    fn missing_items_name_the_file() {
        let (cert, key) = cert_and_key();
        let e = parse_certs(key.as_bytes(), "only-key.pem").expect_err("no cert");
        assert!(matches!(e, TlsError::NoCertificate { .. }), "{e:?}");
        assert_eq!(e.to_string(), "only-key.pem: no PEM certificate found");
        let e = parse_key(cert.as_bytes(), "only-cert.pem").expect_err("no key");
        assert!(matches!(e, TlsError::NoKey { .. }), "{e:?}");
        assert_eq!(e.to_string(), "only-cert.pem: no PEM private key found");
        let e = parse_certs(b"", "empty.pem").expect_err("empty");
        assert_eq!(e.to_string(), "empty.pem: no PEM certificate found");
    }

    #[test]
    fn malformed_pem_names_the_file_and_keeps_the_cause() {
        let (cert, key) = cert_and_key();
        // Cut before the END line: the section never ends.
        let truncated = &cert[..cert.len() / 2];
        let e = parse_certs(truncated.as_bytes(), "cut.pem").expect_err("truncated");
        assert!(
            e.to_string()
                == r#"cut.pem: bad PEM: no "-----END CERTIFICATE-----" line: the section is cut short"#,
            "{e}"
        );
        assert!(e.source().is_some(), "the PEM error is kept as the source");
        let cut_key = &key[..key.len() / 2];
        let e = parse_key(cut_key.as_bytes(), "cut.key").expect_err("truncated key");
        assert!(e.to_string().starts_with("cut.key: bad PEM: "), "{e}");
        assert!(e.source().is_some());
    }

    #[test]
    fn load_errors_name_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("absent.crt");
        let e = load_certs(&path).expect_err("absent");
        assert!(e.to_string().contains("absent.crt"), "{e}");
        let path = dir.path().join("empty.key");
        std::fs::write(&path, "").expect("write");
        let e = load_key(&path).expect_err("empty");
        assert_eq!(
            e.to_string(),
            format!("{}: no PEM private key found", path.display())
        );
    }
}

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
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
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
    let certs = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Invalid {
            what: what.to_string(),
            message: e.to_string(),
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
    let pem = read(path)?;
    rustls_pemfile::private_key(&mut &pem[..])
        .map_err(|e| TlsError::Invalid {
            what: path.display().to_string(),
            message: e.to_string(),
        })?
        .ok_or_else(|| TlsError::NoKey {
            what: path.display().to_string(),
        })
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

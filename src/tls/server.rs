//! The front door's rustls configuration: serving certificate, ALPN `h2` and `http/1.1`, and a
//! client-certificate request that accepts, but does not require, certificates from the user
//! client CA and the front-proxy CA.

use super::{provider, root_store, ReloadingCert, TlsError};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use std::sync::Arc;

/// Builds the serving config. `client_cas` are all CAs whose client certificates the handshake
/// accepts; which of them signed a given peer is decided later by a [`PeerVerifier`].
pub fn server_config(
    cert: Arc<ReloadingCert>,
    client_cas: &[CertificateDer<'static>],
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS versions", e))?;
    let builder = if client_cas.is_empty() {
        builder.with_no_client_auth()
    } else {
        let roots = root_store(client_cas, "client CA")?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| invalid("client CA", e))?;
        builder.with_client_cert_verifier(verifier)
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Checks whether a peer's certificate chain was issued by one particular CA bundle, for
/// telling user certificates from front-proxy certificates after the handshake.
#[derive(Debug, Clone)]
pub struct PeerVerifier {
    inner: Arc<dyn ClientCertVerifier>,
}

impl PeerVerifier {
    pub fn new(cas: &[CertificateDer<'static>], what: &str) -> Result<Self, TlsError> {
        let roots = root_store(cas, what)?;
        let inner = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .build()
            .map_err(|e| invalid(what, e))?;
        Ok(Self { inner })
    }

    /// True when `chain` (leaf first) verifies, for client authentication, to these CAs now.
    pub fn verifies(&self, chain: &[CertificateDer<'static>]) -> bool {
        match chain.split_first() {
            Some((leaf, intermediates)) => self
                .inner
                .verify_client_cert(leaf, intermediates, UnixTime::now())
                .is_ok(),
            None => false,
        }
    }
}

fn invalid(what: &str, e: impl std::fmt::Display) -> TlsError {
    TlsError::Invalid {
        what: what.to_string(),
        message: e.to_string(),
    }
}

//! The front door's rustls configuration: serving certificate, ALPN `h2` and `http/1.1`, and a
//! client-certificate request that accepts, but does not require, certificates from the user
//! client CA and the front-proxy CA.

use super::{provider, root_store, ReloadingCert, TlsError};
use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::ServerConfig;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use std::sync::Arc;

/// Builds the serving config. `client_auth`, when set, verifies the client certificates the
/// handshake accepts (without requiring one).
pub fn server_config(
    cert: Arc<ReloadingCert>,
    client_auth: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<ServerConfig, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS versions", e))?;
    let builder = match client_auth {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut config = builder.with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A verifier accepting, but not requiring, client certificates issued by any of `cas`.
pub fn optional_client_verifier(
    cas: &[CertificateDer<'static>],
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let roots = root_store(cas, "client CA")?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| invalid("client CA", e))
}

/// A client-certificate verifier whose CAs can be replaced while the server runs (a rotated
/// client CA bundle applies to the next handshake).
#[derive(Debug)]
pub struct SwappableClientVerifier {
    inner: ArcSwap<Arc<dyn ClientCertVerifier>>,
}

impl SwappableClientVerifier {
    pub fn new(inner: Arc<dyn ClientCertVerifier>) -> Arc<Self> {
        Arc::new(Self {
            inner: ArcSwap::from_pointee(inner),
        })
    }

    pub fn replace(&self, inner: Arc<dyn ClientCertVerifier>) {
        self.inner.store(Arc::new(inner));
    }
}

impl ClientCertVerifier for SwappableClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    /// No CA hints: they would have to outlive a swap. Clients send their configured
    /// certificate regardless (kubectl, client-go, curl, openssl all do).
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .load()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.load().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.load().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.load().supported_verify_schemes()
    }
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

//! Client TLS towards addon API servers: trust only the APIService `caBundle` (or a configured
//! fallback), verify the service name, present the proxy client certificate.

use super::{provider, root_store, ReloadingCert, TlsError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

/// The certificate the gateway presents to every backend (`--proxy-client-cert-file`).
pub type ProxyClientCert = Arc<ReloadingCert>;

/// How a backend's serving certificate is checked.
pub enum Trust<'a> {
    /// Verify the chain against these CAs and the name the connection is made for.
    Roots(&'a [CertificateDer<'static>]),
    /// `insecureSkipTLSVerify: true`: any certificate, though handshake signatures still verify.
    Insecure,
}

/// A client config for one backend. `alpn` lists the protocols offered, most preferred first.
pub fn backend_client_config(
    trust: Trust<'_>,
    proxy_cert: Option<ProxyClientCert>,
    alpn: &[&[u8]],
    what: &str,
) -> Result<ClientConfig, TlsError> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Invalid {
            what: what.to_string(),
            message: e.to_string(),
        })?;
    let builder = match trust {
        Trust::Roots(cas) => builder.with_root_certificates(root_store(cas, what)?),
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(any_server_cert()),
    };
    let mut config = match proxy_cert {
        Some(cert) => builder.with_client_cert_resolver(cert),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// A verifier accepting any server certificate (handshake signatures still verify); for
/// `insecureSkipTLSVerify: true` only.
pub fn any_server_cert() -> Arc<dyn ServerCertVerifier> {
    Arc::new(NoVerify)
}

/// Accepts any server certificate; used only for `insecureSkipTLSVerify: true`.
#[derive(Debug)]
struct NoVerify;

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

//! Client certificates, examined once per TLS connection: a chain issued by the client CA names
//! a user (CN) and groups (every O); a chain issued by the front-proxy CA, with a CN in the
//! allowed names, marks a front proxy whose identity headers may be trusted.

use super::Identity;
use crate::tls::PeerVerifier;
use rustls::pki_types::CertificateDer;
use x509_parser::prelude::{FromDer, X509Certificate};

/// What a connection's client certificate proved.
#[derive(Debug, Clone, Default)]
pub struct PeerIdentity {
    pub sort: PeerSort,
}

#[derive(Debug, Clone, Default)]
pub enum PeerSort {
    /// No certificate, or one no configured CA vouches for in this role.
    #[default]
    None,
    /// A user certificate from `--client-ca-file`.
    User(Identity),
    /// A front proxy from `--requestheader-client-ca-file` with an allowed CN.
    FrontProxy { cn: String },
}

impl PeerIdentity {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn user(id: Identity) -> Self {
        Self {
            sort: PeerSort::User(id),
        }
    }

    pub fn front_proxy(cn: &str) -> Self {
        Self {
            sort: PeerSort::FrontProxy { cn: cn.to_string() },
        }
    }
}

/// Sorts client certificates into users and front proxies.
#[derive(Debug, Default, Clone)]
pub struct CertAuthenticator {
    pub users: Option<PeerVerifier>,
    pub front_proxy: Option<PeerVerifier>,
    /// CNs a front proxy may have; empty means any certificate of the front-proxy CA.
    pub allowed_names: Vec<String>,
}

impl CertAuthenticator {
    /// Examines the peer chain (leaf first) once, right after the handshake.
    pub fn examine(&self, chain: &[CertificateDer<'static>]) -> PeerIdentity {
        let Some(leaf) = chain.first() else {
            return PeerIdentity::none();
        };
        let Some((cn, orgs)) = subject(leaf) else {
            return PeerIdentity::none();
        };
        if let Some(fp) = &self.front_proxy {
            let allowed = self.allowed_names.is_empty() || self.allowed_names.contains(&cn);
            if allowed && fp.verifies(chain) {
                return PeerIdentity::front_proxy(&cn);
            }
        }
        if let Some(users) = &self.users {
            if !cn.is_empty() && users.verifies(chain) {
                return PeerIdentity::user(Identity::new(cn, orgs));
            }
        }
        PeerIdentity::none()
    }
}

/// The CN and every O of a certificate's subject.
pub fn subject(der: &CertificateDer<'_>) -> Option<(String, Vec<String>)> {
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

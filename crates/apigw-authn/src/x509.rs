//! Client certificates, examined once per TLS connection: a chain issued by the client CA names
//! a user (CN), groups (every O) and, as kube-apiserver does, the extra
//! `authentication.kubernetes.io/credential-id`; a chain issued by the front-proxy CA, with a
//! CN in the allowed names, marks a front proxy whose identity headers may be trusted.

use super::Identity;
use apigw_core::body::BoxError;
use apigw_core::reload::{Reload, Watched};
pub use apigw_core::tls::subject;
use apigw_core::tls::{self, PeerVerifier, SwappableClientVerifier, TlsError};
use arc_swap::ArcSwap;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use std::path::PathBuf;
use std::sync::Arc;

/// The extra key under which kube-apiserver names the credential a user authenticated with.
pub use apigw_request::CREDENTIAL_ID;

/// A client certificate's credential ID as kube-apiserver's x509 authenticator gives it:
/// `X509SHA256=` and the hex SHA-256 of the leaf's DER.
fn credential_id(leaf: &CertificateDer<'_>) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, leaf.as_ref());
    let mut id = String::from("X509SHA256=");
    for b in digest.as_ref() {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

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
    /// A user certificate from `--client-ca-file`: its identity, with `system:authenticated`,
    /// shared by every request of the connection.
    User(Arc<Identity>),
    /// A front proxy from `--requestheader-client-ca-file` with an allowed CN.
    FrontProxy { cn: String },
}

impl PeerIdentity {
    pub fn none() -> Self {
        Self::default()
    }

    pub fn user(id: Identity) -> Self {
        Self {
            sort: PeerSort::User(Arc::new(id.authenticated())),
        }
    }

    pub fn front_proxy(cn: &str) -> Self {
        Self {
            sort: PeerSort::FrontProxy { cn: cn.to_string() },
        }
    }
}

/// Where client certificates are trusted from.
#[derive(Debug, Clone, Default)]
pub struct CertSources {
    /// `--client-ca-file`: users.
    pub client_ca: Option<PathBuf>,
    /// `--requestheader-client-ca-file`: front proxies.
    pub front_proxy_ca: Option<PathBuf>,
    /// CNs a front proxy may have; empty means any certificate of the front-proxy CA.
    pub allowed_names: Vec<String>,
}

#[derive(Debug, Default)]
struct Roles {
    users: Option<PeerVerifier>,
    front_proxy: Option<PeerVerifier>,
}

/// Sorts client certificates into users and front proxies. The CA files reload: the next
/// handshake and the next connection's examination use the new bundles.
#[derive(Debug, Default)]
pub struct CertAuthenticator {
    sources: CertSources,
    roles: ArcSwap<Roles>,
    handshake: Option<Arc<SwappableClientVerifier>>,
}

/// Reads the CA files: the per-role verifiers and the handshake verifier for all of them.
fn build(sources: &CertSources) -> Result<(Roles, Option<Arc<dyn ClientCertVerifier>>), TlsError> {
    let mut all = Vec::new();
    let mut role = |path: &Option<PathBuf>| -> Result<Option<PeerVerifier>, TlsError> {
        let Some(path) = path else { return Ok(None) };
        let cas = tls::load_certs(path)?;
        let verifier = PeerVerifier::new(&cas, &path.display().to_string())?;
        all.extend(cas);
        Ok(Some(verifier))
    };
    let roles = Roles {
        users: role(&sources.client_ca)?,
        front_proxy: role(&sources.front_proxy_ca)?,
    };
    let handshake = if all.is_empty() {
        None
    } else {
        Some(tls::optional_client_verifier(&all)?)
    };
    Ok((roles, handshake))
}

impl CertAuthenticator {
    pub fn load(sources: CertSources) -> Result<Self, TlsError> {
        let (roles, handshake) = build(&sources)?;
        Ok(Self {
            sources,
            roles: ArcSwap::from_pointee(roles),
            handshake: handshake.map(SwappableClientVerifier::new),
        })
    }

    /// Reads the CA files again; on error everything stays as it was.
    pub fn reload(&self) -> Result<(), TlsError> {
        let (roles, handshake) = build(&self.sources)?;
        if let (Some(slot), Some(verifier)) = (&self.handshake, handshake) {
            slot.replace(verifier);
        }
        self.roles.store(Arc::new(roles));
        Ok(())
    }

    /// The CA files to watch.
    pub fn files(&self) -> Vec<PathBuf> {
        [&self.sources.client_ca, &self.sources.front_proxy_ca]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

impl Reload for CertAuthenticator {
    fn watched(&self) -> Vec<Watched> {
        let files = self.files();
        if files.is_empty() {
            return Vec::new();
        }
        vec![Watched {
            what: "client CA",
            files,
        }]
    }

    fn reload(&self, _: &str) -> Result<(), BoxError> {
        Ok(CertAuthenticator::reload(self)?)
    }
}

impl CertAuthenticator {
    /// For the serving TLS config: None when no client CA is configured.
    pub fn handshake_verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.handshake
            .clone()
            .map(|v| v as Arc<dyn ClientCertVerifier>)
    }

    /// Examines the peer chain (leaf first) once, right after the handshake.
    pub fn examine(&self, chain: &[CertificateDer<'static>]) -> PeerIdentity {
        let Some(leaf) = chain.first() else {
            return PeerIdentity::none();
        };
        let Some((cn, orgs)) = subject(leaf) else {
            return PeerIdentity::none();
        };
        let roles = self.roles.load();
        if let Some(fp) = &roles.front_proxy {
            let names = &self.sources.allowed_names;
            if (names.is_empty() || names.contains(&cn)) && fp.verifies(chain) {
                return PeerIdentity::front_proxy(&cn);
            }
        }
        if let Some(users) = &roles.users {
            if !cn.is_empty() && users.verifies(chain) {
                let mut id = Identity::new(cn, orgs);
                id.extra
                    .insert(CREDENTIAL_ID.to_string(), vec![credential_id(leaf)]);
                return PeerIdentity::user(id);
            }
        }
        PeerIdentity::none()
    }
}

//! Certificate/key pairs that follow their files: a rotated Secret or a renewed cert-manager
//! certificate takes effect on the next handshake, with no restart. A pair that fails to load
//! (half-written, mismatched) is logged and the previous one stays in use.

use super::{load_certified_key, TlsError};
use arc_swap::ArcSwap;
use rustls::client::ResolvesClientCert;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::SignatureScheme;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A certificate chain and key loaded from two files, swappable while in use.
#[derive(Debug)]
pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: ArcSwap<CertifiedKey>,
}

impl ReloadingCert {
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let ck = load_certified_key(cert_path, key_path)?;
        Ok(Arc::new(Self {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: ArcSwap::new(ck),
        }))
    }

    /// The pair in use now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// The certificate and key files.
    pub fn paths(&self) -> Vec<PathBuf> {
        vec![self.cert_path.clone(), self.key_path.clone()]
    }

    /// Loads the files again; on error the pair in use stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        self.current
            .store(load_certified_key(&self.cert_path, &self.key_path)?);
        Ok(())
    }
}

impl crate::reload::Reload for ReloadingCert {
    fn watched(&self) -> Vec<crate::reload::Watched> {
        vec![crate::reload::Watched {
            what: "certificate",
            files: self.paths(),
        }]
    }

    fn reload(&self, _: &str) -> Result<(), crate::body::BoxError> {
        Ok(ReloadingCert::reload(self)?)
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

impl ResolvesClientCert for ReloadingCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

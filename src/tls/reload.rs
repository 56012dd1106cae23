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
use std::time::Duration;

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

    fn snapshot(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        Some((
            std::fs::read(&self.cert_path).ok()?,
            std::fs::read(&self.key_path).ok()?,
        ))
    }

    fn reload(&self) {
        match load_certified_key(&self.cert_path, &self.key_path) {
            Ok(ck) => {
                self.current.store(ck);
                tracing::info!(cert = %self.cert_path.display(), "reloaded certificate");
            }
            Err(e) => {
                tracing::warn!(error = %e, "certificate change not applied; keeping the previous one")
            }
        }
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

/// Polls the files of `certs` every `period` and reloads a pair whose bytes changed. Polling
/// (rather than inotify) also follows the symlink swaps Kubernetes uses for mounted Secrets.
pub fn watch_cert_files(certs: Vec<Arc<ReloadingCert>>, period: Duration) {
    tokio::spawn(async move {
        let mut seen: Vec<_> = certs.iter().map(|c| c.snapshot()).collect();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for (cert, last) in certs.iter().zip(seen.iter_mut()) {
                let now = cert.snapshot();
                if now.is_some() && now != *last {
                    cert.reload();
                    *last = now;
                }
            }
        }
    });
}

//! Files that take effect when they change: certificates, CA bundles, token files, policies.
//! Each concern that owns such files says which they are and how to read them again
//! ([`Reload`]); one task ([`watch`]) polls them all, comparing their bytes, which also follows
//! the atomic symlink swaps Kubernetes uses for mounted Secrets and ConfigMaps (inotify on the
//! old inode would miss them). A reload that fails is logged with its causes and the previous
//! contents stay in force.

use crate::body::BoxError;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A set of files that is read again, whole, when any of them changes.
#[derive(Debug, Clone)]
pub struct Watched {
    /// What the files are, for the logs and for [`Reload::reload`]: `token file`, `client CA`.
    pub what: &'static str,
    pub files: Vec<PathBuf>,
}

/// A concern whose files take effect when they change.
pub trait Reload: Send + Sync {
    /// Its sets of files; none when it has nothing to reload.
    fn watched(&self) -> Vec<Watched>;

    /// Reads the set named `what` again and puts it in force; on error the previous contents
    /// stay.
    fn reload(&self, what: &str) -> Result<(), BoxError>;
}

/// Calls each concern's [`Reload::reload`] whenever the bytes of one of its sets of files
/// change, checking every `period` in one task.
pub fn watch(concerns: Vec<Arc<dyn Reload>>, period: Duration) {
    let sets: Vec<(Arc<dyn Reload>, Watched)> = concerns
        .into_iter()
        .flat_map(|c| c.watched().into_iter().map(move |w| (c.clone(), w)))
        .collect();
    if sets.is_empty() {
        return;
    }
    let read = |w: &Watched| -> Vec<Option<Vec<u8>>> {
        w.files.iter().map(|p| std::fs::read(p).ok()).collect()
    };
    tokio::spawn(async move {
        let mut seen: Vec<_> = sets.iter().map(|(_, w)| read(w)).collect();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for ((concern, watched), seen) in sets.iter().zip(seen.iter_mut()) {
                let now = read(watched);
                // A file missing mid-swap is not a change yet.
                if now.iter().all(Option::is_some) && now != *seen {
                    let what = watched.what;
                    match concern.reload(what) {
                        Ok(()) => tracing::info!(what, "reloaded"),
                        Err(e) => {
                            let error = crate::errors::chain(&*e);
                            tracing::warn!(what, %error, "change not applied; keeping the previous one")
                        }
                    }
                    *seen = now;
                }
            }
        }
    });
}

//! Files that take effect when they change: certificates, CA bundles, the token file. Files are
//! polled, comparing their bytes, which also follows the atomic symlink swaps Kubernetes uses
//! for mounted Secrets and ConfigMaps (inotify on the old inode would miss them). A reload that
//! fails is logged and the previous contents stay in force.

use crate::body::BoxError;
use std::path::PathBuf;
use std::time::Duration;

/// Calls `reload` whenever the bytes of any of `paths` change, checking every `period`. A
/// failure is logged with its whole chain of causes.
pub fn watch_files<F, E>(what: &'static str, paths: Vec<PathBuf>, period: Duration, reload: F)
where
    F: Fn() -> Result<(), E> + Send + 'static,
    E: Into<BoxError>,
{
    let read =
        move || -> Vec<Option<Vec<u8>>> { paths.iter().map(|p| std::fs::read(p).ok()).collect() };
    tokio::spawn(async move {
        let mut seen = read();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now = read();
            // A file missing mid-swap is not a change yet.
            if now.iter().all(Option::is_some) && now != seen {
                match reload() {
                    Ok(()) => tracing::info!(what, "reloaded"),
                    Err(e) => {
                        let error = crate::errors::chain(&*e.into());
                        tracing::warn!(what, %error, "change not applied; keeping the previous one")
                    }
                }
                seen = now;
            }
        }
    });
}

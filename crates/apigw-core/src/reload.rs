//! Files and directories that take effect when they change: certificates, CA bundles, token
//! files, policies, the APIService manifest directory. Each concern that owns such files says
//! which they are and how to read them again ([`Reload`]); one task ([`watch`]) watches them
//! all, the one mechanism for every one of them.
//!
//! A change is decided by comparing bytes (a directory's: its manifest files' names and
//! bytes), which also follows the atomic symlink swaps Kubernetes uses for mounted Secrets and
//! ConfigMaps. The task looks when inotify reports anything in a watched directory or in the
//! directory of a watched file (so a swap of `..data` beside the file is seen; a watch on the
//! old inode would miss it), after a short settle, and every `period` in case an event was
//! missed. A reload that fails is logged with its causes and the previous contents stay in
//! force.

use crate::body::BoxError;
use notify::{RecursiveMode, Watcher};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a burst of events (an editor's save, `kubectl cp`) settles before the files are
/// read, so a burst is read once.
const SETTLE: Duration = Duration::from_millis(150);

/// A set of files (or directories of manifests) that is read again, whole, when any of them
/// changes.
#[derive(Debug, Clone)]
pub struct Watched {
    /// What the files are, for the logs and for [`Reload::reload`]: `token file`, `client CA`.
    pub what: &'static str,
    /// Files, and directories whose manifest files ([`crate::yaml::manifest_files`]) count.
    pub files: Vec<PathBuf>,
}

/// A concern whose files take effect when they change.
pub trait Reload: Send + Sync {
    /// Its sets of files; none when it has nothing to reload.
    fn watched(&self) -> Vec<Watched>;

    /// Reads the set named `what` again and puts it in force; on error the previous contents
    /// stay.
    fn reload(&self, what: &str) -> Result<(), BoxError>;

    /// When to read its sets again even if nothing changed (it holds a change back until
    /// then); None: only on a change.
    fn recheck(&self) -> Option<Instant> {
        None
    }
}

/// What a watched path holds, to compare: a file's bytes, or a directory's manifest files
/// with theirs; None while it is missing (mid-swap).
fn contents(path: &Path) -> Option<Vec<u8>> {
    if !path.is_dir() {
        return std::fs::read(path).ok();
    }
    let mut all = Vec::new();
    for file in crate::yaml::manifest_files(path).ok()? {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for part in [file.as_os_str().as_encoded_bytes(), &bytes] {
            all.extend_from_slice(&part.len().to_le_bytes());
            all.extend_from_slice(part);
        }
    }
    Some(all)
}

fn read(w: &Watched) -> Vec<Option<Vec<u8>>> {
    w.files.iter().map(|p| contents(p)).collect()
}

/// Calls each concern's [`Reload::reload`] whenever the bytes of one of its sets of files
/// change (or its [`Reload::recheck`] is due), in one task: on inotify's word, and every
/// `period`.
pub fn watch(concerns: Vec<Arc<dyn Reload>>, period: Duration) {
    let sets: Vec<(Arc<dyn Reload>, Watched)> = concerns
        .iter()
        .flat_map(|c| c.watched().into_iter().map(move |w| (c.clone(), w)))
        .collect();
    if sets.is_empty() {
        return;
    }
    let (tx, mut events) = tokio::sync::mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Reading the files raises access events; only changes matter.
        if event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_))) {
            let _ = tx.send(());
        }
    });
    // Each watched directory, and the directory of each watched file.
    let dirs: BTreeSet<PathBuf> = sets
        .iter()
        .flat_map(|(_, w)| &w.files)
        .filter_map(|p| match p.is_dir() {
            true => Some(p.clone()),
            false => p.parent().map(|d| match d.as_os_str().is_empty() {
                true => PathBuf::from("."),
                false => d.to_path_buf(),
            }),
        })
        .collect();
    // A directory that cannot be watched is still looked at every period; the others keep
    // their events.
    let watcher = match watcher {
        Ok(mut watcher) => {
            for dir in &dirs {
                if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                    tracing::warn!(dir = %dir.display(), error = %e, ?period, "cannot watch with inotify: checked every period only");
                }
            }
            Some(watcher)
        }
        Err(e) => {
            tracing::warn!(error = %e, ?period, "inotify is not available: files are checked every period only");
            None
        }
    };
    tokio::spawn(async move {
        // Held for as long as the task runs: dropping it ends the events.
        let _watcher = watcher;
        let mut seen: Vec<_> = sets.iter().map(|(_, w)| read(w)).collect();
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let recheck = sets.iter().filter_map(|(c, _)| c.recheck()).min();
            let due = async {
                match recheck {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tick.tick() => {}
                Some(()) = events.recv() => {
                    tokio::time::sleep(SETTLE).await;
                    while events.try_recv().is_ok() {}
                }
                () = due => {}
            }
            let now = Instant::now();
            for ((concern, watched), seen) in sets.iter().zip(seen.iter_mut()) {
                let current = read(watched);
                // A file missing mid-swap is not a change yet.
                let changed = current.iter().all(Option::is_some) && current != *seen;
                if !changed && concern.recheck().is_none_or(|at| at > now) {
                    continue;
                }
                let what = watched.what;
                match concern.reload(what) {
                    Ok(()) if changed => tracing::info!(what, "reloaded"),
                    Ok(()) => {}
                    Err(e) => {
                        let error = crate::errors::chain(&*e);
                        tracing::warn!(what, %error, "change not applied; keeping the previous one")
                    }
                }
                if changed {
                    *seen = current;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its reloads.
    struct Counter(Watched, AtomicUsize);

    impl Reload for Counter {
        fn watched(&self) -> Vec<Watched> {
            vec![self.0.clone()]
        }
        fn reload(&self, _what: &str) -> Result<(), BoxError> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// A volume as the kubelet projects a Secret or ConfigMap: the files are symlinks through
    /// `..data`, itself a symlink to a timestamped directory, swapped by a rename.
    fn project(dir: &Path, version: &str, text: &str) {
        let data = dir.join(format!("..{version}"));
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("apiservices.yaml"), text).unwrap();
        symlink(&data, dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    }

    async fn reloads_within(counter: &Counter, n: usize) -> bool {
        for _ in 0..100 {
            if counter.1.load(Ordering::SeqCst) >= n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Both a file reached through the swapped symlink and the directory holding it see the
    /// swap on inotify's word (the period is far longer than the test), and bytes that did not
    /// change reload nothing.
    #[tokio::test]
    async fn a_kubelet_style_symlink_swap_reloads_the_file_and_the_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        project(dir, "v1", "kind: List\n");
        symlink("..data/apiservices.yaml", dir.join("apiservices.yaml")).unwrap();
        let file = Arc::new(Counter(
            Watched {
                what: "file",
                files: vec![dir.join("apiservices.yaml")],
            },
            AtomicUsize::new(0),
        ));
        let directory = Arc::new(Counter(
            Watched {
                what: "directory",
                files: vec![dir.to_path_buf()],
            },
            AtomicUsize::new(0),
        ));
        watch(
            vec![file.clone(), directory.clone()],
            Duration::from_secs(3600),
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        std::fs::write(dir.join("unrelated.txt"), "x").unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(file.1.load(Ordering::SeqCst), 0, "nothing it reads changed");
        assert_eq!(
            directory.1.load(Ordering::SeqCst),
            0,
            "a .txt is no manifest"
        );

        project(dir, "v2", "kind: List\nitems: []\n");
        assert!(reloads_within(&file, 1).await, "the file's swap was missed");
        assert!(
            reloads_within(&directory, 1).await,
            "the directory's swap was missed"
        );
    }
}

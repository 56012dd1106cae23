//! The APIService registry: an immutable [`Snapshot`] of every registered APIService, swapped
//! atomically when a source (the manifest directory, later a cluster) delivers a new valid set.
//! Readers take the current snapshot without locks; watchers learn of changes through
//! [`Registry::subscribe`]. An APIService carries its APIServiceBackends ([`Backend`]), so a
//! snapshot holds every backend of every group version.

mod apiservice;
mod backend;
mod flags;
mod manifests;

pub use apigw_core::names::{dns1123_subdomain, InvalidName};
pub use apiservice::{
    ApiService, FieldError, ServiceRef, LONG_RUNNING_SUBRESOURCES, REQUEST_TIMEOUT,
};
pub use backend::{
    attach, Backend, Orphan, API_VERSION as BACKEND_API_VERSION, KIND as BACKEND_KIND,
};
pub use flags::RegistryFlags;
pub use manifests::{load_dir, parse_manifest, Manifest, ManifestDir, ManifestError};

use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;

/// One consistent set of APIServices, keyed by name (`<version>.<group>`).
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Increases with every swap; caches derived from a snapshot key on it.
    pub generation: u64,
    services: BTreeMap<String, Arc<ApiService>>,
}

impl Snapshot {
    pub fn new(services: impl IntoIterator<Item = ApiService>) -> Self {
        Self {
            generation: 0,
            services: services
                .into_iter()
                .map(|s| (s.name.clone(), Arc::new(s)))
                .collect(),
        }
    }

    /// Every APIService, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ApiService>> {
        self.services.values()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ApiService>> {
        self.services.get(name)
    }

    /// The APIService serving `group`/`version`.
    pub fn lookup(&self, group: &str, version: &str) -> Option<&Arc<ApiService>> {
        // Built without the formatting machinery: this runs on every proxied request.
        let mut name = String::with_capacity(version.len() + 1 + group.len());
        name.push_str(version);
        name.push('.');
        name.push_str(group);
        self.services.get(&name)
    }

    pub fn len(&self) -> usize {
        self.services.len()
    }

    pub fn is_empty(&self) -> bool {
        self.services.is_empty()
    }

    fn same_services(&self, other: &Snapshot) -> bool {
        self.services == other.services
    }
}

/// The shared handle: current snapshot plus change notification.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwap<Snapshot>,
    changed: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            current: ArcSwap::from_pointee(Snapshot::default()),
            changed: watch::channel(0).0,
        }
    }
}

impl Registry {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The snapshot in force now.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Puts `next` in force, unless it holds exactly the APIServices already in force.
    /// Returns whether anything changed.
    pub fn replace(&self, mut next: Snapshot) -> bool {
        let current = self.current.load();
        if current.generation > 0 && current.same_services(&next) {
            return false;
        }
        next.generation = current.generation + 1;
        let generation = next.generation;
        self.current.store(Arc::new(next));
        self.changed.send_replace(generation);
        true
    }

    /// A receiver that wakes on every swap; its value is the new generation.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

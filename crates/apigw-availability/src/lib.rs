//! The availability controller, as kube-aggregator's: for every APIService, on every registry
//! change and every interval, check that its service resolves and that
//! `GET /apis/<group>/<version>` on the backend answers 2xx over verified TLS with the proxy
//! client certificate. Keeps the `Available` condition (upstream reasons `Local`, `Passed`,
//! `ServiceNotFound`, `FailedDiscoveryCheck`) and the last good APIResourceList. After a
//! passed check it also asks the backend for its aggregated discovery (`/apis`, once per
//! backend and round, with `If-None-Match`; see [`apigw_proxy::fetch`]) and keeps this
//! APIService's version entry from it. Discovery serves the entry, else the converted
//! APIResourceList (as `Stale` while the backend is down).
//! An APIService with APIServiceBackends has each backend checked so, and its state made of
//! theirs ([`members`]).

mod members;
mod metrics;
mod settings;
pub use members::{resource_key, Member, Members};
pub use metrics::AvailabilityMetrics;
pub use settings::AvailabilityFlags;

use apigw_proxy::fetch::{Answer, Fetcher, AGGREGATED_ACCEPT};
use apigw_proxy::Proxy;
use apigw_registry::{ApiService, Registry};
use arc_swap::ArcSwap;
use futures_util::StreamExt;
use metrics::AvailabilityMetrics as Metrics;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// The `Available` condition of one APIService.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub available: bool,
    pub reason: &'static str,
    pub message: String,
    pub last_transition: SystemTime,
}

/// What the controller knows about one APIService.
#[derive(Debug, Clone)]
pub struct State {
    pub condition: Condition,
    /// The backend's APIResourceList from the last successful check.
    pub resources: Option<Arc<Value>>,
    /// This group version's entry in the backend's aggregated discovery (`/apis` as an
    /// `APIGroupDiscoveryList`), from the last time the backend answered; None when it serves
    /// only legacy discovery.
    pub aggregated: Option<Arc<Value>>,
    /// For an APIService with APIServiceBackends: each backend's own state, and which serves
    /// each resource; the fields above are then theirs merged.
    pub members: Option<Arc<Members>>,
}

/// Shared, lock-free view of every APIService's state, keyed by name.
#[derive(Debug)]
pub struct Availability {
    states: ArcSwap<HashMap<String, Arc<State>>>,
    changed: watch::Sender<u64>,
    /// The registry generation the last finished round checked (0: none yet, or only the
    /// empty registry before the first load).
    checked: watch::Sender<u64>,
    /// The backends' aggregated discovery, cached with ETags.
    discovery: Fetcher,
}

impl Default for Availability {
    fn default() -> Self {
        Self {
            states: ArcSwap::default(),
            changed: watch::channel(0).0,
            checked: watch::channel(0).0,
            discovery: Fetcher::default(),
        }
    }
}

impl Availability {
    pub fn get(&self, name: &str) -> Option<Arc<State>> {
        self.states.load().get(name).cloned()
    }

    pub fn all(&self) -> Arc<HashMap<String, Arc<State>>> {
        self.states.load_full()
    }

    /// The number of rounds that changed something; part of the discovery cache key.
    pub fn round(&self) -> u64 {
        *self.changed.borrow()
    }

    /// Wakes on every change of a condition or of discovered resources; the value counts rounds
    /// that changed something (0 until the first round completes).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The registry generation the last finished round checked: readiness waits for a round
    /// over a loaded registry, not the first round, which may have seen none.
    pub fn checked(&self) -> watch::Receiver<u64> {
        self.checked.subscribe()
    }
}

/// How often and how patiently to check.
#[derive(Debug, Clone)]
pub struct Settings {
    pub interval: Duration,
    pub timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(5),
        }
    }
}

/// At most this many checks run at once.
const CONCURRENCY: usize = 32;
/// Discovery documents bigger than this are refused.
const MAX_DISCOVERY_BYTES: usize = apigw_proxy::fetch::MAX_BYTES;

/// Runs the controller until the registry is dropped.
pub fn spawn(
    registry: Arc<Registry>,
    proxy: Arc<Proxy>,
    availability: Arc<Availability>,
    metrics: Metrics,
    settings: Settings,
) {
    tokio::spawn(async move {
        let mut changes = registry.subscribe();
        let mut round = 0u64;
        let mut cycle = 0u64;
        loop {
            cycle += 1;
            let generation = *changes.borrow_and_update();
            let snapshot = registry.snapshot();
            let services: Vec<Arc<ApiService>> = snapshot.iter().cloned().collect();
            let live = services
                .iter()
                .flat_map(|s| std::iter::once(s).chain(s.backends.iter().map(|b| &b.target)))
                .filter_map(|s| s.service.as_ref())
                .map(|s| format!("{}:{}", s.host(), s.port))
                .collect();
            availability.discovery.retain(&live);
            let mut results = futures_util::stream::iter(services)
                .map(|svc| {
                    let (proxy, availability, timeout) =
                        (proxy.clone(), availability.clone(), settings.timeout);
                    async move {
                        let previous = availability.get(&svc.name);
                        let round = (cycle, timeout);
                        let state = if svc.backends.is_empty() {
                            check(&proxy, &availability, &svc, previous.as_deref(), round).await
                        } else {
                            check_members(&proxy, &availability, &svc, previous.as_deref(), round)
                                .await
                        };
                        (svc.name.clone(), state)
                    }
                })
                .buffer_unordered(CONCURRENCY);
            // Each result is in force as soon as its check ends, not when the round's slowest
            // (a backend that never answers: the check timeout) does, as kube-aggregator checks
            // each APIService on its own; a flip of `Available` re-renders discovery at once,
            // anything else once the round is over.
            let mut checked = HashSet::new();
            let mut changed = false;
            while let Some((name, state)) = results.next().await {
                checked.insert(name.clone());
                match store(&availability, &metrics, name, state) {
                    Stored::Flipped => {
                        round += 1;
                        availability.changed.send_replace(round);
                    }
                    Stored::Changed => changed = true,
                    Stored::Same => {}
                }
            }
            changed |= retire(&availability, &metrics, &checked);
            availability
                .checked
                .send_if_modified(|checked| std::mem::replace(checked, generation) != generation);
            if changed || round == 0 {
                round += 1;
                availability.changed.send_replace(round);
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(settings.interval) => {}
            }
        }
    });
}

/// What storing a check's result changed.
enum Stored {
    /// `Available` turned True or False.
    Flipped,
    /// The APIService is new, or its condition or resources changed.
    Changed,
    Same,
}

/// Puts `name`'s new `state` in force.
fn store(availability: &Availability, metrics: &Metrics, name: String, state: State) -> Stored {
    let old = availability.all();
    let previous = old.get(&name);
    let was_available = previous.map(|p| p.condition.available);
    let newly_unavailable = (!state.condition.available && was_available != Some(false))
        .then_some(state.condition.reason);
    metrics.set_available(&name, state.condition.available, newly_unavailable);
    if was_available != Some(state.condition.available) {
        if state.condition.available {
            tracing::info!(apiservice = %name, reason = state.condition.reason, "APIService available");
        } else {
            tracing::warn!(apiservice = %name, reason = state.condition.reason, message = %state.condition.message, "APIService unavailable");
        }
    }
    let before = previous.and_then(|p| p.members.as_deref());
    let member_flipped = members_metrics(metrics, before, state.members.as_deref());
    let stored = match previous {
        Some(p) if p.condition.available != state.condition.available => Stored::Flipped,
        // A backend of a group version went up or down: its resources' answers change.
        Some(_) if member_flipped => Stored::Flipped,
        Some(p)
            if p.condition == state.condition
                && same_resources(&p.resources, &state.resources)
                && same_resources(&p.aggregated, &state.aggregated) =>
        {
            Stored::Same
        }
        _ => Stored::Changed,
    };
    let mut next = HashMap::clone(&old);
    next.insert(name, Arc::new(state));
    availability.states.store(Arc::new(next));
    stored
}

/// Forgets the APIServices a round did not check (gone from the registry); returns whether
/// there were any.
fn retire(availability: &Availability, metrics: &Metrics, checked: &HashSet<String>) -> bool {
    let old = availability.all();
    if old.keys().all(|n| checked.contains(n)) {
        return false;
    }
    let mut next = HashMap::clone(&old);
    next.retain(|name, state| {
        let keep = checked.contains(name);
        if !keep {
            metrics.forget(name);
            members_metrics(metrics, state.members.as_deref(), None);
        }
        keep
    });
    availability.states.store(Arc::new(next));
    true
}

/// Records the availability of each APIServiceBackend in `now` (under its target's name,
/// `<apiservice>/<backend>`) and forgets those of `before` that are gone. Returns whether one
/// went up or down.
fn members_metrics(metrics: &Metrics, before: Option<&Members>, now: Option<&Members>) -> bool {
    let was: HashMap<&str, bool> = before
        .into_iter()
        .flat_map(Members::iter)
        .filter(|m| m.backend.is_some())
        .map(|m| (m.target.name.as_str(), m.state.condition.available))
        .collect();
    let mut flipped = false;
    let mut kept = HashSet::new();
    for m in now.into_iter().flat_map(Members::iter) {
        if m.backend.is_none() {
            continue;
        }
        let (name, available) = (m.target.name.as_str(), m.state.condition.available);
        kept.insert(name);
        let previously = was.get(name).copied();
        flipped |= previously.is_some_and(|p| p != available);
        let newly_unavailable =
            (!available && previously != Some(false)).then_some(m.state.condition.reason);
        metrics.set_available(name, available, newly_unavailable);
    }
    for name in was.keys().filter(|n| !kept.contains(*n)) {
        metrics.forget(name);
    }
    flipped
}

fn same_resources(a: &Option<Arc<Value>>, b: &Option<Arc<Value>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a == b,
        (None, None) => true,
        _ => false,
    }
}

/// Checks one APIService in refresh cycle `cycle`. Keeps the previous transition time when the
/// status did not change, and the previous resources when the backend could not be asked.
async fn check(
    proxy: &Proxy,
    availability: &Availability,
    svc: &ApiService,
    previous: Option<&State>,
    (cycle, timeout): (u64, Duration),
) -> State {
    let (available, reason, message, resources) = probe(proxy, svc, timeout).await;
    if !available {
        proxy.evict(svc);
    }
    let kept = || previous.and_then(|p| p.aggregated.clone());
    let aggregated = if available {
        match aggregated_entry(proxy, &availability.discovery, svc, (cycle, timeout)).await {
            Ok(entry) => entry,
            Err(e) => {
                let error = apigw_core::errors::chain(&e);
                tracing::debug!(apiservice = %svc.name, %error, "aggregated discovery not fetched");
                kept()
            }
        }
    } else {
        kept()
    };
    let last_transition = transition(previous, available);
    let resources = resources
        .map(Arc::new)
        .or_else(|| previous.and_then(|p| p.resources.clone()));
    State {
        condition: Condition {
            available,
            reason,
            message,
            last_transition,
        },
        resources,
        aggregated,
        members: None,
    }
}

/// When the condition last changed: the previous one's time while `available` stays as it was,
/// else now.
fn transition(previous: Option<&State>, available: bool) -> SystemTime {
    match previous {
        Some(p) if p.condition.available == available => p.condition.last_transition,
        _ => SystemTime::now(),
    }
}

/// Checks each backend of an APIService with APIServiceBackends, at once, and makes its state
/// of theirs.
async fn check_members(
    proxy: &Proxy,
    availability: &Availability,
    svc: &Arc<ApiService>,
    previous: Option<&State>,
    round: (u64, Duration),
) -> State {
    let before = |name: &str| {
        let members = previous?.members.as_ref()?;
        members
            .iter()
            .find(|m| m.target.name == name)
            .map(|m| m.state.clone())
    };
    let checks = Members::targets(svc).into_iter().map(|(target, backend)| {
        let earlier = match &backend {
            // Its own service's check of last time, also from before it had backends.
            None => {
                before(&target.name).or_else(|| previous.filter(|p| p.members.is_none()).cloned())
            }
            Some(_) => before(&target.name),
        };
        async move {
            let state = check(proxy, availability, &target, earlier.as_ref(), round).await;
            Member {
                target,
                backend,
                state,
            }
        }
    });
    let members = futures_util::future::join_all(checks).await;
    Members::new(svc, members).state(previous)
}

/// Why an APIService's aggregated discovery entry could not be fetched.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    #[error(transparent)]
    Backend(#[from] apigw_core::errors::Status),
    #[error(transparent)]
    Fetch(#[from] apigw_proxy::FetchError),
}

/// This APIService's version entry in its backend's aggregated `/apis`; None when the backend
/// serves only legacy discovery (the APIResourceList of the check then stands in). When its
/// aggregated list lacks this group version, the version without resources, as
/// kube-aggregator lists it. An error when the backend could not be asked.
async fn aggregated_entry(
    proxy: &Proxy,
    fetcher: &Fetcher,
    svc: &ApiService,
    (cycle, timeout): (u64, Duration),
) -> Result<Option<Arc<Value>>, EntryError> {
    let Some(service) = &svc.service else {
        return Ok(None);
    };
    let backend = proxy.backend_for(svc)?;
    let key = format!("{}:{}", service.host(), service.port);
    let answer = fetcher
        .get(&key, &backend, "/apis", AGGREGATED_ACCEPT, cycle, timeout)
        .await?;
    Ok(match answer.as_ref() {
        Answer::Aggregated(index) => Some(
            index
                .get(&svc.group, &svc.version)
                .cloned()
                .unwrap_or_else(|| Arc::new(serde_json::json!({"version": svc.version}))),
        ),
        Answer::Legacy(_) => None,
    })
}

async fn probe(
    proxy: &Proxy,
    svc: &ApiService,
    timeout: Duration,
) -> (bool, &'static str, String, Option<Value>) {
    let Some(service) = &svc.service else {
        return (
            true,
            "Local",
            "Local APIServices are always available".into(),
            None,
        );
    };
    if let Err(e) = proxy.resolve(&service.host(), service.port).await {
        // The cluster resolver words its errors as upstream does; DNS errors get its prefix.
        let text = e.to_string();
        let reason = if text.contains("no endpoints available") {
            "MissingEndpoints"
        } else if text.contains("no service port") {
            "ServicePortError"
        } else {
            "ServiceNotFound"
        };
        let message = if text.starts_with("service/") || reason != "ServiceNotFound" {
            text
        } else {
            format!(
                "service/{} in {:?} is not present: {text}",
                service.name, service.namespace
            )
        };
        return (false, reason, message, None);
    }
    let backend = match proxy.backend_for(svc) {
        Ok(b) => b,
        Err(status) => {
            return (
                false,
                "FailedDiscoveryCheck",
                status.message().to_string(),
                None,
            )
        }
    };
    let path = format!("/apis/{}/{}", svc.group, svc.version);
    let failing = |detail: String| {
        format!(
            "failing or missing response from {}: {detail}",
            backend.url(&path)
        )
    };
    match backend
        .fetch(
            &path,
            "application/json",
            None,
            MAX_DISCOVERY_BYTES,
            timeout,
        )
        .await
    {
        Ok(Some((body, _))) => match serde_json::from_slice::<Value>(&body) {
            Ok(doc) if doc.get("kind").and_then(Value::as_str) == Some("APIResourceList") => {
                (true, "Passed", "all checks passed".into(), Some(doc))
            }
            Ok(_) => (
                false,
                "FailedDiscoveryCheck",
                failing("the answer is not an APIResourceList".into()),
                None,
            ),
            Err(e) => (
                false,
                "FailedDiscoveryCheck",
                failing(format!("invalid JSON: {e}")),
                None,
            ),
        },
        Ok(None) => (
            false,
            "FailedDiscoveryCheck",
            failing("unexpected 304".into()),
            None,
        ),
        Err(e) => (false, "FailedDiscoveryCheck", failing(e.detail()), None),
    }
}

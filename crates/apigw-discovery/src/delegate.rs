//! The delegate's groups (`--delegate-url`, the main kube-apiserver), merged into `/apis` as
//! kube-aggregator merges them. Upstream, the autoregister controller creates a `Local`
//! APIService for every group version the delegate serves, with priorities from a fixed table
//! (CRD groups get groupPriorityMinimum 1000 and versionPriority 100 from the CRD registration
//! controller). The gateway does the same without writing APIServices: every group version of
//! the delegate's `/apis` becomes a synthetic `Local` APIService here, priced by [`priority`],
//! with the resources the delegate's aggregated discovery lists (or its APIResourceList when it
//! serves only legacy discovery). A registered APIService for the same group version wins.
//!
//! `/api` is the delegate's: its APIVersions, and its aggregated core group; so is `/version`
//! (the gateway's own while the delegate's last answer failed). Everything is
//! fetched at start and every interval as the gateway (`system:kube-aggregator`), with
//! `If-None-Match`; while the delegate cannot be reached the last answer stays, `Stale`.

use super::aggregated;
use super::{Builtin, Doc, JSON};
use apigw_availability::{Condition, State};
use apigw_proxy::fetch::{Answer, Fetcher, AGGREGATED_ACCEPT};
use apigw_proxy::{Backend, FetchError};
use apigw_registry::ApiService;
use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Upstream's priorities for the built-in group versions of kube-apiserver v1.36
/// (`DefaultGenericAPIServicePriorities` merged with kube-apiserver's `apiVersionPriorities`), as
/// `(group, version, groupPriorityMinimum, versionPriority)`. The real-tier tests compare the
/// resulting `/apis` with kube-aggregator's, so a drift shows there.
const PRIORITIES: &[(&str, &str, i64, i64)] = &[
    ("", "v1", 18000, 1),
    ("apps", "v1", 17800, 15),
    ("events.k8s.io", "v1", 17750, 15),
    ("events.k8s.io", "v1beta1", 17750, 5),
    ("authentication.k8s.io", "v1", 17700, 15),
    ("authentication.k8s.io", "v1beta1", 17700, 9),
    ("authentication.k8s.io", "v1alpha1", 17700, 1),
    ("authorization.k8s.io", "v1", 17600, 15),
    ("autoscaling", "v2", 17500, 30),
    ("autoscaling", "v1", 17500, 15),
    ("autoscaling", "v2beta1", 17500, 9),
    ("autoscaling", "v2beta2", 17500, 1),
    ("batch", "v1", 17400, 15),
    ("batch", "v1beta1", 17400, 9),
    ("batch", "v2alpha1", 17400, 9),
    ("certificates.k8s.io", "v1", 17300, 15),
    ("certificates.k8s.io", "v1beta1", 17300, 9),
    ("certificates.k8s.io", "v1alpha1", 17300, 1),
    ("networking.k8s.io", "v1", 17200, 15),
    ("networking.k8s.io", "v1beta1", 17200, 9),
    ("policy", "v1", 17100, 15),
    ("policy", "v1beta1", 17100, 9),
    ("rbac.authorization.k8s.io", "v1", 17000, 15),
    ("storage.k8s.io", "v1", 16800, 15),
    ("storage.k8s.io", "v1beta1", 16800, 9),
    ("storage.k8s.io", "v1alpha1", 16800, 1),
    ("apiextensions.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1", 16700, 15),
    ("admissionregistration.k8s.io", "v1beta1", 16700, 12),
    ("admissionregistration.k8s.io", "v1alpha1", 16700, 9),
    ("scheduling.k8s.io", "v1", 16600, 15),
    ("scheduling.k8s.io", "v1alpha2", 16600, 2),
    ("coordination.k8s.io", "v1", 16500, 15),
    ("coordination.k8s.io", "v1beta1", 16500, 13),
    ("coordination.k8s.io", "v1alpha2", 16500, 12),
    ("node.k8s.io", "v1", 16300, 15),
    ("node.k8s.io", "v1beta1", 16300, 9),
    ("node.k8s.io", "v1alpha1", 16300, 1),
    ("discovery.k8s.io", "v1", 16200, 15),
    ("discovery.k8s.io", "v1beta1", 16200, 12),
    ("resource.k8s.io", "v1", 16200, 21),
    ("resource.k8s.io", "v1beta2", 16200, 15),
    ("resource.k8s.io", "v1beta1", 16200, 9),
    ("resource.k8s.io", "v1alpha3", 16200, 1),
    ("flowcontrol.apiserver.k8s.io", "v1", 16100, 21),
    ("flowcontrol.apiserver.k8s.io", "v1beta3", 16100, 18),
    ("flowcontrol.apiserver.k8s.io", "v1beta2", 16100, 15),
    ("flowcontrol.apiserver.k8s.io", "v1beta1", 16100, 12),
    ("flowcontrol.apiserver.k8s.io", "v1alpha1", 16100, 9),
    ("internal.apiserver.k8s.io", "v1alpha1", 16000, 9),
    ("storagemigration.k8s.io", "v1beta1", 15800, 9),
];

/// `(groupPriorityMinimum, versionPriority)` of a delegate group version: upstream's table;
/// for another version of a group in the table, the group's priority and versionPriority 9
/// (below the table's GA versions); for any other group, the CRD registration controller's
/// 1000 and 100.
pub fn priority(group: &str, version: &str) -> (i64, i64) {
    if let Some(&(_, _, g, v)) = PRIORITIES
        .iter()
        .find(|(g, v, _, _)| *g == group && *v == version)
    {
        return (g, v);
    }
    match PRIORITIES.iter().find(|(g, _, _, _)| *g == group) {
        Some(&(_, _, g, _)) => (g, 9),
        None => (1000, 100),
    }
}

/// What the gateway last learnt from the delegate.
#[derive(Debug, Default)]
pub struct Known {
    /// Changes whenever anything below does; part of the discovery cache key.
    pub generation: u64,
    /// One synthetic `Local` APIService per group version of the delegate's `/apis`.
    pub versions: Vec<Builtin>,
    /// `/api`: legacy, v2; None until the delegate answered it.
    pub api: Option<Arc<[Doc; 2]>>,
}

/// The delegate's discovery, refreshed in the background.
#[derive(Debug)]
pub struct DelegateDiscovery {
    current: ArcSwap<Known>,
    /// The delegate's `/version` as it last answered; None until it did, and after a refresh
    /// in which it did not (the gateway then serves its own).
    version: ArcSwapOption<Bytes>,
    changed: watch::Sender<u64>,
    fetcher: Fetcher,
}

impl Default for DelegateDiscovery {
    fn default() -> Self {
        Self {
            current: ArcSwap::default(),
            version: ArcSwapOption::empty(),
            changed: watch::channel(0).0,
            fetcher: Fetcher::default(),
        }
    }
}

/// One delegate group version, as fetched.
struct Fetched {
    group: String,
    version: String,
    resources: Option<Arc<Value>>,
    aggregated: Option<Arc<Value>>,
}

/// The fetcher key of the delegate.
const KEY: &str = "delegate";

impl DelegateDiscovery {
    pub fn current(&self) -> Arc<Known> {
        self.current.load_full()
    }

    /// The delegate's `/version` body, when its last refresh got one.
    pub fn version(&self) -> Option<Bytes> {
        self.version.load_full().map(|b| (*b).clone())
    }

    /// Wakes on every change; the value is the generation.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Refreshes at once and then every `interval` until the process ends.
    pub fn spawn(self: Arc<Self>, backend: Arc<Backend>, interval: Duration, timeout: Duration) {
        tokio::spawn(async move {
            let mut cycle = 0u64;
            loop {
                cycle += 1;
                self.refresh(&backend, cycle, timeout).await;
                tokio::time::sleep(interval).await;
            }
        });
    }

    /// One refresh: publishes a new [`Known`] when anything changed.
    pub async fn refresh(&self, backend: &Backend, cycle: u64, timeout: Duration) {
        let old = self.current();
        let ask = |path: String, accept: &'static str| async move {
            self.fetcher
                .get(KEY, backend, &path, accept, cycle, timeout)
                .await
        };
        let version = match ask("/version".into(), JSON).await.as_deref() {
            Ok(Answer::Legacy(doc)) if is_version_info(doc) => {
                Some(Arc::new(Bytes::from(doc.to_string())))
            }
            Ok(_) => {
                tracing::warn!(
                    "the delegate's /version is not a version.Info; serving the gateway's own"
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "the delegate's /version not fetched; serving the gateway's own");
                None
            }
        };
        self.version.store(version);
        let groups = match self.groups(backend, &old, cycle, timeout).await {
            Ok(groups) => Some(groups),
            Err(e) => {
                tracing::warn!(error = %e, "delegate discovery (/apis) not refreshed; its groups stay as last seen, Stale");
                None
            }
        };
        let api = match (
            ask("/api".into(), JSON).await,
            ask("/api".into(), AGGREGATED_ACCEPT).await,
        ) {
            (Ok(legacy), Ok(agg)) => api_docs(&legacy, &agg, &old, || ask("/api/v1".into(), JSON))
                .await
                .or_else(|| old.api.clone()),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "delegate discovery (/api) not refreshed");
                old.api.clone()
            }
        };
        let versions: Vec<Builtin> = match groups {
            Some(groups) => groups
                .into_iter()
                .filter_map(|f| synthetic(f, &old.versions, true))
                .collect(),
            None => old
                .versions
                .iter()
                .filter_map(|b| {
                    let f = Fetched {
                        group: b.svc.group.clone(),
                        version: b.svc.version.clone(),
                        resources: b.state.resources.clone(),
                        aggregated: b.state.aggregated.clone(),
                    };
                    synthetic(f, &old.versions, false)
                })
                .collect(),
        };
        let same_api = match (&api, &old.api) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same_api && same_versions(&versions, &old.versions) {
            return;
        }
        let generation = old.generation + 1;
        self.current.store(Arc::new(Known {
            generation,
            versions,
            api,
        }));
        self.changed.send_replace(generation);
    }

    /// The delegate's group versions: from its aggregated `/apis`, else from its APIGroupList
    /// and each version's APIResourceList (a version whose list could not be fetched keeps
    /// the one `old` has).
    async fn groups(
        &self,
        backend: &Backend,
        old: &Known,
        cycle: u64,
        timeout: Duration,
    ) -> Result<Vec<Fetched>, FetchError> {
        let answer = self
            .fetcher
            .get(KEY, backend, "/apis", AGGREGATED_ACCEPT, cycle, timeout)
            .await?;
        let list = match answer.as_ref() {
            Answer::Aggregated(index) => {
                return Ok(index
                    .versions
                    .iter()
                    .filter_map(|(group, entry)| {
                        Some(Fetched {
                            group: group.clone(),
                            version: entry["version"].as_str()?.to_string(),
                            resources: None,
                            aggregated: Some(entry.clone()),
                        })
                    })
                    .collect())
            }
            Answer::Legacy(list) => list.clone(),
        };
        let mut out = Vec::new();
        for group in list["groups"].as_array().into_iter().flatten() {
            let name = group["name"].as_str().unwrap_or_default();
            for v in group["versions"].as_array().into_iter().flatten() {
                let Some(version) = v["version"].as_str() else {
                    continue;
                };
                let path = format!("/apis/{name}/{version}");
                let fetched = self
                    .fetcher
                    .get(KEY, backend, &path, JSON, cycle, timeout)
                    .await;
                let resources = match fetched.as_deref() {
                    Ok(Answer::Legacy(doc)) if doc["kind"] == "APIResourceList" => {
                        Some(doc.clone())
                    }
                    Ok(_) => None,
                    Err(e) => {
                        tracing::debug!(error = %e, "delegate {path} not refreshed");
                        let name = format!("{version}.{name}");
                        old.versions
                            .iter()
                            .find(|b| b.svc.name == name)
                            .and_then(|b| b.state.resources.clone())
                    }
                };
                out.push(Fetched {
                    group: name.to_string(),
                    version: version.to_string(),
                    resources,
                    aggregated: None,
                });
            }
        }
        Ok(out)
    }
}

/// The synthetic `Local` APIService of one delegate group version, reusing the previous one
/// when nothing about it changed (so discovery re-renders only what did).
fn synthetic(f: Fetched, old: &[Builtin], available: bool) -> Option<Builtin> {
    let name = format!("{}.{}", f.version, f.group);
    if let Some(b) = old.iter().find(|b| b.svc.name == name) {
        let same = b.state.condition.available == available
            && same(&b.state.resources, &f.resources)
            && same(&b.state.aggregated, &f.aggregated);
        if same {
            return Some(b.clone());
        }
    }
    let (gpm, vp) = priority(&f.group, &f.version);
    let svc = ApiService::from_value(json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name},
        "spec": {"group": f.group, "version": f.version,
                 "groupPriorityMinimum": gpm, "versionPriority": vp}
    }));
    let svc = match svc {
        Ok(svc) => svc,
        Err(errors) => {
            tracing::debug!(group_version = %name, ?errors, "delegate group version skipped");
            return None;
        }
    };
    let state = State {
        condition: Condition {
            available,
            reason: "Local",
            message: if available {
                "served by the delegate".into()
            } else {
                "the delegate's discovery could not be fetched".into()
            },
            last_transition: SystemTime::now(),
        },
        resources: f.resources,
        aggregated: f.aggregated,
        members: None,
    };
    Some(Builtin {
        svc: Arc::new(svc),
        state: Arc::new(state),
    })
}

fn same(a: &Option<Arc<Value>>, b: &Option<Arc<Value>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn same_versions(a: &[Builtin], b: &[Builtin]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(a, b)| Arc::ptr_eq(&a.svc, &b.svc) && Arc::ptr_eq(&a.state, &b.state))
}

/// `/api` from the delegate's answers: its APIVersions, and its aggregated core group (or, from
/// a delegate without aggregated discovery, its `/api/v1` APIResourceList converted). Reuses
/// the previous documents when both answers are unchanged. None when the delegate serves no
/// APIVersions.
async fn api_docs<F, Fut>(
    legacy: &Arc<Answer>,
    agg: &Arc<Answer>,
    old: &Known,
    core: F,
) -> Option<Arc<[Doc; 2]>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<Arc<Answer>, FetchError>>,
{
    let Answer::Legacy(versions) = legacy.as_ref() else {
        return None;
    };
    if versions["kind"] != "APIVersions" {
        return None;
    }
    let entries: Vec<Arc<str>> = match agg.as_ref() {
        Answer::Aggregated(index) => index
            .versions
            .iter()
            .filter(|(g, _)| g.is_empty())
            .map(|(_, v)| Arc::from(v.to_string()))
            .collect(),
        Answer::Legacy(_) => match core().await {
            Ok(answer) => match answer.as_ref() {
                Answer::Legacy(list) if list["kind"] == "APIResourceList" => {
                    let entry = json!({"version": "v1", "freshness": "Current",
                                       "resources": aggregated::resources(list)});
                    vec![Arc::from(entry.to_string())]
                }
                _ => Vec::new(),
            },
            Err(_) => return old.api.clone(),
        },
    };
    let core = (!entries.is_empty()).then(|| aggregated::group_json("", &entries));
    let items: Vec<&str> = core.as_deref().into_iter().collect();
    let docs = [Doc::new(versions, JSON), super::aggregated_doc(&items)];
    // Unchanged answers keep the same Arc, so the cache key does not move.
    match &old.api {
        Some(prev) if prev.iter().zip(&docs).all(|(a, b)| a.etag == b.etag) => Some(prev.clone()),
        _ => Some(Arc::new(docs)),
    }
}

/// True when the delegate's `/version` answer is a `version.Info` worth passing on: an object
/// with a `gitVersion`.
fn is_version_info(doc: &Value) -> bool {
    doc.get("gitVersion").and_then(Value::as_str).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_follow_upstream_then_crd_defaults() {
        assert_eq!(priority("", "v1"), (18000, 1));
        assert_eq!(priority("apps", "v1"), (17800, 15));
        assert_eq!(priority("apps", "v2alpha1"), (17800, 9));
        assert_eq!(priority("stable.example.com", "v1"), (1000, 100));
    }
}

//! The cluster's APIServices and APIServiceBackends as a registry source: a `kube` watcher of
//! each (with backoff; it resumes from its resourceVersion after a dropped watch and relists
//! after 410 Gone) feeding a reflector store; every change turns both stores into a new
//! [`Snapshot`]. An object that fails validation is logged with its name and fields and left
//! out, so one bad object never blocks the others; so is a backend whose APIService is missing
//! or `Local`. Readiness is a latch released after the first full list of APIServices: a
//! cluster without the APIServiceBackend CRD serves its APIServices all the same.

use apigw_registry::{attach, ApiService, Backend, FieldError, Registry, Snapshot, BACKEND_KIND};
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;

/// `apiregistration.k8s.io/v1` APIService, for dynamic API access.
pub fn api_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    ApiResource::from_gvk_with_plural(&gvk, "apiservices")
}

/// `apigw.dev/v1alpha1` APIServiceBackend (the CRD the chart installs), for dynamic API access.
pub fn backend_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("apigw.dev", "v1alpha1", BACKEND_KIND);
    ApiResource::from_gvk_with_plural(&gvk, "apiservicebackends")
}

/// Which watch an event came from.
enum From {
    ApiServices,
    Backends,
}

/// A running APIService source.
#[derive(Clone)]
pub struct ApiServiceSource {
    ready: watch::Receiver<bool>,
    store: Store<DynamicObject>,
}

impl ApiServiceSource {
    /// Starts watching APIServices with `client`, replacing `registry`'s snapshot on every
    /// change. Runs until the runtime stops.
    pub fn spawn(client: kube::Client, registry: Arc<Registry>) -> Self {
        let ar = api_resource();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let writer = reflector::store::Writer::new(ar);
        let store = writer.as_reader();
        let (ready_tx, ready) = watch::channel(false);
        let apiservices = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let br = backend_resource();
        let backends_api: Api<DynamicObject> = Api::all_with(client, &br);
        let backends_writer = reflector::store::Writer::new(br);
        let backends = backends_writer.as_reader();
        let backend_events = reflector::reflector(
            backends_writer,
            watcher::watcher(backends_api, watcher::Config::default()).default_backoff(),
        );
        let events = futures_util::stream::select(
            apiservices.map(|e| (From::ApiServices, e)),
            backend_events.map(|e| (From::Backends, e)),
        );
        let reader = store.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let (mut synced, mut backends_synced) = (false, false);
            let mut errors =
                super::refusals::WatchErrors::new("apiregistration.k8s.io", "apiservices");
            let mut backend_errors =
                super::refusals::WatchErrors::new("apigw.dev", "apiservicebackends");
            let mut reported = HashMap::new();
            while let Some((from, event)) = events.next().await {
                let (done, errors) = match from {
                    From::ApiServices => (&mut synced, &mut errors),
                    From::Backends => (&mut backends_synced, &mut backend_errors),
                };
                match event {
                    Ok(Event::InitDone) => {
                        *done = true;
                        errors.recovered();
                    }
                    Ok(Event::Apply(_) | Event::Delete(_)) if *done => {}
                    Ok(_) => continue,
                    Err(e) => {
                        errors.report(&e);
                        continue;
                    }
                }
                if !synced {
                    continue;
                }
                let objects = reader.state().iter().map(|o| to_json(o)).collect();
                let extra = match backends_synced {
                    true => backends.state().iter().map(|o| to_json(o)).collect(),
                    false => Vec::new(),
                };
                let (snapshot, problems) = snapshot_of(objects, extra);
                report(&mut reported, problems);
                if registry.replace(snapshot) {
                    tracing::info!(
                        count = registry.snapshot().len(),
                        "APIServices from the cluster"
                    );
                }
                ready_tx.send_replace(true);
            }
        });
        Self { ready, store }
    }

    /// True once the first full list is in the registry.
    pub fn is_ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits for the first full list; returns false if the source stopped first.
    pub async fn wait_ready(&self) -> bool {
        self.ready.clone().wait_for(|r| *r).await.is_ok()
    }

    /// The `status` of APIService `name` as last seen in the cluster.
    pub fn observed_status(&self, name: &str) -> Option<Value> {
        let obj = self.store.get(&ObjectRef::new_with(name, api_resource()))?;
        obj.data.get("status").cloned()
    }
}

/// The object as JSON with its type filled in (list items come without it), less the fields
/// that change on every status write, so status write-back does not churn the registry.
fn to_json(obj: &DynamicObject) -> Value {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    let (api_version, kind) = match &obj.types {
        Some(t) if t.kind == BACKEND_KIND => (t.api_version.as_str(), BACKEND_KIND),
        _ => ("apiregistration.k8s.io/v1", "APIService"),
    };
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), api_version.into());
        map.insert("kind".into(), kind.into());
        map.remove("status");
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    value
}

/// The valid APIServices, with the valid backends of `backends` attached, as a snapshot, and
/// the problems of the others by `<kind> <name>`.
pub fn snapshot_of(
    objects: Vec<Value>,
    backends: Vec<Value>,
) -> (Snapshot, HashMap<String, Vec<FieldError>>) {
    let mut valid = Vec::with_capacity(objects.len());
    let mut problems = HashMap::new();
    let name = |obj: &Value| obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    for obj in objects {
        let label = format!("APIService {}", name(&obj));
        match ApiService::from_value(obj) {
            Ok(svc) => valid.push(svc),
            Err(errors) => {
                problems.insert(label, errors);
            }
        }
    }
    let mut extra = Vec::with_capacity(backends.len());
    for obj in backends {
        let label = format!("{BACKEND_KIND} {}", name(&obj));
        match Backend::from_value(obj) {
            Ok(b) => extra.push(b),
            Err(errors) => {
                problems.insert(label, errors);
            }
        }
    }
    for orphan in attach(&mut valid, extra) {
        let field = FieldError {
            field: "spec.apiService".into(),
            message: orphan.why,
        };
        problems.insert(
            format!("{BACKEND_KIND} {}", orphan.backend.name),
            vec![field],
        );
    }
    (Snapshot::new(valid), problems)
}

/// Logs each invalid object once per distinct set of problems.
fn report(reported: &mut HashMap<String, String>, problems: HashMap<String, Vec<FieldError>>) {
    reported.retain(|name, _| problems.contains_key(name));
    for (name, errors) in problems {
        let text = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if reported.get(&name) != Some(&text) {
            tracing::warn!(object = %name, problems = %text, "ignoring an invalid object");
            reported.insert(name, text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apiservice(name: &str, group: &str, version: &str) -> Value {
        json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
               "metadata": {"name": name},
               "spec": {"group": group, "version": version, "groupPriorityMinimum": 100,
                        "versionPriority": 10, "insecureSkipTLSVerify": true,
                        "service": {"name": "s", "namespace": "ns"}}})
    }

    #[test]
    fn one_bad_object_does_not_block_the_others() {
        let mut bad = apiservice("v1.b.example.com", "b.example.com", "v1");
        bad["spec"]["groupPriorityMinimum"] = json!(0);
        let backend = |name: &str, api_service: &str| {
            json!({"apiVersion": "apigw.dev/v1alpha1", "kind": "APIServiceBackend",
                   "metadata": {"name": name},
                   "spec": {"apiService": api_service, "insecureSkipTLSVerify": true,
                            "service": {"name": name, "namespace": "ns"}}})
        };
        let (snap, problems) = snapshot_of(
            vec![apiservice("v1.a.example.com", "a.example.com", "v1"), bad],
            vec![
                backend("second", "v1.a.example.com"),
                backend("lost", "v1.b.example.com"),
                backend("Bad", "v1.a.example.com"),
            ],
        );
        assert_eq!(snap.len(), 1);
        let a = snap.get("v1.a.example.com").unwrap();
        assert_eq!(a.backends.len(), 1);
        assert_eq!(a.backends[0].target.name, "v1.a.example.com/second");
        let errs = &problems["APIService v1.b.example.com"];
        assert_eq!(errs[0].field, "spec.groupPriorityMinimum");
        assert_eq!(
            problems["APIServiceBackend lost"][0].to_string(),
            "spec.apiService: there is no APIService v1.b.example.com"
        );
        assert_eq!(problems["APIServiceBackend Bad"][0].field, "metadata.name");
    }

    #[test]
    fn list_items_get_their_type_and_lose_volatile_fields() {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "metadata": {"name": "v1.a", "resourceVersion": "7", "managedFields": []},
            "spec": {"group": "a"}, "status": {"conditions": []}
        }))
        .unwrap();
        obj.types = None;
        let v = to_json(&obj);
        assert_eq!(v["apiVersion"], "apiregistration.k8s.io/v1");
        assert_eq!(v["kind"], "APIService");
        assert!(v.get("status").is_none());
        assert!(v["metadata"].get("resourceVersion").is_none());
        assert_eq!(v["spec"]["group"], "a");
    }
}

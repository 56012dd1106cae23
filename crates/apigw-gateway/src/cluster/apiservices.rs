//! The cluster's APIServices as a registry source: a `kube` watcher (with backoff; it resumes
//! from its resourceVersion after a dropped watch and relists after 410 Gone) feeding a
//! reflector store; every change turns the whole store into a new [`Snapshot`]. An object that
//! fails validation is logged with its name and fields and left out, so one bad APIService
//! never blocks the others. Readiness is a latch released after the first full list.

use crate::registry::{ApiService, FieldError, Registry, Snapshot};
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
        let api: Api<DynamicObject> = Api::all_with(client, &ar);
        let writer = reflector::store::Writer::new(ar);
        let store = writer.as_reader();
        let (ready_tx, ready) = watch::channel(false);
        let events = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let reader = store.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut synced = false;
            let mut errors =
                super::refusals::WatchErrors::new("apiregistration.k8s.io", "apiservices");
            let mut reported = HashMap::new();
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::InitDone) => {
                        synced = true;
                        errors.recovered();
                    }
                    Ok(Event::Apply(_) | Event::Delete(_)) if synced => {}
                    Ok(_) => continue,
                    Err(e) => {
                        errors.report(&e);
                        continue;
                    }
                }
                let objects = reader.state().iter().map(|o| to_json(o)).collect();
                let (snapshot, problems) = snapshot_of(objects);
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
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), "apiregistration.k8s.io/v1".into());
        map.insert("kind".into(), "APIService".into());
        map.remove("status");
    }
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    value
}

/// The valid objects as a snapshot, and the problems of the invalid ones by name.
pub fn snapshot_of(objects: Vec<Value>) -> (Snapshot, HashMap<String, Vec<FieldError>>) {
    let mut valid = Vec::with_capacity(objects.len());
    let mut problems = HashMap::new();
    for obj in objects {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        match ApiService::from_value(obj) {
            Ok(svc) => valid.push(svc),
            Err(errors) => {
                problems.insert(name, errors);
            }
        }
    }
    (Snapshot::new(valid), problems)
}

/// Logs each invalid APIService once per distinct set of problems.
fn report(reported: &mut HashMap<String, String>, problems: HashMap<String, Vec<FieldError>>) {
    reported.retain(|name, _| problems.contains_key(name));
    for (name, errors) in problems {
        let text = errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if reported.get(&name) != Some(&text) {
            tracing::warn!(apiservice = %name, problems = %text, "ignoring invalid APIService");
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
        let (snap, problems) = snapshot_of(vec![
            apiservice("v1.a.example.com", "a.example.com", "v1"),
            bad,
        ]);
        assert_eq!(snap.len(), 1);
        assert!(snap.get("v1.a.example.com").is_some());
        let errs = &problems["v1.b.example.com"];
        assert_eq!(errs[0].field, "spec.groupPriorityMinimum");
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

//! The cluster's FlowSchemas and PriorityLevelConfigurations as APF's configuration: two
//! `kube` watchers feeding reflector stores; every change turns both stores into the
//! configuration in force ([`apigw_flowcontrol::Flow::set_cluster`]), as kube-apiserver's APF
//! controller digests the same objects (UIDs included, so the PF headers name the cluster's
//! objects). A bad object is logged and the configuration in force stays.

use apigw_flowcontrol::Flow;
use futures_util::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use serde_json::Value;
use std::sync::Arc;

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1", kind), plural)
}

/// Watches both kinds with `client`, putting every change in force in `flow`. Runs until the
/// runtime stops.
pub fn spawn(client: kube::Client, flow: Arc<Flow>) {
    let kinds = [
        ("PriorityLevelConfiguration", "prioritylevelconfigurations"),
        ("FlowSchema", "flowschemas"),
    ];
    let mut stores: Vec<(String, Store<DynamicObject>)> = Vec::new();
    let (changed, mut on_change) = tokio::sync::mpsc::unbounded_channel::<()>();
    for (kind, plural) in kinds {
        let ar = resource(kind, plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let writer = reflector::store::Writer::new(ar);
        stores.push((kind.to_string(), writer.as_reader()));
        let events = reflector::reflector(
            writer,
            watcher::watcher(api, watcher::Config::default()).default_backoff(),
        );
        let changed = changed.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            let mut synced = false;
            let mut errors = super::refusals::WatchErrors::new(GROUP, plural);
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
                if changed.send(()).is_err() {
                    return;
                }
            }
        });
    }
    tokio::spawn(async move {
        while on_change.recv().await.is_some() {
            // Both lists known, or wait for the other.
            if stores.iter().any(|(_, s)| s.state().is_empty()) {
                continue;
            }
            let items: Vec<Value> = stores
                .iter()
                .flat_map(|(kind, store)| {
                    store
                        .state()
                        .iter()
                        .map(|o| to_json(o, kind))
                        .collect::<Vec<_>>()
                })
                .collect();
            match flow.set_cluster(items) {
                Ok(()) => tracing::info!("flow-control configuration from the cluster"),
                Err(problems) => tracing::warn!(
                    problems = %problems.join("; "),
                    "flow-control objects refused; keeping the configuration in force"
                ),
            }
        }
    });
}

fn to_json(obj: &DynamicObject, kind: &str) -> Value {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), format!("{GROUP}/v1").into());
        map.insert("kind".into(), kind.into());
        map.remove("status");
    }
    value
}

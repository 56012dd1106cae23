//! Status write-back: the `Available` condition of each APIService, as the availability
//! controller found it, written to the APIService's `status` subresource in the cluster; only
//! while this replica leads, and only when its status or reason differs from what the cluster
//! holds. The message alone is no reason to write: where kube-apiserver's own kube-aggregator
//! checks the same APIServices, it words the same verdict differently and rewrites its words
//! on every update, so writing ours would make the two take turns (docs/interop.md). A
//! condition written moments ago is not written again while the watch catches up (`settle`).

use super::apiservices::{api_resource, ApiServiceSource};
use apigw_availability::{Availability, Condition, State};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Writes availability to the cluster.
pub struct StatusWriter {
    api: Api<DynamicObject>,
    source: ApiServiceSource,
    /// What we wrote, and when, per APIService.
    written: HashMap<String, (Value, Instant)>,
    settle: Duration,
}

/// The condition as the API has it: `type`, `status`, `lastTransitionTime`, `reason`, `message`.
pub fn condition_json(c: &Condition) -> Value {
    json!({
        "type": "Available",
        "status": if c.available { "True" } else { "False" },
        "lastTransitionTime": apigw_core::meta::timestamp(c.last_transition),
        "reason": c.reason,
        "message": c.message,
    })
}

/// True when `status` already holds the verdict of `want`: the same status and reason
/// (whatever the message and the transition time).
pub fn holds(status: Option<&Value>, want: &Value) -> bool {
    let same = |c: &Value| {
        ["status", "reason"]
            .iter()
            .all(|k| c.get(*k) == want.get(*k))
    };
    status
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"))
        .is_some_and(same)
}

impl StatusWriter {
    pub fn new(client: kube::Client, source: ApiServiceSource) -> Self {
        Self {
            api: Api::all_with(client, &api_resource()),
            source,
            written: HashMap::new(),
            settle: Duration::from_secs(5),
        }
    }

    /// Runs until the availability controller stops: on every availability change, every
    /// change of leadership, and every `resync`, writes what differs while `leader` is true.
    pub fn spawn(
        mut self,
        availability: Arc<Availability>,
        mut leader: watch::Receiver<bool>,
        resync: Duration,
    ) {
        tokio::spawn(async move {
            let mut changes = availability.subscribe();
            loop {
                if *leader.borrow_and_update() {
                    self.write_changed(&availability.all()).await;
                } else {
                    self.written.clear();
                }
                tokio::select! {
                    r = changes.changed() => if r.is_err() { return },
                    r = leader.changed() => if r.is_err() { return },
                    () = tokio::time::sleep(resync) => {}
                }
            }
        });
    }

    /// One pass over every APIService's condition; returns how many were written.
    pub async fn write_changed(&mut self, states: &HashMap<String, Arc<State>>) -> usize {
        self.written.retain(|name, _| states.contains_key(name));
        let mut count = 0;
        for (name, state) in states.iter() {
            let want = condition_json(&state.condition);
            if holds(self.source.observed_status(name).as_ref(), &want) {
                continue;
            }
            let recent = self.written.get(name).is_some_and(|(w, at)| {
                holds(Some(&json!({"conditions": [w]})), &want) && at.elapsed() < self.settle
            });
            if recent {
                continue;
            }
            let patch = json!({"status": {"conditions": [want.clone()]}});
            match self
                .api
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    tracing::info!(apiservice = %name, status = %want["status"], reason = %want["reason"], "APIService status written");
                    count += 1;
                    self.written.insert(name.clone(), (want, Instant::now()));
                }
                Err(e) => {
                    tracing::warn!(apiservice = %name, error = %e, "writing APIService status")
                }
            }
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn holds_ignores_transition_time_and_message() {
        let c = Condition {
            available: false,
            reason: "ServiceNotFound",
            message: "m".into(),
            last_transition: SystemTime::UNIX_EPOCH,
        };
        let want = condition_json(&c);
        let mut other = want.clone();
        other["lastTransitionTime"] = "2030-01-01T00:00:00Z".into();
        assert!(holds(Some(&json!({"conditions": [other]})), &want));
        let mut reworded = want.clone();
        reworded["message"] = "n".into();
        assert!(holds(Some(&json!({"conditions": [reworded]})), &want));
        let mut changed = want.clone();
        changed["reason"] = "FailedDiscoveryCheck".into();
        assert!(!holds(Some(&json!({"conditions": [changed]})), &want));
        assert!(!holds(None, &want));
    }
}

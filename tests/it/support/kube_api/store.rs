//! The test API server's storage: objects as JSON keyed by resource, namespace and name, one
//! resourceVersion counter for everything (as etcd's revision), a history of events for watch
//! resume (cut by `compact`), optimistic concurrency and JSON merge patches.

use super::resources::Kind;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::broadcast;

/// One change, as a watch sends it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: &'static Kind,
    pub namespace: String,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub action: &'static str,
    pub object: Value,
}

/// An API error: HTTP code, Status reason and message.
#[derive(Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
        }
    }

    pub fn not_found(kind: &Kind, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} {name:?} not found", kind.qualified()),
        )
    }

    pub fn status(&self) -> Value {
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code
        })
    }
}

type Key = (&'static str, &'static str, String, String);

fn key(kind: &'static Kind, ns: &str, name: &str) -> Key {
    (kind.group, kind.plural, ns.to_string(), name.to_string())
}

/// Every object, the revision counter and the event history.
pub struct Store {
    pub rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Arc<Event>>,
    /// Events at or below this revision are forgotten: resuming from them is 410 Gone.
    pub compacted: u64,
    pub events: broadcast::Sender<Arc<Event>>,
    uids: u64,
}

impl Store {
    pub fn new() -> Self {
        Self {
            rv: 1,
            objects: BTreeMap::new(),
            history: Vec::new(),
            compacted: 0,
            events: broadcast::channel(4096).0,
            uids: 0,
        }
    }

    /// Forgets history: watches resuming from any revision handed out before now get 410
    /// Gone. The revision moves on, so lists after this hand out a revision that resumes.
    pub fn compact(&mut self) {
        self.history.clear();
        self.rv += 1;
        self.compacted = self.rv;
    }

    pub fn get(&self, kind: &'static Kind, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&key(kind, ns, name))
    }

    /// Objects of `kind` (in `ns` when given), ordered by namespace and name.
    pub fn list(&self, kind: &'static Kind, ns: Option<&str>) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|((g, p, n, _), _)| {
                *g == kind.group && *p == kind.plural && ns.is_none_or(|ns| ns == n)
            })
            .map(|(_, v)| v)
            .collect()
    }

    /// Events of `kind` after revision `after`, or None when history no longer reaches back.
    pub fn since(&self, kind: &'static Kind, after: u64) -> Option<Vec<Arc<Event>>> {
        if after < self.compacted {
            return None;
        }
        Some(
            self.history
                .iter()
                .filter(|e| e.rv > after && std::ptr::eq(e.kind, kind))
                .cloned()
                .collect(),
        )
    }

    fn record(&mut self, kind: &'static Kind, ns: &str, action: &'static str, object: Value) {
        let event = Arc::new(Event {
            rv: self.rv,
            kind,
            namespace: ns.to_string(),
            action,
            object,
        });
        self.history.push(event.clone());
        let _ = self.events.send(event);
    }

    /// Stores a new object; `obj` has its name and namespace already checked.
    pub fn create(
        &mut self,
        kind: &'static Kind,
        ns: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        if self.get(kind, ns, &name).is_some() {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} {name:?} already exists", kind.qualified()),
            ));
        }
        self.rv += 1;
        self.uids += 1;
        let meta = &mut obj["metadata"];
        meta["uid"] = format!("00000000-0000-4000-8000-{:012}", self.uids).into();
        meta["resourceVersion"] = self.rv.to_string().into();
        meta["generation"] = 1.into();
        meta["creationTimestamp"] =
            apigw_core::meta::timestamp(std::time::SystemTime::now()).into();
        if kind.namespaced {
            meta["namespace"] = ns.into();
        }
        self.objects.insert(key(kind, ns, &name), obj.clone());
        self.record(kind, ns, "ADDED", obj.clone());
        Ok(obj)
    }

    /// Replaces an object. A non-empty `metadata.resourceVersion` in `obj` must match the
    /// stored one (409 Conflict otherwise). An update that changes nothing keeps the revision.
    pub fn update(
        &mut self,
        kind: &'static Kind,
        ns: &str,
        name: &str,
        mut obj: Value,
    ) -> Result<Value, ApiError> {
        let Some(old) = self.get(kind, ns, name).cloned() else {
            return Err(ApiError::not_found(kind, name));
        };
        if !obj.get("metadata").is_some_and(Value::is_object) {
            return Err(ApiError::new(422, "Invalid", "metadata: must be an object"));
        }
        let given = obj["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let current = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if !given.is_empty() && given != current {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {name:?}: the object has been modified; \
                     please apply your changes to the latest version and try again",
                    kind.qualified()
                ),
            ));
        }
        for field in ["uid", "creationTimestamp", "generation", "resourceVersion"] {
            obj["metadata"][field] = old["metadata"][field].clone();
        }
        if kind.namespaced {
            obj["metadata"]["namespace"] = ns.into();
        }
        if obj == old {
            return Ok(old);
        }
        if obj.get("spec") != old.get("spec") {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            obj["metadata"]["generation"] = (generation + 1).into();
        }
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = self.rv.to_string().into();
        self.objects.insert(key(kind, ns, name), obj.clone());
        self.record(kind, ns, "MODIFIED", obj.clone());
        Ok(obj)
    }

    pub fn delete(&mut self, kind: &'static Kind, ns: &str, name: &str) -> Result<Value, ApiError> {
        let Some(mut obj) = self.objects.remove(&key(kind, ns, name)) else {
            return Err(ApiError::not_found(kind, name));
        };
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = self.rv.to_string().into();
        self.record(kind, ns, "DELETED", obj.clone());
        Ok(obj)
    }
}

/// RFC 7386 JSON merge patch; keys starting with `$` (strategic-merge directives) are dropped.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(map) = target else { return };
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

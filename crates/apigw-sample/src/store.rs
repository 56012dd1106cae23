//! In-memory flunder storage with kube-apiserver semantics: objects keyed by (namespace, name),
//! one global resourceVersion counter, server-set metadata (uid, creationTimestamp, generation),
//! optimistic concurrency on update, and a bounded event history that feeds watches.

use apigw_core::errors::Status;
use http::StatusCode;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use tokio::sync::broadcast;

pub const GROUP: &str = "wardle.example.com";
pub const VERSION: &str = "v1alpha1";
pub const API_VERSION: &str = "wardle.example.com/v1alpha1";
pub const KIND: &str = "Flunder";
pub const RESOURCE: &str = "flunders";

/// How many past events a watch may resume from.
const HISTORY: usize = 1000;

/// One change, as a watch reports it.
#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    pub namespace: String,
    pub object: Value,
}

/// Where a new watch starts.
pub struct WatchStart {
    /// The events to send before any live one.
    pub initial: Vec<Event>,
    /// Every later event, of every namespace.
    pub rx: broadcast::Receiver<Event>,
    /// The resourceVersion the watch is in sync with once `initial` is sent.
    pub rv: u64,
}

/// The flunders of one sample server.
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Event>,
}

#[derive(Default)]
struct Inner {
    rv: u64,
    items: BTreeMap<(String, String), Value>,
    history: VecDeque<Event>,
    /// Every event with a larger resourceVersion is still in `history`.
    history_floor: u64,
}

impl Default for Store {
    fn default() -> Self {
        Self::new()
    }
}

impl Store {
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            events: broadcast::channel(HISTORY).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the map consistent (every write is one insert).
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Stores a new object in `ns`; `obj` must already carry a name or a generateName. A dry
    /// run checks everything and answers the object as it would be stored (without a
    /// resourceVersion, as kube-apiserver's), storing nothing.
    pub fn create(&self, ns: &str, mut obj: Value, dry_run: bool) -> Result<Value, Status> {
        check_object(ns, &obj)?;
        let mut inner = self.lock();
        let name = match meta_str(&obj, "name") {
            Some(name) => name.to_string(),
            None => generated_name(&inner, ns, &obj)?,
        };
        check_name(&name)?;
        let key = (ns.to_string(), name.clone());
        if inner.items.contains_key(&key) {
            return Err(already_exists(&name));
        }
        let meta = metadata_mut(&mut obj);
        meta.insert("name".into(), json!(name));
        meta.insert("namespace".into(), json!(ns));
        meta.insert("uid".into(), json!(new_uid()?));
        meta.insert(
            "creationTimestamp".into(),
            json!(apigw_core::meta::timestamp(std::time::SystemTime::now())),
        );
        meta.remove("resourceVersion");
        meta.insert("generation".into(), json!(1));
        drop_empty_metadata(meta);
        set_type(&mut obj);
        if dry_run {
            return Ok(obj);
        }
        inner.rv += 1;
        metadata_mut(&mut obj).insert("resourceVersion".into(), json!(inner.rv.to_string()));
        inner.items.insert(key, obj.clone());
        self.record(&mut inner, "ADDED", ns, &obj);
        Ok(obj)
    }

    pub fn get(&self, ns: &str, name: &str) -> Result<Value, Status> {
        let inner = self.lock();
        let key = (ns.to_string(), name.to_string());
        inner
            .items
            .get(&key)
            .cloned()
            .ok_or_else(|| not_found(name))
    }

    /// The objects of `ns` (every namespace when `None`), and the list's resourceVersion.
    pub fn list(&self, ns: Option<&str>) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .items
            .iter()
            .filter(|((item_ns, _), _)| ns.is_none_or(|ns| ns == item_ns))
            .map(|(_, obj)| obj.clone())
            .collect();
        (items, inner.rv)
    }

    /// Replaces an object with what `change` makes of the current one. A resourceVersion in the
    /// result that is not the current one is a conflict; server-set metadata is kept. A dry run
    /// checks everything and answers the object as it would be stored, with the current
    /// resourceVersion, storing nothing.
    pub fn update(
        &self,
        ns: &str,
        name: &str,
        dry_run: bool,
        change: impl FnOnce(&Value) -> Result<Value, Status>,
    ) -> Result<Value, Status> {
        let mut inner = self.lock();
        let key = (ns.to_string(), name.to_string());
        let current = inner.items.get(&key).ok_or_else(|| not_found(name))?;
        let mut obj = change(current)?;
        check_object(ns, &obj)?;
        check_update(current, &obj, name)?;
        let spec_changed = current.get("spec") != obj.get("spec");
        let mut meta = current
            .get("metadata")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let generation = meta["generation"].as_i64().unwrap_or(1) + i64::from(spec_changed);
        let user_meta = metadata_mut(&mut obj);
        for field in USER_METADATA {
            match user_meta.remove(field) {
                Some(value) => meta[field] = value,
                None => {
                    meta.as_object_mut().map(|m| m.remove(field));
                }
            }
        }
        meta["generation"] = json!(generation);
        if let Value::Object(map) = &mut meta {
            drop_empty_metadata(map);
        }
        obj["metadata"] = meta;
        set_type(&mut obj);
        // Nothing changed: nothing is written, as kube-apiserver skips a no-op update (a
        // repeated apply makes no new resourceVersion and no watch event).
        if dry_run || obj == *current {
            return Ok(obj);
        }
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        inner.items.insert(key, obj.clone());
        self.record(&mut inner, "MODIFIED", ns, &obj);
        Ok(obj)
    }

    /// Removes an object and returns it as it was last stored; a dry run only finds it.
    pub fn delete(&self, ns: &str, name: &str, dry_run: bool) -> Result<Value, Status> {
        let mut inner = self.lock();
        let key = (ns.to_string(), name.to_string());
        if dry_run {
            return inner
                .items
                .get(&key)
                .cloned()
                .ok_or_else(|| not_found(name));
        }
        let mut obj = inner.items.remove(&key).ok_or_else(|| not_found(name))?;
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        self.record(&mut inner, "DELETED", ns, &obj);
        Ok(obj)
    }

    /// Starts a watch of `ns` (every namespace when `None`). Without `since` (or with 0) the
    /// current objects come first as `ADDED`; otherwise the events after `since`, or a `410
    /// Expired` when those are no longer all kept. The receiver carries every later event, of
    /// every namespace.
    pub fn watch(&self, ns: Option<&str>, since: Option<u64>) -> Result<WatchStart, Status> {
        let inner = self.lock();
        let rx = self.events.subscribe();
        let wanted = |event_ns: &str| ns.is_none_or(|ns| ns == event_ns);
        let initial = match since.filter(|rv| *rv > 0) {
            None => inner
                .items
                .iter()
                .filter(|((item_ns, _), _)| wanted(item_ns))
                .map(|((item_ns, _), obj)| Event {
                    rv: inner.rv,
                    kind: "ADDED",
                    namespace: item_ns.clone(),
                    object: obj.clone(),
                })
                .collect(),
            Some(rv) if rv < inner.history_floor => return Err(expired(rv, inner.history_floor)),
            Some(rv) => inner
                .history
                .iter()
                .filter(|e| e.rv > rv && wanted(&e.namespace))
                .cloned()
                .collect(),
        };
        Ok(WatchStart {
            initial,
            rx,
            rv: inner.rv,
        })
    }

    fn record(&self, inner: &mut Inner, kind: &'static str, ns: &str, obj: &Value) {
        let event = Event {
            rv: inner.rv,
            kind,
            namespace: ns.to_string(),
            object: obj.clone(),
        };
        if inner.history.len() == HISTORY {
            if let Some(old) = inner.history.pop_front() {
                inner.history_floor = old.rv;
            }
        }
        inner.history.push_back(event.clone());
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(event);
    }
}

/// What kube-apiserver answers a watch from a resourceVersion it no longer keeps.
pub fn expired(rv: u64, floor: u64) -> Status {
    Status::new(
        StatusCode::GONE,
        "Expired",
        format!("too old resource version: {rv} ({floor})"),
    )
}

/// The body must be a Flunder object of this namespace.
fn check_object(ns: &str, obj: &Value) -> Result<(), Status> {
    if !obj.is_object() {
        return Err(Status::bad_request("the body is not a JSON object"));
    }
    if let Some(kind) = obj.get("kind").filter(|k| !k.is_null()) {
        if kind != KIND {
            return Err(Status::bad_request(format!(
                "the kind {kind} does not match the expected kind {KIND}"
            )));
        }
    }
    if let Some(av) = obj.get("apiVersion").filter(|v| !v.is_null()) {
        if av != API_VERSION {
            return Err(Status::bad_request(format!(
                "the apiVersion {av} does not match the expected {API_VERSION}"
            )));
        }
    }
    match obj.get("metadata") {
        None | Some(Value::Object(_)) => {}
        Some(_) => return Err(Status::bad_request("metadata must be an object")),
    }
    match meta_str(obj, "namespace") {
        Some(body_ns) if body_ns != ns => Err(Status::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => Ok(()),
    }
}

/// The name may not change, and a stated resourceVersion or uid must be the current one.
fn check_update(current: &Value, obj: &Value, name: &str) -> Result<(), Status> {
    if let Some(body_name) = meta_str(obj, "name") {
        if body_name != name {
            return Err(Status::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
    }
    for field in ["resourceVersion", "uid"] {
        if let Some(stated) = meta_str(obj, field).filter(|s| !s.is_empty()) {
            if Some(stated) != meta_str(current, field) {
                return Err(Status::conflict(format!(
                    "Operation cannot be fulfilled on {RESOURCE}.{GROUP} \"{name}\": the object has \
                     been modified; please apply your changes to the latest version and try again"
                )));
            }
        }
    }
    Ok(())
}

/// A DNS-1123 subdomain, as object names must be.
fn check_name(name: &str) -> Result<(), Status> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.len() <= 253
        && name.chars().all(ok_char)
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last())
    {
        return Ok(());
    }
    Err(Status::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        format!(
            "{KIND}.{GROUP} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": a \
             lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' \
             or '.', and must start and end with an alphanumeric character"
        ),
    ))
}

fn generated_name(inner: &Inner, ns: &str, obj: &Value) -> Result<String, Status> {
    let Some(prefix) = meta_str(obj, "generateName").filter(|p| !p.is_empty()) else {
        return Err(Status::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Invalid",
            format!("{KIND}.{GROUP} is invalid: metadata.name: Required value: name or generateName is required"),
        ));
    };
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    for _ in 0..16 {
        let mut bytes = [0u8; 5];
        fill_random(&mut bytes)?;
        let suffix: String = bytes
            .iter()
            .map(|b| ALPHABET[usize::from(*b) % ALPHABET.len()] as char)
            .collect();
        let name = format!("{prefix}{suffix}");
        if !inner.items.contains_key(&(ns.to_string(), name.clone())) {
            return Ok(name);
        }
    }
    Err(Status::new(
        StatusCode::CONFLICT,
        "AlreadyExists",
        format!("no unused name found for generateName {prefix:?}"),
    ))
}

/// The metadata fields a client sets; the server keeps the others.
const USER_METADATA: [&str; 5] = [
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "managedFields",
];

/// Empty label and annotation maps and empty lists are left out, as a typed ObjectMeta
/// (`omitempty`) leaves them out: a patch that removes the last label leaves no `labels: {}`.
fn drop_empty_metadata(meta: &mut Map<String, Value>) {
    for field in USER_METADATA {
        let empty = match meta.get(field) {
            Some(Value::Object(m)) => m.is_empty(),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            meta.remove(field);
        }
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// The object's metadata map, created if missing. `obj` is known to be an object.
fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    match &mut obj["metadata"] {
        Value::Object(map) => map,
        _ => unreachable!("metadata was just made an object"),
    }
}

fn set_type(obj: &mut Value) {
    obj["apiVersion"] = json!(API_VERSION);
    obj["kind"] = json!(KIND);
}

pub fn not_found(name: &str) -> Status {
    Status::not_found(format!("{RESOURCE}.{GROUP} \"{name}\" not found"))
}

fn already_exists(name: &str) -> Status {
    Status::new(
        StatusCode::CONFLICT,
        "AlreadyExists",
        format!("{RESOURCE}.{GROUP} \"{name}\" already exists"),
    )
}

fn fill_random(buf: &mut [u8]) -> Result<(), Status> {
    apigw_core::tls::provider()
        .secure_random
        .fill(buf)
        .map_err(|e| Status::internal(format!("random generator failed: {e:?}")))
}

/// A random (version 4) UUID.
fn new_uid() -> Result<String, Status> {
    let mut b = [0u8; 16];
    fill_random(&mut b)?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flunder(name: &str) -> Value {
        json!({"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": {"reference": "a"}})
    }

    #[test]
    fn create_get_list_delete() {
        let store = Store::new();
        let made = store.create("ns1", flunder("one"), false).expect("create");
        assert_eq!(made["metadata"]["namespace"], "ns1");
        assert_eq!(made["metadata"]["resourceVersion"], "1");
        assert_eq!(made["metadata"]["uid"].as_str().map(str::len), Some(36));
        assert!(apigw_core::meta::parse_timestamp(
            made["metadata"]["creationTimestamp"].as_str().unwrap_or("")
        )
        .is_some());
        let dup = store
            .create("ns1", flunder("one"), false)
            .expect_err("duplicate");
        assert_eq!(dup.code(), StatusCode::CONFLICT);
        store
            .create("ns2", flunder("one"), false)
            .expect("other namespace");
        assert_eq!(store.list(Some("ns1")).0.len(), 1);
        let (all, rv) = store.list(None);
        assert_eq!((all.len(), rv), (2, 2));
        assert_eq!(store.get("ns1", "one").expect("get"), made);
        store.delete("ns1", "one", false).expect("delete");
        let gone = store.get("ns1", "one").expect_err("gone");
        assert_eq!(
            gone.message(),
            "flunders.wardle.example.com \"one\" not found"
        );
    }

    #[test]
    fn generate_name_and_validation() {
        let store = Store::new();
        let made = store
            .create("ns", json!({"metadata": {"generateName": "fl-"}}), false)
            .expect("generateName");
        let name = made["metadata"]["name"].as_str().unwrap_or("");
        assert!(name.starts_with("fl-") && name.len() == 8, "{name}");
        assert_eq!(made["kind"], KIND);
        for bad in [
            json!([1]),
            json!({"kind": "Pod", "metadata": {"name": "a"}}),
            json!({"metadata": {"name": "a", "namespace": "other"}}),
        ] {
            assert_eq!(
                store.create("ns", bad, false).expect_err("bad").code(),
                StatusCode::BAD_REQUEST
            );
        }
        let invalid = store
            .create("ns", flunder("Not_Valid"), false)
            .expect_err("invalid");
        assert_eq!(invalid.code(), StatusCode::UNPROCESSABLE_ENTITY);
    }

    #[test]
    fn update_checks_resource_version_and_keeps_server_fields() {
        let store = Store::new();
        let made = store.create("ns", flunder("a"), false).expect("create");
        let mut next = made.clone();
        next["spec"]["reference"] = json!("b");
        next["metadata"]["uid"] = Value::Null;
        next["metadata"]["labels"] = json!({"x": "y"});
        let updated = store
            .update("ns", "a", false, |_| Ok(next.clone()))
            .expect("update");
        assert_eq!(updated["metadata"]["uid"], made["metadata"]["uid"]);
        assert_eq!(updated["metadata"]["generation"], 2);
        assert_eq!(updated["metadata"]["labels"]["x"], "y");
        assert_eq!(updated["metadata"]["resourceVersion"], "2");
        let same = store
            .update("ns", "a", false, |cur| Ok(cur.clone()))
            .expect("no-op");
        assert_eq!(
            same["metadata"]["resourceVersion"], "2",
            "a no-op writes nothing"
        );
        let stale = store
            .update("ns", "a", false, |_| Ok(next.clone()))
            .expect_err("stale");
        assert_eq!(stale.code(), StatusCode::CONFLICT);
        let missing = store
            .update("ns", "b", false, |_| Ok(flunder("b")))
            .expect_err("missing");
        assert_eq!(missing.code(), StatusCode::NOT_FOUND);
        let renamed = store
            .update("ns", "a", false, |_| Ok(flunder("c")))
            .expect_err("rename");
        assert_eq!(renamed.code(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn watch_replays_history_or_current_state() {
        let store = Store::new();
        store.create("ns", flunder("a"), false).expect("create");
        store.create("other", flunder("b"), false).expect("create");
        let start = store.watch(Some("ns"), None).expect("watch");
        assert_eq!((start.initial.len(), start.rv), (1, 2));
        store.delete("ns", "a", false).expect("delete");
        let mut since = store.watch(Some("ns"), Some(2)).expect("watch");
        assert_eq!(
            since.initial.iter().map(|e| e.kind).collect::<Vec<_>>(),
            ["DELETED"]
        );
        assert_eq!(since.rv, 3);
        store.create("ns", flunder("c"), false).expect("create");
        assert_eq!(since.rx.try_recv().expect("event").kind, "ADDED");
    }

    #[test]
    fn dry_runs_change_nothing() {
        let store = Store::new();
        let mut watch = store.watch(None, None).expect("watch");
        let would = store.create("ns", flunder("a"), true).expect("dry create");
        assert_eq!(would["metadata"]["name"], "a");
        assert!(
            would["metadata"].get("resourceVersion").is_none(),
            "{would}"
        );
        assert_eq!(store.list(None), (Vec::new(), 0));
        let made = store.create("ns", flunder("a"), false).expect("create");
        let dup = store.create("ns", flunder("a"), true).expect_err("exists");
        assert_eq!(dup.code(), StatusCode::CONFLICT);
        let changed = store
            .update("ns", "a", true, |cur| {
                let mut next = cur.clone();
                next["spec"]["reference"] = json!("b");
                next["metadata"]["annotations"] = json!({});
                Ok(next)
            })
            .expect("dry update");
        assert_eq!(changed["spec"]["reference"], "b");
        assert_eq!(changed["metadata"]["resourceVersion"], "1");
        assert!(
            changed["metadata"].get("annotations").is_none(),
            "{changed}"
        );
        store.delete("ns", "a", true).expect("dry delete");
        assert_eq!(store.get("ns", "a").expect("still there"), made);
        assert_eq!(store.list(None).1, 1);
        assert_eq!(watch.rx.try_recv().expect("one event").kind, "ADDED");
        assert!(watch.rx.try_recv().is_err(), "no event from a dry run");
    }

    #[test]
    fn watch_from_a_forgotten_version_is_expired() {
        let store = Store::new();
        for i in 0..HISTORY + 2 {
            store
                .create("ns", flunder(&format!("f{i}")), false)
                .expect("create");
        }
        let gone = store.watch(None, Some(1)).err().expect("expired");
        assert_eq!(gone.code(), StatusCode::GONE);
        assert_eq!(gone.to_json()["reason"], "Expired");
        let kept = store.watch(None, Some(2)).expect("still kept");
        assert_eq!(kept.initial.len(), HISTORY);
    }
}

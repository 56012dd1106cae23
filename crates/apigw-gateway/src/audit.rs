//! The audit log: one `audit.k8s.io/v1` Event JSON line per request, at the level an audit
//! policy chooses (`None` or `Metadata`; `Request` and `RequestResponse` are recorded as
//! `Metadata`, since bodies stream and are never buffered). Lines go to stdout or to a file
//! rotated by size. Writing happens on its own task behind a bounded queue: a request never
//! waits for the log, and when the queue is full the event is dropped and counted.

use apigw_request::Attributes;
use apigw_request::Identity;
use serde::Deserialize;
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;
use tokio::sync::mpsc;

/// Why the audit policy could not be loaded or the audit log could not be started.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// Reading the policy file or opening the log file.
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: apigw_core::yaml::Error,
    },
    #[error("audit writer: {0}")]
    Spawn(#[source] std::io::Error),
}

/// Where and how much to log.
#[derive(Debug, Clone)]
pub struct Settings {
    /// A file path, or `-` for stdout.
    pub path: String,
    pub max_size_bytes: u64,
    pub max_backups: usize,
    pub policy_file: Option<PathBuf>,
}

/// The audit log's defaults: rotate at this many megabytes, keep this many rotated files.
pub const MAX_SIZE_MB: u64 = 100;
pub const MAX_BACKUPS: usize = 10;

apigw_core::section! {
    /// [`Settings`].
    pub struct AuditFlags {
        /// Audit log file, or - for stdout; no audit log when unset.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 50)]
        pub audit_log_path: Option<String> = "auditLogPath",
        /// Rotate the audit log file at this many megabytes.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 51)]
        pub audit_log_maxsize: Option<u64> = "auditLogMaxsize",
        /// Rotated audit log files to keep.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 52)]
        pub audit_log_maxbackup: Option<usize> = "auditLogMaxbackup",
        /// audit.k8s.io/v1 Policy choosing levels (None or Metadata); unset: Metadata for all.
        #[arg(long, help_heading = "Logs, metrics and audit", display_order = 53)]
        pub audit_policy_file: Option<PathBuf> = "auditPolicyFile",
    }
}

impl AuditFlags {
    /// The audit log's settings (None: off).
    pub fn settings(self, cx: &mut apigw_core::settings::Cx) -> Option<Settings> {
        let policy_file = cx.later_file("audit-policy-file", self.audit_policy_file);
        let max_size_bytes = match self.audit_log_maxsize {
            None => MAX_SIZE_MB << 20,
            Some(megabytes) => megabytes.checked_mul(1 << 20).unwrap_or_else(|| {
                let most = u64::MAX >> 20;
                let message = format!("{megabytes}: too large; at most {most} (megabytes)");
                cx.problem("audit-log-maxsize", message);
                u64::MAX
            }),
        };
        let path = match self.audit_log_path? {
            stdout if stdout == "-" => stdout,
            path => cx
                .path("audit-log-path", Some(path.into()))?
                .display()
                .to_string(),
        };
        Some(Settings {
            path,
            max_size_bytes,
            max_backups: self.audit_log_maxbackup.unwrap_or(MAX_BACKUPS),
            policy_file,
        })
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        vec![
            ("audit_log_maxsize", MAX_SIZE_MB.to_string()),
            ("audit_log_maxbackup", MAX_BACKUPS.to_string()),
        ]
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct GroupResources {
    group: String,
    resources: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct Rule {
    level: String,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

/// An audit policy: the first rule that matches a request sets its level.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Policy {
    #[serde(default)]
    rules: Vec<Rule>,
}

impl Rule {
    fn matches(&self, id: Option<&Identity>, a: &Attributes) -> bool {
        let user = id.map_or("", |i| i.user.as_str());
        let any =
            |list: &[String], v: &str| list.is_empty() || list.iter().any(|x| x == v || x == "*");
        any(&self.users, user)
            && (self.user_groups.is_empty()
                || id.is_some_and(|i| i.groups.iter().any(|g| self.user_groups.contains(g))))
            && any(&self.verbs, &a.verb)
            && if a.resource_request {
                self.non_resource_urls.is_empty()
                    && any(&self.namespaces, &a.namespace)
                    && (self.resources.is_empty()
                        || self
                            .resources
                            .iter()
                            .any(|r| r.group == a.group && any(&r.resources, &a.resource)))
            } else {
                self.resources.is_empty()
                    && self.namespaces.is_empty()
                    && (self.non_resource_urls.is_empty()
                        || self.non_resource_urls.iter().any(|u| {
                            u == &a.path
                                || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
                        }))
            }
    }
}

impl Policy {
    pub fn load(path: &Path) -> Result<Self, AuditError> {
        let text = std::fs::read_to_string(path).map_err(|source| AuditError::File {
            path: path.to_path_buf(),
            source,
        })?;
        apigw_core::yaml::from_str(&text).map_err(|source| AuditError::Parse {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The level for a request; `Metadata` when no rule matches or there is no policy.
    pub fn level(&self, id: Option<&Identity>, a: &Attributes) -> &str {
        if self.rules.is_empty() {
            return "Metadata";
        }
        self.rules
            .iter()
            .find(|r| r.matches(id, a))
            .map_or("None", |r| r.level.as_str())
    }
}

/// How a request ended: the access line's `outcome=` and the audit event's
/// `apigw/outcome` annotation (with a `reason` in `responseStatus` when it did not complete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The whole response was handed to the connection.
    Completed,
    /// `--request-timeout` passed: a 504 before the response head, or a response cut mid-body.
    Timeout,
    /// The client went away (closed the connection or reset the stream) first.
    ClientGone,
    /// The backend's response body failed mid-stream.
    BackendError,
    /// A long-running response ended by the end of the shutdown grace period.
    Shutdown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Timeout => "timeout",
            Self::ClientGone => "client-gone",
            Self::BackendError => "backend-error",
            Self::Shutdown => "shutdown",
        }
    }

    /// The `reason` and `message` of `responseStatus` for an outcome other than completed.
    fn reason(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Completed => None,
            Self::Timeout => Some((
                "Timeout",
                "the request did not complete within the allotted timeout",
            )),
            Self::ClientGone => Some((
                "ClientGone",
                "the client went away before the response was complete",
            )),
            Self::BackendError => Some((
                "BackendError",
                "the backend's response failed before it was complete",
            )),
            Self::Shutdown => Some(("Shutdown", "ended by the gateway's shutdown")),
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is known of a finished request.
pub struct Request<'a> {
    pub attrs: &'a Attributes,
    pub uri: &'a str,
    pub identity: Option<&'a Identity>,
    /// The authenticated user when `identity` is an impersonated one.
    pub real: Option<&'a Identity>,
    pub source: std::net::IpAddr,
    pub user_agent: Option<&'a str>,
    /// The response's status, or 499 when the client went away before the response head.
    pub code: u16,
    pub outcome: Outcome,
    pub received: SystemTime,
}

/// The audit logger.
pub struct Auditor {
    policy: Policy,
    tx: mpsc::Sender<String>,
    pub dropped: AtomicU64,
}

fn micros(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    let micros = t.microsecond();
    format!(
        "{}.{micros:06}Z",
        apigw_core::meta::timestamp(t.into()).trim_end_matches('Z')
    )
}

fn user_info(id: &Identity) -> Value {
    let mut u = json!({"username": id.user, "groups": id.groups});
    if let Some(uid) = &id.uid {
        u["uid"] = json!(uid);
    }
    if !id.extra.is_empty() {
        u["extra"] = json!(id.extra);
    }
    u
}

/// The Event of one request at `level`.
pub fn event(r: &Request<'_>, level: &str) -> Value {
    let a = r.attrs;
    let id_bytes =
        ring::rand::generate::<[u8; 16]>(&ring::rand::SystemRandom::new()).map(|b| b.expose());
    let audit_id: String = id_bytes
        .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
        .unwrap_or_default();
    let (user, impersonated) = match (r.real, r.identity) {
        (Some(real), Some(id)) => (user_info(real), Some(user_info(id))),
        (None, Some(id)) => (user_info(id), None),
        _ => (json!({}), None),
    };
    let mut e = json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": level,
        "auditID": audit_id, "stage": "ResponseComplete",
        "requestURI": r.uri, "verb": a.verb, "user": user,
        "sourceIPs": [r.source.to_string()],
        "responseStatus": {"metadata": {}, "code": r.code},
        "requestReceivedTimestamp": micros(r.received),
        "stageTimestamp": micros(SystemTime::now()),
    });
    if let Some((reason, message)) = r.outcome.reason() {
        let status = &mut e["responseStatus"];
        status["status"] = json!("Failure");
        status["reason"] = json!(reason);
        status["message"] = json!(message);
    }
    e["annotations"] = json!({"apigw/outcome": r.outcome.as_str()});
    if let Some(i) = impersonated {
        e["impersonatedUser"] = i;
    }
    if let Some(ua) = r.user_agent {
        e["userAgent"] = json!(ua);
    }
    if a.resource_request {
        let mut o = json!({"resource": a.resource, "apiGroup": a.group, "apiVersion": a.version});
        for (k, v) in [
            ("namespace", &a.namespace),
            ("name", &a.name),
            ("subresource", &a.subresource),
        ] {
            if !v.is_empty() {
                o[k] = json!(v);
            }
        }
        e["objectRef"] = o;
    }
    e
}

impl Auditor {
    /// Starts the writer; fails when the file cannot be opened or the policy is invalid.
    pub fn start(settings: Settings) -> Result<Self, AuditError> {
        let policy = match &settings.policy_file {
            Some(p) => Policy::load(p)?,
            None => Policy::default(),
        };
        let mut sink = Sink::open(&settings)?;
        let (tx, mut rx) = mpsc::channel::<String>(8192);
        std::thread::Builder::new()
            .name("apigw-audit".into())
            .spawn(move || {
                while let Some(line) = rx.blocking_recv() {
                    if let Err(e) = sink.write(&line) {
                        tracing::warn!(error = %e, "audit log write failed");
                    }
                }
            })
            .map_err(AuditError::Spawn)?;
        Ok(Self {
            policy,
            tx,
            dropped: AtomicU64::new(0),
        })
    }

    /// Queues the event of a finished request; never waits.
    pub fn record(&self, r: &Request<'_>) {
        let level = self.policy.level(r.identity, r.attrs);
        if level == "None" {
            return;
        }
        let line = event(r, "Metadata").to_string();
        if self.tx.try_send(line).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// stdout, or a file rotated when it passes the size limit (`path.1` is the newest backup).
struct Sink {
    path: Option<PathBuf>,
    file: Box<dyn Write + Send>,
    written: u64,
    max_size: u64,
    max_backups: usize,
}

impl Sink {
    fn open(s: &Settings) -> Result<Self, AuditError> {
        if s.path == "-" {
            return Ok(Self {
                path: None,
                file: Box::new(std::io::stdout()),
                written: 0,
                max_size: u64::MAX,
                max_backups: 0,
            });
        }
        let path = PathBuf::from(&s.path);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| AuditError::File {
                path: path.clone(),
                source,
            })?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(Self {
            path: Some(path),
            file: Box::new(file),
            written,
            max_size: s.max_size_bytes,
            max_backups: s.max_backups,
        })
    }

    fn write(&mut self, line: &str) -> std::io::Result<()> {
        if self.written + line.len() as u64 + 1 > self.max_size {
            self.rotate()?;
        }
        self.file.write_all(line.as_bytes())?;
        self.file.write_all(b"\n")?;
        self.file.flush()?;
        self.written += line.len() as u64 + 1;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let backup = |n: usize| PathBuf::from(format!("{}.{n}", path.display()));
        // Shift only the backups that exist (they are numbered from 1 without gaps): a huge
        // `--audit-log-maxbackup` must not mean a huge loop.
        let existing = (1..self.max_backups)
            .take_while(|n| backup(*n).exists())
            .last()
            .unwrap_or(0);
        for n in (1..=existing).rev() {
            let _ = std::fs::rename(backup(n), backup(n + 1));
        }
        if self.max_backups > 0 {
            std::fs::rename(path, backup(1))?;
        } else {
            std::fs::remove_file(path)?;
        }
        self.file = Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)?,
        );
        self.written = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn attrs(m: Method, p: &str) -> Attributes {
        Attributes::from_request(&m, p, None)
    }

    #[test]
    fn policy_errors_name_the_file_and_keep_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.yaml");
        let err = Policy::load(&missing).unwrap_err();
        assert!(matches!(err, AuditError::File { .. }), "{err:?}");
        assert!(err
            .to_string()
            .starts_with(&format!("{}: ", missing.display())));
        assert!(std::error::Error::source(&err).is_some());

        let bad = dir.path().join("bad.yaml");
        std::fs::write(&bad, "rules: 3\n").unwrap();
        let err = Policy::load(&bad).unwrap_err();
        assert!(matches!(err, AuditError::Parse { .. }), "{err:?}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn policy_picks_the_first_matching_rule() {
        let p: Policy = apigw_core::yaml::from_str(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  nonResourceURLs: [/healthz*, /apis]\n- level: None\n  users: [system:kube-aggregator]\n- level: Metadata\n  resources: [{group: wardle.example.com, resources: [flunders]}]\n",
        )
        .unwrap();
        let bob = Identity::new("bob", vec![]);
        assert_eq!(p.level(Some(&bob), &attrs(Method::GET, "/apis")), "None");
        assert_eq!(
            p.level(
                Some(&bob),
                &attrs(
                    Method::GET,
                    "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders"
                )
            ),
            "Metadata"
        );
        assert_eq!(
            p.level(
                Some(&bob),
                &attrs(
                    Method::GET,
                    "/apis/other.example.com/v1/namespaces/x/things"
                )
            ),
            "None"
        );
        assert_eq!(
            Policy::default().level(None, &attrs(Method::GET, "/x")),
            "Metadata"
        );
    }

    #[test]
    fn event_has_the_upstream_shape() {
        let a = attrs(
            Method::DELETE,
            "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders/f",
        );
        let real = Identity::new("ops", vec!["g".into()]);
        let carol = Identity::new("carol", vec![]);
        let r = Request {
            attrs: &a,
            uri: "/apis/wardle.example.com/v1alpha1/namespaces/x/flunders/f?dryRun=All",
            identity: Some(&carol),
            real: Some(&real),
            source: [10, 0, 0, 1].into(),
            user_agent: Some("kubectl"),
            code: 200,
            outcome: Outcome::Completed,
            received: SystemTime::now(),
        };
        let e = event(&r, "Metadata");
        assert_eq!(e["verb"], "delete");
        assert_eq!(e["user"]["username"], "ops");
        assert_eq!(e["impersonatedUser"]["username"], "carol");
        assert_eq!(
            e["objectRef"],
            json!({"resource": "flunders", "apiGroup": "wardle.example.com", "apiVersion": "v1alpha1", "namespace": "x", "name": "f"})
        );
        assert_eq!(e["responseStatus"], json!({"metadata": {}, "code": 200}));
        assert_eq!(e["annotations"], json!({"apigw/outcome": "completed"}));
        let gone = event(
            &Request {
                code: 499,
                outcome: Outcome::ClientGone,
                ..r
            },
            "Metadata",
        );
        assert_eq!(gone["responseStatus"]["code"], 499);
        assert_eq!(gone["responseStatus"]["reason"], "ClientGone");
        assert_eq!(gone["annotations"]["apigw/outcome"], "client-gone");
        assert_eq!(e["auditID"].as_str().map(str::len), Some(32));
        assert!(e["stageTimestamp"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn file_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let s = Settings {
            path: path.display().to_string(),
            max_size_bytes: 100,
            max_backups: 2,
            policy_file: None,
        };
        let mut sink = Sink::open(&s).unwrap();
        for i in 0..10 {
            sink.write(&format!(
                "{{\"line\":{i},\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}"
            ))
            .unwrap();
        }
        assert!(std::fs::metadata(&path).unwrap().len() <= 100);
        assert!(dir.path().join("audit.log.1").exists() && dir.path().join("audit.log.2").exists());
        assert!(!dir.path().join("audit.log.3").exists());
    }

    #[test]
    fn a_huge_backup_count_rotates_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let s = Settings {
            path: path.display().to_string(),
            max_size_bytes: 10,
            max_backups: usize::MAX,
            policy_file: None,
        };
        let mut sink = Sink::open(&s).unwrap();
        for i in 0..4 {
            sink.write(&format!("{{\"line\":{i},\"pad\":\"xxxx\"}}"))
                .unwrap();
        }
        for n in 1..=3 {
            assert!(dir.path().join(format!("audit.log.{n}")).exists(), "{n}");
        }
        let oldest = std::fs::read_to_string(dir.path().join("audit.log.3")).unwrap();
        assert!(oldest.contains("\"line\":0"), "{oldest}");
    }
}

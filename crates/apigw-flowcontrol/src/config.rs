//! The configuration APF works from: PriorityLevelConfigurations and FlowSchemas
//! (`flowcontrol.apiserver.k8s.io/v1`), and the mandatory and suggested objects a fresh
//! kube-apiserver creates (k8s.io/apiserver's `bootstrap` package), built in so that with no
//! configuration apigw classifies exactly as kube-apiserver does. Each object's UID is a
//! UUIDv5 of its kind and name: the same on every replica and restart, shaped as upstream's.

/// A priority level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PriorityLevel {
    pub name: String,
    pub uid: String,
    pub seats: Seats,
    pub kind: LevelKind,
}

/// A level's share of the seats, and what of it it lends and borrows ([`super::borrowing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seats {
    /// `nominalConcurrencyShares`.
    pub shares: u32,
    /// `lendablePercent`: the part of its nominal seats others may borrow while it is idle.
    pub lendable_percent: u32,
    /// `borrowingLimitPercent`: how much beyond its nominal seats it may borrow; None: no limit.
    pub borrowing_limit_percent: Option<u32>,
}

impl Seats {
    /// A limited level's, as upstream defaults them: nothing lent, no borrowing limit.
    pub const fn shares(shares: u32) -> Self {
        Self {
            shares,
            lendable_percent: 0,
            borrowing_limit_percent: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LevelKind {
    /// Never limited, never queued.
    Exempt,
    Limited(LimitResponse),
}

/// What a full limited level does with a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitResponse {
    Reject,
    Queue {
        queues: usize,
        hand_size: usize,
        queue_length_limit: usize,
    },
}

/// A flow schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSchema {
    pub name: String,
    pub uid: String,
    pub precedence: u32,
    pub level: String,
    pub distinguisher: Option<Distinguisher>,
    pub rules: Vec<PolicyRules>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distinguisher {
    ByUser,
    ByNamespace,
}

/// One `rules` entry: any subject, and any of the rules of the request's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRules {
    pub subjects: Vec<Subject>,
    pub resource_rules: Vec<ResourceRule>,
    pub non_resource_rules: Vec<NonResourceRule>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
    ServiceAccount { namespace: String, name: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    /// `resource` or `resource/subresource`; `*` alone is every one.
    pub resources: Vec<String>,
    pub namespaces: Vec<String>,
    pub cluster_scope: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonResourceRule {
    pub verbs: Vec<String>,
    /// Exact paths, `prefix/*`, or `*`.
    pub urls: Vec<String>,
}

/// The reserved names.
pub const EXEMPT: &str = "exempt";
pub const CATCH_ALL: &str = "catch-all";

/// The UID of an object: a UUIDv5 (RFC 9562) in a namespace of apigw's own, over
/// `<kind>/<name>`.
pub fn uid(kind: &str, name: &str) -> String {
    // A fixed, random namespace UUID for apigw's built-in flow-control objects.
    const NAMESPACE: [u8; 16] = [
        0x5b, 0x1e, 0x8f, 0x3a, 0x9c, 0x2d, 0x4e, 0x71, 0xa6, 0x0f, 0x3c, 0x58, 0xd2, 0x94, 0x7b,
        0xe1,
    ];
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY);
    ctx.update(&NAMESPACE);
    ctx.update(kind.as_bytes());
    ctx.update(b"/");
    ctx.update(name.as_bytes());
    let digest = ctx.finish();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest.as_ref()[..16]);
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn level(name: &str, shares: u32, lendable_percent: u32, kind: LevelKind) -> PriorityLevel {
    PriorityLevel {
        name: name.into(),
        uid: uid("prioritylevelconfiguration", name),
        seats: Seats {
            lendable_percent,
            ..Seats::shares(shares)
        },
        kind,
    }
}

fn queued(queues: usize, hand_size: usize) -> LevelKind {
    LevelKind::Limited(LimitResponse::Queue {
        queues,
        hand_size,
        queue_length_limit: 50,
    })
}

/// The priority levels of a fresh kube-apiserver: mandatory `exempt` and `catch-all`, and the
/// suggested ones.
pub fn bootstrap_levels() -> Vec<PriorityLevel> {
    vec![
        level(EXEMPT, 0, 0, LevelKind::Exempt),
        level(CATCH_ALL, 5, 0, LevelKind::Limited(LimitResponse::Reject)),
        level("system", 30, 33, queued(64, 6)),
        level("node-high", 40, 25, queued(64, 6)),
        level("leader-election", 10, 0, queued(16, 4)),
        level("workload-high", 40, 50, queued(128, 6)),
        level("workload-low", 100, 90, queued(128, 6)),
        level("global-default", 20, 50, queued(128, 6)),
    ]
}

fn all_resources() -> ResourceRule {
    ResourceRule {
        verbs: strings(&["*"]),
        api_groups: strings(&["*"]),
        resources: strings(&["*"]),
        namespaces: strings(&["*"]),
        cluster_scope: true,
    }
}

fn all_non_resources() -> NonResourceRule {
    NonResourceRule {
        verbs: strings(&["*"]),
        urls: strings(&["*"]),
    }
}

fn everything(subjects: Vec<Subject>) -> Vec<PolicyRules> {
    vec![PolicyRules {
        subjects,
        resource_rules: vec![all_resources()],
        non_resource_rules: vec![all_non_resources()],
    }]
}

fn groups(names: &[&str]) -> Vec<Subject> {
    names
        .iter()
        .map(|g| Subject::Group(g.to_string()))
        .collect()
}

fn schema(
    name: &str,
    precedence: u32,
    level: &str,
    distinguisher: Option<Distinguisher>,
    rules: Vec<PolicyRules>,
) -> FlowSchema {
    FlowSchema {
        name: name.into(),
        uid: uid("flowschema", name),
        precedence,
        level: level.into(),
        distinguisher,
        rules,
    }
}

/// The flow schemas of a fresh kube-apiserver, mandatory and suggested.
pub fn bootstrap_schemas() -> Vec<FlowSchema> {
    use Distinguisher::{ByNamespace, ByUser};
    let everyone = || groups(&["system:unauthenticated", "system:authenticated"]);
    let kube_system_sa = || Subject::ServiceAccount {
        namespace: "kube-system".into(),
        name: "*".into(),
    };
    vec![
        schema(
            EXEMPT,
            1,
            EXEMPT,
            None,
            everything(groups(&["system:masters"])),
        ),
        schema(
            "probes",
            2,
            EXEMPT,
            None,
            vec![PolicyRules {
                subjects: everyone(),
                resource_rules: Vec::new(),
                non_resource_rules: vec![NonResourceRule {
                    verbs: strings(&["get"]),
                    urls: strings(&["/healthz", "/readyz", "/livez"]),
                }],
            }],
        ),
        schema(
            "system-leader-election",
            100,
            "leader-election",
            Some(ByUser),
            vec![PolicyRules {
                subjects: vec![
                    Subject::User("system:kube-controller-manager".into()),
                    Subject::User("system:kube-scheduler".into()),
                    kube_system_sa(),
                ],
                resource_rules: vec![ResourceRule {
                    verbs: strings(&["get", "create", "update"]),
                    api_groups: strings(&["coordination.k8s.io"]),
                    resources: strings(&["leases"]),
                    namespaces: strings(&["*"]),
                    cluster_scope: false,
                }],
                non_resource_rules: Vec::new(),
            }],
        ),
        schema(
            "system-node-high",
            400,
            "node-high",
            Some(ByUser),
            vec![PolicyRules {
                subjects: groups(&["system:nodes"]),
                resource_rules: vec![
                    ResourceRule {
                        verbs: strings(&["*"]),
                        api_groups: strings(&[""]),
                        resources: strings(&["nodes", "nodes/status"]),
                        namespaces: strings(&["*"]),
                        cluster_scope: true,
                    },
                    ResourceRule {
                        verbs: strings(&["*"]),
                        api_groups: strings(&["coordination.k8s.io"]),
                        resources: strings(&["leases"]),
                        namespaces: strings(&["*"]),
                        cluster_scope: false,
                    },
                ],
                non_resource_rules: Vec::new(),
            }],
        ),
        schema(
            "system-nodes",
            500,
            "system",
            Some(ByUser),
            everything(groups(&["system:nodes"])),
        ),
        schema(
            "kube-controller-manager",
            800,
            "workload-high",
            Some(ByNamespace),
            everything(vec![Subject::User("system:kube-controller-manager".into())]),
        ),
        schema(
            "kube-scheduler",
            800,
            "workload-high",
            Some(ByNamespace),
            everything(vec![Subject::User("system:kube-scheduler".into())]),
        ),
        schema(
            "kube-system-service-accounts",
            900,
            "workload-high",
            Some(ByNamespace),
            everything(vec![kube_system_sa()]),
        ),
        schema(
            "service-accounts",
            9000,
            "workload-low",
            Some(ByUser),
            everything(groups(&["system:serviceaccounts"])),
        ),
        schema(
            "global-default",
            9900,
            "global-default",
            Some(ByUser),
            everything(everyone()),
        ),
        schema(
            CATCH_ALL,
            10000,
            CATCH_ALL,
            Some(ByUser),
            everything(everyone()),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_stable_version_5_uuids() {
        let a = uid("flowschema", "global-default");
        assert_eq!(a, uid("flowschema", "global-default"));
        assert_ne!(a, uid("prioritylevelconfiguration", "global-default"));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "5", "{a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "{a}");
    }

    #[test]
    fn the_bootstrap_set_is_upstreams() {
        let levels = bootstrap_levels();
        let shares: u32 = levels.iter().map(|l| l.seats.shares).sum();
        assert_eq!(shares, 245);
        let schemas = bootstrap_schemas();
        assert_eq!(schemas.len(), 11);
        for s in &schemas {
            assert!(levels.iter().any(|l| l.name == s.level), "{}", s.name);
        }
    }
}

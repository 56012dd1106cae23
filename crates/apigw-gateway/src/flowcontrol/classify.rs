//! Which flow schema a request matches, as k8s.io/apiserver's APF controller decides: schemas
//! in order of matching precedence (ties by name), the first whose rules match the request's
//! user and attributes; its flow is the schema and the distinguisher (the user, the namespace,
//! or nothing), hashed for shuffle sharding. The hash is foldhash, not upstream's SHA-256 (a
//! fraction of the cost): the hands it deals are as well spread, dealt the same way, but a flow
//! may sit in other queues than on kube-apiserver. Which rules' subjects an identity matches
//! is remembered for the identities seen last ([`SubjectCache`]): subjects are most of a
//! match's cost, and a client sends request after request as the same identity.

use super::config::{
    Distinguisher, FlowSchema, NonResourceRule, PolicyRules, ResourceRule, Subject,
};
use crate::authn::Identity;
use crate::authz::Attributes;

/// True when `fs` matches a request by `id` with attributes `a`.
pub fn matches(fs: &FlowSchema, id: &Identity, a: &Attributes) -> bool {
    fs.rules
        .iter()
        .any(|rules| subjects_match(rules, id) && attributes_match(rules, a))
}

/// The index of the first of `schemas` (each `config` of it) that matches a request by `id`
/// with `a`, as [`matches`] decides, with the subjects' answers for `id` from `cache`.
pub fn first_match<S>(
    schemas: &[S],
    config: impl Fn(&S) -> &FlowSchema,
    cache: &SubjectCache,
    id: &Identity,
    a: &Attributes,
) -> Option<usize> {
    let slot = &cache.slots[cache.slot_of(id)];
    let mut entry = slot.lock().unwrap_or_else(|e| e.into_inner());
    let known = entry
        .as_ref()
        .is_some_and(|e| e.user == id.user && e.groups == id.groups);
    if !known {
        let matched = schemas
            .iter()
            .flat_map(|s| {
                config(s)
                    .rules
                    .iter()
                    .map(|rules| subjects_match(rules, id))
            })
            .collect();
        *entry = Some(Subjects {
            user: id.user.clone(),
            groups: id.groups.clone(),
            matched,
        });
    }
    let matched = entry.as_ref().map_or(&[][..], |e| &e.matched[..]);
    let mut at = 0;
    schemas.iter().position(|s| {
        let rules = &config(s).rules;
        let hit = rules
            .iter()
            .zip(&matched[at.min(matched.len())..])
            .any(|(rules, subject)| *subject && attributes_match(rules, a));
        at += rules.len();
        hit
    })
}

/// Entries of a [`SubjectCache`]: a power of two.
const SUBJECT_SLOTS: usize = 64;

/// For the identities seen last (one per slot, by a hash of user and groups), which rules'
/// subjects they match, in schema order. Belongs to one set of schemas: built with them.
pub struct SubjectCache {
    keys: foldhash::fast::RandomState,
    slots: Box<[std::sync::Mutex<Option<Subjects>>]>,
}

struct Subjects {
    user: String,
    groups: Vec<String>,
    /// Per rules of every schema, in order: whether a subject of them is the identity.
    matched: Box<[bool]>,
}

impl Default for SubjectCache {
    fn default() -> Self {
        Self::with_slots(SUBJECT_SLOTS)
    }
}

impl SubjectCache {
    /// `slots`: a power of two.
    fn with_slots(slots: usize) -> Self {
        Self {
            keys: Default::default(),
            slots: (0..slots).map(|_| Default::default()).collect(),
        }
    }

    fn slot_of(&self, id: &Identity) -> usize {
        use std::hash::BuildHasher as _;
        let h = self.keys.hash_one((&id.user, &id.groups));
        (h as usize) & (self.slots.len() - 1)
    }
}

fn subjects_match(rules: &PolicyRules, id: &Identity) -> bool {
    rules.subjects.iter().any(|s| subject_matches(s, id))
}

fn attributes_match(rules: &PolicyRules, a: &Attributes) -> bool {
    if a.resource_request {
        rules.resource_rules.iter().any(|r| resource_matches(r, a))
    } else {
        rules
            .non_resource_rules
            .iter()
            .any(|r| non_resource_matches(r, a))
    }
}

fn subject_matches(subject: &Subject, id: &Identity) -> bool {
    match subject {
        Subject::User(name) => name == "*" || *name == id.user,
        Subject::Group(name) => name == "*" || id.groups.iter().any(|g| g == name),
        Subject::ServiceAccount { namespace, name } => {
            let Some(rest) = id.user.strip_prefix("system:serviceaccount:") else {
                return false;
            };
            match rest.split_once(':') {
                Some((ns, sa)) => ns == namespace && (name == "*" || sa == name),
                None => false,
            }
        }
    }
}

/// The wildcard counts only as the list's sole entry.
fn contains(list: &[String], value: &str) -> bool {
    matches!(list, [only] if only == "*") || list.iter().any(|v| v == value)
}

/// `resource` or `resource/subresource` of `a` is `rule_resource`.
fn same_resource(rule_resource: &str, a: &Attributes) -> bool {
    match rule_resource.split_once('/') {
        Some((r, sub)) => r == a.resource && sub == a.subresource,
        None => a.subresource.is_empty() && rule_resource == a.resource,
    }
}

fn resource_matches(rule: &ResourceRule, a: &Attributes) -> bool {
    let resource_ok = matches!(rule.resources.as_slice(), [only] if only == "*")
        || rule.resources.iter().any(|r| same_resource(r, a));
    contains(&rule.verbs, &a.verb)
        && contains(&rule.api_groups, &a.group)
        && resource_ok
        && if a.namespace.is_empty() {
            rule.cluster_scope
        } else {
            contains(&rule.namespaces, &a.namespace)
        }
}

fn non_resource_matches(rule: &NonResourceRule, a: &Attributes) -> bool {
    contains(&rule.verbs, &a.verb) && rule.urls.iter().any(|url| url_matches(url, &a.path))
}

/// `*`, the exact path, or a prefix: a rule `p/*` or `p` matches every path under `p/`.
fn url_matches(url: &str, path: &str) -> bool {
    if url == "*" || url == path {
        return true;
    }
    let prefix = url.strip_suffix('*').unwrap_or(url);
    let prefix = if prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    };
    path.starts_with(&prefix)
}

/// The distinguisher of a request's flow within a schema distinguishing by `how`.
pub fn distinguisher<'a>(how: Option<Distinguisher>, user: &'a str, a: &'a Attributes) -> &'a str {
    match how {
        Some(Distinguisher::ByUser) => user,
        Some(Distinguisher::ByNamespace) => &a.namespace,
        None => "",
    }
}

/// The flow's hash: foldhash's (quality) of schema and distinguisher, with keys drawn once per
/// process. Fast (a tenth of SipHash's cost on these short strings), and a flow's hand is stable
/// while the process runs; which queues that is differs from kube-apiserver's SHA-256 anyway.
pub fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    use std::hash::BuildHasher as _;
    static KEYS: std::sync::OnceLock<foldhash::quality::RandomState> = std::sync::OnceLock::new();
    KEYS.get_or_init(Default::default)
        .hash_one((schema, distinguisher))
}

/// The most queues a hand may hold (a PriorityLevelConfiguration's `handSize` limit).
pub const MAX_HAND: usize = 128;

/// A hand of queues, without a heap allocation (queue numbers fit 16 bits: a level has at
/// most 10,000 queues).
pub struct Hand {
    cards: [u16; MAX_HAND],
    len: usize,
}

impl Hand {
    pub fn as_slice(&self) -> &[u16] {
        &self.cards[..self.len]
    }
}

/// The hand of `hand` distinct queues out of `deck` that `hash` deals, in deal order, as
/// upstream's shuffle-sharding dealer deals it.
pub fn deal(mut hash: u64, deck: usize, hand: usize) -> Hand {
    let len = hand.min(deck).min(MAX_HAND);
    let mut picks = [0u16; MAX_HAND];
    for (i, pick) in picks.iter_mut().enumerate().take(len) {
        let size = (deck - i) as u64;
        // Below `deck`, so below 2^16 for any deck a level may have.
        *pick = u16::try_from(hash % size).unwrap_or(u16::MAX);
        hash /= size;
    }
    let mut out = Hand {
        cards: [0; MAX_HAND],
        len,
    };
    for i in 0..len {
        let mut card = picks[i];
        for j in (0..i).rev() {
            if card >= picks[j] {
                card += 1;
            }
        }
        out.cards[i] = card;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::config::bootstrap_schemas;
    use super::*;
    use http::Method;

    thread_local! {
        /// One slot: every identity of a test evicts the one before, and a repeated one hits.
        static CACHE: SubjectCache = SubjectCache::with_slots(1);
    }

    /// The first bootstrap schema that matches; [`first_match`] must agree, asked twice (the
    /// second time from its cache).
    fn classify(id: &Identity, method: Method, path: &str) -> String {
        let a = Attributes::from_request(&method, path, None);
        let mut schemas = bootstrap_schemas();
        schemas.sort_by(|x, y| (x.precedence, &x.name).cmp(&(y.precedence, &y.name)));
        let linear = schemas.iter().position(|s| matches(s, id, &a));
        for _ in 0..2 {
            let cached = CACHE.with(|c| first_match(&schemas, |s| s, c, id, &a));
            assert_eq!(cached, linear, "{} {path}", id.user);
        }
        linear
            .map(|at| schemas[at].name.clone())
            .unwrap_or_default()
    }

    #[test]
    fn requests_land_where_kube_apiserver_puts_them() {
        let user = |name: &str, groups: &[&str]| {
            Identity::new(name, groups.iter().map(|g| g.to_string()).collect())
        };
        let alice = user("alice", &["system:authenticated"]);
        let admin = user("admin", &["system:masters", "system:authenticated"]);
        let node = user("system:node:n1", &["system:nodes", "system:authenticated"]);
        let kcm = user("system:kube-controller-manager", &["system:authenticated"]);
        let sa = user(
            "system:serviceaccount:default:builder",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let ks = user(
            "system:serviceaccount:kube-system:coredns",
            &["system:serviceaccounts", "system:authenticated"],
        );
        let anonymous = user("system:anonymous", &["system:unauthenticated"]);
        let cases = [
            (
                &admin,
                Method::DELETE,
                "/apis/g/v1/namespaces/n/things/x",
                "exempt",
            ),
            (&alice, Method::GET, "/healthz", "probes"),
            (&alice, Method::GET, "/readyz/ping", "probes"),
            (&anonymous, Method::GET, "/livez", "probes"),
            (&alice, Method::POST, "/healthz", "global-default"),
            (
                &node,
                Method::PUT,
                "/api/v1/nodes/n1/status",
                "system-node-high",
            ),
            (
                &node,
                Method::GET,
                "/api/v1/namespaces/x/pods",
                "system-nodes",
            ),
            (
                &kcm,
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kcm",
                "system-leader-election",
            ),
            (&kcm, Method::GET, "/api/v1/pods", "kube-controller-manager"),
            (
                &ks,
                Method::GET,
                "/api/v1/namespaces/kube-system/configmaps",
                "kube-system-service-accounts",
            ),
            (
                &sa,
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/flunders",
                "service-accounts",
            ),
            (
                &alice,
                Method::GET,
                "/apis/wardle.example.com/v1alpha1/namespaces/n/flunders",
                "global-default",
            ),
            (&anonymous, Method::GET, "/apis", "global-default"),
            (&user("nobody", &[]), Method::GET, "/apis", ""),
        ];
        for (id, method, path, want) in cases {
            assert_eq!(
                classify(id, method.clone(), path),
                want,
                "{} {method} {path}",
                id.user
            );
        }
    }

    #[test]
    fn urls_wildcards_and_scope() {
        assert!(url_matches("/healthz", "/healthz/etcd"));
        assert!(url_matches("/healthz/*", "/healthz/etcd"));
        assert!(!url_matches("/healthz/*", "/healthz"));
        assert!(!url_matches("/hea", "/healthz"));
        assert!(url_matches("*", "/anything"));
        assert!(!contains(&["*".into(), "get".into()], "list"));
        let rule = ResourceRule {
            verbs: vec!["*".into()],
            api_groups: vec!["*".into()],
            resources: vec!["*".into()],
            namespaces: vec!["*".into()],
            cluster_scope: false,
        };
        let list_all = Attributes::from_request(&Method::GET, "/api/v1/pods", None);
        assert!(
            !resource_matches(&rule, &list_all),
            "* never matches no namespace"
        );
    }

    #[test]
    fn hands_are_distinct_and_in_the_deck() {
        for hash in [0u64, 1, 0xf4de_3bd4_2ccd_f6b7, u64::MAX] {
            let hand = deal(hash, 128, 6);
            let hand = hand.as_slice();
            assert_eq!(hand.len(), 6);
            let mut sorted = hand.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), 6, "{hand:?}");
            assert!(hand.iter().all(|&q| q < 128));
        }
        // Different flows get different hands.
        assert_ne!(
            deal(flow_hash("global-default", "alice"), 128, 6).as_slice(),
            deal(flow_hash("global-default", "bob"), 128, 6).as_slice()
        );
    }
}

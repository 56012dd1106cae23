//! Which flow schema a request matches, as k8s.io/apiserver's APF controller decides: schemas
//! in order of matching precedence (ties by name), the first whose rules match the request's
//! user and attributes; its flow is the schema and the distinguisher (the user, the namespace,
//! or nothing), hashed for shuffle sharding. The hash is SipHash, not upstream's SHA-256 (a
//! tenth of the cost): the hands it deals are as well spread, dealt the same way, but a flow
//! may sit in other queues than on kube-apiserver.

use super::config::{
    Distinguisher, FlowSchema, NonResourceRule, PolicyRules, ResourceRule, Subject,
};
use crate::authn::Identity;
use crate::authz::Attributes;

/// True when `fs` matches a request by `id` with attributes `a`.
pub fn matches(fs: &FlowSchema, id: &Identity, a: &Attributes) -> bool {
    fs.rules.iter().any(|rules| rules_match(rules, id, a))
}

fn rules_match(rules: &PolicyRules, id: &Identity, a: &Attributes) -> bool {
    rules.subjects.iter().any(|s| subject_matches(s, id))
        && if a.resource_request {
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

/// The flow's hash: std's SipHash of schema ‖ 0 ‖ distinguisher, with its fixed keys (the
/// same on every run of a build).
pub fn flow_hash(schema: &str, distinguisher: &str) -> u64 {
    use std::hash::Hasher as _;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    h.write(schema.as_bytes());
    h.write_u8(0);
    h.write(distinguisher.as_bytes());
    h.finish()
}

/// The most queues a hand may hold (a PriorityLevelConfiguration's `handSize` limit).
pub const MAX_HAND: usize = 128;

/// A hand of queues, without a heap allocation.
pub struct Hand {
    cards: [usize; MAX_HAND],
    len: usize,
}

impl Hand {
    pub fn as_slice(&self) -> &[usize] {
        &self.cards[..self.len]
    }
}

/// The hand of `hand` distinct queues out of `deck` that `hash` deals, in deal order, as
/// upstream's shuffle-sharding dealer deals it.
pub fn deal(mut hash: u64, deck: usize, hand: usize) -> Hand {
    let len = hand.min(deck).min(MAX_HAND);
    let mut picks = [0usize; MAX_HAND];
    for (i, pick) in picks.iter_mut().enumerate().take(len) {
        let size = (deck - i) as u64;
        *pick = (hash % size) as usize;
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

    /// The first bootstrap schema that matches.
    fn classify(id: &Identity, method: Method, path: &str) -> String {
        let a = Attributes::from_request(&method, path, None);
        let mut schemas = bootstrap_schemas();
        schemas.sort_by(|x, y| (x.precedence, &x.name).cmp(&(y.precedence, &y.name)));
        schemas
            .iter()
            .find(|s| matches(s, id, &a))
            .map(|s| s.name.clone())
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

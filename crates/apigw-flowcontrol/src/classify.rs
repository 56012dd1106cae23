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
use apigw_request::Attributes;
use apigw_request::Identity;
use std::sync::Arc;

/// True when `fs` matches a request by `id` with attributes `a`.
pub fn matches(fs: &FlowSchema, id: &Identity, a: &Attributes) -> bool {
    fs.rules
        .iter()
        .any(|rules| subjects_match(rules, id) && attributes_match(rules, a))
}

/// What [`first_match`] found: the index of the matching schema, if any, and the identity's
/// user name, shared with the cache (a request's tag keeps it without a copy); and the
/// request's flow hash when the cache knows it (a schema distinguishing by user or not at
/// all): [`flow_hash`] of the schema's name and the distinguisher.
pub struct Matched {
    pub at: Option<usize>,
    pub user: Arc<str>,
    pub flow: Option<u64>,
}

/// The index of the first of `schemas` (each `config` of it) that matches a request by `id`
/// with `a`, as [`matches`] decides, with the rules whose subjects `id` is from `cache`.
pub fn first_match<S>(
    schemas: &[S],
    config: impl Fn(&S) -> &FlowSchema,
    cache: &SubjectCache,
    id: &Identity,
    a: &Attributes,
) -> Matched {
    let slot = &cache.slots[cache.slot_of(&id.user)];
    let mut entry = slot.lock().unwrap_or_else(|e| e.into_inner());
    let subjects = match &mut *entry {
        Some(known) if *known.user == *id.user && known.groups.are(&id.groups) => known,
        stale => stale.insert(Subjects {
            user: Arc::from(id.user.as_str()),
            groups: Groups::of(&id.groups),
            rules: subject_rules(schemas, &config, id),
        }),
    };
    let found = subjects.rules.iter().find(|c| {
        // Rules that match no request of its kind, or every one, need not be read.
        let reach = match a.resource_request {
            true => c.resource,
            false => c.non_resource,
        };
        match reach {
            Reach::Nothing => return false,
            Reach::Everything => return true,
            Reach::Some => {}
        }
        let rules = schemas
            .get(c.schema as usize)
            .map(&config)
            .map(|fs| &fs.rules);
        rules
            .and_then(|rules| rules.get(c.rules as usize))
            .is_some_and(|rules| attributes_match(rules, a))
    });
    Matched {
        at: found.map(|c| c.schema as usize),
        user: subjects.user.clone(),
        flow: found.and_then(|c| c.flow),
    }
}

/// Every rule set, in order, whose subjects `id` is.
fn subject_rules<S>(
    schemas: &[S],
    config: &impl Fn(&S) -> &FlowSchema,
    id: &Identity,
) -> Box<[Candidate]> {
    let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
    schemas
        .iter()
        .enumerate()
        .flat_map(|(s, schema)| {
            let fs = config(schema);
            let flow = match fs.distinguisher {
                Some(Distinguisher::ByNamespace) => None,
                how => Some(flow_hash(&fs.name, distinguisher_of(how, &id.user, ""))),
            };
            fs.rules
                .iter()
                .enumerate()
                .filter(|(_, rules)| subjects_match(rules, id))
                .map(move |(r, rules)| Candidate {
                    schema: index(s),
                    rules: index(r),
                    resource: Reach::of(&rules.resource_rules, every_resource),
                    non_resource: Reach::of(&rules.non_resource_rules, every_non_resource),
                    flow,
                })
        })
        .collect()
}

/// A rule set whose subjects an identity is: where it is, how much of the resource and of the
/// non-resource requests it matches, and the flow hash of the identity's requests it matches
/// when that does not depend on the request.
struct Candidate {
    schema: u32,
    rules: u32,
    resource: Reach,
    non_resource: Reach,
    flow: Option<u64>,
}

/// How much of one kind of request (resource or non-resource) a rule set matches: when
/// nothing or everything, a request of that kind is decided without reading the rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Nothing,
    Some,
    Everything,
}

impl Reach {
    /// The reach of `rules`, each matching every request of its kind when `every` says so.
    fn of<R>(rules: &[R], every: impl Fn(&R) -> bool) -> Self {
        if rules.is_empty() {
            Self::Nothing
        } else if rules.iter().any(every) {
            Self::Everything
        } else {
            Self::Some
        }
    }
}

/// Whether `list` is the lone wildcard, which [`contains`] lets match every value.
fn wildcard(list: &[String]) -> bool {
    matches!(list, [only] if only == "*")
}

/// Whether `rule` matches every resource request, as [`resource_matches`] decides.
fn every_resource(rule: &ResourceRule) -> bool {
    wildcard(&rule.verbs)
        && wildcard(&rule.api_groups)
        && wildcard(&rule.resources)
        && wildcard(&rule.namespaces)
        && rule.cluster_scope
}

/// Whether `rule` matches every non-resource request, as [`non_resource_matches`] decides.
fn every_non_resource(rule: &NonResourceRule) -> bool {
    wildcard(&rule.verbs) && rule.urls.iter().any(|url| url == "*")
}

/// Entries of a [`SubjectCache`]: a power of two.
const SUBJECT_SLOTS: usize = 64;

/// For the identities seen last (one per slot, by a hash of the user name), which rules'
/// subjects they are, in schema order. Belongs to one set of schemas: built with them. An
/// entry is used only for the exact user and groups it was made for.
pub struct SubjectCache {
    keys: foldhash::fast::RandomState,
    slots: Box<[std::sync::Mutex<Option<Subjects>>]>,
}

struct Subjects {
    user: Arc<str>,
    groups: Groups,
    /// The rule sets whose subjects the identity is, in order: only these are matched
    /// against a request's attributes.
    rules: Box<[Candidate]>,
}

/// An identity's groups in one buffer, each its length (4 bytes, little-endian) then its
/// bytes: compared with a request's groups in one pass over memory that is one allocation.
struct Groups(Box<[u8]>);

impl Groups {
    fn of(groups: &[String]) -> Self {
        let mut buf = Vec::with_capacity(groups.iter().map(|g| 4 + g.len()).sum());
        for g in groups {
            // A group longer than 4 GiB cannot have arrived in a request's headers.
            let len = u32::try_from(g.len()).unwrap_or(u32::MAX);
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(g.as_bytes());
        }
        Self(buf.into_boxed_slice())
    }

    /// Whether these are `groups`, in the same order.
    fn are(&self, groups: &[String]) -> bool {
        let mut rest = &self.0[..];
        for g in groups {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return false;
            };
            let len = u32::from_le_bytes(*len) as usize;
            if len != g.len() || !tail.starts_with(g.as_bytes()) {
                return false;
            }
            rest = &tail[len..];
        }
        rest.is_empty()
    }
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

    fn slot_of(&self, user: &str) -> usize {
        use std::hash::BuildHasher as _;
        let h = self.keys.hash_one(user);
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
    wildcard(list) || list.iter().any(|v| v == value)
}

/// `resource` or `resource/subresource` of `a` is `rule_resource`.
fn same_resource(rule_resource: &str, a: &Attributes) -> bool {
    match rule_resource.split_once('/') {
        Some((r, sub)) => r == a.resource && sub == a.subresource,
        None => a.subresource.is_empty() && rule_resource == a.resource,
    }
}

fn resource_matches(rule: &ResourceRule, a: &Attributes) -> bool {
    let resource_ok =
        wildcard(&rule.resources) || rule.resources.iter().any(|r| same_resource(r, a));
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
    distinguisher_of(how, user, &a.namespace)
}

fn distinguisher_of<'a>(how: Option<Distinguisher>, user: &'a str, namespace: &'a str) -> &'a str {
    match how {
        Some(Distinguisher::ByUser) => user,
        Some(Distinguisher::ByNamespace) => namespace,
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

/// How many queues a hand of `hand` out of `deck` holds.
pub fn hand_len(deck: usize, hand: usize) -> usize {
    hand.min(deck).min(MAX_HAND)
}

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
/// upstream's shuffle-sharding dealer deals it. A card does not depend on the cards after
/// it: a shorter hand is the longer one's beginning.
pub fn deal(hash: u64, deck: usize, hand: usize) -> Hand {
    let len = hand_len(deck, hand);
    let mut out = Hand {
        cards: [0; MAX_HAND],
        len,
    };
    deal_into(hash, deck, &mut out.cards[..len]);
    out
}

/// Card `at` (from 0) of every hand `hash` deals out of `deck` that is longer than `at`.
pub fn card(hash: u64, deck: usize, at: usize) -> Option<u16> {
    if at >= deck {
        return None;
    }
    // Hands are short: most need not clear room for the longest.
    const SHORT: usize = 16;
    let (mut short, mut long) = ([0; SHORT], None);
    let cards = match at < SHORT {
        true => &mut short[..=at],
        false => long.insert([0; MAX_HAND]).get_mut(..=at)?,
    };
    deal_into(hash, deck, cards);
    cards.last().copied()
}

/// Deals `cards.len()` (at most `deck`) cards into `cards`.
fn deal_into(mut hash: u64, deck: usize, cards: &mut [u16]) {
    // Each pick is an index into the queues not dealt yet...
    for (i, pick) in cards.iter_mut().enumerate() {
        let size = (deck - i) as u64;
        // Below `deck`, so below 2^16 for any deck a level may have.
        *pick = u16::try_from(hash % size).unwrap_or(u16::MAX);
        hash /= size;
    }
    // ...made a queue number by stepping over every earlier pick at or below it. From the
    // last card back, so that the earlier picks are still picks when read.
    for i in (0..cards.len()).rev() {
        let (picks, rest) = cards.split_at_mut(i);
        let card = &mut rest[0];
        for &pick in picks.iter().rev() {
            if *card >= pick {
                *card += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::bootstrap_schemas;
    use super::*;
    use http::Method;

    #[test]
    fn cached_groups_are_only_the_same_groups_in_the_same_order() {
        let owned = |gs: &[&str]| gs.iter().map(|g| g.to_string()).collect::<Vec<_>>();
        let cached = Groups::of(&owned(&["ab", "c"]));
        assert!(cached.are(&owned(&["ab", "c"])));
        for other in [
            &["a", "bc"][..],
            &["c", "ab"],
            &["ab"],
            &["ab", "c", ""],
            &["abc"],
            &[],
        ] {
            assert!(!cached.are(&owned(other)), "{other:?}");
        }
        assert!(Groups::of(&[]).are(&[]));
        assert!(!Groups::of(&owned(&[""])).are(&[]));
    }

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
            assert_eq!(cached.at, linear, "{} {path}", id.user);
            assert_eq!(&*cached.user, id.user);
            // A flow hash the cache knows is the one the request's own would be.
            if let Some(flow) = cached.flow {
                let fs = linear.map(|at| &schemas[at]);
                let how = fs.and_then(|fs| fs.distinguisher);
                let name = fs.map_or("", |fs| fs.name.as_str());
                assert_eq!(
                    flow,
                    flow_hash(name, distinguisher(how, &id.user, &a)),
                    "{path}"
                );
            }
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
            for len in 1..=6 {
                assert_eq!(deal(hash, 128, len).as_slice(), &hand[..len], "a prefix");
                assert_eq!(card(hash, 128, len - 1), Some(hand[len - 1]));
            }
            assert_eq!(card(hash, 4, 4), None, "past the deck");
        }
        // Different flows get different hands.
        assert_ne!(
            deal(flow_hash("global-default", "alice"), 128, 6).as_slice(),
            deal(flow_hash("global-default", "bob"), 128, 6).as_slice()
        );
    }
}

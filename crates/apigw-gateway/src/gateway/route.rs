//! What a request targets, decided once per request, before authentication, from the path's one
//! split ([`apigw_request::segments`]) and one registry snapshot: the discovery documents, the
//! `apiregistration.k8s.io` API, an identity review, an APIService's backend, OpenAPI, the
//! metrics, the delegate, or nothing. The metrics labels, the access line and dispatch
//! ([`super::dispatch`]) all read the one [`Route`], so a registry change while a request is in
//! flight cannot label it with one APIService and send it to another.
//!
//! Without a delegate, `/api` lists the core group's `v1` and `/api/v1` is its empty
//! APIResourceList, so clients that assume the core group go on to `/apis`.

use super::reviews;
use apigw_discovery::apiservices::GROUP;
use apigw_discovery::{delegate::Known, Doc, Documents};
use apigw_registry::{ApiService, Snapshot};
use std::sync::Arc;

/// Which APF debug dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowDump {
    PriorityLevels,
    Queues,
    Requests,
}

/// Where a request goes.
#[derive(Debug, Clone)]
pub enum Route {
    /// `/api` without a delegate: the core group's versions, naming the address reached.
    CoreGroup(Arc<Documents>),
    /// `/api/v1` without a delegate: its empty APIResourceList.
    CoreV1,
    /// Discovery documents as rendered: `/apis` (the registry's groups), `/apis/<group>`, or
    /// `/api` as the delegate last answered it. One document per content type offered.
    Discovery(Discovery),
    /// `/apis/apiregistration.k8s.io`.
    ApiServicesGroup,
    /// `/apis/apiregistration.k8s.io/v1`.
    ApiServicesResources,
    /// `/apis/apiregistration.k8s.io/v1/<rest>`: the read-only apiservices API.
    ApiServices {
        rest: Box<[String]>,
    },
    /// `/apis/<authentication|authorization>.k8s.io/v1/<rest>`, answered here: the identity
    /// reviews (and, without a delegate, the rest of those groups).
    Review {
        group: &'static str,
        rest: Box<[String]>,
    },
    /// `/apis/<group>/<version>/...`, registered: to its APIService's backend (of a group
    /// version with APIServiceBackends, the one serving the resource).
    Backend(Arc<ApiService>),
    /// `/apis/<group>/<version>` itself, of a group version with APIServiceBackends: the
    /// APIResourceList merged from them, answered here.
    MergedResources(Arc<ApiService>),
    /// `/openapi/v3/apis/<group>/<version>`, registered: the backend's document.
    OpenApiBackend(Arc<ApiService>),
    /// `/openapi/v3/apis/<group>/<version>` of a group version with APIServiceBackends: the
    /// document merged from theirs, answered here.
    OpenApiMerged(Arc<ApiService>),
    OpenApiV2,
    OpenApiV3,
    Metrics,
    /// `/debug/api_priority_and_fairness/dump_priority_levels`, `dump_queues` or
    /// `dump_requests`.
    FlowDump(FlowDump),
    /// Anything else, with a delegate. `listed`: the delegate's discovery lists the path's
    /// group version (or it is one of the identity groups), so the request metrics may take
    /// their labels from the path.
    Delegate {
        listed: bool,
    },
    /// Anything else, without a delegate: 404.
    NotFound,
}

/// The documents of a [`Route::Discovery`].
#[derive(Debug, Clone)]
pub enum Discovery {
    /// `/apis`: legacy, v2.
    Apis(Arc<Documents>),
    /// `/api` as the delegate answered it: legacy, v2.
    DelegateApi(Arc<[Doc; 2]>),
    /// `/apis/<group>`.
    Group(Doc),
}

impl Discovery {
    /// The forms offered, preferred first.
    pub fn forms(&self) -> &[Doc] {
        match self {
            Self::Apis(docs) => &docs.apis,
            Self::DelegateApi(api) => &api[..],
            Self::Group(doc) => std::slice::from_ref(doc),
        }
    }
}

impl Route {
    /// The APIService the request is sent to, if any.
    pub fn apiservice(&self) -> Option<&Arc<ApiService>> {
        match self {
            Self::Backend(svc)
            | Self::MergedResources(svc)
            | Self::OpenApiBackend(svc)
            | Self::OpenApiMerged(svc) => Some(svc),
            _ => None,
        }
    }

    /// True when the path's group version is served somewhere that knows its resources (a
    /// registered APIService, the gateway itself, or the delegate's discovery), so the request
    /// metrics may take their group, version and resource labels from a resource request's path.
    pub fn knows_resources(&self) -> bool {
        match self {
            Self::Backend(_)
            | Self::MergedResources(_)
            | Self::ApiServices { .. }
            | Self::Review { .. } => true,
            Self::Delegate { listed } => *listed,
            _ => false,
        }
    }
}

/// What the decision reads, all from one moment.
pub struct Router<'a> {
    pub snapshot: &'a Snapshot,
    /// The delegate's discovery as last fetched; None without a delegate.
    pub delegate: Option<&'a Known>,
    /// The discovery documents of `snapshot`, rendered (or taken from the cache) on first use.
    pub documents: &'a dyn Fn() -> Arc<Documents>,
}

impl Router<'_> {
    /// The route of a request whose path splits into `segments`.
    pub fn decide(&self, segments: &[&str]) -> Route {
        let own = |rest: &[&str]| rest.iter().map(|s| s.to_string()).collect();
        match segments {
            ["api"] | ["api", ""] => match self.delegate {
                None => return Route::CoreGroup((self.documents)()),
                // The delegate's APIVersions as last fetched; until then, the delegate itself.
                Some(known) => {
                    if let Some(api) = &known.api {
                        return Route::Discovery(Discovery::DelegateApi(api.clone()));
                    }
                }
            },
            ["api", "v1"] | ["api", "v1", ""] if self.delegate.is_none() => return Route::CoreV1,
            ["apis"] | ["apis", ""] => {
                return Route::Discovery(Discovery::Apis((self.documents)()));
            }
            ["apis", GROUP] | ["apis", GROUP, ""] => return Route::ApiServicesGroup,
            ["apis", GROUP, "v1"] | ["apis", GROUP, "v1", ""] => {
                return Route::ApiServicesResources
            }
            ["apis", GROUP, "v1", rest @ ..] => return Route::ApiServices { rest: own(rest) },
            ["apis", group @ (reviews::AUTHN | reviews::AUTHZ), "v1", rest @ ..]
                if self.delegate.is_none() || reviews::is_own(group, rest) =>
            {
                let group = if *group == reviews::AUTHN {
                    reviews::AUTHN
                } else {
                    reviews::AUTHZ
                };
                return Route::Review {
                    group,
                    rest: own(rest),
                };
            }
            ["apis", group] | ["apis", group, ""] => {
                if let Some(doc) = (self.documents)().groups.get(*group) {
                    return Route::Discovery(Discovery::Group(doc.clone()));
                }
            }
            ["apis", group, version] | ["apis", group, version, ""] => {
                if let Some(svc) = self.snapshot.lookup(group, version) {
                    return match svc.backends.is_empty() {
                        true => Route::Backend(svc.clone()),
                        false => Route::MergedResources(svc.clone()),
                    };
                }
            }
            ["apis", group, version, ..] => {
                if let Some(svc) = self.snapshot.lookup(group, version) {
                    return Route::Backend(svc.clone());
                }
            }
            ["metrics"] => return Route::Metrics,
            ["debug", "api_priority_and_fairness", "dump_priority_levels"] => {
                return Route::FlowDump(FlowDump::PriorityLevels)
            }
            ["debug", "api_priority_and_fairness", "dump_queues"] => {
                return Route::FlowDump(FlowDump::Queues)
            }
            ["debug", "api_priority_and_fairness", "dump_requests"] => {
                return Route::FlowDump(FlowDump::Requests)
            }
            ["openapi", "v2"] => return Route::OpenApiV2,
            ["openapi", "v3"] | ["openapi", "v3", ""] => return Route::OpenApiV3,
            ["openapi", "v3", "apis", group, version] => {
                if let Some(svc) = self.snapshot.lookup(group, version) {
                    return match svc.backends.is_empty() {
                        true => Route::OpenApiBackend(svc.clone()),
                        false => Route::OpenApiMerged(svc.clone()),
                    };
                }
            }
            // The group's own document, from the backend whose index the merged one lists it
            // from (the first of the group's APIServices by name).
            ["openapi", "v3", "apis", group] => {
                let first = self
                    .snapshot
                    .iter()
                    .find(|s| s.group == *group && s.service.is_some());
                if let Some(svc) = first {
                    return Route::OpenApiBackend(svc.clone());
                }
            }
            _ => {}
        }
        match self.delegate {
            Some(known) => Route::Delegate {
                listed: lists(known, segments),
            },
            None => Route::NotFound,
        }
    }
}

/// True when the delegate's discovery lists the group version of a path sent to it: `/api/v1`
/// once the delegate answered `/api`, a group version of its `/apis`, or an identity group's
/// `v1` (the gateway lists those itself).
fn lists(known: &Known, segments: &[&str]) -> bool {
    match segments {
        ["api", version, ..] => *version == "v1" && known.api.is_some(),
        ["apis", reviews::AUTHN | reviews::AUTHZ, "v1", ..] => true,
        ["apis", group, version, ..] => known
            .versions
            .iter()
            .any(|b| b.svc.group == *group && b.svc.version == *version),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    //! The router in the style of axum's: many small cases, each a path and the route it takes.

    use super::*;
    use apigw_discovery::Builtin;
    use apigw_request::segments;
    use serde_json::json;
    use std::collections::HashMap;

    fn service(group: &str, version: &str) -> ApiService {
        ApiService::from_value(json!({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": format!("{version}.{group}")},
            "spec": {"group": group, "version": version, "groupPriorityMinimum": 1000,
                     "versionPriority": 15,
                     "service": {"name": "s", "namespace": "n"}, "caBundle": ""}
        }))
        .expect("APIService")
    }

    /// A registry of `wardle.example.com/v1alpha1`, and a delegate that lists `apps/v1` and
    /// answered `/api` when `delegate` is true.
    struct Case {
        snapshot: Snapshot,
        cache: apigw_discovery::Cache,
        known: Option<Known>,
    }

    impl Case {
        fn new(delegate: bool) -> Self {
            let known = delegate.then(|| {
                let apps = Builtin::new(
                    Arc::new(service("apps", "v1")),
                    json!({"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": []}),
                );
                let doc = apigw_discovery::Doc::new(
                    &json!({"kind": "APIVersions"}),
                    apigw_discovery::JSON,
                );
                Known {
                    generation: 1,
                    versions: vec![apps],
                    api: Some(Arc::new([doc.clone(), doc])),
                }
            });
            Self {
                snapshot: Snapshot::new([service("wardle.example.com", "v1alpha1")]),
                cache: apigw_discovery::Cache::new(Vec::new()),
                known,
            }
        }

        fn route(&self, path: &str) -> Route {
            let documents = || self.cache.get(&self.snapshot, &HashMap::new(), (1, 0));
            let router = Router {
                snapshot: &self.snapshot,
                delegate: self.known.as_ref(),
                documents: &documents,
            };
            router.decide(&segments(path))
        }
    }

    /// The route's name, and the APIService or review group it names.
    fn name(route: &Route) -> String {
        match route {
            Route::CoreGroup(_) => "core-group".into(),
            Route::CoreV1 => "core-v1".into(),
            Route::Discovery(Discovery::Apis(_)) => "apis".into(),
            Route::Discovery(Discovery::DelegateApi(_)) => "delegate-api".into(),
            Route::Discovery(Discovery::Group(_)) => "group".into(),
            Route::ApiServicesGroup => "apiservices-group".into(),
            Route::ApiServicesResources => "apiservices-resources".into(),
            Route::ApiServices { rest } => format!("apiservices {}", rest.join("/")),
            Route::Review { group, rest } => format!("review {group} {}", rest.join("/")),
            Route::Backend(svc) => format!("backend {}", svc.name),
            Route::MergedResources(svc) => format!("merged-resources {}", svc.name),
            Route::OpenApiBackend(svc) => format!("openapi-backend {}", svc.name),
            Route::OpenApiMerged(svc) => format!("openapi-merged {}", svc.name),
            Route::OpenApiV2 => "openapi-v2".into(),
            Route::OpenApiV3 => "openapi-v3".into(),
            Route::Metrics => "metrics".into(),
            Route::FlowDump(dump) => format!("flow-dump {dump:?}"),
            Route::Delegate { listed } => format!("delegate listed={listed}"),
            Route::NotFound => "not-found".into(),
        }
    }

    fn check(case: &Case, table: &[(&str, &str)]) {
        for (path, want) in table {
            assert_eq!(name(&case.route(path)), *want, "{path}");
        }
    }

    const WARDLE: &str = "v1alpha1.wardle.example.com";

    /// A group version with an APIServiceBackend: its own document and its OpenAPI v3
    /// document are answered here, its resources still go to a backend.
    #[test]
    fn a_group_version_with_backends_has_its_documents_merged_here() {
        let mut case = Case::new(false);
        let mut svc = service("wardle.example.com", "v1alpha1");
        let backend = apigw_registry::Backend::from_value(json!({
            "apiVersion": "apigw.dev/v1alpha1", "kind": "APIServiceBackend",
            "metadata": {"name": "second"},
            "spec": {"apiService": WARDLE, "insecureSkipTLSVerify": true,
                     "service": {"name": "second", "namespace": "n"}}
        }))
        .expect("APIServiceBackend");
        let orphans = apigw_registry::attach(std::slice::from_mut(&mut svc), vec![backend]);
        assert!(orphans.is_empty(), "{orphans:?}");
        case.snapshot = Snapshot::new([svc]);
        check(
            &case,
            &[
                (
                    "/apis/wardle.example.com/v1alpha1",
                    &format!("merged-resources {WARDLE}"),
                ),
                (
                    "/apis/wardle.example.com/v1alpha1/",
                    &format!("merged-resources {WARDLE}"),
                ),
                (
                    "/apis/wardle.example.com/v1alpha1/namespaces/n/flunders",
                    &format!("backend {WARDLE}"),
                ),
                (
                    "/openapi/v3/apis/wardle.example.com/v1alpha1",
                    &format!("openapi-merged {WARDLE}"),
                ),
                (
                    "/openapi/v3/apis/wardle.example.com",
                    &format!("openapi-backend {WARDLE}"),
                ),
            ],
        );
        let merged = case.route("/apis/wardle.example.com/v1alpha1");
        assert_eq!(merged.apiservice().map(|s| s.name.as_str()), Some(WARDLE));
    }

    #[test]
    fn without_a_delegate() {
        let case = Case::new(false);
        check(
            &case,
            &[
                ("/api", "core-group"),
                ("/api/", "core-group"),
                ("/api/v1", "core-v1"),
                ("/api/v1/", "core-v1"),
                ("/api/v1/pods", "not-found"),
                ("/apis", "apis"),
                ("/apis/", "apis"),
                ("/apis/wardle.example.com", "group"),
                ("/apis/wardle.example.com/", "group"),
                ("/apis/apps", "not-found"),
                ("/apis/apiregistration.k8s.io", "apiservices-group"),
                ("/apis/apiregistration.k8s.io/v1", "apiservices-resources"),
                (
                    "/apis/apiregistration.k8s.io/v1/apiservices",
                    "apiservices apiservices",
                ),
                (
                    "/apis/apiregistration.k8s.io/v1/apiservices/x",
                    "apiservices apiservices/x",
                ),
                (
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    "review authentication.k8s.io selfsubjectreviews",
                ),
                (
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                    "review authorization.k8s.io subjectaccessreviews",
                ),
                (
                    "/apis/wardle.example.com/v1alpha1",
                    &format!("backend {WARDLE}"),
                ),
                (
                    "/apis/wardle.example.com/v1alpha1/namespaces/n/flunders/f",
                    &format!("backend {WARDLE}"),
                ),
                ("/apis/wardle.example.com/v1beta1/flunders", "not-found"),
                ("/apis/wardle.example.com/", "group"),
                ("/metrics", "metrics"),
                ("/metrics/x", "not-found"),
                (
                    "/debug/api_priority_and_fairness/dump_priority_levels",
                    "flow-dump PriorityLevels",
                ),
                (
                    "/debug/api_priority_and_fairness/dump_queues",
                    "flow-dump Queues",
                ),
                (
                    "/debug/api_priority_and_fairness/dump_requests",
                    "flow-dump Requests",
                ),
                ("/openapi/v2", "openapi-v2"),
                ("/openapi/v3", "openapi-v3"),
                ("/openapi/v3/", "openapi-v3"),
                (
                    "/openapi/v3/apis/wardle.example.com/v1alpha1",
                    &format!("openapi-backend {WARDLE}"),
                ),
                ("/openapi/v3/apis/apps/v1", "not-found"),
                (
                    "/openapi/v3/apis/wardle.example.com",
                    &format!("openapi-backend {WARDLE}"),
                ),
                ("/openapi/v3/apis/apps", "not-found"),
                ("/", "not-found"),
                ("/healthz/x", "not-found"),
            ],
        );
    }

    #[test]
    fn with_a_delegate() {
        let case = Case::new(true);
        check(
            &case,
            &[
                ("/api", "delegate-api"),
                ("/api/v1", "delegate listed=true"),
                ("/api/v1/namespaces/n/pods", "delegate listed=true"),
                ("/api/v2/pods", "delegate listed=false"),
                ("/apis", "apis"),
                ("/apis/wardle.example.com", "group"),
                // A group no document lists goes to the delegate.
                ("/apis/batch", "delegate listed=false"),
                ("/apis/apps/v1/deployments", "delegate listed=true"),
                ("/apis/batch/v1/jobs", "delegate listed=false"),
                (
                    "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                    "review authentication.k8s.io selfsubjectreviews",
                ),
                (
                    "/apis/authentication.k8s.io/v1/tokenreviews",
                    "delegate listed=true",
                ),
                (
                    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                    "review authorization.k8s.io selfsubjectaccessreviews",
                ),
                (
                    "/apis/authorization.k8s.io/v1/namespaces/n/localsubjectaccessreviews",
                    "delegate listed=true",
                ),
                (
                    "/apis/apiregistration.k8s.io/v1/apiservices",
                    "apiservices apiservices",
                ),
                (
                    "/apis/wardle.example.com/v1alpha1/flunders",
                    &format!("backend {WARDLE}"),
                ),
                ("/version/x", "delegate listed=false"),
                ("/", "delegate listed=false"),
            ],
        );
    }

    #[test]
    fn a_delegate_yet_to_answer_api_gets_api_itself() {
        let mut case = Case::new(true);
        if let Some(known) = case.known.as_mut() {
            known.api = None;
        }
        check(
            &case,
            &[
                ("/api", "delegate listed=false"),
                ("/api/v1/pods", "delegate listed=false"),
            ],
        );
    }

    #[test]
    fn the_labels_and_the_access_line_read_the_route() {
        let case = Case::new(false);
        let backend = case.route("/apis/wardle.example.com/v1alpha1/flunders");
        assert_eq!(backend.apiservice().map(|s| s.name.as_str()), Some(WARDLE));
        assert!(backend.knows_resources());
        let openapi = case.route("/openapi/v3/apis/wardle.example.com/v1alpha1");
        assert_eq!(openapi.apiservice().map(|s| s.name.as_str()), Some(WARDLE));
        for path in ["/apis/other/v1/things", "/apis", "/metrics"] {
            let route = case.route(path);
            assert!(route.apiservice().is_none(), "{path}");
            assert!(!route.knows_resources(), "{path}");
        }
        assert!(case
            .route("/apis/apiregistration.k8s.io/v1/apiservices")
            .knows_resources());
    }
}

//! The `Webhook` authorizer: each request's [`Attributes`] and [`Identity`] become an
//! `authorization.k8s.io/v1` SubjectAccessReview (resource attributes for resource requests,
//! non-resource attributes otherwise). Answers are cached, keyed by a digest of the review's
//! spec: allowed for 5 minutes and denied for 30 seconds, kube-apiserver's defaults for
//! `--authorization-webhook-cache-authorized-ttl` and `-unauthorized-ttl`. Implements
//! [`crate::authz::AccessReview`], through which the authorizer asks it.

use crate::cache::{digest, TtlCache};
use super::ClusterError;
use crate::authn::Identity;
use crate::authz::Attributes;
pub use crate::authz::Decision;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use std::time::Duration;

/// Cache lifetimes and bounds.
#[derive(Debug, Clone)]
pub struct SarSettings {
    pub allow_ttl: Duration,
    pub deny_ttl: Duration,
    pub capacity: usize,
}

impl Default for SarSettings {
    fn default() -> Self {
        Self {
            allow_ttl: Duration::from_secs(300),
            deny_ttl: Duration::from_secs(30),
            capacity: 10_000,
        }
    }
}

/// Asks the cluster whether a request is allowed.
pub struct SubjectAccessReviewer {
    api: Api<SubjectAccessReview>,
    cache: TtlCache<Decision>,
    settings: SarSettings,
}

impl SubjectAccessReviewer {
    pub fn new(client: kube::Client, settings: SarSettings) -> Self {
        Self {
            api: Api::all(client),
            cache: TtlCache::new(settings.capacity),
            settings,
        }
    }

    /// Whether `id` may do what `a` describes; an error when the cluster could not be asked.
    pub async fn review(&self, id: &Identity, a: &Attributes) -> Result<Decision, ClusterError> {
        let review = build(id, a);
        let spec_json = serde_json::to_string(&review.spec)
            .map_err(|e| ClusterError::config("SubjectAccessReview spec".into(), e))?;
        let key = digest(&["subjectaccessreview", &spec_json]);
        if let Some(decision) = self.cache.get(&key) {
            return Ok(decision);
        }
        let answer = self
            .api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ClusterError::api("SubjectAccessReview", e))?;
        let status = answer.status.unwrap_or_default();
        let decision = Decision {
            allowed: status.allowed,
            denied: status.denied.unwrap_or(false),
            reason: status.reason.unwrap_or_default(),
        };
        let ttl = if decision.allowed {
            self.settings.allow_ttl
        } else {
            self.settings.deny_ttl
        };
        self.cache.insert(key, decision.clone(), ttl);
        Ok(decision)
    }
}

impl crate::authz::AccessReview for SubjectAccessReviewer {
    fn review<'a>(
        &'a self,
        id: &'a Identity,
        a: &'a Attributes,
    ) -> crate::authn::BoxFuture<'a, Result<Decision, apigw_core::body::BoxError>> {
        Box::pin(async move {
            SubjectAccessReviewer::review(self, id, a)
                .await
                .map_err(Into::into)
        })
    }
}

/// The SubjectAccessReview asking about `a` for `id`.
pub fn build(id: &Identity, a: &Attributes) -> SubjectAccessReview {
    let (resource_attributes, non_resource_attributes) = if a.resource_request {
        let some = |s: &str| Some(s.to_string());
        let ra = ResourceAttributes {
            verb: some(&a.verb),
            group: some(&a.group),
            version: some(&a.version),
            resource: some(&a.resource),
            subresource: some(&a.subresource),
            name: some(&a.name),
            namespace: some(&a.namespace),
            ..ResourceAttributes::default()
        };
        (Some(ra), None)
    } else {
        let nra = NonResourceAttributes {
            path: Some(a.path.clone()),
            verb: Some(a.verb.clone()),
        };
        (None, Some(nra))
    };
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(id.user.clone()),
            uid: id.uid.clone(),
            groups: Some(id.groups.clone()),
            extra: (!id.extra.is_empty()).then(|| id.extra.clone()),
            resource_attributes,
            non_resource_attributes,
        },
        ..SubjectAccessReview::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn resource_and_non_resource_reviews() {
        let mut id = Identity::new("bob", vec!["devs".into()]);
        id.uid = Some("u1".into());
        id.extra.insert("scopes".into(), vec!["x".into()]);
        let a = Attributes::from_request(
            &Method::GET,
            "/apis/wardle.example.com/v1alpha1/namespaces/y/flunders",
            None,
        );
        let spec = serde_json::to_value(build(&id, &a).spec).unwrap();
        assert_eq!(spec["user"], "bob");
        assert_eq!(spec["uid"], "u1");
        assert_eq!(spec["groups"], serde_json::json!(["devs"]));
        assert_eq!(spec["extra"]["scopes"], serde_json::json!(["x"]));
        let ra = &spec["resourceAttributes"];
        assert_eq!(
            (&ra["verb"], &ra["group"], &ra["resource"], &ra["namespace"]),
            (
                &"list".into(),
                &"wardle.example.com".into(),
                &"flunders".into(),
                &"y".into()
            )
        );
        assert!(spec.get("nonResourceAttributes").is_none());
        let a = Attributes::from_request(&Method::GET, "/healthz", None);
        let spec = serde_json::to_value(build(&id, &a).spec).unwrap();
        assert_eq!(
            spec["nonResourceAttributes"],
            serde_json::json!({"path": "/healthz", "verb": "get"})
        );
    }
}

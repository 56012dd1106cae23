//! Where an authenticated request goes: discovery and the `apiregistration.k8s.io` API are
//! answered from the registry; `/apis/<group>/<version>/...` goes to the APIService's backend
//! (503 at once while it is unavailable); `/metrics` to the metrics; anything else to the
//! delegate, or 404. Without a delegate, `/api` lists the core group's `v1` and `/api/v1` is
//! its empty APIResourceList, so clients that assume the core group go on to `/apis`.

use super::{reviews, Gateway};
use crate::apiservices::{self, GROUP};
use crate::authn::Identity;
use crate::discovery;
use crate::request_info::RequestInfo;
use apigw_core::body::{Body, BoxError};
use apigw_core::errors::{json_response, render, Status};
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;

impl Gateway {
    /// Phase 4 of the pipeline: the answer to an admitted request.
    pub(super) async fn route<B>(
        &self,
        req: Request<B>,
        identity: &Identity,
        info: &RequestInfo,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        // The URI's bytes are shared, not copied: `req` moves on while its path is still read.
        let uri = req.uri().clone();
        let mut segments: Vec<&str> = Vec::with_capacity(8);
        segments.extend(uri.path().trim_start_matches('/').split('/'));
        let snapshot = self.registry.snapshot();
        let docs = || {
            let key = (snapshot.generation, self.availability.round());
            self.discovery.get(&snapshot, &self.availability.all(), key)
        };
        match segments.as_slice() {
            ["api"] | ["api", ""] if self.proxy.delegate().is_none() => {
                // The legacy form names the address this client reached the gateway at.
                let mut forms = (*docs().api).clone();
                let address = server_address(info.host.as_ref());
                forms[0] = discovery::Doc::new(
                    &discovery::render::api_versions(&address),
                    discovery::JSON,
                );
                return discovery::serve(&req, &forms);
            }
            ["api", "v1"] | ["api", "v1", ""] if self.proxy.delegate().is_none() => {
                return discovery::serve(&req, std::slice::from_ref(discovery::render::core_v1()));
            }
            ["api"] | ["api", ""] => {
                // The delegate's APIVersions as last fetched; until then, the delegate itself.
                if let Some(api) = self.discovery.delegate.current().api.clone() {
                    return discovery::serve(&req, &api[..]);
                }
            }
            ["apis"] | ["apis", ""] => return discovery::serve(&req, &docs().apis),
            ["apis", GROUP] | ["apis", GROUP, ""] => {
                return Ok(json_response(&apiservices::group_document()));
            }
            ["apis", GROUP, "v1"] | ["apis", GROUP, "v1", ""] => {
                return Ok(json_response(&apiservices::resource_list()));
            }
            ["apis", GROUP, "v1", rest @ ..] => return self.apiservices.handle(&req, rest),
            ["apis", group @ (reviews::AUTHN | reviews::AUTHZ), "v1", rest @ ..]
                if self.proxy.delegate().is_none() || reviews::is_own(group, rest) =>
            {
                let group = group.to_string();
                let rest: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
                let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                return reviews::handle(&self.authz, identity, req, &group, &rest).await;
            }
            ["apis", group] | ["apis", group, ""] => {
                if let Some(doc) = docs().groups.get(*group) {
                    return discovery::serve(&req, std::slice::from_ref(doc));
                }
            }
            ["apis", group, version, ..] => {
                if let Some(svc) = snapshot.lookup(group, version) {
                    if let Some(state) = self.availability.get(&svc.name) {
                        if !state.condition.available {
                            return Err(Status::service_unavailable(format!(
                                "service unavailable: APIService {} is not available ({}): {}",
                                svc.name, state.condition.reason, state.condition.message
                            )));
                        }
                    }
                    let backend = self.proxy.backend_for(svc)?;
                    return self
                        .proxy
                        .forward(&backend, req, identity, info, &svc.name)
                        .await;
                }
            }
            ["metrics"] => return Ok(self.metrics_response()),
            ["openapi", "v2"] => return discovery::serve(&req, &[(*self.openapi.v2()).clone()]),
            ["openapi", "v3"] | ["openapi", "v3", ""] => {
                return discovery::serve(&req, &[(*self.openapi.v3()).clone()]);
            }
            ["openapi", "v3", "apis", group, version] => {
                if let Some(svc) = snapshot.lookup(group, version) {
                    let immutable = req
                        .uri()
                        .query()
                        .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("hash=")));
                    let backend = self.proxy.backend_for(svc)?;
                    let mut res = self
                        .proxy
                        .forward(&backend, req, identity, info, &svc.name)
                        .await?;
                    // A hashed URL names one version of the document forever, as upstream serves it.
                    if immutable
                        && res.status().is_success()
                        && !res.headers().contains_key(http::header::CACHE_CONTROL)
                    {
                        res.headers_mut().insert(
                            http::header::CACHE_CONTROL,
                            http::HeaderValue::from_static("public, immutable"),
                        );
                    }
                    return Ok(res);
                }
            }
            _ => {}
        }
        match self.proxy.delegate() {
            Some(delegate) => {
                self.proxy
                    .forward(delegate, req, identity, info, "delegate")
                    .await
            }
            None => Err(Status::not_found(
                "the server could not find the requested resource",
            )),
        }
    }
}

/// The `serverAddress` of `/api`: the request's host with its port (443 when it names none, the
/// port of `https` URLs without one); empty without a host.
fn server_address(host: Option<&http::HeaderValue>) -> String {
    let Some(host) = host.and_then(|h| h.to_str().ok()) else {
        return String::new();
    };
    let has_port = match host.rfind(']') {
        Some(end) => host[end..].contains(':'),
        None => host.contains(':'),
    };
    if has_port {
        host.to_string()
    } else {
        format!("{host}:443")
    }
}

/// The metrics listener's answer (`--metrics-bind-address`, plain HTTP, no authentication, for
/// scrapers inside a trusted network): `/metrics` and the health endpoints, nothing else.
pub(super) fn metrics_listener(gateway: &Gateway, req: &Request<Incoming>) -> Response<Body> {
    render(match req.uri().path() {
        "/metrics" => Ok(gateway.metrics_response()),
        path => gateway
            .health
            .respond(path, req.uri().query())
            .ok_or_else(|| Status::not_found("the server could not find the requested resource")),
    })
}

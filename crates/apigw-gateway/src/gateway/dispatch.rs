//! The answer to an admitted request, by its [`Route`]: discovery and the
//! `apiregistration.k8s.io` API from the registry, the identity reviews, the metrics and
//! OpenAPI here; a registered group version to its APIService's backend (503 at once while it
//! is unavailable); anything else to the delegate, or 404.

use super::route::{FlowDump, Route};
use super::{reviews, Gateway};
use crate::apiservices;
use crate::authn::Identity;
use crate::discovery;
use crate::request_info::RequestInfo;
use apigw_core::body::{Body, BoxError};
use apigw_core::errors::{json_response, render, Status};
use bytes::Bytes;
use http::{Request, Response};

impl Gateway {
    /// Phase 4 of the pipeline: the answer to an admitted request.
    pub(super) async fn dispatch<B>(
        &self,
        route: Route,
        req: Request<B>,
        identity: &Identity,
        info: &RequestInfo,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        match route {
            Route::CoreGroup(docs) => {
                // The legacy form names the address this client reached the gateway at.
                let mut forms = (*docs.api).clone();
                let address = server_address(info.host.as_ref());
                forms[0] = discovery::Doc::new(
                    &discovery::render::api_versions(&address),
                    discovery::JSON,
                );
                discovery::serve(&req, &forms)
            }
            Route::CoreV1 => {
                discovery::serve(&req, std::slice::from_ref(discovery::render::core_v1()))
            }
            Route::Discovery(docs) => discovery::serve(&req, docs.forms()),
            Route::ApiServicesGroup => Ok(json_response(&apiservices::group_document())),
            Route::ApiServicesResources => Ok(json_response(&apiservices::resource_list())),
            Route::ApiServices { rest } => {
                let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                self.apiservices.handle(&req, &rest)
            }
            Route::Review { group, rest } => {
                let rest: Vec<&str> = rest.iter().map(String::as_str).collect();
                reviews::handle(&self.authz, identity, req, group, &rest).await
            }
            Route::Backend(svc) => {
                let state = self.availability.get(&svc.name);
                // A group version with APIServiceBackends: the backend serving the resource,
                // and the group version's own document from all of them.
                let (target, state) = match state.as_ref().and_then(|s| s.members.as_ref()) {
                    None => (&svc, state.as_deref()),
                    Some(members) => {
                        if is_group_version(&svc, &info.attrs) {
                            return discovery::serve(
                                &req,
                                &[discovery::Doc::new(&members.list, discovery::JSON)],
                            );
                        }
                        let m = members.for_request(&info.attrs);
                        (&m.target, Some(&m.state))
                    }
                };
                if let Some(state) = state.filter(|s| !s.condition.available) {
                    return Err(Status::service_unavailable(format!(
                        "service unavailable: APIService {} is not available ({}): {}",
                        target.name, state.condition.reason, state.condition.message
                    )));
                }
                let backend = self.proxy.backend_for(target)?;
                self.proxy
                    .forward(&backend, req, identity, info, &target.name)
                    .await
            }
            Route::OpenApiBackend(svc) => {
                let immutable = req
                    .uri()
                    .query()
                    .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("hash=")));
                // A group version with several backends: their documents, merged here.
                let own = format!("/openapi/v3/apis/{}/{}", svc.group, svc.version);
                let merged = (info.attrs.path.trim_end_matches('/') == own)
                    .then(|| self.openapi.v3_document(&svc.group, &svc.version))
                    .flatten();
                let mut res = match merged {
                    Some(doc) => {
                        discovery::readable(&req)?;
                        let mut res = discovery::respond(&req, &doc);
                        if immutable {
                            res.headers_mut().insert(
                                http::header::CACHE_CONTROL,
                                http::HeaderValue::from_static("public, immutable"),
                            );
                        }
                        res
                    }
                    None => {
                        let backend = self.proxy.backend_for(&svc)?;
                        self.proxy
                            .forward(&backend, req, identity, info, &svc.name)
                            .await?
                    }
                };
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
                Ok(res)
            }
            Route::OpenApiV2 => self.openapi.v2().serve(&req),
            Route::OpenApiV3 => discovery::serve(&req, &[(*self.openapi.v3()).clone()]),
            Route::Metrics => Ok(self.metrics_response()),
            Route::FlowDump(dump) => match &self.flow {
                Some(flow) => {
                    let flow = flow.current();
                    let text = match dump {
                        FlowDump::PriorityLevels => flow.dump_priority_levels(),
                        FlowDump::Queues => flow.dump_queues(),
                        // Upstream's: details with any non-empty `includeRequestDetails`.
                        FlowDump::Requests => flow.dump_requests(
                            crate::authz::query_value(req.uri().query(), "includeRequestDetails")
                                .is_some_and(|v| !v.is_empty()),
                        ),
                    };
                    let mut res = Response::new(apigw_core::body::full(text));
                    res.headers_mut().insert(
                        http::header::CONTENT_TYPE,
                        http::HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                    Ok(res)
                }
                None => Err(not_found()),
            },
            Route::Delegate { .. } => match self.proxy.delegate() {
                Some(delegate) => {
                    self.proxy
                        .forward(delegate, req, identity, info, "delegate")
                        .await
                }
                None => Err(not_found()),
            },
            Route::NotFound => Err(not_found()),
        }
    }
}

/// True for a request of `/apis/<group>/<version>` itself, the group version's APIResourceList.
fn is_group_version(svc: &crate::registry::ApiService, attrs: &crate::authz::Attributes) -> bool {
    !attrs.resource_request
        && attrs
            .path
            .trim_end_matches('/')
            .strip_prefix("/apis/")
            .and_then(|gv| gv.strip_prefix(svc.group.as_str()))
            .and_then(|v| v.strip_prefix('/'))
            == Some(svc.version.as_str())
}

fn not_found() -> Status {
    Status::not_found("the server could not find the requested resource")
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
pub(super) fn metrics_listener<B>(gateway: &Gateway, req: &Request<B>) -> Response<Body> {
    render(match req.uri().path() {
        "/metrics" => Ok(gateway.metrics_response()),
        path => gateway
            .health
            .respond(path, req.uri().query())
            .ok_or_else(not_found),
    })
}

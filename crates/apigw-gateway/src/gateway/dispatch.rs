//! The answer to an admitted request, by its [`Route`]: discovery and the
//! `apiregistration.k8s.io` API from the registry, the identity reviews, the metrics and
//! OpenAPI here; a registered group version to its APIService's backend (503 at once while it
//! is unavailable), and of a group version with APIServiceBackends, to the backend serving the
//! resource, its own APIResourceList and OpenAPI v3 document merged here; anything else to the
//! delegate, or 404.

use super::route::{FlowDump, Route};
use super::{reviews, Gateway};
use apigw_core::body::{Body, BoxError};
use apigw_core::errors::{json_response, render, Status};
use apigw_discovery::apiservices;
use apigw_registry::ApiService;
use apigw_request::Identity;
use apigw_request::RequestInfo;
use bytes::Bytes;
use http::{Request, Response};
use std::sync::Arc;

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
                forms[0] = apigw_discovery::Doc::new(
                    &apigw_discovery::render::api_versions(&address),
                    apigw_discovery::JSON,
                );
                apigw_discovery::serve(&req, &forms)
            }
            Route::CoreV1 => apigw_discovery::serve(
                &req,
                std::slice::from_ref(apigw_discovery::render::core_v1()),
            ),
            Route::Discovery(docs) => apigw_discovery::serve(&req, docs.forms()),
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
            Route::Backend(svc) => self.to_backend(svc, req, identity, info).await,
            // Until the backends' first check, the APIService's own backend answers.
            Route::MergedResources(svc) => {
                match self
                    .availability
                    .get(&svc.name)
                    .and_then(|s| s.members.clone())
                {
                    Some(members) => {
                        let list = apigw_discovery::Doc::new(&members.list, apigw_discovery::JSON);
                        apigw_discovery::serve(&req, &[list])
                    }
                    None => self.to_backend(svc, req, identity, info).await,
                }
            }
            Route::OpenApiBackend(svc) => {
                self.openapi_document(svc, None, req, identity, info).await
            }
            Route::OpenApiMerged(svc) => {
                let merged = self.openapi.v3_document(&svc.group, &svc.version);
                self.openapi_document(svc, merged, req, identity, info)
                    .await
            }
            Route::OpenApiV2 => self.openapi.v2().serve(&req),
            Route::OpenApiV3 => apigw_discovery::serve(&req, &[(*self.openapi.v3()).clone()]),
            Route::Metrics => Ok(self.metrics_response()),
            Route::FlowDump(dump) => match &self.flow {
                Some(flow) => {
                    let flow = flow.current();
                    let text = match dump {
                        FlowDump::PriorityLevels => flow.dump_priority_levels(),
                        FlowDump::Queues => flow.dump_queues(),
                        // Upstream's: details with any non-empty `includeRequestDetails`.
                        FlowDump::Requests => flow.dump_requests(
                            apigw_request::query_value(req.uri().query(), "includeRequestDetails")
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

impl Gateway {
    /// A registered group version's request, to its APIService's backend: of a group version
    /// with APIServiceBackends, the one serving its resource (503 at once while it is
    /// unavailable).
    async fn to_backend<B>(
        &self,
        svc: Arc<ApiService>,
        req: Request<B>,
        identity: &Identity,
        info: &RequestInfo,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let state = self.availability.get(&svc.name);
        let (target, state) = match state.as_ref().and_then(|s| s.members.as_ref()) {
            None => (&svc, state.as_deref()),
            Some(members) => {
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

    /// An APIService's OpenAPI v3 document: `merged` (a group version with APIServiceBackends)
    /// when there is one, else its backend's. A hashed URL names one version of the document
    /// forever, as upstream serves it.
    async fn openapi_document<B>(
        &self,
        svc: Arc<ApiService>,
        merged: Option<Arc<apigw_discovery::Doc>>,
        req: Request<B>,
        identity: &Identity,
        info: &RequestInfo,
    ) -> Result<Response<Body>, Status>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let immutable = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv.starts_with("hash=")));
        let ours = merged.is_some();
        let mut res = match merged {
            Some(doc) => {
                apigw_discovery::readable(&req)?;
                apigw_discovery::respond(&req, &doc)
            }
            None => {
                let backend = self.proxy.backend_for(&svc)?;
                self.proxy
                    .forward(&backend, req, identity, info, &svc.name)
                    .await?
            }
        };
        // A backend's own Cache-Control stands; ours is replaced.
        if immutable
            && res.status().is_success()
            && (ours || !res.headers().contains_key(http::header::CACHE_CONTROL))
        {
            res.headers_mut().insert(
                http::header::CACHE_CONTROL,
                http::HeaderValue::from_static("public, immutable"),
            );
        }
        Ok(res)
    }
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

//! The front door's request pipeline as one [`tower::Service`], generic over the request body,
//! so the same code serves hyper's connections and in-process tests (`oneshot`). A request
//! goes through these phases, each owned by the module named:
//!
//! 1. **filter** ([`host`], `public`, [`limits`]): one valid host, health and `/version`
//!    answered without credentials, the in-flight limits;
//! 2. **authenticate** ([`apigw_authn`]) and 3. **authorize** ([`apigw_authz`]), with the
//!    path checks of [`paths`] first, and between impersonation and authorization, API
//!    Priority and Fairness ([`apigw_flowcontrol`]): a seat of the request's priority level,
//!    after its turn in a fair queue, or a 429;
//! 4. **dispatch** ([`super::dispatch`]): the gateway's own APIs and discovery, or a backend,
//!    where 5. the **upstream request** ([`apigw_proxy`]) strips credentials and sets the
//!    identity;
//! 6. **log** ([`access`]): access line, audit event and metrics, however the request ends.
//!
//! What the request is ([`RequestInfo`]) and what it targets ([`Route`]) are decided once,
//! before authentication, from one split of its path, and read by every phase after. A phase that fails returns a [`Status`], which [`render`] turns into the
//! response, here only.

use super::route::{Route, Router};
use super::{access, host, paths, Gateway};
use crate::limits;
use apigw_authn::PeerIdentity;
use apigw_authz::{Acting, Refused};
use apigw_core::body::{Body, BoxError};
use apigw_core::errors::{render, Status};
use apigw_core::server::ConnInfo;
use apigw_flowcontrol::{PfHeaders, Ticket};
use apigw_request::RequestInfo;
use apigw_request::RequestKind;
use bytes::Bytes;
use http::{Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// The pipeline for the requests of one connection, whose client certificate was examined once.
#[derive(Clone)]
pub struct GatewayService {
    gateway: Arc<Gateway>,
    peer: Arc<PeerIdentity>,
    client: SocketAddr,
}

/// The response to one request.
pub type ResponseFuture = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

impl Gateway {
    /// The pipeline for a connection: its client certificate is examined here, once.
    pub fn service(self: &Arc<Self>, conn: &ConnInfo) -> GatewayService {
        GatewayService {
            gateway: self.clone(),
            peer: Arc::new(self.certs.examine(&conn.peer_chain)),
            client: conn.remote,
        }
    }
}

impl GatewayService {
    /// The response to `req`; the pipeline never fails, as every failure is a `kind: Status`.
    pub fn respond<B>(&self, req: Request<B>) -> ResponseFuture
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let (gateway, peer, client) = (self.gateway.clone(), self.peer.clone(), self.client);
        Box::pin(async move { gateway.handle(req, &peer, client).await })
    }
}

impl<B> tower::Service<Request<B>> for GatewayService
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Infallibly;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Infallibly {
        Infallibly(self.respond(req))
    }
}

/// [`ResponseFuture`] as a service's future, which has a `Result`.
pub struct Infallibly(ResponseFuture);

impl Future for Infallibly {
    type Output = Result<Response<Body>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
    }
}

impl Gateway {
    /// Every phase of one request.
    async fn handle<B>(
        &self,
        req: Request<B>,
        peer: &PeerIdentity,
        client: SocketAddr,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let start = Instant::now();
        // 1. Filter. Before anything reads the request: a request without one valid host never
        // reaches a handler, as with Go's net/http, and its HTTP/1 connection is closed.
        let host = match host::of(&req) {
            Ok(host) => host,
            Err(status) => return render(Err(status.close_connection(req.version()))),
        };
        if let Some(res) = self.public(&req) {
            return res;
        }
        let segments = apigw_request::segments(req.uri().path());
        let route = self.route(&segments);
        let policy = route.apiservice().map(|s| &s.policy);
        let info = RequestInfo::of(
            &req,
            &segments,
            client,
            host,
            start,
            self.request_timeout,
            policy,
        );
        drop(segments);
        let permit = match self.limits.admit(client.ip(), info.kind.long_running()) {
            Ok(permit) => permit,
            Err(status) => return render(Err(status)),
        };
        // 6. Log: from here on the request is logged and audited however it ends, also when
        // the client goes away before the response head (this future is then dropped).
        let mut record = self.record(&req, info, &route, permit);
        let apiservice = route.apiservice().map(|s| s.name.as_str());
        let (admitted, pf) = self.admit(&req, peer, &record.info, apiservice).await;
        let mut warning = None;
        let result = match admitted {
            Err(refused) => {
                record.identity = refused.identity;
                Err(refused.status)
            }
            Ok((
                Acting {
                    identity,
                    real,
                    warning: w,
                },
                flow,
            )) => {
                warning = w;
                record.real = real;
                record.flow = flow;
                let identity = &*record.identity.insert(identity);
                // 4. Dispatch, and 5. the upstream request, within the request's deadline.
                let routed = self.dispatch(route, req, identity, &record.info);
                let result = match record.info.deadline {
                    None => routed.await,
                    Some(at) => match tokio::time::timeout_at(at.into(), routed).await {
                        Ok(result) => result,
                        Err(_) => {
                            record.outcome = Some(crate::audit::Outcome::Timeout);
                            Err(Status::gateway_timeout(
                                "Timeout: request did not complete within the allotted timeout",
                            ))
                        }
                    },
                };
                // An established watch gives its seat back and streams on.
                if record.info.kind == RequestKind::Watch {
                    if let Some(flow) = record.flow.as_mut() {
                        flow.release();
                    }
                }
                result
            }
        };
        let mut res = render(result);
        // Not on what caches keep for every later request (discovery: kubectl's disk cache
        // would replay the warning to requests that impersonate no one).
        if let Some(w) =
            warning.filter(|_| !res.headers().contains_key(http::header::CACHE_CONTROL))
        {
            res.headers_mut()
                .append(http::header::WARNING, http::HeaderValue::from_static(w));
        }
        match (&record.flow, &pf) {
            (Some(ticket), _) => ticket.apply(res.headers_mut()),
            (None, Some(pf)) => pf.apply(res.headers_mut()),
            (None, None) => {}
        }
        let status = res.status();
        res.map(|body| record.wrap(status, body))
    }

    /// Phases 2 and 3: the path checks, then authentication ([`apigw_authn`]), then
    /// impersonation, API Priority and Fairness ([`apigw_flowcontrol`]: a seat, after a wait
    /// in its queue, or a 429) and authorization ([`apigw_authz`]), in kube-apiserver's
    /// order. Also the PF headers of a request APF classified but refused (an admitted
    /// request's ticket carries them).
    async fn admit<B>(
        &self,
        req: &Request<B>,
        peer: &PeerIdentity,
        info: &RequestInfo,
        apiservice: Option<&str>,
    ) -> (Result<(Acting, Option<Ticket>), Refused>, Option<PfHeaders>) {
        let admitted = async {
            paths::check(req.uri().path())?;
            let real = self
                .authn
                .authenticate(req.headers(), req.uri().path(), peer)
                .await?;
            self.authz
                .impersonate(real, req.headers(), &info.attrs)
                .await
        };
        let acting = match admitted.await {
            Ok(acting) => acting,
            Err(refused) => return (Err(refused), None),
        };
        // Long-running requests but watches bypass APF, as upstream's.
        let flow = match (&self.flow, info.kind) {
            (Some(flow), RequestKind::Short | RequestKind::Watch) => {
                flow.admit(&acting.identity, &info.attrs, apiservice).await
            }
            _ => None,
        };
        let ticket = match flow {
            None => None,
            Some(Ok(ticket)) => Some(ticket),
            Some(Err(rejected)) => {
                return (
                    Err(Refused::of(acting.identity, rejected.status)),
                    Some(rejected.headers),
                )
            }
        };
        match self.authz.authorize_as(acting, &info.attrs).await {
            Ok(admitted) => (Ok((admitted, ticket)), None),
            Err(refused) => (Err(refused), ticket.as_ref().map(Ticket::headers)),
        }
    }

    /// Where a request whose path splits into `segments` goes, from one registry snapshot.
    fn route(&self, segments: &[&str]) -> Route {
        let snapshot = self.registry.snapshot();
        let known = self
            .proxy
            .delegate()
            .map(|_| self.discovery.delegate.current());
        let documents = || {
            let key = (snapshot.generation, self.availability.round());
            self.discovery.get(&snapshot, &self.availability.all(), key)
        };
        Router {
            snapshot: &snapshot,
            delegate: known.as_deref(),
            documents: &documents,
        }
        .decide(segments)
    }

    /// The log phase's record of a request admitted past the limits.
    fn record<B>(
        &self,
        req: &Request<B>,
        info: RequestInfo,
        route: &Route,
        permit: limits::Permit,
    ) -> access::Record {
        // Only the audit log needs these copies.
        let audit = self.audit.as_ref().map(|auditor| access::Audit {
            auditor: auditor.clone(),
            received: std::time::SystemTime::now(),
            uri: req
                .uri()
                .path_and_query()
                .map_or_else(|| "/".to_string(), |pq| pq.as_str().to_string()),
            user_agent: req
                .headers()
                .get(http::header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
        let attrs = &info.attrs;
        // Only the access line names the APIService.
        let apiservice = route
            .apiservice()
            .filter(|_| tracing::enabled!(target: "apigw::access", tracing::Level::INFO))
            .map(|service| service.name.clone());
        let metrics_verb = crate::metrics::verb(req.method(), req.headers(), attrs);
        let served = attrs.resource_request && route.knows_resources();
        access::Record {
            metrics: self.metrics.clone(),
            audit,
            identity: None,
            real: None,
            metrics_verb,
            served,
            apiservice,
            status: None,
            outcome: None,
            bytes: 0,
            closing: info.kind.long_running().then(|| self.closing.clone()),
            flow: None,
            info,
            _permit: Some(permit),
        }
    }
}

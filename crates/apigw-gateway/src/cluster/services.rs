//! Service resolution in a cluster, as kube-aggregator resolves an APIService's service:
//! `<name>.<namespace>.svc:<port>` goes to the Service's ClusterIP and the Service port equal to
//! `<port>` (the default), or, with `--enable-aggregator-routing`, to the ready endpoints of the
//! Service's EndpointSlices on the endpoint port whose name matches that Service port's name.
//! Services and EndpointSlices come from reflector caches, so resolving asks the API server
//! nothing. Errors read as upstream's.

use apigw_core::body::BoxError;
use apigw_proxy::{parse_host, ResolveService};
use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// How a service name becomes addresses (`--enable-aggregator-routing` picks `Endpoints`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingMode {
    ClusterIp,
    Endpoints,
}

/// Why a service could not be resolved; `reason()` is the availability reason upstream uses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{0:?} is not a service host (<name>.<namespace>.svc)")]
    NotServiceHost(String),
    #[error("service/{name} in {namespace:?} is not present")]
    NotFound { namespace: String, name: String },
    #[error("no service port {port} found for service {name:?}")]
    MissingPort { name: String, port: u16 },
    #[error("no endpoints available for service {0:?}")]
    NoEndpoints(String),
    #[error("{0}")]
    Unsupported(String),
}

impl ResolveError {
    /// The `Available` condition reason kube-aggregator gives this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::NotServiceHost(_) => "ServiceNotFound",
            Self::MissingPort { .. } | Self::Unsupported(_) => "ServicePortError",
            Self::NoEndpoints(_) => "MissingEndpoints",
        }
    }
}

/// Resolves service hosts from cached Services (and EndpointSlices in `Endpoints` mode).
pub struct ServiceResolver {
    mode: RoutingMode,
    services: Store<Service>,
    slices: Option<Store<EndpointSlice>>,
}

/// A reflector's store of `api`'s objects (`group`/`plural` as RBAC names them).
fn reflect<K>(api: Api<K>, group: &'static str, plural: &'static str) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api, watcher::Config::default()).default_backoff(),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut errors = super::refusals::WatchErrors::new(group, plural);
        while let Some(event) = stream.next().await {
            match event {
                Err(e) => errors.report(&e),
                Ok(watcher::Event::InitDone) => errors.recovered(),
                Ok(_) => {}
            }
        }
    });
    reader
}

impl ServiceResolver {
    /// Starts the reflectors the mode needs.
    pub fn spawn(client: kube::Client, mode: RoutingMode) -> Arc<Self> {
        let services = reflect(Api::<Service>::all(client.clone()), "", "services");
        let slices = (mode == RoutingMode::Endpoints).then(|| {
            reflect(
                Api::<EndpointSlice>::all(client),
                "discovery.k8s.io",
                "endpointslices",
            )
        });
        Arc::new(Self {
            mode,
            services,
            slices,
        })
    }

    /// Waits (up to `limit`) for the caches' first full lists; false when they are not there.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let all = async {
            let services = self.services.wait_until_ready().await.is_ok();
            let slices = match &self.slices {
                Some(s) => s.wait_until_ready().await.is_ok(),
                None => true,
            };
            services && slices
        };
        tokio::time::timeout(limit, all).await.unwrap_or(false)
    }

    /// The addresses for `host:port`, or why not (worded as upstream words it).
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
        let (name, ns) =
            parse_host(host).ok_or_else(|| ResolveError::NotServiceHost(host.into()))?;
        // Early requests wait briefly for the caches instead of failing as "not present".
        self.wait_ready(Duration::from_secs(5)).await;
        let svc = self
            .services
            .get(&ObjectRef::new(name).within(ns))
            .ok_or_else(|| ResolveError::NotFound {
                namespace: ns.into(),
                name: name.into(),
            })?;
        match (&self.mode, &self.slices) {
            (RoutingMode::Endpoints, Some(slices)) => {
                let mine = slices.state_filter(|s| owned_by(s, ns, name));
                endpoint_addrs(&svc, &mine, port)
            }
            _ => cluster_ip_addrs(&svc, port).await,
        }
    }
}

impl ResolveService for ServiceResolver {
    fn resolve_service<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> BoxFuture<'a, Result<Vec<SocketAddr>, BoxError>> {
        Box::pin(async move { Ok(self.resolve(host, port).await?) })
    }
}

fn owned_by(slice: &EndpointSlice, ns: &str, name: &str) -> bool {
    slice.metadata.namespace.as_deref() == Some(ns)
        && slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/service-name"))
            .is_some_and(|n| n == name)
}

fn service_port(svc: &Service, port: u16) -> Result<&ServicePort, ResolveError> {
    svc.spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == i32::from(port)))
        .ok_or_else(|| ResolveError::MissingPort {
            name: svc.metadata.name.clone().unwrap_or_default(),
            port,
        })
}

/// The ClusterIP and service port (ClusterIP, NodePort and LoadBalancer services); the
/// external name for ExternalName services, as upstream's `ResolveCluster`.
pub async fn cluster_ip_addrs(svc: &Service, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    let spec = svc.spec.clone().unwrap_or_default();
    let kind = spec.type_.as_deref().unwrap_or("ClusterIP");
    match kind {
        "ExternalName" => {
            let external = spec.external_name.unwrap_or_default();
            let addrs = tokio::net::lookup_host((external.as_str(), port))
                .await
                .map_err(|e| ResolveError::Unsupported(format!("lookup {external}: {e}")))?;
            Ok(addrs.collect())
        }
        "ClusterIP" | "NodePort" | "LoadBalancer" => {
            let ip = spec.cluster_ip.unwrap_or_default();
            if ip == "None" {
                return Err(ResolveError::Unsupported(
                    "cannot route to service with ClusterIP \"None\"".into(),
                ));
            }
            let svc_port = service_port(svc, port)?;
            let ip: IpAddr = ip.parse().map_err(|_| {
                ResolveError::Unsupported(format!("service has no valid ClusterIP: {ip:?}"))
            })?;
            let port = u16::try_from(svc_port.port).unwrap_or(port);
            Ok(vec![SocketAddr::new(ip, port)])
        }
        other => Err(ResolveError::Unsupported(format!(
            "unsupported service type {other:?}"
        ))),
    }
}

/// Ready endpoint addresses of `slices` on the port named as the service port `port` is, as
/// upstream's `ResolveEndpoint`. An endpoint with no `ready` condition counts as ready.
pub fn endpoint_addrs(
    svc: &Service,
    slices: &[Arc<EndpointSlice>],
    port: u16,
) -> Result<Vec<SocketAddr>, ResolveError> {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let svc_port = service_port(svc, port)?;
    let want = svc_port.name.as_deref().unwrap_or("");
    let mut out = Vec::new();
    for slice in slices {
        let Some(number) = slice.ports.iter().flatten().find_map(|p| {
            (p.name.as_deref().unwrap_or("") == want)
                .then_some(p.port)
                .flatten()
        }) else {
            continue;
        };
        let Ok(number) = u16::try_from(number) else {
            continue;
        };
        let ready = slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true));
        for ip in ready.flat_map(|e| e.addresses.iter()) {
            if let Ok(ip) = ip.parse::<IpAddr>() {
                let addr = SocketAddr::new(ip, number);
                if !out.contains(&addr) {
                    out.push(addr);
                }
            }
        }
    }
    if out.is_empty() {
        return Err(ResolveError::NoEndpoints(name));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(ports: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "api", "namespace": "ns"},
            "spec": {"clusterIP": "10.0.0.7", "ports": ports}
        }))
        .unwrap()
    }

    fn slice(port_name: &str, port: i32, endpoints: serde_json::Value) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "api-x", "namespace": "ns",
                             "labels": {"kubernetes.io/service-name": "api"}},
                "addressType": "IPv4",
                "ports": [{"name": port_name, "port": port}],
                "endpoints": endpoints
            }))
            .unwrap(),
        )
    }

    #[test]
    fn hosts() {
        assert_eq!(parse_host("api.ns.svc"), Some(("api", "ns")));
        assert_eq!(parse_host("api.ns.svc.cluster.local"), Some(("api", "ns")));
        assert_eq!(parse_host("example.com"), None);
        assert_eq!(parse_host("a.b.c.svc"), None);
    }

    #[tokio::test]
    async fn cluster_ip_uses_the_service_port() {
        let svc = service(json!([{"name": "https", "port": 443, "targetPort": 8443}]));
        assert_eq!(
            cluster_ip_addrs(&svc, 443).await.unwrap(),
            vec!["10.0.0.7:443".parse().unwrap()]
        );
        let err = cluster_ip_addrs(&svc, 444).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "no service port 444 found for service \"api\""
        );
        assert_eq!(err.reason(), "ServicePortError");
    }

    #[test]
    fn endpoints_by_port_name_and_readiness() {
        let svc = service(json!([{"name": "https", "port": 443, "targetPort": "web"}]));
        let eps = json!([
            {"addresses": ["10.1.0.1"], "conditions": {"ready": true}},
            {"addresses": ["10.1.0.2"], "conditions": {"ready": false}},
            {"addresses": ["10.1.0.3"]}
        ]);
        let got = endpoint_addrs(&svc, &[slice("https", 8443, eps.clone())], 443).unwrap();
        assert_eq!(
            got,
            vec![
                "10.1.0.1:8443".parse().unwrap(),
                "10.1.0.3:8443".parse().unwrap()
            ]
        );
        let err = endpoint_addrs(&svc, &[slice("metrics", 9090, eps)], 443).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no endpoints available for service \"api\""
        );
        assert_eq!(err.reason(), "MissingEndpoints");
    }
}

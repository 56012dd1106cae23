//! The walk along one APIService's request path, as the gateway takes it: which CAs are
//! trusted, name resolution, TCP connect, TLS handshake (with the served chain explained),
//! whether the backend accepts the proxy client certificate, and the discovery GET. The walk
//! stops at the first step that leaves nothing further to check.

use super::answers;
use super::chain::{explain, TrustSource};
use super::probe;
use super::recipes::{self, Target};
use super::report::{ServiceReport, Step};
use super::Ctx;
use apigw_core::certs::describe::{describe_cert, Place};
use apigw_registry::{ApiService, ServiceRef};
use rustls::pki_types::CertificateDer;
use std::net::SocketAddr;
use std::time::Instant;
use tokio::net::TcpStream;

/// Walks the path of `svc`, after its `manifest` step.
pub async fn walk(ctx: &Ctx, svc: &ApiService, manifest: Step) -> ServiceReport {
    let mut report = ServiceReport {
        name: svc.name.clone(),
        target: "Local".into(),
        steps: vec![manifest],
        ca_bundle_file: None,
        commands: Vec::new(),
        listed: None,
    };
    let Some(service) = &svc.service else {
        report.steps.push(Step::ok(
            "service",
            "Local: served by the delegate API server; no backend to probe",
        ));
        return report;
    };
    report.target = format!("{}:{}", service.host(), service.port);
    match recipes::write_ca_bundle(&ctx.ca_dir, svc) {
        Ok(file) => report.ca_bundle_file = file,
        Err(e) => report.steps.push(Step::warning(
            "ca-bundle",
            "NotWritten",
            format!("could not write the caBundle for the commands below: {e}"),
            "pass --ca-dir with a writable directory",
        )),
    }
    let bundle = match bundle_certs(svc) {
        Ok(certs) => certs,
        Err(step) => {
            report.steps.push(step);
            return report;
        }
    };
    let trust = trust_source(ctx, svc, &bundle);
    report.steps.push(trust_step(svc, trust.as_ref()));
    let addr = network(ctx, svc, service, trust.as_ref(), &mut report).await;
    let ca_file = report
        .ca_bundle_file
        .as_deref()
        .or(if svc.ca_bundle.is_empty() {
            ctx.default_ca_file.as_deref()
        } else {
            None
        });
    report.commands = recipes::recipes(&Target {
        svc,
        service,
        addr,
        ca_file,
        proxy_cert: ctx.proxy_paths.as_ref(),
    });
    report
}

fn bundle_certs(svc: &ApiService) -> Result<Vec<CertificateDer<'static>>, Step> {
    if svc.ca_bundle.is_empty() {
        return Ok(Vec::new());
    }
    apigw_core::tls::parse_certs(&svc.ca_bundle, "spec.caBundle").map_err(|e| {
        Step::failed(
            "ca-bundle",
            "InvalidCaBundle",
            e.to_string(),
            "set spec.caBundle to the base64 of the PEM CA that signed the serving cert",
        )
    })
}

/// What the gateway trusts for `svc`; None for `insecureSkipTLSVerify`.
fn trust_source<'a>(
    ctx: &'a Ctx,
    svc: &ApiService,
    bundle: &'a [CertificateDer<'static>],
) -> Option<TrustSource<'a>> {
    if svc.insecure_skip_tls_verify {
        return None;
    }
    Some(if bundle.is_empty() {
        TrustSource {
            roots: &ctx.default_roots,
            name: ctx.default_roots_name.clone(),
            from_ca_bundle: false,
        }
    } else {
        TrustSource {
            roots: bundle,
            name: "spec.caBundle".into(),
            from_ca_bundle: true,
        }
    })
}

fn trust_step(svc: &ApiService, trust: Option<&TrustSource<'_>>) -> Step {
    let check = "ca-bundle";
    let Some(trust) = trust else {
        return Step::warning(check, "InsecureSkipTLSVerify", "insecureSkipTLSVerify: the backend's certificate is not verified", "set spec.caBundle to the CA that signed the serving cert and remove insecureSkipTLSVerify");
    };
    if trust.roots.is_empty() {
        return Step::failed(
            check,
            "NoTrustedCAs",
            format!("no caBundle, and {} holds no CA", trust.name),
            "set spec.caBundle to the base64 of the CA that signed the serving cert",
        );
    }
    if !trust.from_ca_bundle {
        return Step::ok(
            check,
            format!(
                "no caBundle: trusting {} ({} CAs)",
                trust.name,
                trust.roots.len()
            ),
        );
    }
    let infos: Vec<_> = trust
        .roots
        .iter()
        .enumerate()
        .filter_map(|(position, r)| {
            describe_cert(
                r,
                Place {
                    in_ca_bundle: true,
                    position,
                },
            )
            .ok()
        })
        .collect();
    let mut details = Vec::new();
    for c in &infos {
        details.push(format!("{} ({})", c.subject, c.validity_line()));
        details.extend(c.warnings.iter().map(|w| format!("  warning: {w}")));
    }
    if infos.iter().any(|c| !c.is_ca) {
        return Step::warning(
            check,
            "NotACA",
            format!(
                "spec.caBundle of {} holds a certificate that is not a CA",
                svc.name
            ),
            "put the CA that signed the serving cert in spec.caBundle, not the serving cert itself",
        )
        .details(details);
    }
    Step::ok(check, format!("{} CA(s) in spec.caBundle", infos.len())).details(details)
}

/// Resolve, connect, handshake, request; returns the address used, for the commands.
async fn network(
    ctx: &Ctx,
    svc: &ApiService,
    service: &ServiceRef,
    trust: Option<&TrustSource<'_>>,
    report: &mut ServiceReport,
) -> Option<SocketAddr> {
    let steps = &mut report.steps;
    let addrs = match resolve(ctx, service).await {
        Ok((step, addrs)) => {
            steps.push(step);
            addrs
        }
        Err(step) => {
            steps.push(step);
            return None;
        }
    };
    let (tcp, addr) = match connect(ctx, service, &addrs).await {
        Ok((step, tcp, addr)) => {
            steps.push(step);
            (tcp, addr)
        }
        Err(step) => {
            steps.push(step);
            return addrs.first().copied();
        }
    };
    let (steps, listed) = tls_and_request(ctx, svc, service, trust, tcp, addr).await;
    report.steps.extend(steps);
    report.listed = listed;
    Some(addr)
}

/// The handshake, then (when it succeeds) the discovery GET over the same connection, and the
/// APIResourceList it answered.
async fn tls_and_request(
    ctx: &Ctx,
    svc: &ApiService,
    service: &ServiceRef,
    trust: Option<&TrustSource<'_>>,
    tcp: TcpStream,
    addr: SocketAddr,
) -> (Vec<Step>, Option<serde_json::Value>) {
    let host = service.host();
    let verifier = match trust
        .map(|t| probe::webpki_verifier(t.roots, &t.name))
        .transpose()
    {
        Ok(v) => v,
        Err(e) => {
            let step = Step::failed(
                "tls-handshake",
                "NoTrustedCAs",
                e.to_string(),
                "set spec.caBundle to the CA that signed the serving cert",
            );
            return (vec![step], None);
        }
    };
    let hs = probe::handshake(tcp, &host, verifier, ctx.proxy_cert.clone(), ctx.timeout).await;
    let explained = explain(&hs.chain, &host, trust);
    let tls = match hs.result {
        Ok(tls) => tls,
        Err(e) => return (answers::handshake_failure(ctx, &e, addr, explained), None),
    };
    let (_, session) = tls.get_ref();
    let version = session
        .protocol_version()
        .map_or("TLS".into(), |v| format!("{v:?}"));
    let mut steps = vec![Step::ok(
        "tls-handshake",
        format!("{version} with {host}, as the gateway verifies it"),
    )];
    steps.extend(explained);
    // As the gateway sends it: the service name and port.
    let authority = format!("{host}:{}", service.port);
    let path = format!("/apis/{}/{}", svc.group, svc.version);
    let answer = probe::get(tls, &authority, &path, ctx.timeout).await;
    let listed = answer
        .as_ref()
        .ok()
        .filter(|a| a.status.is_success())
        .and_then(|a| serde_json::from_slice::<serde_json::Value>(&a.body).ok())
        .filter(|doc| doc["kind"] == "APIResourceList");
    steps.extend(answers::request_steps(ctx, svc, &path, answer));
    (steps, listed)
}

async fn resolve(ctx: &Ctx, service: &ServiceRef) -> Result<(Step, Vec<SocketAddr>), Step> {
    let (host, port) = (service.host(), service.port);
    let fixed = ctx
        .resolver
        .fixed
        .contains_key(&(host.to_ascii_lowercase(), port));
    let fix = format!("add --resolve {host}:{port}=ADDR:PORT (resolve: in the config file), or create service {} in namespace {}", service.name, service.namespace);
    match tokio::time::timeout(ctx.timeout, ctx.resolver.resolve(&host, port)).await {
        Ok(Ok(addrs)) => {
            let list: Vec<String> = addrs.iter().map(ToString::to_string).collect();
            let via = if fixed { "--resolve" } else { "DNS" };
            Ok((
                Step::ok(
                    "resolve",
                    format!("{host}:{port} -> {} (via {via})", list.join(", ")),
                ),
                addrs,
            ))
        }
        Ok(Err(e)) => Err(Step::failed(
            "resolve",
            "ServiceNotFound",
            format!("{host} does not resolve: {e}"),
            fix,
        )),
        Err(_) => Err(Step::failed(
            "resolve",
            "ServiceNotFound",
            format!("looking up {host} took longer than {:?}", ctx.timeout),
            fix,
        )),
    }
}

async fn connect(
    ctx: &Ctx,
    service: &ServiceRef,
    addrs: &[SocketAddr],
) -> Result<(Step, TcpStream, SocketAddr), Step> {
    let mut last = None;
    for &addr in addrs {
        let started = Instant::now();
        match tokio::time::timeout(ctx.timeout, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => {
                let ms = started.elapsed().as_millis();
                return Ok((
                    Step::ok("connect", format!("connected to {addr} in {ms} ms")),
                    tcp,
                    addr,
                ));
            }
            Ok(Err(e)) => last = Some((addr, Some(e))),
            Err(_) => last = Some((addr, None)),
        }
    }
    let Some((addr, error)) = last else {
        return Err(Step::failed(
            "connect",
            "ConnectFailed",
            "no address to connect to",
            "make the service name resolve to the addon server",
        ));
    };
    let target = format!("{}:{}", service.host(), service.port);
    Err(match error {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Step::failed("connect", "ConnectionRefused", format!("dial tcp {addr}: nothing listens there ({e})"), format!("start the addon server on {addr}, or point {target} (--resolve, or the Service's targetPort) at where it listens")),
        Some(e) => Step::failed("connect", "ConnectFailed", format!("dial tcp {addr}: {e}"), format!("open the network path from the gateway to {addr}")),
        None => Step::failed("connect", "ConnectTimeout", format!("dial tcp {addr}: no answer within {:?}", ctx.timeout), format!("open the network path from the gateway to {addr} (firewall, NetworkPolicy)")),
    })
}

//! What a backend's answers mean: a failed handshake (the gateway refusing the serving cert,
//! the backend refusing the proxy client cert by TLS alert, or no TLS at all), a 401/403 to the
//! proxy client certificate, and the discovery document itself. Each verdict names one fix.

use super::probe::{self, ProbeError};
use super::report::{Status, Step};
use super::Ctx;
use apigw_registry::ApiService;
use rustls::AlertDescription;
use std::net::SocketAddr;
use std::time::Duration;

/// Discovery slower than this gets a warning.
const SLOW: Duration = Duration::from_secs(1);

/// Alerts a server sends when it refuses the client's certificate.
fn rejects_client_cert(alert: AlertDescription) -> bool {
    matches!(
        alert,
        AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied
            | AlertDescription::CertificateRequired
    )
}

pub(super) fn handshake_failure(
    ctx: &Ctx,
    e: &ProbeError,
    addr: SocketAddr,
    explained: Vec<Step>,
) -> Vec<Step> {
    if let ProbeError::Tls(rustls::Error::InvalidCertificate(_)) = e {
        let fix = explained.iter().find_map(|s| {
            (s.status == Status::Failed)
                .then(|| s.fix.clone())
                .flatten()
        });
        let head = Step::failed(
            "tls-handshake",
            "CertificateRejected",
            format!("the gateway refuses the backend's certificate: {e}"),
            fix.unwrap_or_else(|| "reissue the serving cert from the CA in spec.caBundle".into()),
        );
        return std::iter::once(head).chain(explained).collect();
    }
    if let Some(alert) = e.alert().filter(|a| rejects_client_cert(*a)) {
        let mut steps = vec![Step::ok(
            "tls-handshake",
            "the gateway accepts the backend's certificate",
        )];
        steps.extend(explained);
        steps.push(proxy_rejected(
            ctx,
            format!("the backend ended the handshake with TLS alert {alert:?}"),
        ));
        return steps;
    }
    let mut steps = vec![Step::failed(
        "tls-handshake",
        "HandshakeFailed",
        format!("TLS handshake with {addr}: {e}"),
        format!("make sure {addr} serves TLS (the addon server's --secure-port)"),
    )];
    steps.extend(explained);
    steps
}

fn proxy_rejected(ctx: &Ctx, message: String) -> Step {
    let fix = match &ctx.proxy_paths {
        Some((crt, _)) => format!("add the front-proxy CA (the CA that signed {}) to the addon server's --requestheader-client-ca-file, and its CN to --requestheader-allowed-names", crt.display()),
        None => "set --proxy-client-cert-file and --proxy-client-key-file to a cert from the CA in the addon server's --requestheader-client-ca-file".into(),
    };
    Step::failed("proxy-client-cert", "ProxyCertRejected", message, fix)
}

pub(super) fn request_steps(
    ctx: &Ctx,
    svc: &ApiService,
    path: &str,
    answer: Result<probe::Answer, ProbeError>,
) -> Vec<Step> {
    let answer = match answer {
        Ok(a) => a,
        Err(e) => {
            if let Some(alert) = e.alert().filter(|a| rejects_client_cert(*a)) {
                return vec![proxy_rejected(
                    ctx,
                    format!(
                        "the backend refused the proxy client certificate with TLS alert {alert:?}"
                    ),
                )];
            }
            let reason = if matches!(e, ProbeError::Timeout) {
                "Timeout"
            } else {
                "RequestFailed"
            };
            return vec![Step::failed(
                "discovery",
                reason,
                format!("GET {path}: {e}"),
                format!(
                    "make the addon server answer GET {path} within {:?}",
                    ctx.timeout
                ),
            )];
        }
    };
    let status = answer.status.as_u16();
    if status == 401 || status == 403 {
        let reason = if status == 401 {
            "Unauthorized"
        } else {
            "Forbidden"
        };
        let mut step = proxy_rejected(
            ctx,
            format!("GET {path} answered {status}: {}", excerpt(&answer.body)),
        );
        step.reason = Some(reason);
        return vec![step];
    }
    let client = match &ctx.proxy_paths {
        Some((crt, _)) => Step::ok("proxy-client-cert", format!("the backend accepted {}", crt.display())),
        None => Step::warning("proxy-client-cert", "NoProxyClientCert", "no proxy client certificate presented; the backend answered anyway", "set --proxy-client-cert-file and --proxy-client-key-file, as addon servers normally require them"),
    };
    vec![client, discovery_step(ctx, svc, path, &answer)]
}

fn discovery_step(ctx: &Ctx, svc: &ApiService, path: &str, a: &probe::Answer) -> Step {
    let check = "discovery";
    let ms = a.elapsed.as_millis();
    if !a.status.is_success() {
        let fix = if a.status == http::StatusCode::NOT_FOUND {
            format!(
                "serve {}/{} from the addon server, or correct spec.group and spec.version",
                svc.group, svc.version
            )
        } else {
            format!("make the addon server answer GET {path} with 200")
        };
        return Step::failed(
            check,
            "BadStatus",
            format!(
                "GET {path} answered {} in {ms} ms: {}",
                a.status,
                excerpt(&a.body)
            ),
            fix,
        );
    }
    let doc: Option<serde_json::Value> = serde_json::from_slice(&a.body).ok();
    let kind = doc
        .as_ref()
        .and_then(|d| d.get("kind"))
        .and_then(|k| k.as_str());
    if kind != Some("APIResourceList") {
        return Step::failed(
            check,
            "NotAPIResourceList",
            format!(
                "GET {path} answered 200 in {ms} ms, but not with an APIResourceList: {}",
                excerpt(&a.body)
            ),
            format!(
                "make GET {path} return the APIResourceList of {}/{}",
                svc.group, svc.version
            ),
        );
    }
    let resources = doc
        .as_ref()
        .and_then(|d| d["resources"].as_array())
        .map_or(0, Vec::len);
    let message = format!("GET {path}: APIResourceList with {resources} resources in {ms} ms");
    if a.elapsed > SLOW {
        return Step::warning(
            check,
            "SlowDiscovery",
            message,
            format!(
                "speed up the addon server's discovery: the availability check gives up after {:?}",
                ctx.timeout
            ),
        );
    }
    Step::ok(check, message)
}

/// The start of a body, on one line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line,
    }
}

//! Trust from the backends' end: whether an addon server built on k8s.io/apiserver would accept
//! the identity apigw sends it. Such a backend reads its front-proxy settings from
//! `kube-system/extension-apiserver-authentication` (the requestheader CA, allowed names and
//! the user, uid, group and extra header names kube-apiserver publishes there). The doctor
//! reads that ConfigMap from the cluster (cluster mode) or from a file
//! (`--extension-apiserver-authentication`, as `kubectl get configmap -o yaml` writes it), and
//! checks apigw's proxy client certificate and header names against it: the chain to the
//! requestheader CA, the validity, the allowed CN, and each header name apigw sends.

use super::report::Step;
use apigw_gateway::config::Config;
use rustls::pki_types::{CertificateDer, UnixTime};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The ConfigMap's namespace and name.
pub const CONFIGMAP: (&str, &str) = ("kube-system", "extension-apiserver-authentication");

/// What backends trust, as the ConfigMap says.
#[derive(Debug, Clone, Default)]
pub struct Expectation {
    /// Where it was read, for the messages.
    pub source: String,
    /// `requestheader-client-ca-file`: PEM.
    pub ca_pem: Option<String>,
    pub allowed_names: Vec<String>,
    pub username_headers: Vec<String>,
    pub uid_headers: Vec<String>,
    pub group_headers: Vec<String>,
    pub extra_prefixes: Vec<String>,
}

impl Expectation {
    /// From the ConfigMap's `data`; its list values are JSON arrays held as strings.
    pub fn from_data(data: &BTreeMap<String, String>, source: String) -> Result<Self, Step> {
        let list = |key: &str| -> Result<Vec<String>, Step> {
            match data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty()) {
                None => Ok(Vec::new()),
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    Step::failed(
                        "backend-trust",
                        "Unreadable",
                        format!("{source}: {key} is not a JSON list of strings: {e}"),
                        "read the ConfigMap kube-apiserver writes, unedited",
                    )
                }),
            }
        };
        Ok(Self {
            ca_pem: data
                .get("requestheader-client-ca-file")
                .filter(|v| !v.trim().is_empty())
                .cloned(),
            allowed_names: list("requestheader-allowed-names")?,
            username_headers: list("requestheader-username-headers")?,
            uid_headers: list("requestheader-uid-headers")?,
            group_headers: list("requestheader-group-headers")?,
            extra_prefixes: list("requestheader-extra-headers-prefix")?,
            source,
        })
    }

    /// From a ConfigMap manifest (YAML or JSON).
    pub fn from_file(path: &Path) -> Result<Self, Step> {
        let unreadable = |message: String| {
            Step::failed(
                "backend-trust",
                "Unreadable",
                message,
                format!(
                    "write it with: kubectl get configmap -n {} {} -o yaml > {}",
                    CONFIGMAP.0,
                    CONFIGMAP.1,
                    path.display()
                ),
            )
        };
        let text = std::fs::read_to_string(path)
            .map_err(|e| unreadable(format!("{}: {e}", path.display())))?;
        let object: Value = apigw_core::yaml::from_str(&text)
            .map_err(|e| unreadable(format!("{}: {e}", path.display())))?;
        let data: BTreeMap<String, String> = serde_json::from_value(object["data"].clone())
            .map_err(|e| unreadable(format!("{}: data: {e}", path.display())))?;
        Self::from_data(&data, path.display().to_string())
    }

    /// From the cluster this configuration's cluster mode talks to.
    pub async fn from_cluster(cfg: &Config) -> Option<Result<Self, Step>> {
        let cluster = cfg.cluster.as_ref()?;
        let read = async {
            let client = apigw_gateway::cluster::client(cluster.kubeconfig.as_deref())
                .await
                .map_err(|e| e.to_string())?;
            let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(client, CONFIGMAP.0);
            let cm = api.get(CONFIGMAP.1).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(cm.data.unwrap_or_default())
        };
        let source = format!("{}/{} in the cluster", CONFIGMAP.0, CONFIGMAP.1);
        Some(match read.await {
            Ok(data) => Self::from_data(&data, source),
            Err(e) => Err(Step::failed(
                "backend-trust",
                "Unreachable",
                format!("reading {source}: {e}"),
                "check the kubeconfig, and that it may get configmaps in kube-system",
            )),
        })
    }
}

/// Whether backends reading `exp` accept apigw's proxy client certificate and headers: one
/// step per finding, the worst first.
pub fn check(exp: &Expectation, cfg: &Config) -> Vec<Step> {
    let mut steps = Vec::new();
    let src = &exp.source;
    let Some(ca_pem) = &exp.ca_pem else {
        steps.push(Step::failed(
            "backend-trust",
            "NoRequestHeaderCA",
            format!("{src} has no requestheader-client-ca-file: backends trust no front proxy, and refuse apigw's identity"),
            "start kube-apiserver with --requestheader-client-ca-file (the CA that issued apigw's --proxy-client-cert-file)",
        ));
        return steps;
    };
    let Some((crt, _)) = &cfg.proxy.proxy_client else {
        steps.push(Step::failed(
            "backend-trust",
            "NoProxyClientCert",
            "apigw has no proxy client certificate: backends cannot tell its requests from a client's",
            "set --proxy-client-cert-file and --proxy-client-key-file to a certificate from the requestheader CA",
        ));
        return steps;
    };
    let file = crt.display();
    let chain = match apigw_core::tls::load_certs(crt) {
        Ok(chain) if !chain.is_empty() => chain,
        Ok(_) | Err(_) => return steps, // own_certs reports an unreadable file
    };
    match verifies(ca_pem, &chain) {
        Ok(()) => steps.push(Step::ok(
            "backend-trust-chain",
            format!("{file} chains to the requestheader CA of {src}"),
        )),
        Err(e) => steps.push(
            Step::failed(
                "backend-trust-chain",
                "UntrustedProxyClientCert",
                format!("backends do not trust {file}: it does not chain to the requestheader CA of {src} ({e})"),
                "issue --proxy-client-cert-file from the CA in kube-apiserver's --requestheader-client-ca-file, or add its issuer to that bundle",
            )
            .details(ca_subjects(ca_pem)),
        ),
    }
    let cn = common_name(&chain[0]).unwrap_or_default();
    if exp.allowed_names.is_empty() {
        steps.push(Step::ok(
            "backend-trust-name",
            format!("requestheader-allowed-names is empty: any certificate from the CA is a front proxy (CN={cn})"),
        ));
    } else if exp.allowed_names.contains(&cn) {
        steps.push(Step::ok(
            "backend-trust-name",
            format!("CN={cn} is in requestheader-allowed-names"),
        ));
    } else {
        steps.push(Step::failed(
            "backend-trust-name",
            "DisallowedName",
            format!(
                "backends refuse {file}: CN={cn} is not in requestheader-allowed-names {:?} of {src}",
                exp.allowed_names
            ),
            format!(
                "add {cn} to kube-apiserver's --requestheader-allowed-names, or issue the proxy client certificate with CN one of {:?}",
                exp.allowed_names
            ),
        ));
    }
    for (what, sent) in apigw_proxy::sent_names() {
        let (read, flag) = match what {
            "username" => (&exp.username_headers, "--requestheader-username-headers"),
            "uid" => (&exp.uid_headers, "--requestheader-uid-headers"),
            "group" => (&exp.group_headers, "--requestheader-group-headers"),
            _ => (&exp.extra_prefixes, "--requestheader-extra-headers-prefix"),
        };
        let shown = canonical(sent);
        if read.iter().any(|h| h.eq_ignore_ascii_case(sent)) {
            steps.push(Step::ok(
                "backend-trust-headers",
                format!("backends read the {what} from {shown}"),
            ));
            continue;
        }
        let message = format!(
            "backends do not read {shown}, where apigw sends the {what} ({src} lists {read:?})"
        );
        let fix = format!("add {shown} to kube-apiserver's {flag}");
        steps.push(if what == "uid" {
            // The identity still gets through, without its UID.
            Step::warning(
                "backend-trust-headers",
                "MissingUidHeader",
                format!("{message}: the user's UID never reaches them"),
                format!("{fix} (kube-apiserver 1.32+)"),
            )
        } else {
            Step::failed("backend-trust-headers", "HeaderNotRead", message, fix)
        });
    }
    steps
}

/// The verdict for one APIService's backend, from the gateway-wide steps: it accepts apigw's
/// identity when none of them failed.
pub fn verdict(steps: &[Step], source: &str) -> Step {
    let failed: Vec<&Step> = steps
        .iter()
        .filter(|s| s.status == super::report::Status::Failed)
        .collect();
    match failed.first() {
        None => Step::ok(
            "proxy-identity",
            format!(
                "the backend accepts apigw's identity (its front-proxy settings from {source})"
            ),
        ),
        Some(first) => Step::failed(
            "proxy-identity",
            first.reason.unwrap_or("Refused"),
            format!("the backend refuses apigw's identity: {}", first.message),
            first.fix.clone().unwrap_or_default(),
        ),
    }
}

/// Ok when `chain` (leaf first) verifies for client authentication against the CAs of `pem`.
fn verifies(pem: &str, chain: &[CertificateDer<'static>]) -> Result<(), String> {
    let cas = apigw_core::tls::parse_certs(pem.as_bytes(), "requestheader-client-ca-file")
        .map_err(|e| e.to_string())?;
    let roots = apigw_core::tls::root_store(&cas, "requestheader-client-ca-file")
        .map_err(|e| e.to_string())?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        apigw_core::tls::provider(),
    )
    .build()
    .map_err(|e| e.to_string())?;
    verifier
        .verify_client_cert(&chain[0], &chain[1..], UnixTime::now())
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn common_name(cert: &CertificateDer<'_>) -> Option<String> {
    let (_, x) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let cn = x.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

fn ca_subjects(pem: &str) -> Vec<String> {
    apigw_core::tls::parse_certs(pem.as_bytes(), "requestheader-client-ca-file")
        .unwrap_or_default()
        .iter()
        .filter_map(|c| {
            let (_, x) = x509_parser::parse_x509_certificate(c.as_ref()).ok()?;
            Some(format!("requestheader CA: {}", x.subject()))
        })
        .collect()
}

/// `x-remote-user` as `X-Remote-User`.
fn canonical(name: &str) -> String {
    name.split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect::<Vec<_>>()
        .join("-")
}

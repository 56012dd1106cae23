//! Explains a backend's served chain against what the gateway trusts: the chain itself
//! (subject, issuer, SANs, validity, key), then three independent verdicts, each with its own
//! fix: signed by the trusted CAs, valid for `<service>.<namespace>.svc`, inside its validity
//! period. Trust is judged at a time the leaf is valid, so an expired certificate from the
//! right CA is reported as expired, not as untrusted.

use super::report::Step;
use apigw_core::certs::describe::{describe_cert, CertInfo, Place, EXPIRY_WARNING_DAYS};
use apigw_core::certs::inspect::cert_lines;
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, Error as TlsError};
use std::time::Duration;
use x509_parser::prelude::{FromDer, X509Certificate};

/// What the gateway trusts for one APIService, and how to name it in messages.
pub struct TrustSource<'a> {
    pub roots: &'a [CertificateDer<'static>],
    /// `spec.caBundle`, `--service-ca-file /path`, or `the system roots`.
    pub name: String,
    /// True when the roots are the APIService's own caBundle.
    pub from_ca_bundle: bool,
}

/// The `serving-cert` step and the trust, name and validity verdicts on `chain`.
/// `trust` is None for `insecureSkipTLSVerify`.
pub fn explain(
    chain: &[CertificateDer<'static>],
    host: &str,
    trust: Option<&TrustSource<'_>>,
) -> Vec<Step> {
    let Some((leaf, intermediates)) = chain.split_first() else {
        return vec![Step::failed(
            "serving-cert",
            "NoCertificate",
            "the backend presented no certificate",
            "configure the addon server with --tls-cert-file and --tls-private-key-file",
        )];
    };
    let Ok(leaf_info) = describe_cert(leaf, Place::default()) else {
        return vec![Step::failed(
            "serving-cert",
            "BadEncoding",
            "the backend's certificate cannot be parsed",
            "reissue the serving certificate",
        )];
    };
    let rest = intermediates.iter().enumerate().filter_map(|(i, der)| {
        describe_cert(
            der,
            Place {
                in_ca_bundle: false,
                position: i + 1,
            },
        )
        .ok()
    });
    let rest: Vec<CertInfo> = rest.collect();
    let infos: Vec<&CertInfo> = std::iter::once(&leaf_info).chain(&rest).collect();
    let mut details = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        details.extend(cert_lines(info).into_iter().map(|l| format!("[{i}] {l}")));
        details.extend(info.warnings.iter().map(|w| format!("[{i}] warning: {w}")));
    }
    let mut steps = vec![Step::ok(
        "serving-cert",
        format!(
            "{} certificate(s); leaf {} issued by {}",
            chain.len(),
            leaf_info.subject,
            leaf_info.issuer
        ),
    )
    .details(details)];
    if let Some(trust) = trust {
        steps.push(trust_step(leaf, intermediates, &leaf_info, trust));
    }
    steps.push(name_step(leaf, &leaf_info, host));
    steps.push(validity_step(&infos));
    steps
}

fn trust_step(
    leaf: &CertificateDer<'static>,
    intermediates: &[CertificateDer<'static>],
    info: &CertInfo,
    trust: &TrustSource<'_>,
) -> Step {
    let check = "serving-cert-trust";
    let result = verify_chain(leaf, intermediates, trust.roots, UnixTime::now());
    // An expired (or early) leaf fails chain building on time; judge trust while it is valid.
    let result = match result {
        Err(TlsError::InvalidCertificate(
            CertificateError::Expired
            | CertificateError::ExpiredContext { .. }
            | CertificateError::NotValidYet
            | CertificateError::NotValidYetContext { .. },
        )) => verify_chain(leaf, intermediates, trust.roots, valid_time(leaf)),
        other => other,
    };
    let cas = trust_names(trust.roots);
    match result {
        Ok(()) => Step::ok(check, format!("signed by a CA in {}", trust.name)).details(cas),
        Err(TlsError::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            let fix = if trust.from_ca_bundle {
                format!("put the CA that signed the serving cert ({}) in spec.caBundle, or reissue the serving cert from the CA in spec.caBundle", info.issuer)
            } else {
                format!("set spec.caBundle to the CA that signed the serving cert ({})", info.issuer)
            };
            Step::failed(
                check,
                "UnknownAuthority",
                format!("the serving cert, issued by {}, is not signed by any CA in {}", info.issuer, trust.name),
                fix,
            )
            .details(cas)
        }
        Err(TlsError::InvalidCertificate(CertificateError::InvalidPurpose)) => Step::failed(
            check,
            "WrongKeyUsage",
            "the serving cert is not allowed for TLS servers (its extended key usage lacks serverAuth)",
            "reissue the serving cert with the serverAuth extended key usage",
        ),
        Err(e) => Step::failed(
            check,
            "InvalidChain",
            format!("the chain does not verify against {}: {e}", trust.name),
            "reissue the serving cert from the CA in spec.caBundle and serve the full chain",
        )
        .details(cas),
    }
}

fn verify_chain(
    leaf: &CertificateDer<'static>,
    intermediates: &[CertificateDer<'static>],
    roots: &[CertificateDer<'static>],
    now: UnixTime,
) -> Result<(), TlsError> {
    let store = apigw_core::tls::root_store(roots, "trusted CAs")
        .map_err(|e| TlsError::General(e.to_string()))?;
    let parsed = ParsedCertificate::try_from(leaf)?;
    let algs = apigw_core::tls::provider().signature_verification_algorithms;
    verify_server_cert_signed_by_trust_anchor(&parsed, &store, intermediates, now, algs.all)
}

/// A moment inside the leaf's validity period (its midpoint), or now when it cannot be read.
fn valid_time(leaf: &CertificateDer<'_>) -> UnixTime {
    X509Certificate::from_der(leaf.as_ref())
        .ok()
        .and_then(|(_, c)| {
            let v = c.validity();
            let mid = (v.not_before.timestamp() + v.not_after.timestamp()) / 2;
            u64::try_from(mid).ok()
        })
        .map_or_else(UnixTime::now, |secs| {
            UnixTime::since_unix_epoch(Duration::from_secs(secs))
        })
}

fn trust_names(roots: &[CertificateDer<'static>]) -> Vec<String> {
    if roots.len() > 20 {
        return vec![format!("{} trusted CAs", roots.len())];
    }
    roots
        .iter()
        .filter_map(|r| describe_cert(r, Place::default()).ok())
        .map(|c| format!("trusted CA: {}", c.subject))
        .collect()
}

fn name_step(leaf: &CertificateDer<'static>, info: &CertInfo, host: &str) -> Step {
    let check = "serving-cert-name";
    let result = ServerName::try_from(host)
        .map_err(|e| TlsError::General(e.to_string()))
        .and_then(|name| {
            let parsed = ParsedCertificate::try_from(leaf)?;
            verify_server_name(&parsed, &name)
        });
    let sans = if info.sans.is_empty() {
        "no SANs".to_string()
    } else {
        info.sans.join(", ")
    };
    match result {
        Ok(()) => Step::ok(check, format!("{host} is among the SANs ({sans})")),
        Err(_) => Step::failed(
            check,
            "NameMismatch",
            format!("the serving cert is not valid for {host}: it names {sans}"),
            format!("reissue the serving cert with DNS SAN {host}"),
        ),
    }
}

fn validity_step(infos: &[&CertInfo]) -> Step {
    let check = "serving-cert-validity";
    let which = |i: usize| {
        if i == 0 {
            "serving cert".to_string()
        } else {
            format!("chain certificate [{i}]")
        }
    };
    for (i, c) in infos.iter().enumerate() {
        if c.expired {
            return Step::failed(
                check,
                "Expired",
                format!(
                    "the {} expired {} days ago ({})",
                    which(i),
                    -c.days_left,
                    c.not_after
                ),
                format!(
                    "reissue the {} and restart or reload the addon server",
                    which(i)
                ),
            );
        }
        if c.not_yet_valid {
            return Step::failed(
                check,
                "NotYetValid",
                format!("the {} is not valid before {}", which(i), c.not_before),
                "check the clocks of this machine and the issuer, or reissue it with a notBefore in the past",
            );
        }
    }
    if let Some((i, c)) = infos
        .iter()
        .enumerate()
        .find(|(_, c)| c.days_left < EXPIRY_WARNING_DAYS)
    {
        return Step::warning(
            check,
            "ExpiresSoon",
            format!(
                "the {} expires in {} days ({})",
                which(i),
                c.days_left,
                c.not_after
            ),
            format!("renew the {} before {}", which(i), c.not_after),
        );
    }
    let line = infos
        .first()
        .map_or_else(String::new, |c| c.validity_line());
    Step::ok(check, line)
}

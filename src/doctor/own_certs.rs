//! The gateway's own certificate files: the serving certificate (`--tls-cert-file`) and the
//! proxy client certificate (`--proxy-client-cert-file`). Each must load, match its key, be
//! inside its validity period (a warning within 30 days of expiry) and be fit for its role:
//! serverAuth for serving, clientAuth for the proxy client.

use super::report::Step;
use apigw_core::certs::describe::{describe_cert, CertInfo, Place, EXPIRY_WARNING_DAYS};
use apigw_gateway::config::Config;
use std::path::Path;

/// Steps for the serving and the proxy client certificate of `cfg`.
pub fn check(cfg: &Config) -> Vec<Step> {
    let mut steps = vec![pair_step(
        "serving-cert-file",
        &cfg.tls_cert,
        &cfg.tls_key,
        Role::Serving,
    )];
    match &cfg.proxy.proxy_client {
        Some((crt, key)) => steps.push(pair_step("proxy-client-cert-file", crt, key, Role::ProxyClient)),
        None => steps.push(Step::warning(
            "proxy-client-cert-file",
            "NoProxyClientCert",
            "no proxy client certificate: backends that require one refuse the gateway",
            "set --proxy-client-cert-file and --proxy-client-key-file to a cert signed by the front-proxy CA the addon servers trust",
        )),
    }
    steps
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Serving,
    ProxyClient,
}

impl Role {
    fn flag(self) -> &'static str {
        match self {
            Role::Serving => "--tls-cert-file",
            Role::ProxyClient => "--proxy-client-cert-file",
        }
    }

    fn eku(self) -> &'static str {
        match self {
            Role::Serving => "serverAuth",
            Role::ProxyClient => "clientAuth",
        }
    }
}

fn pair_step(check: &'static str, crt: &Path, key: &Path, role: Role) -> Step {
    let file = crt.display().to_string();
    let chain = match apigw_core::tls::load_certs(crt) {
        Ok(chain) => chain,
        Err(e) => {
            return Step::failed(
                check,
                "Unreadable",
                e.to_string(),
                format!("point {} at a PEM certificate", role.flag()),
            )
        }
    };
    let described = chain
        .first()
        .ok_or_else(|| "no certificate".to_string())
        .and_then(|leaf| describe_cert(leaf.as_ref(), Place::default()).map_err(|e| e.to_string()));
    let info = match described {
        Ok(info) => info,
        Err(e) => {
            return Step::failed(
                check,
                "Unreadable",
                format!("{file}: {e}"),
                format!("point {} at a PEM certificate", role.flag()),
            )
        }
    };
    if let Err(step) = key_matches(check, crt, key, chain) {
        return step;
    }
    verdict(check, &file, &info, role)
}

/// Ok when the key loads and belongs to the certificate.
fn key_matches(
    check: &'static str,
    crt: &Path,
    key: &Path,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
) -> Result<(), Step> {
    let fix = format!(
        "use the key {} was issued for (or reissue both together)",
        crt.display()
    );
    let der = apigw_core::tls::load_key(key)
        .map_err(|e| Step::failed(check, "Unreadable", e.to_string(), fix.clone()))?;
    let signing = apigw_core::tls::provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| {
            Step::failed(
                check,
                "Unreadable",
                format!("{}: {e}", key.display()),
                fix.clone(),
            )
        })?;
    match rustls::sign::CertifiedKey::new(chain, signing).keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(_) => Err(Step::failed(
            check,
            "KeyMismatch",
            format!("{} is not the key of {}", key.display(), crt.display()),
            fix,
        )),
    }
}

fn verdict(check: &'static str, file: &str, c: &CertInfo, role: Role) -> Step {
    let what = format!("{file}: {}", c.subject);
    if c.expired {
        return Step::failed(
            check,
            "Expired",
            format!("{what} expired {} days ago ({})", -c.days_left, c.not_after),
            format!("renew {file}"),
        );
    }
    if c.not_yet_valid {
        return Step::failed(
            check,
            "NotYetValid",
            format!("{what} is not valid before {}", c.not_before),
            format!("check the clock, or reissue {file} with a notBefore in the past"),
        );
    }
    if !c.allows(role.eku()) {
        let usages = c.ext_key_usages.clone().unwrap_or_default().join(", ");
        return Step::failed(
            check,
            if role == Role::ProxyClient {
                "NoClientAuthEku"
            } else {
                "NoServerAuthEku"
            },
            format!(
                "{what} has extended key usages {usages}, without {}",
                role.eku()
            ),
            format!("reissue {file} with the {} extended key usage", role.eku()),
        );
    }
    if c.days_left < EXPIRY_WARNING_DAYS {
        return Step::warning(
            check,
            "ExpiresSoon",
            format!("{what} expires in {} days ({})", c.days_left, c.not_after),
            format!("renew {file} before {}", c.not_after),
        );
    }
    Step::ok(check, format!("{what}, {}", c.validity_line()))
}

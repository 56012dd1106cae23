//! The commands that repeat the doctor's checks by hand: curl for the discovery GET as the
//! gateway makes it, `openssl s_client` for the handshake, and `apigw certs inspect` for the
//! served chain and the caBundle. Each APIService's caBundle is written to a file first
//! (`$TMPDIR/apigw-doctor/<apiservice>-ca.crt`) so the commands run as printed.

use super::report::Recipe;
use apigw_registry::{ApiService, ServiceRef};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Where the doctor writes caBundles unless told otherwise.
pub fn default_ca_dir() -> PathBuf {
    std::env::temp_dir().join("apigw-doctor")
}

/// Writes `svc`'s caBundle to `<dir>/<name>-ca.crt`; None when it has no caBundle.
pub fn write_ca_bundle(dir: &Path, svc: &ApiService) -> Result<Option<PathBuf>, String> {
    if svc.ca_bundle.is_empty() {
        return Ok(None);
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join(format!("{}-ca.crt", svc.name));
    std::fs::write(&path, &svc.ca_bundle).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some(path))
}

/// What the commands need to know.
pub struct Target<'a> {
    pub svc: &'a ApiService,
    pub service: &'a ServiceRef,
    /// The address the name resolved to, when it did.
    pub addr: Option<SocketAddr>,
    /// The CA file to trust (the written caBundle, or `--service-ca-file`); None: system roots.
    pub ca_file: Option<&'a Path>,
    /// `(cert, key)` of the proxy client certificate.
    pub proxy_cert: Option<&'a (PathBuf, PathBuf)>,
}

/// The recipes for one APIService.
pub fn recipes(t: &Target<'_>) -> Vec<Recipe> {
    let mut out = vec![
        Recipe {
            what: "the discovery request the gateway makes, with its client certificate".into(),
            command: curl(t),
        },
        Recipe {
            what: "the TLS handshake, verified as the gateway verifies it".into(),
            command: format!("{} </dev/null", s_client(t, true)),
        },
        Recipe {
            what: "the chain the backend serves, certificate by certificate".into(),
            command: format!(
                "{} -showcerts </dev/null 2>/dev/null | apigw certs inspect -",
                s_client(t, false)
            ),
        },
    ];
    if let Some(ca) = t.ca_file {
        out.push(Recipe {
            what: "the CAs the gateway trusts for this APIService".into(),
            command: format!(
                "apigw certs inspect --ca-bundle {}",
                quote(&ca.display().to_string())
            ),
        });
    }
    out.push(Recipe {
        what: "in a cluster, the caBundle as the API server has it".into(),
        command: format!(
            "kubectl get apiservice {} -o jsonpath='{{.spec.caBundle}}' | base64 -d > {}-ca.crt",
            quote(&t.svc.name),
            quote(&t.svc.name)
        ),
    });
    out
}

fn curl(t: &Target<'_>) -> String {
    let host = t.service.host();
    let port = t.service.port;
    let mut cmd = vec!["curl".to_string(), "-sS".into(), "--fail-with-body".into()];
    match (t.svc.insecure_skip_tls_verify, t.ca_file) {
        (true, _) => cmd.push("-k".into()),
        (false, Some(ca)) => cmd.extend(["--cacert".into(), quote(&ca.display().to_string())]),
        (false, None) => {}
    }
    if let Some((crt, key)) = t.proxy_cert {
        cmd.extend(["--cert".into(), quote(&crt.display().to_string())]);
        cmd.extend(["--key".into(), quote(&key.display().to_string())]);
    }
    if let Some(addr) = t.addr {
        let ip = match addr {
            SocketAddr::V4(a) => a.ip().to_string(),
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
        };
        // --resolve keeps the port; --connect-to also redirects it (a --resolve entry's port).
        if addr.port() == port {
            cmd.extend(["--resolve".into(), quote(&format!("{host}:{port}:{ip}"))]);
        } else {
            let to = format!("{host}:{port}:{ip}:{}", addr.port());
            cmd.extend(["--connect-to".into(), quote(&to)]);
        }
    }
    cmd.extend([
        "-H".into(),
        quote("X-Remote-User: system:kube-aggregator"),
        "-H".into(),
        quote("X-Remote-Group: system:masters"),
    ]);
    let authority = if port == 443 {
        host
    } else {
        format!("{host}:{port}")
    };
    cmd.push(format!(
        "https://{authority}/apis/{}/{}",
        t.svc.group, t.svc.version
    ));
    cmd.join(" ")
}

/// `openssl s_client` towards the backend; `verify` adds the checks the gateway makes.
fn s_client(t: &Target<'_>, verify: bool) -> String {
    let host = t.service.host();
    let connect = t
        .addr
        .map_or_else(|| format!("{host}:{}", t.service.port), |a| a.to_string());
    let mut cmd = vec![
        "openssl".to_string(),
        "s_client".into(),
        "-connect".into(),
        quote(&connect),
        "-servername".into(),
        quote(&host),
    ];
    if verify && !t.svc.insecure_skip_tls_verify {
        cmd.extend([
            "-verify_hostname".into(),
            quote(&host),
            "-verify_return_error".into(),
        ]);
        if let Some(ca) = t.ca_file {
            cmd.extend(["-CAfile".into(), quote(&ca.display().to_string())]);
        }
    }
    if let Some((crt, key)) = t.proxy_cert {
        cmd.extend(["-cert".into(), quote(&crt.display().to_string())]);
        cmd.extend(["-key".into(), quote(&key.display().to_string())]);
    }
    if verify {
        cmd.push("-brief".into());
    }
    cmd.join(" ")
}

/// Quotes `s` for a POSIX shell when it holds anything but safe characters.
pub fn quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_./:=@%+,-".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("/tmp/a-b.crt"), "/tmp/a-b.crt");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}

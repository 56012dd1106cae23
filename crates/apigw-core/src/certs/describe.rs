//! What matters about one certificate or CSR, in a form people and JSON readers both use:
//! subject, issuer, serial, validity, SANs, key, CA flag, key usages and EKUs, plus the
//! warnings that explain most aggregation failures (expired, no SANs, CN-only names, a leaf
//! where a CA belongs, an EKU that does not fit the certificate's role). Shared by
//! `apigw certs inspect` and `apigw doctor`.

use serde::Serialize;
use std::net::IpAddr;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::error::X509Error;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::SubjectPublicKeyInfo;

/// Certificates expiring within this many days get a warning.
pub const EXPIRY_WARNING_DAYS: i64 = 30;

/// One certificate, described.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CertInfo {
    pub subject: String,
    pub issuer: String,
    pub serial: String,
    pub not_before: String,
    pub not_after: String,
    /// Whole days until notAfter; negative once expired.
    pub days_left: i64,
    pub expired: bool,
    pub not_yet_valid: bool,
    /// `DNS:name`, `IP:addr`, `email:...`, `URI:...`.
    pub sans: Vec<String>,
    /// `ECDSA P-256`, `RSA 2048`, `Ed25519`, ...
    pub key: String,
    pub is_ca: bool,
    pub self_signed: bool,
    pub key_usages: Vec<String>,
    /// `None` when the certificate has no EKU extension (any use allowed).
    pub ext_key_usages: Option<Vec<String>>,
    pub warnings: Vec<String>,
}

/// One certificate signing request, described.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CsrInfo {
    pub subject: String,
    pub sans: Vec<String>,
    pub key: String,
    pub warnings: Vec<String>,
}

/// Where a certificate was found, which decides some warnings.
#[derive(Debug, Clone, Copy, Default)]
pub struct Place {
    /// The certificate came from a CA bundle (an APIService caBundle, a `-CAfile`).
    pub in_ca_bundle: bool,
    /// Its position in the file or chain (0 = first).
    pub position: usize,
}

impl CertInfo {
    /// True when the EKU extension is absent or lists `eku` (`serverAuth`, `clientAuth`).
    pub fn allows(&self, eku: &str) -> bool {
        self.ext_key_usages
            .as_ref()
            .is_none_or(|list| list.iter().any(|e| e == eku || e == "any"))
    }

    /// The DNS names among the SANs.
    pub fn dns_names(&self) -> impl Iterator<Item = &str> {
        self.sans.iter().filter_map(|s| s.strip_prefix("DNS:"))
    }

    /// The subject CN, if any.
    pub fn common_name(&self) -> Option<&str> {
        self.subject
            .split(", ")
            .find_map(|part| part.strip_prefix("CN="))
    }

    /// A one-line validity summary: `expires in N days`, `expired N days ago`, ...
    pub fn validity_line(&self) -> String {
        if self.not_yet_valid {
            format!("not valid before {}", self.not_before)
        } else if self.expired {
            format!("expired {} days ago ({})", -self.days_left, self.not_after)
        } else {
            format!("expires in {} days ({})", self.days_left, self.not_after)
        }
    }
}

/// DER bytes that are not what they were read as.
#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    #[error("not an X.509 certificate: {0}")]
    Certificate(#[source] x509_parser::nom::Err<X509Error>),
    #[error("not a certificate request: {0}")]
    Request(#[source] x509_parser::nom::Err<X509Error>),
}

/// Describes a DER certificate found at `place`.
pub fn describe_cert(der: &[u8], place: Place) -> Result<CertInfo, DescribeError> {
    let (_, cert) = X509Certificate::from_der(der).map_err(DescribeError::Certificate)?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let validity = cert.validity();
    let (nb, na) = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    let mut info = CertInfo {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        serial: cert.raw_serial_as_string(),
        not_before: rfc3339(nb),
        not_after: rfc3339(na),
        days_left: whole_days(na - now),
        expired: now > na,
        not_yet_valid: now < nb,
        sans: Vec::new(),
        key: key_type(cert.public_key()),
        is_ca: cert.is_ca(),
        self_signed: cert.subject() == cert.issuer(),
        key_usages: Vec::new(),
        ext_key_usages: None,
        warnings: Vec::new(),
    };
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                info.sans = san.general_names.iter().filter_map(san_text).collect();
            }
            ParsedExtension::KeyUsage(ku) => {
                info.key_usages = ku.to_string().split(", ").map(str::to_string).collect();
            }
            ParsedExtension::ExtendedKeyUsage(eku) => info.ext_key_usages = Some(eku_names(eku)),
            _ => {}
        }
    }
    info.warnings = warnings(&info, place);
    Ok(info)
}

/// Describes a DER certificate signing request.
pub fn describe_csr(der: &[u8]) -> Result<CsrInfo, DescribeError> {
    let (_, csr) = X509CertificationRequest::from_der(der).map_err(DescribeError::Request)?;
    let mut sans = Vec::new();
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            sans.extend(san.general_names.iter().filter_map(san_text));
        }
    }
    let mut warnings = Vec::new();
    if csr.verify_signature().is_err() {
        warnings.push("the request's signature does not verify".to_string());
    }
    let info = &csr.certification_request_info;
    Ok(CsrInfo {
        subject: info.subject.to_string(),
        sans,
        key: key_type(&info.subject_pki),
        warnings,
    })
}

fn warnings(c: &CertInfo, place: Place) -> Vec<String> {
    let mut w = Vec::new();
    if c.expired {
        w.push(format!("expired {} days ago", -c.days_left));
    } else if c.not_yet_valid {
        w.push(format!("not yet valid: valid from {}", c.not_before));
    } else if c.days_left < EXPIRY_WARNING_DAYS {
        w.push(format!("expires in {} days", c.days_left));
    }
    if c.is_ca {
        if !c.key_usages.is_empty() && !c.key_usages.iter().any(|k| k == "Key Cert Sign") {
            w.push("a CA without the keyCertSign key usage cannot sign certificates".into());
        }
        return w;
    }
    if place.in_ca_bundle {
        w.push("not a CA, yet in a CA bundle: a caBundle must hold the CA that signed the serving certificate, not the serving certificate itself".into());
    } else if place.position > 0 {
        w.push("not a CA, yet not first in the file: a chain continues with the CAs that issued the first certificate".into());
    }
    w.extend(role_warnings(c));
    w
}

/// Warnings for a leaf: names and EKUs that do not fit what it appears to be for.
fn role_warnings(c: &CertInfo) -> Vec<String> {
    let mut w = Vec::new();
    let serves = c
        .ext_key_usages
        .as_ref()
        .is_some_and(|e| e.iter().any(|k| k == "serverAuth"));
    let cn = c.common_name().unwrap_or("");
    let cn_is_host = cn.contains('.') && !cn.contains(':') && !cn.contains(' ');
    if c.sans.is_empty() && (serves || cn_is_host) {
        w.push("no SANs: TLS clients match the server name only against SANs".into());
    }
    if cn_is_host && !c.dns_names().any(|d| d.eq_ignore_ascii_case(cn)) {
        w.push(format!(
            "CN-only name: {cn:?} is in the subject CN but not in the SANs, and clients ignore the CN"
        ));
    }
    if !c.sans.is_empty() && !c.allows("serverAuth") {
        w.push("has SANs like a serving certificate, but its EKUs lack serverAuth: TLS clients refuse it".into());
    }
    if c.sans.is_empty() && !serves && !c.allows("clientAuth") {
        w.push(
            "looks like a client certificate, but its EKUs lack clientAuth: servers refuse it"
                .into(),
        );
    }
    w
}

fn san_text(name: &GeneralName<'_>) -> Option<String> {
    Some(match name {
        GeneralName::DNSName(d) => format!("DNS:{d}"),
        GeneralName::IPAddress(bytes) => format!("IP:{}", ip_text(bytes)),
        GeneralName::RFC822Name(e) => format!("email:{e}"),
        GeneralName::URI(u) => format!("URI:{u}"),
        GeneralName::DirectoryName(n) => format!("DirName:{n}"),
        _ => return None,
    })
}

fn ip_text(bytes: &[u8]) -> String {
    let ip = match bytes.len() {
        4 => <[u8; 4]>::try_from(bytes).ok().map(IpAddr::from),
        16 => <[u8; 16]>::try_from(bytes).ok().map(IpAddr::from),
        _ => None,
    };
    ip.map_or_else(|| format!("<{} bytes>", bytes.len()), |ip| ip.to_string())
}

fn eku_names(eku: &x509_parser::extensions::ExtendedKeyUsage<'_>) -> Vec<String> {
    let flags = [
        (eku.any, "any"),
        (eku.server_auth, "serverAuth"),
        (eku.client_auth, "clientAuth"),
        (eku.code_signing, "codeSigning"),
        (eku.email_protection, "emailProtection"),
        (eku.time_stamping, "timeStamping"),
        (eku.ocsp_signing, "OCSPSigning"),
    ];
    let mut names: Vec<String> = flags
        .iter()
        .filter(|(set, _)| *set)
        .map(|(_, n)| n.to_string())
        .collect();
    names.extend(eku.other.iter().map(|oid| oid.to_id_string()));
    names
}

/// `ECDSA P-256`, `RSA 2048`, `Ed25519`, or the algorithm OID.
fn key_type(spki: &SubjectPublicKeyInfo<'_>) -> String {
    let alg = spki.algorithm.algorithm.to_id_string();
    match alg.as_str() {
        "1.2.840.113549.1.1.1" => match spki.parsed() {
            Ok(key) => format!("RSA {}", key.key_size()),
            Err(_) => "RSA".into(),
        },
        "1.2.840.10045.2.1" => {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.as_oid().ok())
                .map(|oid| oid.to_id_string());
            match curve.as_deref() {
                Some("1.2.840.10045.3.1.7") => "ECDSA P-256".into(),
                Some("1.3.132.0.34") => "ECDSA P-384".into(),
                Some("1.3.132.0.35") => "ECDSA P-521".into(),
                Some(other) => format!("ECDSA curve {other}"),
                None => "ECDSA".into(),
            }
        }
        "1.3.101.112" => "Ed25519".into(),
        "1.3.101.113" => "Ed448".into(),
        other => format!("key algorithm {other}"),
    }
}

/// Whole days in `secs`, rounded towards zero: 2 days and 5 seconds ago is -2.
fn whole_days(secs: i64) -> i64 {
    secs / 86_400
}

fn rfc3339(unix: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(unix)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("@{unix}"))
}

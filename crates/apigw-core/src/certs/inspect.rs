//! `apigw certs inspect FILE...`: reads PEM certificates, chains, CSRs, DER, or an APIService
//! `caBundle` in base64 (detected, not declared), and shows what `openssl x509 -noout -text`
//! would show that matters for aggregation, a few lines per certificate, with warnings.
//! `-` reads standard input, so `kubectl get apiservice X -o jsonpath='{.spec.caBundle}'`
//! can be piped in.

use super::describe::{describe_cert, describe_csr, CertInfo, CsrInfo, DescribeError, Place};
use base64::Engine;
use rustls::pki_types::pem::{PemObject, SectionKind};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// The flags of `apigw certs inspect`.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// Files to read (PEM, DER, or a base64 caBundle); `-` is standard input.
    #[arg(required = true)]
    pub files: Vec<String>,
    /// Treat every file as a CA bundle (each certificate must be a CA).
    #[arg(long)]
    pub ca_bundle: bool,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Everything found in one file.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileReport {
    pub file: String,
    /// `PEM`, `DER`, `base64 caBundle (PEM)`, `base64 DER`.
    pub format: String,
    pub items: Vec<Item>,
    /// Why the file (or part of it) could not be read.
    pub errors: Vec<String>,
}

/// One object in a file.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum Item {
    Certificate(CertInfo),
    CertificateRequest(CsrInfo),
    /// A private key: only its presence is reported.
    PrivateKey,
}

/// Reads and describes one file (`-` for standard input).
pub fn inspect_file(file: &str, ca_bundle: bool) -> FileReport {
    let bytes = if file == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).map(|_| buf)
    } else {
        std::fs::read(Path::new(file))
    };
    match bytes {
        Ok(bytes) => inspect_bytes(file, &bytes, ca_bundle),
        Err(e) => FileReport {
            file: file.to_string(),
            format: "unreadable".into(),
            items: Vec::new(),
            errors: vec![e.to_string()],
        },
    }
}

/// Detects the encoding of `bytes` and describes every object in them.
pub fn inspect_bytes(file: &str, bytes: &[u8], ca_bundle: bool) -> FileReport {
    let mut report = FileReport {
        file: file.to_string(),
        format: String::new(),
        items: Vec::new(),
        errors: Vec::new(),
    };
    if looks_like_pem(bytes) {
        report.format = "PEM".into();
        read_pem(bytes, ca_bundle, &mut report);
    } else if let Some(decoded) = base64_text(bytes) {
        if looks_like_pem(&decoded) {
            // The caBundle of an APIService: every certificate in it must be a CA.
            report.format = "base64 caBundle (PEM)".into();
            read_pem(&decoded, true, &mut report);
        } else {
            report.format = "base64 DER".into();
            read_der(&decoded, ca_bundle, &mut report);
        }
    } else {
        report.format = "DER".into();
        read_der(bytes, ca_bundle, &mut report);
    }
    if report.items.is_empty() && report.errors.is_empty() {
        report
            .errors
            .push("no certificate, request or key found".into());
    }
    report
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// The bytes base64 `bytes` decode to, when they are base64 text.
fn base64_text(bytes: &[u8]) -> Option<Vec<u8>> {
    let text: Vec<u8> = bytes
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    if text.is_empty() {
        return None;
    }
    base64::engine::general_purpose::STANDARD.decode(&text).ok()
}

fn read_pem(bytes: &[u8], in_ca_bundle: bool, report: &mut FileReport) {
    let mut position = 0;
    for item in <(SectionKind, Vec<u8>)>::pem_slice_iter(bytes) {
        match item {
            Ok((SectionKind::Certificate, der)) => {
                let place = Place {
                    in_ca_bundle,
                    position,
                };
                position += 1;
                push(report, describe_cert(&der, place).map(Item::Certificate));
            }
            Ok((SectionKind::Csr, der)) => {
                push(report, describe_csr(&der).map(Item::CertificateRequest));
            }
            Ok((
                SectionKind::RsaPrivateKey | SectionKind::PrivateKey | SectionKind::EcPrivateKey,
                _,
            )) => report.items.push(Item::PrivateKey),
            Ok(_) => {}
            Err(e) => report
                .errors
                .push(format!("bad PEM: {}", crate::tls::pem_message(&e))),
        }
    }
}

fn read_der(bytes: &[u8], in_ca_bundle: bool, report: &mut FileReport) {
    let place = Place {
        in_ca_bundle,
        position: 0,
    };
    match describe_cert(bytes, place) {
        Ok(info) => report.items.push(Item::Certificate(info)),
        Err(cert_err) => match describe_csr(bytes) {
            Ok(info) => report.items.push(Item::CertificateRequest(info)),
            Err(_) => report.errors.push(format!(
                "neither PEM, base64, nor a DER certificate or request ({cert_err})"
            )),
        },
    }
}

fn push(report: &mut FileReport, item: Result<Item, DescribeError>) {
    match item {
        Ok(item) => report.items.push(item),
        Err(e) => report.errors.push(e.to_string()),
    }
}

/// The readable form: a few lines per certificate, warnings last.
pub fn render_text(reports: &[FileReport]) -> String {
    let mut out = String::new();
    for r in reports {
        let _ = writeln!(out, "{} ({})", r.file, r.format);
        for (i, item) in r.items.iter().enumerate() {
            match item {
                Item::Certificate(c) => cert_text(&mut out, i, c),
                Item::CertificateRequest(c) => csr_text(&mut out, i, c),
                Item::PrivateKey => {
                    let _ = writeln!(out, "  [{i}] private key (not shown)");
                }
            }
        }
        for e in &r.errors {
            let _ = writeln!(out, "  error: {e}");
        }
    }
    out
}

/// Lines describing one certificate, indented, for reuse in other reports.
pub fn cert_lines(c: &CertInfo) -> Vec<String> {
    let sans = if c.sans.is_empty() {
        "(none)".to_string()
    } else {
        c.sans.join(", ")
    };
    let mut kind = if c.is_ca { "CA" } else { "not a CA" }.to_string();
    if c.self_signed {
        kind.push_str(", self-signed");
    }
    let ekus = c
        .ext_key_usages
        .as_ref()
        .map_or("(none: any use)".to_string(), |e| e.join(", "));
    vec![
        format!("subject:  {}", c.subject),
        format!("issuer:   {}", c.issuer),
        format!("serial:   {}", c.serial),
        format!("validity: {} .. {}, {}", c.not_before, c.not_after, days(c)),
        format!("SANs:     {sans}"),
        format!("key:      {}; {kind}", c.key),
        format!("usages:   {}; EKU: {ekus}", c.key_usages.join(", ")),
    ]
}

fn days(c: &CertInfo) -> String {
    if c.not_yet_valid {
        "not yet valid".into()
    } else if c.expired {
        format!("EXPIRED {} days ago", -c.days_left)
    } else {
        format!("expires in {} days", c.days_left)
    }
}

fn cert_text(out: &mut String, i: usize, c: &CertInfo) {
    let _ = writeln!(out, "  [{i}] certificate");
    for line in cert_lines(c) {
        let _ = writeln!(out, "      {line}");
    }
    for w in &c.warnings {
        let _ = writeln!(out, "      warning: {w}");
    }
}

fn csr_text(out: &mut String, i: usize, c: &CsrInfo) {
    let sans = if c.sans.is_empty() {
        "(none)".to_string()
    } else {
        c.sans.join(", ")
    };
    let _ = writeln!(out, "  [{i}] certificate request");
    let _ = writeln!(out, "      subject:  {}", c.subject);
    let _ = writeln!(out, "      SANs:     {sans}");
    let _ = writeln!(out, "      key:      {}", c.key);
    for w in &c.warnings {
        let _ = writeln!(out, "      warning: {w}");
    }
}

/// Runs `apigw certs inspect`: prints the reports; false when a file could not be read.
pub fn run(args: &InspectArgs) -> bool {
    let reports: Vec<FileReport> = args
        .files
        .iter()
        .map(|f| inspect_file(f, args.ca_bundle))
        .collect();
    match args.output {
        OutputFormat::Text => print!("{}", render_text(&reports)),
        OutputFormat::Json => match serde_json::to_string_pretty(&reports) {
            Ok(json) => println!("{json}"),
            Err(e) => eprintln!("error: encoding the report: {e}"),
        },
    }
    reports.iter().all(|r| r.errors.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca_and_leaf() -> (String, String) {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        let key = rcgen::KeyPair::generate().expect("key");
        let issuer = rcgen::CertifiedIssuer::self_signed(ca, key).expect("ca");
        let leaf = rcgen::CertificateParams::new(vec!["a.b.svc".to_string()]).expect("params");
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let leaf = leaf.signed_by(&leaf_key, &issuer).expect("leaf");
        (issuer.pem(), leaf.pem())
    }

    #[test]
    fn detects_pem_chain_and_base64_bundle() {
        let (ca, leaf) = ca_and_leaf();
        let chain = inspect_bytes("chain.pem", format!("{leaf}{ca}").as_bytes(), false);
        assert_eq!(chain.format, "PEM");
        assert_eq!(chain.items.len(), 2);
        let b64 = base64::engine::general_purpose::STANDARD.encode(&leaf);
        let bundle = inspect_bytes("bundle", b64.as_bytes(), false);
        assert_eq!(bundle.format, "base64 caBundle (PEM)");
        let Item::Certificate(c) = &bundle.items[0] else {
            panic!("not a certificate: {bundle:?}");
        };
        assert!(
            c.warnings.iter().any(|w| w.contains("yet in a CA bundle")),
            "{c:?}"
        );
        assert_eq!(c.sans, vec!["DNS:a.b.svc"]);
        assert_eq!(c.key, "ECDSA P-256");
        assert!(render_text(&[bundle]).contains("SANs:     DNS:a.b.svc"));
    }

    #[test]
    fn reads_csrs_and_reports_garbage() {
        let params = rcgen::CertificateParams::new(vec!["x.y.svc".to_string()]).expect("params");
        let key = rcgen::KeyPair::generate().expect("key");
        let csr = params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        let r = inspect_bytes("req.csr", csr.as_bytes(), false);
        let Item::CertificateRequest(c) = &r.items[0] else {
            panic!("not a CSR: {r:?}");
        };
        assert_eq!(c.sans, vec!["DNS:x.y.svc"]);
        let bad = inspect_bytes("junk", b"\x00\x01 not a cert", false);
        assert!(!bad.errors.is_empty());
    }

    #[test]
    fn lists_keys_and_names_a_cut_section() {
        let (ca, leaf) = ca_and_leaf();
        let key = rcgen::KeyPair::generate().expect("key").serialize_pem();
        let cut = &ca[..ca.len() / 2];
        let r = inspect_bytes("mixed.pem", format!("{leaf}{key}{cut}").as_bytes(), false);
        assert!(matches!(
            r.items[..],
            [Item::Certificate(_), Item::PrivateKey]
        ));
        assert_eq!(
            r.errors,
            vec![r#"bad PEM: no "-----END CERTIFICATE-----" line: the section is cut short"#]
        );
    }
}

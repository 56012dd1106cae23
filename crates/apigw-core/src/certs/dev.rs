//! The dev PKI behind `apigw certs dev` and `apigw dev` (the `dev-pki` feature): four CAs
//! (serving, client, front proxy, addon), the leaf certificates each signs, a static token file
//! and an admin kubeconfig, written into one directory. Existing files are kept unless `force`;
//! a missing leaf is signed by the CA already on disk so the set stays consistent.

use base64::Engine;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use time::{Duration, OffsetDateTime};

/// Where and how to write the dev PKI.
#[derive(Debug, Clone)]
pub struct DevPkiOptions {
    pub out: PathBuf,
    pub force: bool,
    /// The gateway URL written into the kubeconfig.
    pub gateway_url: String,
}

impl Default for DevPkiOptions {
    fn default() -> Self {
        Self {
            out: PathBuf::from("certs-dev"),
            force: false,
            gateway_url: "https://127.0.0.1:8443".to_string(),
        }
    }
}

/// What a run did: files written, and files that already existed and were left alone.
#[derive(Debug, Clone, Default)]
pub struct DevPkiReport {
    pub written: Vec<PathBuf>,
    pub kept: Vec<PathBuf>,
}

impl DevPkiReport {
    /// One line saying what was written into `dir` and what was already there and kept;
    /// `regenerate` tells how to replace what was kept (`--force`, or the command to run).
    pub fn summary(&self, dir: &Path, regenerate: &str) -> String {
        let names = |paths: &[PathBuf]| {
            paths
                .iter()
                .filter_map(|p| p.file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let dir = dir.display();
        match (self.written.len(), self.kept.len()) {
            (0, 0) => format!("nothing written in {dir}"),
            (w, 0) => format!("wrote the dev PKI in {dir}: {w} files ({})", names(&self.written)),
            (0, k) => format!("reusing the dev PKI in {dir} ({k} files; {regenerate})"),
            (w, k) => format!(
                "reusing the dev PKI in {dir} ({k} files; {regenerate}); wrote the {w} missing ({})",
                names(&self.written)
            ),
        }
    }
}

/// Failures writing the dev PKI; each names the file or certificate concerned.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("generating {what}: {source}")]
    Generate { what: String, source: rcgen::Error },
    #[error("{path}: {message}")]
    Existing { path: String, message: String },
    #[error("{path}: {source}")]
    Random { path: String, source: RandomFailed },
}

/// A CA of the dev PKI: file stem and subject CN.
const CAS: [(&str, &str); 4] = [
    ("ca", "apigw-dev-serving-ca"),
    ("client-ca", "apigw-dev-client-ca"),
    ("front-proxy-ca", "apigw-dev-front-proxy-ca"),
    ("addon-ca", "apigw-dev-addon-ca"),
];

/// A leaf certificate of the dev PKI.
struct Leaf {
    stem: &'static str,
    /// Index into [`CAS`] of the signing CA.
    ca: usize,
    cn: &'static str,
    orgs: &'static [&'static str],
    sans: &'static [&'static str],
    server: bool,
}

const LEAVES: [Leaf; 5] = [
    Leaf {
        stem: "serving",
        ca: 0,
        cn: "apigw-dev-serving",
        orgs: &[],
        sans: &["localhost", "127.0.0.1", "::1"],
        server: true,
    },
    Leaf {
        stem: "admin",
        ca: 1,
        cn: "dev-admin",
        orgs: &["system:masters"],
        sans: &[],
        server: false,
    },
    Leaf {
        stem: "user",
        ca: 1,
        cn: "dev-user",
        orgs: &["dev-group"],
        sans: &[],
        server: false,
    },
    Leaf {
        stem: "proxy-client",
        ca: 2,
        cn: "front-proxy-client",
        orgs: &[],
        sans: &[],
        server: false,
    },
    Leaf {
        stem: "wardle",
        ca: 3,
        cn: "wardle-server.wardle-namespace.svc",
        orgs: &[],
        sans: &[
            "wardle-server.wardle-namespace.svc",
            "localhost",
            "127.0.0.1",
        ],
        server: true,
    },
];

/// Writes the dev PKI into `opts.out` (created if missing).
pub fn write_dev_pki(opts: &DevPkiOptions) -> Result<DevPkiReport, CertsError> {
    std::fs::create_dir_all(&opts.out).map_err(|source| io_err(&opts.out, source))?;
    let mut w = Writer {
        dir: &opts.out,
        force: opts.force,
        report: DevPkiReport::default(),
    };
    let mut issuers = Vec::with_capacity(CAS.len());
    for (stem, cn) in CAS {
        issuers.push(w.ensure_ca(stem, cn)?);
    }
    for leaf in &LEAVES {
        let (issuer, fresh_ca) = &issuers[leaf.ca];
        w.ensure_leaf(leaf, issuer, *fresh_ca)?;
    }
    w.ensure_tokens()?;
    w.ensure_kubeconfig(&opts.gateway_url)?;
    Ok(w.report)
}

struct Writer<'a> {
    dir: &'a Path,
    force: bool,
    report: DevPkiReport,
}

impl Writer<'_> {
    /// The CA's issuer, and whether it was generated in this run.
    fn ensure_ca(
        &mut self,
        stem: &str,
        cn: &str,
    ) -> Result<(Issuer<'static, KeyPair>, bool), CertsError> {
        let (crt, key) = self.pair_paths(stem);
        if self.keep_pair(&crt, &key)? {
            return Ok((load_issuer(&crt, &key)?, false));
        }
        let key_pair = new_key(stem)?;
        let mut params = base_params(cn, &[], &[], 3650, stem)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let cert = params
            .self_signed(&key_pair)
            .map_err(|source| gen_err(stem, source))?;
        self.write(&crt, cert.pem().as_bytes(), false)?;
        self.write(&key, key_pair.serialize_pem().as_bytes(), true)?;
        Ok((Issuer::new(params, key_pair), true))
    }

    fn ensure_leaf(
        &mut self,
        leaf: &Leaf,
        issuer: &Issuer<'static, KeyPair>,
        fresh_ca: bool,
    ) -> Result<(), CertsError> {
        let (crt, key) = self.pair_paths(leaf.stem);
        if self.keep_pair(&crt, &key)? {
            if fresh_ca {
                return Err(existing(
                    &crt,
                    "was issued by a CA that no longer exists; delete it or use --force",
                ));
            }
            return Ok(());
        }
        let key_pair = new_key(leaf.stem)?;
        let mut params = base_params(leaf.cn, leaf.orgs, leaf.sans, 365, leaf.stem)?;
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![if leaf.server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params
            .signed_by(&key_pair, issuer)
            .map_err(|source| gen_err(leaf.stem, source))?;
        self.write(&crt, cert.pem().as_bytes(), false)?;
        self.write(&key, key_pair.serialize_pem().as_bytes(), true)
    }

    fn ensure_tokens(&mut self) -> Result<(), CertsError> {
        let path = self.dir.join("tokens.csv");
        if self.keep(&path) {
            return Ok(());
        }
        let token = random_hex(16).map_err(|source| CertsError::Random {
            path: path.display().to_string(),
            source,
        })?;
        let line = format!("{token},dev-token-user,dev-token-user-uid,\"dev-group\"\n");
        self.write(&path, line.as_bytes(), true)
    }

    fn ensure_kubeconfig(&mut self, server: &str) -> Result<(), CertsError> {
        let path = self.dir.join("kubeconfig");
        if self.keep(&path) {
            return Ok(());
        }
        let yaml = kubeconfig(self.dir, server)?;
        self.write(&path, yaml.as_bytes(), true)
    }

    fn pair_paths(&self, stem: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{stem}.crt")),
            self.dir.join(format!("{stem}.key")),
        )
    }

    /// True (and recorded as kept) when the file exists and `force` is off.
    fn keep(&mut self, path: &Path) -> bool {
        let keep = !self.force && path.exists();
        if keep {
            self.report.kept.push(path.to_path_buf());
        }
        keep
    }

    /// True when both halves of a pair are kept; an error when only one of them exists.
    fn keep_pair(&mut self, crt: &Path, key: &Path) -> Result<bool, CertsError> {
        match (self.keep(crt), self.keep(key)) {
            (true, true) => Ok(true),
            (false, false) => Ok(false),
            (true, false) => Err(existing(
                crt,
                format!(
                    "exists but {} does not; delete it or use --force",
                    key.display()
                ),
            )),
            (false, true) => Err(existing(
                key,
                format!(
                    "exists but {} does not; delete it or use --force",
                    crt.display()
                ),
            )),
        }
    }

    fn write(&mut self, path: &Path, bytes: &[u8], secret: bool) -> Result<(), CertsError> {
        write_file(path, bytes, secret, self.force).map_err(|source| io_err(path, source))?;
        self.report.written.push(path.to_path_buf());
        Ok(())
    }
}

/// Writes `dir/kubeconfig` for dev-admin against `server` when it is missing or names another
/// server (`apigw dev` on another port); true when it was written.
pub fn sync_kubeconfig(dir: &Path, server: &str) -> Result<bool, CertsError> {
    let path = dir.join("kubeconfig");
    let want = kubeconfig(dir, server)?;
    match std::fs::read_to_string(&path) {
        Ok(have) if have == want => return Ok(false),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(io_err(&path, source)),
    }
    write_file(&path, want.as_bytes(), true, true).map_err(|source| io_err(&path, source))?;
    Ok(true)
}

/// The kubeconfig for dev-admin against `server`, from the certificates in `dir`.
fn kubeconfig(dir: &Path, server: &str) -> Result<String, CertsError> {
    let b64 = |stem: &str| -> Result<String, CertsError> {
        let file = dir.join(stem);
        let bytes = std::fs::read(&file).map_err(|source| io_err(&file, source))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "apigw-dev", "cluster": {
            "server": server,
            "certificate-authority-data": b64("ca.crt")?,
        }}],
        "users": [{"name": "dev-admin", "user": {
            "client-certificate-data": b64("admin.crt")?,
            "client-key-data": b64("admin.key")?,
        }}],
        "contexts": [{"name": "apigw-dev", "context": {"cluster": "apigw-dev", "user": "dev-admin"}}],
        "current-context": "apigw-dev",
        "preferences": {},
    });
    crate::yaml::to_string(&doc).map_err(|e| existing(&dir.join("kubeconfig"), e))
}

/// Writes a file, mode 0600 when `secret`; without `overwrite` an existing file is an error.
fn write_file(path: &Path, bytes: &[u8], secret: bool, overwrite: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true);
    if overwrite {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        opts.mode(if secret { 0o600 } else { 0o644 });
        let mut file = opts.open(path)?;
        if secret {
            // An overwritten file keeps its old mode; tighten it.
            file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        }
        file.write_all(bytes)?;
        file.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = secret;
        let mut file = opts.open(path)?;
        file.write_all(bytes)?;
        file.sync_all()
    }
}

/// Subject, SANs and validity shared by CAs and leaves.
fn base_params(
    cn: &str,
    orgs: &[&str],
    sans: &[&str],
    days: i64,
    what: &str,
) -> Result<CertificateParams, CertsError> {
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).map_err(|source| gen_err(what, source))?;
    let mut dn = DistinguishedName::new();
    for org in orgs {
        dn.push(DnType::OrganizationName, *org);
    }
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(days);
    Ok(params)
}

fn new_key(what: &str) -> Result<KeyPair, CertsError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| gen_err(what, source))
}

/// Loads a CA from disk as an issuer, checking that the key belongs to the certificate.
fn load_issuer(crt: &Path, key: &Path) -> Result<Issuer<'static, KeyPair>, CertsError> {
    let crt_pem = std::fs::read_to_string(crt).map_err(|source| io_err(crt, source))?;
    let key_pem = std::fs::read_to_string(key).map_err(|source| io_err(key, source))?;
    let key_pair = KeyPair::from_pem(&key_pem).map_err(|e| existing(key, e))?;
    let der = crate::tls::parse_certs(crt_pem.as_bytes(), &crt.display().to_string())
        .map_err(|e| existing(crt, e))?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(der[0].as_ref()).map_err(|e| existing(crt, e))?;
    if x509.public_key().subject_public_key.data.as_ref() != key_pair.public_key_raw() {
        return Err(existing(
            key,
            format!("is not the key of {}", crt.display()),
        ));
    }
    Issuer::from_ca_cert_der(&der[0], key_pair).map_err(|e| existing(crt, e))
}

/// The crypto provider could not give random bytes.
#[derive(Debug, thiserror::Error)]
#[error("random generator failed: {0:?}")]
pub struct RandomFailed(rustls::crypto::GetRandomFailed);

/// `n` random bytes from the crypto provider, hex encoded.
pub(crate) fn random_hex(n: usize) -> Result<String, RandomFailed> {
    let mut buf = vec![0u8; n];
    crate::tls::provider()
        .secure_random
        .fill(&mut buf)
        .map_err(RandomFailed)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

fn io_err(path: &Path, source: std::io::Error) -> CertsError {
    CertsError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn gen_err(what: &str, source: rcgen::Error) -> CertsError {
    CertsError::Generate {
        what: what.to_string(),
        source,
    }
}

fn existing(path: &Path, message: impl std::fmt::Display) -> CertsError {
    CertsError::Existing {
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    use x509_parser::prelude::{FromDer, X509Certificate};

    const FILES: [&str; 20] = [
        "ca.crt",
        "ca.key",
        "serving.crt",
        "serving.key",
        "client-ca.crt",
        "client-ca.key",
        "admin.crt",
        "admin.key",
        "user.crt",
        "user.key",
        "front-proxy-ca.crt",
        "front-proxy-ca.key",
        "proxy-client.crt",
        "proxy-client.key",
        "addon-ca.crt",
        "addon-ca.key",
        "wardle.crt",
        "wardle.key",
        "tokens.csv",
        "kubeconfig",
    ];

    fn generate() -> (tempfile::TempDir, DevPkiOptions) {
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = DevPkiOptions {
            out: dir.path().join("certs-dev"),
            ..DevPkiOptions::default()
        };
        write_dev_pki(&opts).expect("dev PKI");
        (dir, opts)
    }

    fn cert(opts: &DevPkiOptions, name: &str) -> CertificateDer<'static> {
        crate::tls::load_certs(&opts.out.join(name)).expect("cert")[0].clone()
    }

    #[test]
    fn writes_every_file_and_nothing_else() {
        let (_dir, opts) = generate();
        let mut names: Vec<String> = std::fs::read_dir(&opts.out)
            .expect("read dir")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut want: Vec<String> = FILES.iter().map(|s| s.to_string()).collect();
        want.sort();
        assert_eq!(names, want);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(opts.out.join("admin.key")).expect("meta");
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
        let tokens = std::fs::read_to_string(opts.out.join("tokens.csv")).expect("tokens");
        assert!(tokens.ends_with(",dev-token-user,dev-token-user-uid,\"dev-group\"\n"));
        let kc: serde_json::Value = crate::yaml::value(
            &std::fs::read_to_string(opts.out.join("kubeconfig")).expect("kubeconfig"),
        )
        .expect("yaml");
        assert_eq!(kc["current-context"], "apigw-dev");
        assert_eq!(
            kc["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:8443"
        );
    }

    #[test]
    fn serving_cert_has_sans_and_server_eku() {
        let (_dir, opts) = generate();
        let der = cert(&opts, "serving.crt");
        let (_, x509) = X509Certificate::from_der(der.as_ref()).expect("parse");
        let mut dns = Vec::new();
        let mut ips = Vec::new();
        for ext in x509.extensions() {
            match ext.parsed_extension() {
                ParsedExtension::SubjectAlternativeName(san) => {
                    for name in &san.general_names {
                        match name {
                            GeneralName::DNSName(d) => dns.push(d.to_string()),
                            GeneralName::IPAddress(ip) => ips.push(ip.len()),
                            _ => {}
                        }
                    }
                }
                ParsedExtension::ExtendedKeyUsage(eku) => {
                    assert!(eku.server_auth && !eku.client_auth)
                }
                ParsedExtension::BasicConstraints(bc) => assert!(!bc.ca),
                _ => {}
            }
        }
        assert_eq!(dns, vec!["localhost"]);
        assert_eq!(ips, vec![4, 16]);
        let ca = cert(&opts, "ca.crt");
        let (_, ca) = X509Certificate::from_der(ca.as_ref()).expect("parse ca");
        assert!(ca.is_ca());
        let ku = ca.key_usage().expect("ku").expect("present");
        assert!(ku.critical && ku.value.key_cert_sign() && ku.value.crl_sign());
    }

    #[test]
    fn admin_cert_names_user_and_group() {
        let (_dir, opts) = generate();
        let subject = crate::tls::subject(&cert(&opts, "admin.crt")).expect("subject");
        assert_eq!(
            subject,
            ("dev-admin".to_string(), vec!["system:masters".to_string()])
        );
        let subject = crate::tls::subject(&cert(&opts, "user.crt")).expect("subject");
        assert_eq!(
            subject,
            ("dev-user".to_string(), vec!["dev-group".to_string()])
        );
    }

    #[test]
    fn second_run_keeps_files() {
        let (_dir, opts) = generate();
        let before: Vec<Vec<u8>> = FILES
            .iter()
            .map(|f| std::fs::read(opts.out.join(f)).expect("read"))
            .collect();
        let report = write_dev_pki(&opts).expect("second run");
        assert!(report.written.is_empty());
        assert_eq!(report.kept.len(), FILES.len());
        for (f, old) in FILES.iter().zip(before) {
            assert_eq!(std::fs::read(opts.out.join(f)).expect("read"), old, "{f}");
        }
        let forced = DevPkiOptions {
            force: true,
            ..opts.clone()
        };
        assert_eq!(
            write_dev_pki(&forced).expect("forced").written.len(),
            FILES.len()
        );
    }

    #[test]
    fn missing_leaf_is_signed_by_existing_ca() {
        let (_dir, opts) = generate();
        std::fs::remove_file(opts.out.join("proxy-client.crt")).expect("rm");
        std::fs::remove_file(opts.out.join("proxy-client.key")).expect("rm");
        let report = write_dev_pki(&opts).expect("rerun");
        assert_eq!(report.written.len(), 2);
        proxy_client_verifies(&opts);
        std::fs::remove_file(opts.out.join("user.key")).expect("rm");
        assert!(write_dev_pki(&opts).is_err(), "half a pair is reported");
    }

    fn proxy_client_verifies(opts: &DevPkiOptions) {
        let ca = crate::tls::load_certs(&opts.out.join("front-proxy-ca.crt")).expect("ca");
        let chain = crate::tls::load_certs(&opts.out.join("proxy-client.crt")).expect("chain");
        let verifier = crate::tls::PeerVerifier::new(&ca, "front-proxy CA").expect("verifier");
        assert!(verifier.verifies(&chain));
        let other = crate::tls::load_certs(&opts.out.join("client-ca.crt")).expect("ca");
        let other = crate::tls::PeerVerifier::new(&other, "client CA").expect("verifier");
        assert!(!other.verifies(&chain));
    }

    #[test]
    fn proxy_client_verifies_against_front_proxy_ca() {
        let (_dir, opts) = generate();
        proxy_client_verifies(&opts);
    }

    #[test]
    fn wardle_cert_verifies_as_server() {
        let (_dir, opts) = generate();
        let ca = crate::tls::load_certs(&opts.out.join("addon-ca.crt")).expect("ca");
        let roots = crate::tls::root_store(&ca, "addon CA").expect("roots");
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            crate::tls::provider(),
        )
        .build()
        .expect("verifier");
        let leaf = cert(&opts, "wardle.crt");
        let verify = |name: &'static str| {
            let name = ServerName::try_from(name).expect("name");
            rustls::client::danger::ServerCertVerifier::verify_server_cert(
                verifier.as_ref(),
                &leaf,
                &[],
                &name,
                &[],
                UnixTime::now(),
            )
        };
        assert!(verify("wardle-server.wardle-namespace.svc").is_ok());
        assert!(verify("other.wardle-namespace.svc").is_err());
    }
}

//! The demo, behind the `dev` feature (on by default; the product image leaves it out):
//! `apigw dev`, the zero-setup local front door, which checks that the config is there, writes
//! the dev PKI if missing, starts the sample addon server, and runs the gateway with
//! `config/dev.yaml`, whose manifest directory registers the sample server (the gateway sends
//! the sample's APIService to the port the sample server was started on) and logs commands to
//! try it with curl, openssl and kubectl; `apigw certs dev`, the dev PKI alone; and
//! `apigw sample-apiserver`, the sample server alone.

use crate::{COMMANDS_TARGET, DEV_CERTS, DEV_CONFIG};
use anyhow::Context as _;
use apigw_core::certs::{sync_kubeconfig, write_dev_pki, DevPkiOptions};
use apigw_gateway::config::{
    check_config_file, check_key_pairs, AuthnFlags, Config, ConfigError, Flags, ProxyFlags,
    ServingFlags,
};
use apigw_sample::SampleConfig;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The service the dev APIService (`config/apiservices/wardle.yaml`) names, and the name the
/// sample server's certificate is for.
pub const SAMPLE_SERVICE: &str = "wardle-server.wardle-namespace.svc";

/// Flags of `apigw dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Gateway config file (relative paths in it are relative to it).
    #[arg(long, default_value = DEV_CONFIG)]
    pub config: PathBuf,
    /// Where the dev PKI lives (written if missing; `apigw certs dev --force --out DIR`
    /// regenerates it). The gateway and the sample server use its certificates, keys and
    /// tokens, whatever paths the config names.
    #[arg(long, default_value = DEV_CERTS)]
    pub certs: PathBuf,
    /// Port of the gateway [default: the config's securePort, 8443 in config/dev.yaml].
    #[arg(long)]
    pub port: Option<u16>,
    /// Port of the sample addon server on 127.0.0.1; the gateway sends
    /// wardle-server.wardle-namespace.svc:443 there.
    #[arg(long, default_value_t = 9443)]
    pub sample_port: u16,
}

/// Runs dev mode until Ctrl-C.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    // Everything that can be checked before writing anything is checked first.
    check_config_file(&args.config).map_err(|problems| config_missing(&args.config, &problems))?;
    let report = write_dev_pki(&DevPkiOptions {
        out: args.certs.clone(),
        force: false,
        gateway_url: "https://127.0.0.1:8443".into(),
    })
    .context("writing the dev PKI")?;
    let certs = &args.certs;
    tracing::info!(
        "{}",
        report.summary(
            certs,
            &format!(
                "apigw certs dev --force --out {} regenerates it",
                certs.display()
            )
        )
    );
    let pki = |file: &str| Some(certs.join(file));
    let mut cfg = Config::load(&Flags {
        config: Some(args.config.clone()),
        serving: ServingFlags {
            secure_port: args.port,
            tls_cert_file: pki("serving.crt"),
            tls_private_key_file: pki("serving.key"),
            ..Default::default()
        },
        authn: AuthnFlags {
            client_ca_file: pki("client-ca.crt"),
            token_auth_file: pki("tokens.csv"),
            ..Default::default()
        },
        proxy: ProxyFlags {
            proxy_client_cert_file: pki("proxy-client.crt"),
            proxy_client_key_file: pki("proxy-client.key"),
            service_ca_file: pki("addon-ca.crt"),
            ..Default::default()
        },
        ..Default::default()
    })
    .map_err(|problems| problems_error(&problems))?;
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let pair_problems = check_key_pairs(&cfg);
    if !pair_problems.is_empty() {
        return Err(problems_error(&pair_problems));
    }
    let sample_addr = SocketAddr::from(([127, 0, 0, 1], args.sample_port));
    cfg.proxy
        .resolve
        .insert((SAMPLE_SERVICE.to_string(), 443), vec![sample_addr]);

    let url = format!("https://{}", local_addr(cfg.server.listen));
    if sync_kubeconfig(certs, &url).context("writing the dev kubeconfig")? {
        tracing::info!(
            "wrote {} for dev-admin against {url}",
            certs.join("kubeconfig").display()
        );
    }

    let sample_listener = tokio::net::TcpListener::bind(sample_addr)
        .await
        .with_context(|| {
            format!("sample server: listening on {sample_addr} (--sample-port picks another)")
        })?;
    let sample_cfg = SampleConfig {
        allowed_names: vec!["front-proxy-client".into()],
        ..SampleConfig::new(
            certs.join("wardle.crt"),
            certs.join("wardle.key"),
            certs.join("front-proxy-ca.crt"),
        )
    };
    let listener = tokio::net::TcpListener::bind(cfg.server.listen)
        .await
        .with_context(|| {
            format!(
                "gateway: listening on {} (--port picks another)",
                cfg.server.listen
            )
        })?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut sample_stop = stop_rx.clone();
    let sample = tokio::spawn(async move {
        let stop = async move {
            let _ = sample_stop.wait_for(|s| *s).await;
        };
        apigw_sample::run(sample_listener, sample_cfg, stop).await
    });
    tracing::info!(
        "gateway on {url}; sample server wardle.example.com/v1alpha1 on {sample_addr} behind it, as {SAMPLE_SERVICE}:443"
    );
    log_try_lines(certs, &url);
    let result = apigw_gateway::gateway::run(cfg, listener, apigw_core::shutdown_signal()).await;
    let _ = stop_tx.send(true);
    sample.await.context("sample server task")??;
    result
}

/// The error of a dev config that is missing or unreadable: where dev mode runs from.
fn config_missing(config: &Path, problems: &[ConfigError]) -> anyhow::Error {
    let cwd = std::env::current_dir().map_or_else(|_| ".".into(), |d| d.display().to_string());
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    anyhow::anyhow!(
        "{}\napigw dev needs its config ({}; --config FILE names another) and runs from the root \
         of the apigw repository, where config/dev.yaml and config/apiservices/ are; it is \
         running in {cwd}. Nothing was written.",
        lines.join("\n"),
        config.display(),
    )
}

fn problems_error(problems: &[ConfigError]) -> anyhow::Error {
    let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
    anyhow::anyhow!("{}", lines.join("\n"))
}

/// The address to reach a listener on from this host: loopback for an unspecified address.
fn local_addr(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(std::net::Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// The commands to try: one log line saying so, then each command as a line of its own, in the
/// log's order (the text log prints [`COMMANDS_TARGET`] lines bare).
fn log_try_lines(certs: &Path, url: &str) {
    let c = |f: &str| certs.join(f).display().to_string();
    let host_port = url.trim_start_matches("https://");
    let (ca, admin, admin_key) = (c("ca.crt"), c("admin.crt"), c("admin.key"));
    let (tokens, kubeconfig) = (c("tokens.csv"), c("kubeconfig"));
    let flunders = format!("{url}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders");
    tracing::info!("try it (from this directory, in another shell):");
    for line in [
        format!("curl --cacert {ca} --cert {admin} --key {admin_key} {url}/apis"),
        format!(
            "curl --cacert {ca} -H \"Authorization: Bearer $(cut -d, -f1 {tokens})\" {flunders}"
        ),
        format!(
            "openssl s_client -connect {host_port} -CAfile {ca} -cert {admin} -key {admin_key} -alpn h2 </dev/null"
        ),
        format!("kubectl --kubeconfig {kubeconfig} api-versions"),
        format!("kubectl --kubeconfig {kubeconfig} create -n default -f examples/flunder.yaml"),
        format!("kubectl --kubeconfig {kubeconfig} get flunders -n default"),
    ] {
        tracing::info!(target: COMMANDS_TARGET, "{line}");
    }
}

/// Flags of `apigw certs dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct CertsDevArgs {
    /// Directory to write the CAs, certificates, keys, tokens.csv and kubeconfig into
    /// (created if missing).
    #[arg(long, default_value = DEV_CERTS)]
    pub out: PathBuf,
    /// Replace existing files: a whole new PKI (certificates and kubeconfigs made from the
    /// old CAs stop working).
    #[arg(long)]
    pub force: bool,
}

/// `apigw certs dev`: writes the dev PKI and says what it wrote or kept.
pub fn certs_dev(args: &CertsDevArgs) -> anyhow::Result<ExitCode> {
    let report = write_dev_pki(&DevPkiOptions {
        out: args.out.clone(),
        force: args.force,
        gateway_url: "https://127.0.0.1:8443".into(),
    })?;
    println!("{}", report.summary(&args.out, "--force regenerates it"));
    Ok(ExitCode::SUCCESS)
}

/// Flags of `apigw sample-apiserver`.
#[derive(Debug, Clone, clap::Args)]
pub struct SampleArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    #[arg(long, default_value_t = 9443)]
    pub secure_port: u16,
    /// Serving certificate (for wardle-server.wardle-namespace.svc).
    #[arg(long, default_value = "certs-dev/wardle.crt")]
    pub tls_cert_file: PathBuf,
    #[arg(long, default_value = "certs-dev/wardle.key")]
    pub tls_private_key_file: PathBuf,
    /// CA of the gateway's proxy client certificate.
    #[arg(long, default_value = "certs-dev/front-proxy-ca.crt")]
    pub requestheader_client_ca_file: PathBuf,
    /// Allowed proxy client CNs (comma list; empty allows any from the CA).
    #[arg(long, value_delimiter = ',', default_value = "front-proxy-client")]
    pub requestheader_allowed_names: Vec<String>,
}

/// `apigw sample-apiserver`: the sample addon server alone, until a signal.
pub async fn sample_apiserver(args: SampleArgs) -> anyhow::Result<ExitCode> {
    if let Err(problem) = apigw_gateway::config::check_key_pair(
        "tls-cert-file",
        "tls-private-key-file",
        &args.tls_cert_file,
        &args.tls_private_key_file,
    ) {
        eprintln!("error: {problem}");
        return Ok(ExitCode::FAILURE);
    }
    let addr = SocketAddr::new(args.bind_address, args.secure_port);
    let cfg = SampleConfig {
        allowed_names: args.requestheader_allowed_names,
        ..SampleConfig::new(
            args.tls_cert_file,
            args.tls_private_key_file,
            args.requestheader_client_ca_file,
        )
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr}"))?;
    tracing::info!(%addr, "sample-apiserver serving wardle.example.com/v1alpha1");
    apigw_sample::run(listener, cfg, apigw_core::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

//! `apigw dev`: the zero-setup local front door. Writes the dev PKI if missing, starts the
//! sample addon server, and runs the gateway with `config/dev.yaml`, whose manifest directory
//! registers the sample server. Prints commands to try it with curl, openssl and kubectl.

use crate::certs::{write_dev_pki, DevPkiOptions};
use crate::config::{Config, Flags};
use crate::sample::{self, SampleConfig};
use anyhow::Context as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Flags of `apigw dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevArgs {
    /// Gateway config file.
    #[arg(long, default_value = "config/dev.yaml")]
    pub config: PathBuf,
    /// Where the dev PKI lives (created if missing).
    #[arg(long, default_value = "certs-dev")]
    pub certs: PathBuf,
    /// Port of the sample addon server on 127.0.0.1 (the config's `resolve` must match).
    #[arg(long, default_value_t = 9443)]
    pub sample_port: u16,
}

/// Runs dev mode until Ctrl-C.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let report = write_dev_pki(&DevPkiOptions {
        out: args.certs.clone(),
        force: false,
        gateway_url: "https://127.0.0.1:8443".into(),
    })
    .context("writing the dev PKI")?;
    tracing::info!("{report}");
    let cfg = Config::load(&Flags {
        config: Some(args.config.clone()),
        ..Default::default()
    })
    .map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("{}", lines.join("\n"))
    })?;

    let certs = &args.certs;
    let sample_addr = SocketAddr::from(([127, 0, 0, 1], args.sample_port));
    let sample_listener = tokio::net::TcpListener::bind(sample_addr)
        .await
        .with_context(|| format!("sample server: listening on {sample_addr}"))?;
    let sample_cfg = SampleConfig {
        allowed_names: vec!["front-proxy-client".into()],
        ..SampleConfig::new(
            certs.join("wardle.crt"),
            certs.join("wardle.key"),
            certs.join("front-proxy-ca.crt"),
        )
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut sample_stop = stop_rx.clone();
    let sample = tokio::spawn(async move {
        let stop = async move {
            let _ = sample_stop.wait_for(|s| *s).await;
        };
        sample::run(sample_listener, sample_cfg, stop).await
    });

    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("gateway: listening on {}", cfg.listen))?;
    print_try_lines(certs, cfg.listen);
    let result = crate::gateway::run(cfg, listener, crate::shutdown_signal()).await;
    let _ = stop_tx.send(true);
    sample.await.context("sample server task")??;
    result
}

fn print_try_lines(certs: &Path, listen: SocketAddr) {
    let c = |f: &str| certs.join(f).display().to_string();
    let url = format!("https://{listen}");
    println!(
        "\napigw dev: gateway on {url}, sample server wardle.example.com/v1alpha1 behind it\n\n\
         Try:\n  \
         curl --cacert {ca} --cert {admin} --key {admin_key} {url}/apis\n  \
         curl --cacert {ca} -H \"Authorization: Bearer $(cut -d, -f1 {tokens})\" {url}/apis/wardle.example.com/v1alpha1/namespaces/default/flunders\n  \
         openssl s_client -connect {listen} -CAfile {ca} -cert {admin} -key {admin_key} -alpn h2 </dev/null\n  \
         kubectl --kubeconfig {kubeconfig} api-versions\n  \
         kubectl --kubeconfig {kubeconfig} create -n default -f examples/flunder.yaml\n  \
         kubectl --kubeconfig {kubeconfig} get flunders -n default\n",
        ca = c("ca.crt"),
        admin = c("admin.crt"),
        admin_key = c("admin.key"),
        tokens = c("tokens.csv"),
        kubeconfig = c("kubeconfig"),
    );
}

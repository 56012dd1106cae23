//! The connection to the cluster's API server: a [`kube::Client`] from a kubeconfig file
//! (`--kubeconfig`) or, without one, from the in-cluster service account.

use super::ClusterError;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::Path;

/// Builds a client from `kubeconfig` (its current context), or from the in-cluster
/// environment when `None`. Installs the ring crypto provider first: kube's rustls config is
/// built with the process default provider.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClusterError> {
    apigw_core::tls::install_default_provider();
    let config = match kubeconfig {
        Some(path) => {
            let what = || format!("kubeconfig {}", path.display());
            let kc = Kubeconfig::read_from(path).map_err(|e| ClusterError::config(what(), e))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| ClusterError::config(what(), e))?
        }
        None => kube::Config::incluster()
            .map_err(|e| ClusterError::config("in-cluster config".into(), e))?,
    };
    kube::Client::try_from(config).map_err(|e| ClusterError::config("kubernetes client".into(), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn missing_kubeconfig_names_the_file() {
        let Err(err) = client(Some(Path::new("/nonexistent/kubeconfig"))).await else {
            panic!("a missing kubeconfig must fail");
        };
        let err = err.to_string();
        assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
    }
}

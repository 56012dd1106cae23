//! HTTP and TLS basics shared by the gateway, the sample server and the bench: the streaming
//! body type, `kind: Status` errors, TLS configs and certificate verification, the one serve
//! loop (TLS or plain) with its limits and graceful drain, YAML, the API machinery the served
//! APIs share and Kubernetes' naming rules, files that apply when they change, the settings sections and their merge, reading certificates back, the dev PKI (the
//! `dev-pki` feature), a review cache, Prometheus family registration, and the shutdown signal. Depends on no other apigw crate.

pub mod body;
pub mod cache;
pub mod certs;
pub mod digits;
pub mod duration;
pub mod errors;
pub mod families;
pub mod meta;
pub mod names;
pub mod reload;
pub mod server;
pub mod settings;
pub mod tls;
pub mod yaml;

/// A boxed future borrowing its receiver, as the review traits (TokenReview,
/// SubjectAccessReview) return.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// Resolves on the first Ctrl-C or SIGTERM: the signal to stop accepting and drain. A second
/// one ends the process at once with exit code 1, as kube-apiserver does, for whoever will not
/// wait for the drain.
pub async fn shutdown_signal() {
    next_signal().await;
    tracing::info!("shutting down: draining connections; a second Ctrl-C or SIGTERM exits at once");
    tokio::spawn(async {
        next_signal().await;
        tracing::warn!("second signal: exiting without waiting for the drain");
        std::process::exit(1);
    });
}

/// The next Ctrl-C or SIGTERM after the call.
async fn next_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

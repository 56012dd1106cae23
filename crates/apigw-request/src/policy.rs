//! What an APIService's annotations ask of its requests beyond the gateway's defaults
//! (`apigw_registry` reads them): its own timeout and long-running subresources, which
//! kube-aggregator cannot (kubernetes/kubernetes#73421).

/// How the gateway treats an APIService's requests, beyond `--request-timeout` and kube's
/// long-running requests (watches, upgrades, exec, attach, portforward, proxy, followed logs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Bounds its requests that are not long-running instead of `--request-timeout`.
    pub request_timeout: Option<std::time::Duration>,
    /// Subresources whose requests are long-running too: no timeout, no in-flight slot.
    pub long_running_subresources: Vec<String>,
}

impl Policy {
    /// Whether a request for `subresource` is long-running by this policy.
    pub fn long_running(&self, subresource: &str) -> bool {
        !subresource.is_empty()
            && self
                .long_running_subresources
                .iter()
                .any(|s| s == subresource)
    }
}

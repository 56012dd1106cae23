//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does:
//! every `retry` period a candidate reads the Lease; it takes a Lease that is missing, or whose
//! record has not changed for `lease_duration` (measured on the local clock from when this
//! candidate last saw it change, so clock skew between replicas does not matter); the holder
//! renews it, and gives up leadership when it could not renew for `renew_deadline`. Every
//! write carries the resourceVersion it read, so two candidates never both win.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Where the Lease lives, who we are, and the timing.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// `holderIdentity`: unique per replica.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry: Duration,
}

impl LeaseSettings {
    /// client-go's defaults (15 s, 10 s, 2 s) with [`default_identity`].
    pub fn new(namespace: &str, name: &str) -> Self {
        Self::with_timing(namespace, name, &super::LeaderElection::default())
    }

    /// The timing of `--leader-elect-*` with [`default_identity`].
    pub fn with_timing(namespace: &str, name: &str, timing: &super::LeaderElection) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: default_identity(),
            lease_duration: timing.lease_duration,
            renew_deadline: timing.renew_deadline,
            retry: timing.retry_period,
        }
    }
}

/// `$POD_NAME`, else the host name, followed by `_` and a random suffix, as
/// kube-controller-manager makes its id: unique per elector, so two replicas never share one,
/// even two gateways in one process (the tests) or a restart with the same pid.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "apigw".to_string());
    format!("{host}_{}", random_suffix())
}

/// 16 hex digits from the system's random source; the process id and the clock when that
/// source fails, which still tells two processes apart.
fn random_suffix() -> String {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        return format!("{:08x}{nanos:08x}", std::process::id());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A running candidate. Dropping it stops the candidate without releasing the Lease.
pub struct LeaderElector {
    leader: watch::Receiver<bool>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl LeaderElector {
    /// Starts campaigning for the Lease.
    pub fn spawn(client: kube::Client, settings: LeaseSettings) -> Self {
        let (tx, leader) = watch::channel(false);
        let stop = CancellationToken::new();
        let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
        let task = tokio::spawn(campaign(api, settings, tx, stop.clone()));
        Self { leader, stop, task }
    }

    /// "Am I the leader": true while this replica holds the Lease.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.leader.clone()
    }

    pub fn is_leader(&self) -> bool {
        *self.leader.borrow()
    }

    /// Stops campaigning; when leading, releases the Lease so another replica takes over at
    /// once instead of after the lease duration.
    pub async fn release(mut self) {
        self.stop.cancel();
        let _ = (&mut self.task).await;
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What this candidate last saw of the Lease, and when it changed.
struct Observed {
    record: Option<(Option<String>, Option<MicroTime>, Option<String>)>,
    at: Instant,
}

async fn campaign(
    api: Api<Lease>,
    s: LeaseSettings,
    leader: watch::Sender<bool>,
    stop: CancellationToken,
) {
    let mut observed = Observed {
        record: None,
        at: Instant::now(),
    };
    let mut last_renew: Option<Instant> = None;
    loop {
        match try_acquire_or_renew(&api, &s, &mut observed).await {
            Ok(true) => last_renew = Some(Instant::now()),
            Ok(false) => last_renew = None,
            Err(e) => {
                tracing::warn!(lease = %s.name, error = %e, "lease: could not acquire or renew")
            }
        }
        let leading = last_renew.is_some_and(|t| t.elapsed() < s.renew_deadline);
        if leading != *leader.borrow() {
            tracing::info!(lease = %s.name, identity = %s.identity, leading, "leadership changed");
            leader.send_replace(leading);
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(s.retry) => {}
        }
    }
    if *leader.borrow() {
        leader.send_replace(false);
        if let Err(e) = release(&api, &s).await {
            tracing::warn!(lease = %s.name, error = %e, "lease: could not release");
        }
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One round: returns whether we hold the Lease after it.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    s: &LeaseSettings,
    observed: &mut Observed,
) -> Result<bool, kube::Error> {
    // Whole seconds on the wire, rounded up so that others never wait less than configured.
    let duration_secs =
        i32::try_from(s.lease_duration.as_secs_f64().ceil().max(1.0) as u64).unwrap_or(i32::MAX);
    let Some(mut lease) = api.get_opt(&s.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(s.name.clone()),
                namespace: Some(s.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(s.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let record = (
        spec.holder_identity.clone(),
        spec.renew_time.clone(),
        lease.metadata.resource_version.clone(),
    );
    if observed.record.as_ref() != Some(&record) {
        observed.record = Some(record);
        observed.at = Instant::now();
    }
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    let ours = holder == s.identity;
    let held_for = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    if !ours && !holder.is_empty() && observed.at.elapsed() < held_for {
        return Ok(false);
    }
    let mut next = spec;
    if !ours {
        next.acquire_time = Some(now());
        next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
    }
    next.holder_identity = Some(s.identity.clone());
    next.lease_duration_seconds = Some(duration_secs);
    next.renew_time = Some(now());
    lease.spec = Some(next);
    match api.replace(&s.name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Gives the Lease up: empty holder and a one-second duration, as client-go's
/// `ReleaseOnCancel` does.
async fn release(api: &Api<Lease>, s: &LeaseSettings) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&s.name).await? else {
        return Ok(());
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(s.identity.as_str()) {
        return Ok(());
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    api.replace(&s.name, &PostParams::default(), &lease).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_differ_per_elector() {
        let (a, b) = (default_identity(), default_identity());
        assert_ne!(a, b);
        let suffix = a.rsplit('_').next().unwrap_or("");
        assert_eq!(suffix.len(), 16, "{a}");
    }
}

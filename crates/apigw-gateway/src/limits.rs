//! Admission limits, checked before authentication as kube-apiserver's max-in-flight filter
//! is: requests in flight overall (`--max-requests-inflight`, long-running requests exempt)
//! and per client address (`--max-requests-inflight-per-client`). Over a limit: 429 with
//! `Retry-After`. Health and `/version` are answered before these limits, so a probe always gets
//! through; open connections per client address (`--max-connections-per-client`) are limited
//! at accept (`apigw_core::server`). Also the limits' settings, with the request timeout and
//! the largest request body, which the pipeline enforces ([`LimitsSettings`], read from
//! [`LimitsFlags`]).

use apigw_core::duration::format_duration;
use apigw_core::errors::Status;
use apigw_core::settings::Cx;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Limits on the requests the gateway takes; 0 (or None) is unlimited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsSettings {
    /// Requests in flight at once, long-running ones exempt; then 429.
    pub max_inflight: usize,
    /// Requests in flight at once from one client address.
    pub max_inflight_per_client: usize,
    /// Time to the response head of a request that is not long-running; 504 after.
    pub request_timeout: Duration,
    /// Largest non-streaming request body forwarded; None: no limit.
    pub max_request_body_bytes: Option<usize>,
}

impl Default for LimitsSettings {
    fn default() -> Self {
        Self {
            max_inflight: 400,
            max_inflight_per_client: 0,
            request_timeout: Duration::from_secs(60),
            max_request_body_bytes: None,
        }
    }
}

apigw_core::section! {
    /// [`LimitsSettings`].
    pub struct LimitsFlags {
        /// Bound on a request that is not long-running, end to end from its start: 504 before
        /// the response head, the response cut after.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 34)]
        pub request_timeout: Option<String> = "requestTimeout",
        /// Requests in flight at once, long-running ones exempt; then 429; 0: no limit.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 45)]
        pub max_requests_inflight: Option<usize> = "maxRequestsInflight",
        /// Requests in flight at once from one client address; 0: no limit.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 46)]
        pub max_requests_inflight_per_client: Option<usize> = "maxRequestsInflightPerClient",
        /// Largest request body of a non-streaming request (POST, PUT, PATCH...), bytes; then 413.
        #[arg(long, help_heading = "Limits and timeouts", display_order = 49)]
        pub max_request_body_bytes: Option<usize> = "maxRequestBodyBytes",
    }
}

impl LimitsFlags {
    pub fn settings(self, cx: &mut Cx) -> LimitsSettings {
        let d = LimitsSettings::default();
        LimitsSettings {
            max_inflight: self.max_requests_inflight.unwrap_or(d.max_inflight),
            max_inflight_per_client: self
                .max_requests_inflight_per_client
                .unwrap_or(d.max_inflight_per_client),
            request_timeout: cx.duration(
                "request-timeout",
                self.request_timeout,
                d.request_timeout,
            ),
            max_request_body_bytes: self
                .max_request_body_bytes
                .filter(|n| *n > 0)
                .or(d.max_request_body_bytes),
        }
    }

    /// Each flag with a default, by argument id, and the default as a user would write it.
    pub fn defaults() -> Vec<(&'static str, String)> {
        let d = LimitsSettings::default();
        vec![
            ("request_timeout", format_duration(d.request_timeout)),
            ("max_requests_inflight", d.max_inflight.to_string()),
            (
                "max_requests_inflight_per_client",
                d.max_inflight_per_client.to_string(),
            ),
        ]
    }
}

/// The limits; 0 means unlimited.
#[derive(Debug, Default)]
pub struct Limits {
    pub max_inflight: usize,
    pub max_inflight_per_client: usize,
    inflight: AtomicUsize,
    per_client: Mutex<HashMap<IpAddr, usize>>,
}

/// Holds one admitted request; releases it when dropped.
pub struct Permit {
    limits: Arc<Limits>,
    client: IpAddr,
    global: bool,
    per_client: bool,
}

fn take(map: &Mutex<HashMap<IpAddr, usize>>, client: IpAddr, max: usize) -> bool {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    let n = map.entry(client).or_default();
    if *n >= max {
        return false;
    }
    *n += 1;
    true
}

fn give_back(map: &Mutex<HashMap<IpAddr, usize>>, client: IpAddr) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = map.get_mut(&client) {
        *n -= 1;
        if *n == 0 {
            map.remove(&client);
        }
    }
}

/// The 429 kube-apiserver answers, with its `Retry-After`.
fn too_many() -> Status {
    Status::new(
        http::StatusCode::TOO_MANY_REQUESTS,
        "TooManyRequests",
        "Too many requests, please try again later.",
    )
    .with_retry_after(1)
}

impl Limits {
    pub fn new(max_inflight: usize, max_inflight_per_client: usize) -> Arc<Self> {
        Arc::new(Self {
            max_inflight,
            max_inflight_per_client,
            ..Self::default()
        })
    }

    /// Admits a request from `client`; long-running requests only count per client.
    pub fn admit(self: &Arc<Self>, client: IpAddr, long_running: bool) -> Result<Permit, Status> {
        let mut permit = Permit {
            limits: self.clone(),
            client,
            global: false,
            per_client: false,
        };
        if self.max_inflight > 0 && !long_running {
            if self.inflight.fetch_add(1, Ordering::AcqRel) >= self.max_inflight {
                self.inflight.fetch_sub(1, Ordering::AcqRel);
                return Err(too_many());
            }
            permit.global = true;
        }
        if self.max_inflight_per_client > 0 {
            if !take(&self.per_client, client, self.max_inflight_per_client) {
                return Err(too_many());
            }
            permit.per_client = true;
        }
        Ok(permit)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.global {
            self.limits.inflight.fetch_sub(1, Ordering::AcqRel);
        }
        if self.per_client {
            give_back(&self.limits.per_client, self.client);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permits_count_and_release() {
        let l = Limits::new(2, 1);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let p1 = l.admit(a, false).unwrap();
        assert_eq!(
            l.admit(a, false).err().map(|s| s.code().as_u16()),
            Some(429),
            "per client"
        );
        let p2 = l.admit(b, false).unwrap();
        let c: IpAddr = "10.0.0.3".parse().unwrap();
        assert!(l.admit(c, false).is_err(), "global");
        drop(p1);
        assert!(l.admit(c, false).is_ok());
        drop(p2);
        let unlimited = Limits::new(0, 0);
        let all: Vec<_> = (0..100)
            .map(|_| unlimited.admit(a, false).unwrap())
            .collect();
        assert_eq!(all.len(), 100);
    }
}

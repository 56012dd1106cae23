//! Admission limits, checked before authentication as kube-apiserver's max-in-flight filter
//! is: requests in flight overall (`--max-requests-inflight`, long-running requests exempt)
//! and per client address (`--max-requests-inflight-per-client`). Over a limit: 429 with
//! `Retry-After`. Health and `/version` are answered before these limits, so a probe always gets
//! through; open connections per client address (`--max-connections-per-client`) are limited
//! at accept (`apigw_core::server`).

use apigw_core::errors::Status;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

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

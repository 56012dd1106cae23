//! A small bounded cache with a time to live per entry, for the answers of reviews (TokenReview,
//! SubjectAccessReview). Keys are SHA-256
//! digests, so a token never sits in memory as a cache key; when full, the oldest insertion
//! is evicted first.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A SHA-256 digest of `parts`, each length-prefixed so that different splits never collide.
pub fn digest(parts: &[&str]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in parts {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

struct Entry<V> {
    value: V,
    expires: Instant,
    seq: u64,
}

struct Inner<V> {
    entries: HashMap<[u8; 32], Entry<V>>,
    /// Insertion order: sequence number to key.
    order: BTreeMap<u64, [u8; 32]>,
    next: u64,
}

/// Entries expire after the TTL given at insertion; at most `capacity` are kept.
pub struct TtlCache<V> {
    inner: Mutex<Inner<V>>,
    capacity: usize,
}

impl<V: Clone> TtlCache<V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Mutex::new(Inner {
                entries: HashMap::new(),
                order: BTreeMap::new(),
                next: 0,
            }),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<V>> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that
        // matters for a cache; keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live value under `key`, if any.
    pub fn get(&self, key: &[u8; 32]) -> Option<V> {
        let mut inner = self.lock();
        let entry = inner.entries.get(key)?;
        if entry.expires > Instant::now() {
            return Some(entry.value.clone());
        }
        let seq = entry.seq;
        inner.entries.remove(key);
        inner.order.remove(&seq);
        None
    }

    /// Stores `value` for `ttl`; a zero TTL stores nothing.
    pub fn insert(&self, key: [u8; 32], value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut inner = self.lock();
        if let Some(old) = inner.entries.remove(&key) {
            inner.order.remove(&old.seq);
        }
        while inner.entries.len() >= self.capacity {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            inner.entries.remove(&oldest);
        }
        let seq = inner.next;
        inner.next += 1;
        inner.order.insert(seq, key);
        let expires = Instant::now() + ttl;
        inner.entries.insert(
            key,
            Entry {
                value,
                expires,
                seq,
            },
        );
    }

    /// Entries held, expired ones included until evicted.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expires_and_evicts_oldest() {
        let c = TtlCache::new(2);
        let (a, b, d) = (digest(&["a"]), digest(&["b"]), digest(&["d"]));
        c.insert(a, 1, Duration::from_secs(60));
        c.insert(b, 2, Duration::from_secs(60));
        c.insert(d, 3, Duration::from_secs(60));
        assert_eq!((c.get(&a), c.get(&b), c.get(&d)), (None, Some(2), Some(3)));
        c.insert(a, 4, Duration::from_nanos(1));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(c.get(&a), None);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn digest_parts_do_not_run_together() {
        assert_ne!(digest(&["ab", "c"]), digest(&["a", "bc"]));
    }
}

//! The cap on open connections, below the open-file limit: at the cap, a new connection makes
//! room by closing the connection that has been quiet the longest (in its TLS handshake, waiting
//! for its first request, or idle between requests: no request of it is being answered), and is
//! closed at accept itself only when every open connection is answering a request. So a flood of
//! idle connections can neither exhaust the file descriptors nor lock out a kubelet's probe or
//! a client with a request to send; watches and requests in flight are never shed.

use super::deadlines::Activity;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Open connections at most, for an open-file limit of `fds`: a quarter of it (at least 128)
/// is kept for everything else a connection needs (its backend connections, certificate and
/// manifest reads, the listeners, the runtime's own) and for [`MAX_LEAVING`].
pub fn budget(fds: u64) -> usize {
    let kept = (fds / 4).max(128);
    usize::try_from(fds.saturating_sub(kept)).unwrap_or(usize::MAX)
}

/// The open-file limit of this process (soft), None when it cannot be read.
pub fn fd_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Connections chosen to close whose files are not closed yet, at most: past it, a new
/// connection at the cap is closed at accept instead (a flood faster than connections close).
const MAX_LEAVING: usize = 32;

struct Slot {
    accepted: Instant,
    /// Chosen to close for a newer one; still counted until its [`Room`] drops.
    leaving: bool,
    /// Set once the TLS handshake is done and HTTP serves the connection.
    activity: Option<Arc<Activity>>,
    shed: CancellationToken,
}

impl Slot {
    /// Since when no request of it is being answered; None while one is.
    fn quiet_since(&self) -> Option<Instant> {
        match &self.activity {
            None => Some(self.accepted),
            Some(a) => a.quiet_since(),
        }
    }
}

#[derive(Default)]
struct Open {
    slots: HashMap<u64, Slot>,
    /// Slots with `leaving` set.
    leaving: usize,
    next: u64,
}

pub(crate) struct Shed {
    /// 0: no cap.
    cap: usize,
    open: Mutex<Open>,
}

/// An open connection's place; dropped when the connection ends.
pub(crate) struct Room {
    shed: Arc<Shed>,
    id: u64,
    /// Cancelled when the connection is to close for a newer one.
    pub(crate) closing: CancellationToken,
}

impl Shed {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            cap,
            open: Mutex::default(),
        })
    }

    /// A place for a connection just accepted, made by shedding the quietest open connection
    /// at the cap; None (close it) when all are answering requests or too many are leaving.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Room> {
        let mut guard = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let open = &mut *guard;
        if self.cap > 0 && open.slots.len() - open.leaving >= self.cap {
            if open.leaving >= MAX_LEAVING {
                return None;
            }
            let quietest = open
                .slots
                .iter_mut()
                .filter(|(_, slot)| !slot.leaving)
                .filter_map(|(_, slot)| slot.quiet_since().map(|since| (since, slot)))
                .min_by_key(|(since, _)| *since)?;
            quietest.1.leaving = true;
            quietest.1.shed.cancel();
            open.leaving += 1;
        }
        let id = open.next;
        open.next += 1;
        let closing = CancellationToken::new();
        open.slots.insert(
            id,
            Slot {
                accepted: Instant::now(),
                leaving: false,
                activity: None,
                shed: closing.clone(),
            },
        );
        Some(Room {
            shed: self.clone(),
            id,
            closing,
        })
    }
}

impl Room {
    /// The connection is past its handshake; `activity` tells when it is quiet.
    pub(crate) fn serving(&self, activity: &Arc<Activity>) {
        let mut open = self.shed.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = open.slots.get_mut(&self.id) {
            slot.activity = Some(activity.clone());
        }
    }
}

impl Drop for Room {
    fn drop(&mut self) {
        let mut open = self.shed.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.slots.remove(&self.id).is_some_and(|slot| slot.leaving) {
            open.leaving -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keeps_a_quarter_and_at_least_128() {
        assert_eq!(budget(1024), 768);
        assert_eq!(budget(256), 128);
        assert_eq!(budget(100), 0);
        assert_eq!(budget(1 << 20), 786_432);
    }

    #[tokio::test]
    async fn the_quietest_connection_makes_room_and_busy_ones_never_do() {
        let shed = Shed::new(2);
        let handshaking = shed.admit().unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let serving = shed.admit().unwrap();
        let activity = Activity::new();
        serving.serving(&activity);
        let busy = activity.begin();
        // Full: the one still in its handshake (quiet since its accept) goes.
        let third = shed.admit().unwrap();
        assert!(handshaking.closing.is_cancelled());
        assert!(!serving.closing.is_cancelled());
        drop(handshaking);
        // Full again: the third, quiet since its accept, goes; the busy one stays.
        let fourth = shed.admit().unwrap();
        assert!(third.closing.is_cancelled());
        assert!(!serving.closing.is_cancelled());
        drop(third);
        // Both open ones busy: the new one is refused.
        assert_eq!(shed.open.lock().unwrap().leaving, 0);
        let other = Activity::new();
        fourth.serving(&other);
        let _also_busy = other.begin();
        assert!(shed.admit().is_none());
        // A request ends: its connection is quiet, and goes for the next.
        drop(busy);
        assert!(shed.admit().is_some());
        assert!(serving.closing.is_cancelled());
    }

    #[test]
    fn a_flood_faster_than_connections_close_is_refused_at_accept() {
        let shed = Shed::new(1);
        let mut rooms = vec![shed.admit().unwrap()];
        for _ in 0..MAX_LEAVING {
            rooms.push(shed.admit().unwrap());
        }
        // One open, MAX_LEAVING chosen to close and not closed yet.
        assert!(shed.admit().is_none());
        drop(rooms.remove(0));
        assert!(shed.admit().is_some());
    }

    #[test]
    fn no_cap_admits_everything() {
        let shed = Shed::new(0);
        let rooms: Vec<_> = (0..1000).map(|_| shed.admit().unwrap()).collect();
        assert!(rooms.iter().all(|r| !r.closing.is_cancelled()));
    }
}

//! The leases a connection owns ([`OwnedLeases`], in its `Client`): only
//! that connection can end or extend them, and they return to their queue
//! when it ends, however it ends.

use super::super::off_worker;
use crate::reply;
use crate::state::LeaseCounts;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tvm::error::{Error, LEASE_EXPIRED, LEASE_INVALID};
use tvm::{Lease, Queue};

/// Owned leases past which the expired ones are forgotten at the next lease.
const PRUNE_AT: usize = 4096;

/// (queue id, position, tag): a lease as its id (`<position>-<tag>`) names it.
pub(crate) type LeaseId = (u32, u64, u64);

/// The leases one connection owns, released when it ends.
pub(crate) struct OwnedLeases {
    map: HashMap<LeaseId, (Arc<Queue>, Lease)>,
    /// The map's size after the last prune.
    pruned: usize,
    /// The server's counts of what lease calls did.
    counts: Arc<LeaseCounts>,
}

/// What ending a lease did with its record, as the server counts it
/// ([`LeaseCounts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Put back by TVMQ.RELEASE.
    Released,
    /// Put back because its connection ended.
    Returned,
    /// Moved to the queue's dead-letter queue.
    DeadLettered,
    /// Dropped (no dead-letter queue).
    Dropped,
}

/// What ending `lease` of `q` does with its record if the call succeeds:
/// a reject (`reject`), else a release, by TVMQ.RELEASE or (`closed`)
/// because its connection ended. At the delivery limit a release is a
/// reject: to the dead-letter queue, or dropped without one (as the
/// library decides it, by the lease's delivery count).
pub(crate) fn ending(q: &Queue, lease: &Lease, reject: bool, closed: bool) -> Ending {
    let spec = q.info().leases.as_ref();
    let at_limit = spec.is_some_and(|s| s.max_deliveries > 0 && lease.deliveries() >= s.max_deliveries);
    match (reject || at_limit, spec.and_then(|s| s.dead_letter)) {
        (true, Some(_)) => Ending::DeadLettered,
        (true, None) => Ending::Dropped,
        (false, _) if closed => Ending::Returned,
        (false, _) => Ending::Released,
    }
}

impl OwnedLeases {
    /// No leases yet; what lease calls do is counted in `counts`.
    pub(crate) fn new(counts: Arc<LeaseCounts>) -> OwnedLeases {
        OwnedLeases { map: HashMap::new(), pruned: 0, counts }
    }

    /// Counts `n` leases handed to this connection.
    pub(crate) fn granted(&self, n: usize) {
        self.counts.granted.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts `n` leases acknowledged.
    pub(crate) fn acked(&self, n: u64) {
        self.counts.acked.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts a lease ended so.
    pub(crate) fn ended(&self, how: Ending) {
        count(&self.counts, how);
    }

    /// Owns `lease` of `q` from now on; its id.
    pub(crate) fn insert(&mut self, q: &Arc<Queue>, lease: Lease) -> LeaseId {
        if self.map.len() >= PRUNE_AT.max(2 * self.pruned) {
            // Leases that ran out (no call can end them any more).
            self.map.retain(|_, (_, l)| !l.remaining().is_zero());
            self.pruned = self.map.len();
        }
        let (pos, tag) = lease.delivery_id();
        let id = (q.id(), pos, tag);
        self.map.insert(id, (q.clone(), lease));
        id
    }

    /// Leases owned now (expired ones not yet forgotten included).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The lease `id`, if owned.
    pub(crate) fn get(&self, id: &LeaseId) -> Option<Lease> {
        self.map.get(id).map(|(_, l)| *l)
    }

    /// No longer owns the lease `id` (ended, or ran out); the lease, if it was owned.
    pub(crate) fn forget(&mut self, id: &LeaseId) -> Option<Lease> {
        self.map.remove(id).map(|(_, l)| l)
    }

    /// The lease named `text` on queue `q` owned by this connection.
    /// Errors: `LEASE_INVALID` (not a lease id: `<position>-<tag>`),
    /// `LEASE_EXPIRED` (no lease this connection owns: it ran out, was
    /// ended, or is another connection's). The error's detail is the
    /// reply's text after the code's name.
    pub(crate) fn find(&self, q: &Queue, text: &[u8]) -> Result<LeaseId, Error> {
        let parsed = std::str::from_utf8(text).ok().and_then(|s| {
            let (a, b) = s.split_once('-')?;
            Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
        });
        let Some((pos, tag)) = parsed else {
            return Err(Error::new(
                LEASE_INVALID,
                format!("{} is not a lease id (<position>-<tag>)", reply::quoted_key(text)),
            ));
        };
        let id = (q.id(), pos, tag);
        if self.map.contains_key(&id) {
            Ok(id)
        } else {
            Err(Error::new(
                LEASE_EXPIRED,
                format!(
                    "lease {pos}-{tag} of queue {} is not held by this connection: it ran out, was ended, or is another connection's",
                    q.id()
                ),
            ))
        }
    }

    /// Releases every lease owned (delay 0: delivered again at once); see
    /// [`give_back`]. A lease at its delivery limit on a queue with a
    /// dead-letter queue goes there, which may open that queue and sync
    /// it: those are released off the worker ([`LeasesToRelease`]).
    pub(crate) fn release_all(&mut self) {
        let mut later = LeasesToRelease(Vec::new(), self.counts.clone());
        for (_, (q, lease)) in self.map.drain() {
            if may_dead_letter(&q, &lease, false) {
                later.0.push((q, lease));
            } else {
                return_at_close(&self.counts, &q, &lease);
            }
        }
        if !later.0.is_empty() {
            off_worker::detach(move || drop(later));
        }
        self.pruned = 0;
    }
}

impl Drop for OwnedLeases {
    /// Owner mode: a connection's leases return to the queue when it ends.
    fn drop(&mut self) {
        self.release_all();
    }
}

/// Releases `lease` of `q` (delay 0): delivered again at once. On an
/// `always` queue the syncs are put off and not waited for (nobody is told
/// anything): the next sync of the queue covers them, and a machine crash
/// before it delivers the record again all the same. A refusal is ignored:
/// the lease ran out, or the queue was dropped; nothing to give back.
/// True if it was given back.
pub(crate) fn give_back(q: &Queue, lease: &Lease) -> bool {
    q.defer_syncs(|q| q.release(lease, Duration::ZERO)).0.is_ok()
}

/// Gives back `lease` of `q`, whose connection ended (see [`give_back`]),
/// and counts what that did in `counts`.
fn return_at_close(counts: &LeaseCounts, q: &Queue, lease: &Lease) {
    let how = ending(q, lease, false, true);
    if give_back(q, lease) {
        count(counts, how);
    }
}

/// Counts a lease ended so in `counts`.
fn count(counts: &LeaseCounts, how: Ending) {
    let counter = match how {
        Ending::Released => &counts.released,
        Ending::Returned => &counts.returned,
        Ending::DeadLettered => &counts.dead_lettered,
        Ending::Dropped => &counts.dropped,
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Leases of a connection that ended, to release off the worker (each may
/// move its record to a dead-letter queue), and the server's counts;
/// released wherever this is dropped.
struct LeasesToRelease(Vec<(Arc<Queue>, Lease)>, Arc<LeaseCounts>);

impl Drop for LeasesToRelease {
    fn drop(&mut self) {
        for (q, lease) in &self.0 {
            return_at_close(&self.1, q, lease);
        }
    }
}

/// Would ending `lease` of `q` (`reject`, or a release) move its record to
/// a dead-letter queue, which may open that queue and sync it?
pub(crate) fn may_dead_letter(q: &Queue, lease: &Lease, reject: bool) -> bool {
    ending(q, lease, reject, false) == Ending::DeadLettered
}

//! What a queue does for durability: the syncs of `always` queues after
//! pops, [`Queue::sync`], syncs put off and waited for later
//! ([`Queue::defer_syncs`], for a server that must not wait on its event
//! loop), and the durable state for `tvmq stat`.

use super::Queue;
use crate::durable::{Durable, DurableStats, SyncRing, SyncStart};
use crate::error::*;
use crate::spec::Durability;

impl Queue {
    /// After records were taken: with `always`, returns once their
    /// consumption is durable. A failed sync is not an error here: the
    /// records are the caller's now (failing would lose them); the failure
    /// is counted in the file, and a crash may deliver them again.
    #[inline]
    pub(super) fn popped_durably(&self) {
        if let Some(d) = self.always() {
            let _ = sync_popped(d);
        }
    }

    /// Makes everything pushed and popped on this queue so far durable, by
    /// every thread of this process (and what other processes did before
    /// the call): a group-committed sync for a durable queue, a plain
    /// `msync` for another queue on a disk.
    ///
    /// Errors: `NOT_DURABLE` (the file is on tmpfs or ramfs: nothing can
    /// make it durable), `SYNC_FAILED` (the system call failed),
    /// `SHM_ERR_ACCES` (a read-only view).
    pub fn sync(&self) -> Result<()> {
        if let Some(d) = &self.durable {
            return d.sync();
        }
        if self.file.is_volatile() {
            return Err(Error::new(
                NOT_DURABLE,
                format!(
                    "queue {} cannot be synced to stable storage: its file {} is in memory (tmpfs or ramfs)",
                    self.id(),
                    self.path().display()
                ),
            ));
        }
        if !self.writable {
            return Err(Error::new(SHM_ERR_ACCES, "queue opened read-only for inspection"));
        }
        crate::durable::msync(self.file.map())
    }

    /// Runs `f` on this queue with the syncs of an `always` queue put off:
    /// the pushes, pops and other calls `f` makes on this queue from this
    /// thread publish their changes at once (other threads and processes
    /// see them) and return without waiting for stable storage. Returns
    /// what `f` returned and, when one of those calls would have waited
    /// for a sync, a [`SyncTicket`] naming a sync that covers every one of
    /// them: the caller must not tell anyone that the changes are durable
    /// before [`sync_ticket`](Self::sync_ticket) returned `Ok` for it (or
    /// [`is_synced`](Self::is_synced) said so). `None` for other queues
    /// (nothing to wait for: `interval` queues keep their window).
    ///
    /// Calls on other queues inside `f` sync as usual. A failed sync
    /// inside `f` cannot happen (none runs); it shows when the ticket is
    /// waited for.
    pub fn defer_syncs<R>(&self, f: impl FnOnce(&Queue) -> R) -> (R, Option<SyncTicket>) {
        let Some(d) = self.always() else {
            return (f(self), None);
        };
        let guard = crate::durable::defer::begin(d);
        let r = f(self);
        let target = guard.end();
        (r, (target != 0).then_some(SyncTicket(target)))
    }

    /// Has the sync `ticket` names completed (the changes it covers are on
    /// stable storage)? Never waits. `true` on a queue that is not `always`.
    pub fn is_synced(&self, ticket: SyncTicket) -> bool {
        self.always().is_none_or(|d| d.covered(ticket.0))
    }

    /// Waits until the sync `ticket` names has completed, running it when
    /// no thread or process is syncing the queue: one sync covers the
    /// changes every caller made before it started, so tickets of many
    /// threads and processes share it (group commit).
    ///
    /// Errors: `SYNC_FAILED` (the system call failed: the changes are in
    /// the queue but not known to be on stable storage; a later sync may
    /// still cover them).
    pub fn sync_ticket(&self, ticket: SyncTicket) -> Result<()> {
        match self.always() {
            Some(d) => d.wait_for_sync(ticket.0),
            None => Ok(()),
        }
    }

    /// Runs a sync that covers `ticket` on the calling thread if no thread
    /// or process is syncing the queue now: it waits for the disk, never
    /// for another syncer. For an event loop that syncs inline when it has
    /// nothing else to do (and uses [`start_sync`](Self::start_sync)
    /// otherwise). No gathering: one sync covers every change published
    /// before it began, by any thread or process.
    ///
    /// Returns `Ok(true)` once a completed sync covers the ticket (already,
    /// or the one run here; always on a queue that is not `always`),
    /// `Ok(false)` when another syncer holds the queue's sync lock (nothing
    /// was done: wait for it by other means). Errors: `SYNC_FAILED` (the
    /// system call failed, as for [`sync_ticket`](Self::sync_ticket)).
    pub fn try_sync_ticket(&self, ticket: SyncTicket) -> Result<bool> {
        match self.always() {
            Some(d) => d.try_sync(ticket.0),
            None => Ok(true),
        }
    }

    /// Starts a sync that covers `ticket` on `ring`, without waiting for
    /// it: the sync is begun here (the group commit's lock taken, the sync
    /// numbered: it covers every change published before, by any thread or
    /// process) and its writes submitted; [`SyncRing::reap`] later finishes
    /// it, releases the lock and reports its outcome under `token`. For a
    /// thread that must not wait for the disk (an event loop): see
    /// [`SyncRing`] for its threading rule.
    ///
    /// Returns [`SyncStart::Covered`] when a completed sync covers the
    /// ticket already (and on a queue that is not `always`),
    /// [`SyncStart::Started`], [`SyncStart::Busy`] when another syncer
    /// holds the lock (ask again once its sync ended: it may not cover the
    /// ticket), or [`SyncStart::Full`] when the ring has no room (ask again
    /// after a reap). Errors: `SYNC_FAILED` (the writes could not be
    /// submitted: the sync failed, as a failed system call fails it).
    pub fn start_sync(
        self: &std::sync::Arc<Self>,
        ticket: SyncTicket,
        ring: &mut SyncRing,
        token: u64,
    ) -> Result<SyncStart> {
        match self.durable.as_ref().filter(|d| d.is_always()) {
            Some(d) => ring.start(d, self.clone(), ticket.0, token),
            None => Ok(SyncStart::Covered),
        }
    }

    /// How the queue's changes reach stable storage (`None`: not durable).
    pub fn durability(&self) -> Option<Durability> {
        self.info.durability
    }

    /// A durable queue's sync state and what its last recovery found
    /// (`None` for other queues). Works on read-only views too.
    pub fn durable_stats(&self) -> Option<DurableStats> {
        let policy = self.info.durability?;
        Some(crate::durable::stats(self.control(), policy, self.info.created_ns))
    }
}

/// A sync of an `always` queue that covers changes published earlier (see
/// [`Queue::defer_syncs`]). Tickets of one queue are ordered: a later
/// (greater) one covers everything an earlier one does. Meaningless on
/// another queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SyncTicket(u64);

impl SyncTicket {
    /// The sync's number (syncs of the queue are numbered from 1).
    pub fn number(self) -> u64 {
        self.0
    }
}

/// An `always` queue's pop is done: sync. Out of line, so that the pop
/// path of other queues stays small (one test of an `Option`).
#[inline(never)]
fn sync_popped(d: &Durable) -> Result<()> {
    d.sync()
}

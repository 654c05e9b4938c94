//! The counters of the syncs run for replies that wait for one, for INFO
//! ([`SyncStats`]): shared by the workers' rings and the sync threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counters of the syncs run for unsynced replies, for INFO.
#[derive(Default)]
pub(crate) struct SyncStats {
    /// Syncs run (tickets already covered when their turn came not counted).
    pub(crate) syncs: AtomicU64,
    /// Of them, those run on a worker itself (`inline`, `hybrid`).
    pub(crate) inline: AtomicU64,
    /// Syncs that failed.
    pub(crate) failures: AtomicU64,
    /// Records (pushed or popped) whose replies waited for a sync.
    pub(crate) records: AtomicU64,
    /// How long the last sync took, microseconds.
    pub(crate) last_us: AtomicU64,
    /// How long all of them took, microseconds.
    pub(crate) total_us: AtomicU64,
    /// How long each took (the metrics' `tvmq_durable_sync_seconds`).
    pub(crate) seconds: crate::histogram::Histogram,
    /// Syncs whose first wait was timed, and the time from that wait to the
    /// sync's start (hand-over, wake-up and gathering), microseconds.
    pub(crate) asked: AtomicU64,
    pub(crate) ask_us: AtomicU64,
    /// Of the same syncs, the time from their *last* wait (the last
    /// request the sync covers) to the sync's start, apart from time spent
    /// behind the queue's previous sync, microseconds: what no serving of
    /// other requests fills, that is the hand-over (nothing on a worker
    /// that syncs inline but its turn's end; a sync thread's wake-up and
    /// its gathering).
    pub(crate) handover_us: AtomicU64,
    /// Syncs that released a wait that slept, and the time from each one's
    /// end to the first of those waits running again (the hand-over back
    /// to the worker), microseconds.
    pub(crate) woken: AtomicU64,
    pub(crate) wake_us: AtomicU64,
    /// Waits that slept, and the time from the end of the sync that
    /// released them to each one running again (after the hand-over, the
    /// replies of the waits released before it), microseconds.
    pub(crate) released: AtomicU64,
    pub(crate) release_us: AtomicU64,
    /// (Syncs on a worker's ring.) Of the time from the first wait a sync
    /// covers to that sync's start, the part spent behind the queue's
    /// previous sync (its disk time), microseconds; `ask_us` is the rest.
    pub(crate) behind_us: AtomicU64,
}

impl SyncStats {
    /// A wait that slept runs again `us` microseconds after the end of the
    /// sync that released it; `first`: the first such wait of that sync
    /// (set by the sync's end, taken here).
    pub(crate) fn woken(&self, us: u64, first: &AtomicBool) {
        self.released.fetch_add(1, Ordering::Relaxed);
        self.release_us.fetch_add(us, Ordering::Relaxed);
        if first.swap(false, Ordering::Relaxed) {
            self.woken.fetch_add(1, Ordering::Relaxed);
            self.wake_us.fetch_add(us, Ordering::Relaxed);
        }
    }
}

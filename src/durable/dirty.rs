//! (`interval` queues.) Changes no sync covers yet, and the flusher's
//! sync when the oldest of them nears the end of the interval (see
//! `flusher`, which calls [`Durable::flush_if_due`] every tick).

use super::Durable;
use super::marks::best_mark;
use crate::clock::now_ns;
use crate::error::*;
use crate::spec::Durability;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Durable {
    /// (`interval` queues.) Did pushes or pops happen that no sync covers?
    /// Producers and consumers mark nothing (a shared flag written by every
    /// push and read by every pop slowed them: docs/measurements.md); the flushers
    /// compare instead: records pushed beyond those the last sync sealed
    /// (`sealed` trails the tail also while a producer is still writing,
    /// so its record brings another sync), records taken beyond those whose
    /// release the last sync copied (likewise), or the position after the
    /// consumed watermark released by its consumer.
    pub(crate) fn changed_since_sync(&self) -> bool {
        let w = self.words();
        if self.ring.pushed() != w.sealed.load(Ordering::Relaxed)
            || self.ring.popped() != w.released.load(Ordering::Relaxed)
            || w.leases_changed.load(Ordering::Relaxed) != 0
        {
            return true;
        }
        let mark = best_mark(&self.control, self.created_ns).map_or(0, |m| m.1);
        self.ring.released_until(mark, 1) > mark
    }

    /// (`interval` queues with leases.) The caller changed the lease table
    /// in a way the next sync must carry: the flushers see it. A load of a
    /// word that changes once per sync; a store only when it is clear.
    /// SeqCst, after the change (itself a SeqCst CAS): a flag seen set was
    /// set before the next sync clears it, and that sync, which persists
    /// the table after the clear, covers the change.
    #[inline]
    pub(crate) fn leases_changed(&self) {
        let flag = &self.words().leases_changed;
        if flag.load(Ordering::SeqCst) == 0 {
            flag.store(1, Ordering::SeqCst);
        }
    }

    /// (The flusher, every `slack`.) Marks the queue dirty when it changed
    /// since the last sync, as of the last look that found it unchanged (in
    /// this process: the change is later than that) or the start of the
    /// last sync, whichever is later (that sync covered every change made
    /// before it started); then syncs if it is
    /// dirty, its oldest unsynced change is at least `window` less two
    /// `slack` and twice the last sync's duration old (but at least a
    /// quarter of `window`), and nobody is syncing. Returns whether it synced.
    pub(crate) fn flush_if_due(&self, window: Duration, slack: Duration) -> Result<bool> {
        let w = self.words();
        if w.dirty.load(Ordering::SeqCst) == 0 {
            let now = now_ns();
            if !self.changed_since_sync() {
                self.clean_seen_ns.store(now, Ordering::Relaxed);
                return Ok(false);
            }
            // Without the second term, a queue that never stays unchanged
            // for a tick was synced again as soon as each sync ended (10
            // syncs a second instead of 1 with a 1 s interval, measured).
            let synced_from =
                w.last_sync_ns.load(Ordering::Acquire).saturating_sub(w.last_sync_took_ns.load(Ordering::Relaxed));
            let since = self.clean_seen_ns.load(Ordering::Relaxed).max(synced_from);
            if w.dirty.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                w.dirty_ns.store(since, Ordering::SeqCst);
            }
        }
        let window = window.as_nanos() as u64;
        let took = w.last_sync_took_ns.load(Ordering::Relaxed);
        let due = window.saturating_sub(2 * slack.as_nanos() as u64 + 2 * took).max(window / 4);
        let since = w.dirty_ns.load(Ordering::Relaxed);
        if now_ns().saturating_sub(since) < due {
            return Ok(false);
        }
        if !self.try_lock() {
            // A syncer killed holding the lock would otherwise stop every
            // flusher for good: the next tick takes the lock.
            self.free_if_dead(w.lock.load(Ordering::SeqCst));
            return Ok(false);
        }
        let r = self.run_sync();
        self.unlock();
        r.map(|()| true)
    }

    /// Is a change waiting for a sync (`interval` queues: a flusher saw
    /// one, or one happened since the last sync)?
    pub(crate) fn is_dirty(&self) -> bool {
        self.words().dirty.load(Ordering::Relaxed) != 0
            || (matches!(self.policy, Durability::Interval(_)) && self.changed_since_sync())
    }
}

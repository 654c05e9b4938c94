//! The sweeps of the lease table: leases that ran out and leases of
//! consumers that died end (their records wait for another delivery), run
//! when due by the lease calls and pops, and at repair.

use super::Leases;
use crate::clock::mono_ns;
use crate::queue::Queue;

impl Queue {
    /// Sweeps if a sweep is due (a lease ran out, or the periodic look for
    /// holders that died): a load of two hint words otherwise.
    #[inline]
    pub(super) fn upkeep(&self, l: &Leases, now: u64) {
        if l.table.sweep_due(now) {
            self.sweep(l, now, false);
        }
    }

    /// See [`LeaseTable::sweep`]; then wakes sleepers for the records made
    /// ready, and moves the doomed ones to the dead-letter queue.
    #[cold]
    pub(super) fn sweep(&self, l: &Leases, now: u64, force: bool) {
        let Some(me) = l.me else { return };
        let max = l.settings.max_deliveries;
        let swept = l.table.sweep(
            now,
            me,
            max,
            force,
            |o| self.owner_alive(o),
            |at| self.ring.holds(at),
            |at| self.ring.release_held(at),
        );
        let Some(swept) = swept else { return };
        if swept.ready > 0 {
            self.wake(u32::try_from(swept.ready).unwrap_or(u32::MAX));
        }
        if swept.doomed > 0 {
            self.doomed_found(l, me);
        }
    }

    /// (Repair.) Sweeps the lease table now.
    pub(in crate::queue) fn lease_repair(&self) {
        if let Some(l) = &self.leases {
            self.sweep(l, mono_ns(), true);
        }
    }
}

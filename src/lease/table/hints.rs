//! The hints every lease call reads (a few loads): is a sweep due, is a
//! waiting record due, when is the next event; and their upkeep.

use super::LeaseTable;
use std::sync::atomic::Ordering;

impl LeaseTable {
    /// Notes a lease that runs out at `deadline` (given at `now`), so that
    /// the sweep that ends it comes no later, and that the periodic sweep
    /// runs while it is in flight. A load of each hint; a write only when
    /// it moves them.
    #[inline]
    pub(crate) fn leased_until(&self, now: u64, deadline: u64) {
        let h = &self.control.hints.0;
        if h.next_deadline_ns.load(Ordering::Relaxed) > deadline {
            h.next_deadline_ns.fetch_min(deadline, Ordering::AcqRel);
        }
        let period = now.saturating_add(self.period());
        if h.next_sweep_ns.load(Ordering::Relaxed) > period {
            h.next_sweep_ns.fetch_min(period, Ordering::AcqRel);
        }
    }

    /// Notes a record waiting for another delivery from `at` on. SeqCst: a
    /// sleeper that announced itself and then checks [`ready_due`](Self::ready_due) either
    /// sees it or is woken by the caller (who wakes after this).
    pub(crate) fn ready_at(&self, at: u64) {
        self.control.hints.0.next_ready_ns.fetch_min(at, Ordering::SeqCst);
    }

    /// Is a sweep due (the periodic one, or a lease that ran out)?
    #[inline]
    pub(crate) fn sweep_due(&self, now: u64) -> bool {
        let h = &self.control.hints.0;
        now >= h.next_sweep_ns.load(Ordering::Relaxed) || now >= h.next_deadline_ns.load(Ordering::Relaxed)
    }

    /// May a record waiting for another delivery be due? (SeqCst: see
    /// [`ready_at`](Self::ready_at).)
    #[inline]
    pub(crate) fn ready_due(&self, now: u64) -> bool {
        now >= self.control.hints.0.next_ready_ns.load(Ordering::SeqCst)
    }

    /// When a sleeping consumer should look again: a lease running out or a
    /// waiting record coming due (the periodic sweep can wait for the
    /// sleeper's own slices).
    pub(crate) fn next_event_ns(&self) -> u64 {
        let h = &self.control.hints.0;
        h.next_deadline_ns.load(Ordering::Relaxed).min(h.next_ready_ns.load(Ordering::Relaxed))
    }

    /// The periodic sweep's period: [`SWEEP_PERIOD_NS`], plus a millisecond
    /// per 1,024 entries.
    #[inline]
    pub(crate) fn period(&self) -> u64 {
        self.period_ns
    }

    /// How late a sweep for leases that ran out may come, so that one sweep
    /// ends those that run out close together: a millisecond per 16,384
    /// entries (none below that), so that ending leases costs a big table
    /// at most a scan per this time (100,000 entries: 6 ms late at most,
    /// many times what the scan takes: docs/measurements.md).
    pub(super) fn batch_ns(&self) -> u64 {
        (self.count as u64 / 16_384) * 1_000_000
    }
}

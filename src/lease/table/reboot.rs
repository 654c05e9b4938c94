//! After a machine restart: every lease of the previous boot ends as if
//! its holder had died, and records the ring still holds are dropped from
//! it ([`LeaseTable::reboot`]).

use super::LeaseTable;
use crate::lease::state::EntryState;
use std::sync::atomic::Ordering;

/// What [`LeaseTable::reboot`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rebooted {
    /// Leases (and takings, releases) in flight that the restart ended.
    pub(crate) ended: u64,
    /// Records waiting for another delivery now.
    pub(crate) ready: u64,
    /// Records bound for the dead-letter queue.
    pub(crate) doomed: u64,
    /// Entries whose record did not match its checksum (freed).
    pub(crate) torn: u64,
    /// Of the records kept, those whose ring slot still held them (released now).
    pub(crate) in_ring: u64,
    /// The position after the newest one an entry names (0: none).
    pub(crate) floor: u64,
}

impl LeaseTable {
    /// (Recovery after a machine restart, alone: nobody else uses the
    /// queue.) Every holder of the previous boot is gone, and the
    /// monotonic instants stored (deadlines, hints) belong to that boot's
    /// clock. So every lease in flight ends as a holder's death ends it:
    /// its record waits for another delivery at once, its delivery count
    /// kept (or, at `max_deliveries`, is bound for the dead-letter queue);
    /// a record being moved to the dead-letter queue is bound for it again;
    /// a claim without a record is freed; waiting records are due at once.
    /// A record saved here whose ring slot still holds it (its consumer's
    /// slot release was not on disk yet) has that slot released with
    /// `release_held`, so that it is delivered once, from here. Returns
    /// what it found; its `floor` is the position after the newest one an
    /// entry names (the ring must not give those positions again).
    ///
    /// # Safety
    /// No other thread of this process reaches the table meanwhile (it
    /// reads every entry's record without holding it): the recovery of the
    /// first attach after a restart, before any queue of the file is open.
    pub(crate) unsafe fn reboot(&self, max_deliveries: u32, release_held: impl Fn(u64) -> bool) -> Rebooted {
        let mut found = Rebooted::default();
        let mut buf = vec![0u8; self.record_size];
        // The indexes on disk are hints from another moment: rebuilt.
        self.free.clear_all();
        self.ready.clear_all();
        for i in 0..self.count {
            let e = self.entry(i);
            let w = e.word();
            // SAFETY: no other thread of this process reaches the table
            // (the caller's contract).
            if w.state().holds_record() && !unsafe { self.seal_matches(i, &mut buf) } {
                // Its head and its record reached the disk from different
                // moments: the entry was reused after its record was
                // acknowledged, or the record now named was not saved when
                // the last sync began (its slot was not released then, so
                // the ring has it).
                found.torn += 1;
                e.state.store(w.free().0, Ordering::SeqCst);
                self.free.insert(i);
                continue;
            }
            let to = match w.state() {
                EntryState::Free => {
                    self.free.insert(i);
                    continue;
                }
                EntryState::Filling => w.free(),
                EntryState::Ready | EntryState::Doomed => w,
                EntryState::Leased | EntryState::Taking | EntryState::Busy => {
                    found.ended += 1;
                    w.undelivered(max_deliveries)
                }
                EntryState::Dead => w.doomed(),
            };
            if to.state().holds_record() {
                let pos = e.pos.load(Ordering::Relaxed);
                if release_held(pos) {
                    found.in_ring += 1;
                }
                found.floor = found.floor.max(pos.saturating_add(1));
                e.deadline_ns.store(0, Ordering::Relaxed);
                e.leased_ns.store(0, Ordering::Relaxed);
                match to.state() {
                    EntryState::Ready => found.ready += 1,
                    _ => found.doomed += 1,
                }
            }
            e.state.store(to.0, Ordering::SeqCst);
            match to.state() {
                EntryState::Free => self.free.insert(i),
                EntryState::Ready => self.ready.insert(i),
                _ => {}
            }
        }
        let h = &self.control.hints.0;
        let in_use = found.ready + found.doomed > 0;
        h.next_sweep_ns.store(if in_use { 0 } else { u64::MAX }, Ordering::SeqCst);
        h.next_deadline_ns.store(u64::MAX, Ordering::SeqCst);
        h.next_ready_ns.store(if found.ready > 0 { 0 } else { u64::MAX }, Ordering::SeqCst);
        let sw = &self.control.sweeping.0;
        sw.sweeper.store(0, Ordering::SeqCst);
        sw.last_ns.store(0, Ordering::Relaxed);
        self.control.counters.0.orphaned.fetch_add(found.ended, Ordering::Relaxed);
        found
    }

    /// Does entry `i`'s record match its checksum (a table without a seal:
    /// yes)? `buf`: room for a record.
    ///
    /// # Safety
    /// As [`read`](Self::read).
    unsafe fn seal_matches(&self, i: usize, buf: &mut [u8]) -> bool {
        let Some(key) = self.seal else { return true };
        let e = self.entry(i);
        // SAFETY: the caller's contract.
        match unsafe { self.read(i, buf) } {
            Some(len) => {
                crate::ring::seal::seal(key, e.pos.load(Ordering::Relaxed), &buf[..len])
                    == e.check.load(Ordering::Relaxed)
            }
            None => false,
        }
    }
}

//! The queue's waiter count, by process: each entry counts its holder's
//! threads asleep in a blocking pop, so that a killed process's sleepers
//! are taken off the count ([`Registry::reconcile`]).

use super::Registry;
use super::layout::{MAX_PROCS, ProcHead};
use std::sync::atomic::{AtomicU32, Ordering};

impl Registry {
    /// Counts one of our threads into the waiter count before it sleeps. The
    /// global count goes first, so that a kill between the two steps leaves it
    /// too high (a spare wake-up), never too low (a missed one).
    pub(crate) fn enter_wait(&self, global_waiters: &AtomicU32) {
        global_waiters.fetch_add(1, Ordering::SeqCst);
        if let Some(m) = self.mine {
            self.entry(m.index).waiters.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Undoes [`enter_wait`](Self::enter_wait), in the opposite order. The
    /// global count never goes below zero (a repair may have reset it).
    pub(crate) fn leave_wait(&self, global_waiters: &AtomicU32) {
        if let Some(m) = self.mine {
            self.entry(m.index).waiters.fetch_sub(1, Ordering::SeqCst);
        }
        let _ = global_waiters.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |g| Some(g.saturating_sub(1)));
    }

    /// This process's threads counted as asleep.
    pub(crate) fn own_waiters(&self) -> u32 {
        self.mine.map_or(0, |m| self.entry(m.index).waiters.load(Ordering::SeqCst))
    }

    /// Takes the sleepers of dead processes off the waiter count. Returns how
    /// many were removed. Costs one `fcntl` per entry that has sleepers.
    pub(crate) fn reconcile(&self, global_waiters: &AtomicU32) -> u32 {
        let mut removed = 0;
        let mut locks = self.locks();
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            if entry.waiters.load(Ordering::Relaxed) == 0 {
                continue;
            }
            if self.mine.is_some_and(|m| m.index == index) {
                continue;
            }
            if self.held(&mut locks, index) == Some(false) {
                removed += take_waiters(entry, global_waiters);
            }
        }
        removed
    }
}

/// Moves an entry's waiters off the global count; exclusive by the swap.
pub(super) fn take_waiters(entry: &ProcHead, global_waiters: &AtomicU32) -> u32 {
    let n = entry.waiters.swap(0, Ordering::SeqCst);
    if n > 0 {
        let _ = global_waiters.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |g| Some(g.saturating_sub(n)));
    }
    n
}

//! Which processes are attached: a lease holder's registration, deaths
//! not cleaned up, the live entries (for `tvmq stat`).

use super::Registry;
use super::layout::MAX_PROCS;
use std::sync::atomic::Ordering;

impl Registry {
    /// Is the process that took entry `index` as its registration whose
    /// number ends in the 8 bits `low8` still attached? `Some(false)` is
    /// proof of its end (the entry's lock is free, or the entry has been
    /// taken again since); `None`: cannot tell. One `fcntl` (none for this
    /// process's own entry).
    pub(crate) fn registration_alive(&self, index: usize, low8: u32) -> Option<bool> {
        if index >= MAX_PROCS {
            return Some(false);
        }
        let generation = match self.mine {
            Some(m) if m.index == index => m.generation,
            _ => self.entry(index).generation.load(Ordering::Acquire),
        };
        if generation & 0xff != low8 & 0xff {
            return Some(false);
        }
        if self.mine.is_some_and(|m| m.index == index) {
            return Some(true);
        }
        self.held(&mut self.locks(), index)
    }

    /// Processes that died without detaching (their entry still names a pid
    /// but nobody holds its lock): `(index, pid)`. One `fcntl` per named entry.
    pub(crate) fn unclean_deaths(&self) -> Vec<(usize, u32)> {
        let mut locks = self.locks();
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_none_or(|m| m.index != i))
            .filter_map(|i| {
                let pid = self.entry(i).pid.load(Ordering::Relaxed);
                (pid != 0 && self.held(&mut locks, i) == Some(false)).then_some((i, pid))
            })
            .collect()
    }

    /// Marks dead entries as dealt with (after a repair), if still unheld.
    pub(crate) fn forget(&self, deaths: &[(usize, u32)]) {
        for &(index, pid) in deaths {
            let _ = self.entry(index).pid.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::Relaxed);
        }
    }

    /// Live processes other than this one.
    pub(crate) fn others_alive(&self) -> usize {
        let mut locks = self.locks();
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_none_or(|m| m.index != i) && self.held(&mut locks, i) == Some(true))
            .count()
    }

    /// How many processes are attached with an entry (this one included),
    /// for watchers that read many queues often: entries are taken lowest
    /// first, so the scan stops at the first never taken, and only an entry
    /// naming a pid costs an `fcntl` (one left cleanly names none). A
    /// process between taking its entry and naming its pid is not counted.
    /// A detached view opens its file again for the look, only when an entry
    /// names a pid.
    pub(crate) fn live_count(&self) -> u32 {
        let mut locks = self.locks();
        let mut n = 0;
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            if self.mine.is_some_and(|m| m.index == index) {
                n += 1;
                continue;
            }
            // No registration ever passed over an entry it could take: none
            // above a never-taken one was taken either.
            if entry.generation.load(Ordering::Relaxed) == 0 {
                break;
            }
            if entry.pid.load(Ordering::Relaxed) != 0 && self.held(&mut locks, index) == Some(true) {
                n += 1;
            }
        }
        n
    }

    /// Live entries: `(index, pid, since_ns, waiters)`; one `fcntl` each.
    pub(crate) fn live(&self) -> Vec<(usize, u32, u64, u32)> {
        let mut locks = self.locks();
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_some_and(|m| m.index == i) || self.held(&mut locks, i) == Some(true))
            .map(|i| {
                let e = self.entry(i);
                (
                    i,
                    e.pid.load(Ordering::Relaxed),
                    e.since_ns.load(Ordering::Relaxed),
                    e.waiters.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

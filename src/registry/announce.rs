//! Announcements: this process's intent words, handed out to its threads
//! ([`IntentSlots`]), and the judgement of a stuck position's holder by
//! them ([`HolderIs`]).

use super::Registry;
use super::layout::{INTENTS, MAX_PROCS};
use crate::ring::{Holder, covers};
use std::sync::atomic::{AtomicU64, Ordering};

/// Is the holder of a position alive?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HolderIs {
    /// Proven dead: no live process announces the position.
    Dead,
    /// A live process announces it.
    Alive,
    /// Cannot be told: a live process has threads that cannot announce, or a
    /// process is attached without an entry, or a lock check failed.
    Unknown,
}

/// This process's intent words of one entry, handed out to its threads.
#[derive(Default)]
pub(crate) struct IntentSlots {
    /// Bit i set: intent word i belongs to a thread.
    used: AtomicU64,
}

impl IntentSlots {
    /// A free word's index, if any.
    pub(crate) fn acquire(&self) -> Option<usize> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let free = (!used).trailing_zeros() as usize;
            if free >= INTENTS {
                return None;
            }
            match self.used.compare_exchange_weak(used, used | 1 << free, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(free),
                Err(now) => used = now,
            }
        }
    }

    /// Gives word `index` back (its thread is gone).
    pub(crate) fn release(&self, index: usize) {
        self.used.fetch_and(!(1 << index), Ordering::AcqRel);
    }
}

impl Registry {
    /// Intent word `slot` of this process's entry (None if not registered).
    #[inline]
    pub(crate) fn intent_word(&self, slot: usize) -> Option<&AtomicU64> {
        self.mine.map(|m| &self.intents(m.index)[slot % INTENTS].0)
    }

    /// Notes that a thread of this process uses the queue without an intent
    /// word: from now on, stalls on positions nobody announces are "unknown".
    pub(crate) fn add_anonymous(&self) {
        if let Some(m) = self.mine {
            self.entry(m.index).anonymous.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Is the `role` holder of position number `at` alive? One `fcntl` per
    /// registered entry. `unregistered`: processes are attached without an
    /// entry (they cannot announce).
    pub(crate) fn holder(&self, role: Holder, at: u64, unregistered: bool) -> HolderIs {
        let mut unknown = unregistered;
        let mut locks = self.locks();
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            let mine = self.mine.is_some_and(|m| m.index == index);
            if !mine {
                if entry.pid.load(Ordering::Acquire) == 0 {
                    continue; // never held, or left cleanly (a new holder announces nothing yet)
                }
                match self.held(&mut locks, index) {
                    Some(true) => {}
                    Some(false) => continue, // dead: its announcements do not count
                    // Cannot tell: its announcements still count (a holder
                    // that announces is never robbed), the rest is unknown.
                    None => unknown = true,
                }
            }
            // Only a held (or our own) entry's page is read: its holder
            // cleared it when it took the entry.
            if self.intents(index).iter().any(|w| covers(w.0.load(Ordering::Acquire), role, at)) {
                return HolderIs::Alive;
            }
            if entry.anonymous.load(Ordering::Acquire) > 0 {
                unknown = true;
            }
        }
        if unknown { HolderIs::Unknown } else { HolderIs::Dead }
    }
}

//! Announcements: this process's intent words, handed out to its threads
//! ([`IntentSlots`]), and the judgement of a stuck position's holder by
//! them ([`HolderIs`]).

use super::Registry;
use super::layout::{INTENTS, MAX_PROCS};
use crate::ring::{Holder, covers};
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};

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

/// Threads of a process that [`IntentSlots`] index by number (the queue
/// layer numbers them); the others look their words up in a map of their
/// own.
pub(crate) const NUMBERED_THREADS: usize = 256;

/// This process's intent words of one entry, handed out to its threads.
pub(crate) struct IntentSlots {
    /// Bit i set: intent word i belongs to a thread.
    used: AtomicU64,
    /// The word thread number `n` holds, plus one (0: none noted;
    /// `u16::MAX`: the thread announces nothing here). Each is written and
    /// read by its thread alone (the number belongs to one thread at a
    /// time, and is given to another only after the word was forgotten).
    by_thread: [AtomicU16; NUMBERED_THREADS],
}

impl Default for IntentSlots {
    fn default() -> IntentSlots {
        IntentSlots { used: AtomicU64::new(0), by_thread: [const { AtomicU16::new(0) }; NUMBERED_THREADS] }
    }
}

impl IntentSlots {
    /// The word (`Some(usize::MAX)`: none) noted for thread number `n`,
    /// `None` if none was noted.
    #[inline(always)]
    pub(crate) fn noted(&self, n: usize) -> Option<usize> {
        match self.by_thread.get(n)?.load(Ordering::Relaxed) {
            0 => None,
            u16::MAX => Some(usize::MAX),
            v => Some(usize::from(v) - 1),
        }
    }

    /// Notes that thread number `n` holds word `slot` (`usize::MAX`: none).
    pub(crate) fn note(&self, n: usize, slot: usize) {
        if let Some(at) = self.by_thread.get(n) {
            at.store(u16::try_from(slot.saturating_add(1)).unwrap_or(u16::MAX), Ordering::Relaxed);
        }
    }

    /// Forgets what thread number `n` holds (its thread let go of it).
    pub(crate) fn forget(&self, n: usize) {
        if let Some(at) = self.by_thread.get(n) {
            at.store(0, Ordering::Relaxed);
        }
    }

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

//! The operations of the lease calls, each a few CASes on one entry's
//! state word: claim a free entry and commit a record into it, free or
//! abandon it, take a record waiting for another delivery and deliver it,
//! read a saved record.

use super::LeaseTable;
use crate::lease::state::{EntryState, Owner, Word};
use std::sync::atomic::Ordering;

impl LeaseTable {
    /// Claims a free entry for `me`: entry `start` (the calling thread's
    /// own) if it is free, else one the free index gives, the first from
    /// `start` on: its index and `Filling` word, or `None` when the index
    /// holds no free entry (every entry in use, or the free ones hidden by a
    /// process killed between an entry's change and its bit's, until the
    /// next sweep).
    #[inline]
    pub(crate) fn claim(&self, start: usize, me: Owner) -> Option<(usize, Word)> {
        // No division on this path (it is on every lease): `start` is
        // almost always below twice the count.
        let n = self.count;
        let i = if start < n {
            start
        } else if start < 2 * n {
            start - n
        } else {
            start % n
        };
        // The thread's own entry: claimed without touching the index (its
        // bit, if set, goes stale: the next reader of the index clears it).
        let e = self.entry(i);
        let w = e.word();
        if w.state() == EntryState::Free {
            if let Ok(filling) = e.change(w, w.claimed(me)) {
                return Some((i, filling));
            }
        }
        self.claim_indexed(i, me)
    }

    /// [`claim`](Self::claim) through the free index.
    #[cold]
    fn claim_indexed(&self, start: usize, me: Owner) -> Option<(usize, Word)> {
        // Each turn clears a bit, or finds it cleared by another claimer:
        // bounded by the bits set, which only frees set again.
        loop {
            let i = self.free.next_wrapping(start)?;
            if !self.free.remove(i) {
                continue;
            }
            let e = self.entry(i);
            let w = Word(e.state.load(Ordering::SeqCst));
            if w.state() == EntryState::Free {
                if let Ok(filling) = e.change(w, w.claimed(me)) {
                    return Some((i, filling));
                }
                // Claimed by its thread meanwhile (without the index): its
                // free sets the bit again.
            }
        }
    }

    /// Frees entry `i` (its word `from`, held by the caller): the state
    /// change, then the free index. False if the word was not `from`.
    #[inline]
    pub(crate) fn free(&self, i: usize, from: Word) -> bool {
        if self.entry(i).change(from, from.free()).is_err() {
            return false;
        }
        self.free.insert(i);
        true
    }

    /// Entry `i` was made to wait for another delivery (`Ready`) by the
    /// caller: puts it in the ready index.
    pub(crate) fn made_ready(&self, i: usize) {
        self.ready.insert(i);
    }

    /// Saves `rec`, taken from the ring at position number `pos`, in entry
    /// `i` (`Filling` as `filling`) and leases it until `deadline_ns`: the
    /// commit point. False if the entry was not ours any more (a corrupted
    /// table), or `rec` is empty or longer than the record size.
    ///
    /// # Safety
    /// The caller holds entry `i` as `filling` (the word its claim
    /// returned), not yet committed or given back: no other thread of this
    /// process writes or reads the entry's record meanwhile (snapshots
    /// copy it with volatile reads, and keep a copy only if the state word
    /// did not change). The table cannot check this: an entry's word lives
    /// in memory any process may write.
    pub(crate) unsafe fn commit(
        &self,
        i: usize,
        filling: Word,
        rec: &[u8],
        pos: u64,
        now: u64,
        deadline_ns: u64,
    ) -> bool {
        if rec.is_empty() || rec.len() > self.record_size {
            return false;
        }
        let e = self.entry(i);
        // SAFETY: entry i is `Filling`, ours (the caller's contract): nobody
        // else writes its record; rec fits.
        unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), self.data(i), rec.len()) };
        e.len.store(rec.len() as u32, Ordering::Relaxed);
        e.pos.store(pos, Ordering::Relaxed);
        if let Some(key) = self.seal {
            e.check.store(crate::ring::seal::seal(key, pos, rec), Ordering::Relaxed);
        }
        e.leased_ns.store(now, Ordering::Relaxed);
        e.deadline_ns.store(deadline_ns, Ordering::Relaxed);
        e.change(filling, filling.committed()).is_ok()
    }

    /// Gives back an entry claimed for a record that did not come.
    pub(crate) fn abandon(&self, i: usize, filling: Word) {
        self.free(i, filling);
    }

    /// Copies entry `i`'s record into `out` (at least the record size); its
    /// length, or `None` if the stored length is impossible (corruption).
    ///
    /// # Safety
    /// The caller holds entry `i` (`Taking`, `Leased`, `Busy` or `Dead` as
    /// its owner), or no other thread of this process can reach the table
    /// (a recovery before the queue is opened): nobody writes the entry's
    /// record while it is copied. The table cannot check this (see
    /// [`commit`](Self::commit)).
    pub(crate) unsafe fn read(&self, i: usize, out: &mut [u8]) -> Option<usize> {
        let len = self.entry(i).len.load(Ordering::Relaxed) as usize;
        if len == 0 || len > self.record_size || len > out.len() {
            return None;
        }
        // SAFETY: nobody writes entry i's record meanwhile (the caller's
        // contract); len <= record_size bytes lie in the entry.
        unsafe { std::ptr::copy_nonoverlapping(self.data(i), out.as_mut_ptr(), len) };
        Some(len)
    }

    /// Takes up, for `me`, a record due for another delivery (`Ready` with
    /// its deadline passed), looking from entry `start` on: its index and
    /// `Taking` word. Looks only when the hint says one may be due, and then
    /// only at the entries of the ready index (not due yet ones included).
    pub(crate) fn take_ready(&self, now: u64, me: Owner, start: usize) -> Option<(usize, Word)> {
        let hint = &self.control.hints.0.next_ready_ns;
        let seen = hint.load(Ordering::Acquire);
        if now < seen {
            return None;
        }
        let start = start % self.count;
        let mut next = u64::MAX;
        // From `start` to the end, then from 0 to `start`.
        let (mut at, mut wrapped) = (start, false);
        loop {
            let found = self.ready.next(at).filter(|&i| !wrapped || i < start);
            let Some(i) = found else {
                if wrapped || start == 0 {
                    break;
                }
                (at, wrapped) = (0, true);
                continue;
            };
            at = i + 1;
            let e = self.entry(i);
            let w = Word(e.state.load(Ordering::SeqCst));
            if w.state() != EntryState::Ready {
                // A stale bit: cleared, then set again if the entry came
                // back meanwhile (see `lease::bits`).
                if self.ready.remove(i) && e.word().state() == EntryState::Ready {
                    self.ready.insert(i);
                }
                continue;
            }
            let due = e.deadline_ns.load(Ordering::Relaxed);
            if due > now {
                next = next.min(due);
                continue;
            }
            if let Ok(taking) = e.change(w, w.taken(me)) {
                // Ours until we free it or deliver it: nobody makes it
                // `Ready` before this clear.
                self.ready.remove(i);
                self.control.counters.0.redelivered.fetch_add(1, Ordering::Relaxed);
                return Some((i, taking));
            }
        }
        // None due: note when the next one is (unless the hint moved meanwhile).
        let _ = hint.compare_exchange(seen, next, Ordering::AcqRel, Ordering::Relaxed);
        None
    }

    /// Leases the record of entry `i` (`Taking` as `taking`) to its taker
    /// until `deadline_ns`: its new `Leased` word, or `None` if the entry was
    /// not ours any more (a corrupted table).
    pub(crate) fn deliver(&self, i: usize, taking: Word, now: u64, deadline_ns: u64) -> Option<Word> {
        let e = self.entry(i);
        e.leased_ns.store(now, Ordering::Relaxed);
        e.deadline_ns.store(deadline_ns, Ordering::Relaxed);
        e.change(taking, taking.delivered()).ok()
    }
}

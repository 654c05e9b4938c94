//! Recovery of slots whose holders are gone: a record published again for
//! another consumer, the stranded mark that lets consumers reach such a
//! record beyond the tail, [`Ring::repair`] of what nobody waits on, and
//! the release of a slot on behalf of a dead consumer that saved its record
//! elsewhere.

use super::{Claim, Holder, MAX_CLAIM, POS_MASK, PUBLISHED, Ring, SKIP, Storage};
use crate::atomics::Ordering;

impl<S: Storage> Ring<S> {
    /// Gives a claimed slot's record back: published again one lap later,
    /// for another consumer (as a recovery does).
    pub(super) fn republish(&self, claim: Claim) {
        let again = self.add_lap(claim.lap) | PUBLISHED | (claim.seq & SKIP);
        let slot = self.store.slot(claim.index);
        if slot.seq.compare_exchange(claim.seq, again, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            self.note_republished(again, claim.index);
        }
    }

    /// A record was published again as `seq` (its slot's next lap) in slot
    /// `index`: notes it in the tail line's `stranded`, so that consumers
    /// finding the ring empty reach it even if no producer does.
    pub(super) fn note_republished(&self, seq: u64, index: usize) {
        let at = self.count((seq & POS_MASK & !PUBLISHED) + index as u64);
        self.store.cursors().tail.0.stranded.fetch_max(at + 1, Ordering::SeqCst);
    }

    /// Does the slot of position number `at` still hold that position's
    /// record (queued, or taken by a consumer that has not released it)?
    pub(crate) fn holds(&self, at: u64) -> bool {
        let (lap, index) = self.position(at);
        self.store.slot(index).seq.load(Ordering::Acquire) == lap | PUBLISHED
    }

    /// (Recovery.) Releases the slot of position number `at` on behalf of
    /// its consumer, who died after saving the record elsewhere (see
    /// [`pop_committed`](Self::pop_committed)): one CAS, which succeeds only
    /// while the slot still holds that position's record. Returns whether
    /// this call released it.
    ///
    /// On a ring whose consumers erase checksums (an `interval` queue's),
    /// the record's checksum is erased first, as its consumer's release
    /// would have (see `forget_seal`), while the slot still holds the
    /// record: by CAS against the value read, so that a checksum written
    /// meanwhile (a seal pass sealing this record: erased on the next
    /// round; the next lap's, once the slot moved on: left) is never
    /// overwritten blindly. Should the release CAS then fail, the slot
    /// was released by its consumer (alive after all, releasing by CAS
    /// without erasing: the erasure is what it would have done) or by
    /// another recovery: a record published again (which needs its
    /// checksum) comes only from a recovery that found no lease entry
    /// holding the record, never beside this one.
    pub(crate) fn release_held(&self, at: u64) -> bool {
        let (lap, index) = self.position(at);
        let slot = self.store.slot(index);
        let held = lap | PUBLISHED;
        if self.erase_seals {
            let tomb = self.tombstone(lap);
            loop {
                // Acquire: a checksum read here that a later lap left (its
                // consumer's tombstone, or its seal: both release stores)
                // comes with that lap's `seq`.
                let before = slot.check.load(Ordering::Acquire);
                if slot.seq.load(Ordering::Acquire) != held {
                    return false;
                }
                if before == tomb
                    || slot.check.compare_exchange(before, tomb, Ordering::Release, Ordering::Relaxed).is_ok()
                {
                    break;
                }
            }
        }
        slot.seq.compare_exchange(held, self.add_lap(lap), Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }

    /// Recovers the slots whose holders are gone although nobody waits on
    /// them (a record taken by a consumer that died, when producers have not
    /// come round to its slot; a claim of a producer that died, before any
    /// consumer reached it). `dead(holder, at)` says whether the holder of
    /// position number `at` may be robbed. Uses the same CAS transitions as a
    /// waiter, so it is safe while others work. Returns the slots recovered
    /// from producers and from consumers.
    ///
    /// A record published again goes to its slot's next lap, which may lie
    /// beyond `tail`: consumers reach it once producers have claimed up to
    /// it, or when they find the ring empty (see `reach_stranded`). With
    /// `exclusive` (no other process attached), `tail` is moved past every
    /// such record at once, the free slots on the way becoming empty
    /// records, so that everything recovered shows in the depth now.
    pub(crate) fn repair(&self, mut dead: impl FnMut(Holder, u64) -> bool, exclusive: bool) -> (u64, u64) {
        let cursors = self.store.cursors();
        let (mut producers, mut consumers) = (0, 0);
        for index in 0..self.cap as usize {
            let slot = self.store.slot(index);
            // A slot may take more than one step: a record published again
            // goes to the slot's next lap, whose position a consumer that
            // died too may have claimed already (it waited there for the
            // record's producer); nobody else would release it (this pass
            // has gone by, and a later attach finds no death). So the slot
            // is looked at again after each step, until it is queued, free,
            // or held by someone alive.
            loop {
                let seq = slot.seq.load(Ordering::Acquire);
                let pos = seq & POS_MASK;
                let (lap, published) = (pos & !PUBLISHED, pos & PUBLISHED != 0);
                if lap & (self.one_lap - 1) != 0 || (seq & SKIP != 0 && !published) {
                    break; // not a legal value: leave it to the callers, who report it
                }
                // The slot's current position, and whether a holder has claimed it.
                let at = self.count(lap + index as u64);
                let (holder, recovered) = if published {
                    if at >= self.count(cursors.head.0.load(Ordering::Acquire)) {
                        break; // a queued record, not taken yet
                    }
                    (Holder::Consumer, self.add_lap(lap) | PUBLISHED | (seq & SKIP))
                } else {
                    if at >= self.count(cursors.tail.0.pos.load(Ordering::Acquire)) {
                        break; // free, not claimed yet
                    }
                    (Holder::Producer, lap | PUBLISHED | SKIP)
                };
                if !dead(holder, at) {
                    break;
                }
                if slot.seq.compare_exchange(seq, recovered, Ordering::SeqCst, Ordering::Relaxed).is_err() {
                    break;
                }
                match holder {
                    Holder::Producer => {
                        producers += 1;
                        // A consumer that claimed the position (waiting for
                        // its producer) and died too holds the empty record
                        // now: stepped over on its behalf, as its
                        // `read_claimed` would (the slot is then free for
                        // its next lap, looked at again).
                        let head = self.count(cursors.head.0.load(Ordering::Acquire));
                        if at < head && dead(Holder::Consumer, at) {
                            let _ = slot.seq.compare_exchange(
                                recovered,
                                self.add_lap(lap),
                                Ordering::SeqCst,
                                Ordering::Relaxed,
                            );
                        }
                    }
                    Holder::Consumer => {
                        consumers += 1;
                        self.note_republished(recovered, index);
                    }
                }
            }
        }
        if let (true, Some(target)) = (exclusive, self.stranded()) {
            self.claim_through(target, u64::MAX);
        }
        (producers, consumers)
    }

    /// (A consumer found the ring empty.) If a record published again by a
    /// recovery lies beyond the tail (see `TailWords::stranded`), moves the
    /// tail towards it by up to [`MAX_CLAIM`] positions, so that this
    /// consumer and the next reach it, stepping over the empty records
    /// passed on the way; a few at a time, so that the tail never runs far
    /// ahead of the consumers (producers would find the ring full of empty
    /// records). Returns whether the tail moved. Out of line: only the
    /// empty path calls it.
    #[cold]
    #[inline(never)]
    pub(super) fn reach_stranded(&self) -> bool {
        self.stranded().is_some_and(|target| self.claim_through(target, MAX_CLAIM))
    }

    /// The `stranded` mark, if it names a position a record published
    /// again can hold: at most a lap past the head (it was taken below the
    /// head). Anything further is a corrupted word, ignored (following it
    /// would fill the ring with empty records, again and again).
    fn stranded(&self) -> Option<u64> {
        let cursors = self.store.cursors();
        let stranded = cursors.tail.0.stranded.load(Ordering::Acquire);
        let head = self.count(cursors.head.0.load(Ordering::Acquire));
        (stranded != 0 && stranded <= head.saturating_add(self.cap)).then_some(stranded)
    }

    /// Moves `tail` until its count reaches `target` (up to `limit`
    /// positions): a position whose slot already holds its lap's record
    /// (published again) is just passed; a free one is claimed and becomes
    /// an empty record, as a producer that died there would leave it (so
    /// that a waiter who judges it first does the same, harmlessly). Stops
    /// at anything else (an earlier lap's consumer still holds the slot:
    /// the next consumer to find the ring empty goes on), and when the ring
    /// is full. Safe while others work: every step is a CAS of `tail` or of
    /// a slot we claimed. Returns whether it moved the tail.
    fn claim_through(&self, target: u64, limit: u64) -> bool {
        let tail = &self.store.cursors().tail.0.pos;
        let mut moved = false;
        for _ in 0..limit {
            let t = tail.load(Ordering::Acquire);
            let Ok((lap, index)) = self.split(t) else { break };
            if self.count(t) >= target || !matches!(self.available(Holder::Producer, t), Some(1..)) {
                break;
            }
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            let passable = seq & POS_MASK == lap | PUBLISHED || seq == lap;
            if !passable {
                break;
            }
            // Lost: someone else moved the tail (look at the new one).
            if tail.compare_exchange(t, self.next(t, lap, index), Ordering::SeqCst, Ordering::Acquire).is_err() {
                continue;
            }
            moved = true;
            if seq == lap {
                self.abandon(Claim { lap, index, seq });
            }
        }
        moved
    }
}

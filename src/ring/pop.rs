//! A pop: claim, wait for the slot's turn, take the record and release
//! the slot; the pop that hands a record over before releasing its slot
//! (queues with leases); and the checksum a consumer erases as it
//! releases, which the seal pass writes only while the slot still holds
//! its record.

use super::{Announce, Claim, Holder, Ring, RingError, SKIP, Stall, State, Storage, Turn};
use crate::atomics::{AtomicU32, Ordering};

impl<S: Storage> Ring<S> {
    /// Removes the oldest record into `out` (at least `record_size` bytes) and
    /// returns its length, announcing through `ann`. Inline always, as
    /// `push`: as a call of its own it cost lPop about 20 instructions.
    #[inline(always)]
    pub(crate) fn pop(&self, out: &mut [u8], ann: &impl Announce, stall: &mut impl Stall) -> Result<usize, RingError> {
        debug_assert!(out.len() >= self.record_size);
        let result = loop {
            match self.claim_pop(ann, stall).and_then(|claim| self.take(claim, out, ann.robbable())) {
                Ok(Some(len)) => break Ok(len),
                // An empty record (an abandoned push): go on to the next one.
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        };
        ann.idle();
        result
    }

    /// Claims the oldest record (possibly an empty one), claiming its
    /// position first and waiting for its producer afterwards. Inline
    /// always, as `claim_push` (it has two callers, `pop` and `pop_committed`).
    #[inline(always)]
    pub(crate) fn claim_pop(&self, ann: &impl Announce, stall: &mut impl Stall) -> Result<Claim, RingError> {
        let (lap, index) = self.claim_one(Holder::Consumer, ann)?;
        self.prefetch_ahead(index);
        match self.await_turn(index, lap, Holder::Consumer, stall)? {
            Turn::Ready(seq) => Ok(Claim { lap, index, seq }),
            Turn::Taken => Err(RingError::Corrupt), // await_turn never says this to a consumer
        }
    }

    /// Reads the record of a slot we claimed and releases the slot. `None`:
    /// the record was an empty one (an abandoned push). `robbable`: see
    /// [`Announce::robbable`].
    #[inline]
    pub(crate) fn take(&self, claim: Claim, out: &mut [u8], robbable: bool) -> Result<Option<usize>, RingError> {
        let Claim { lap, index, seq } = claim;
        let slot = self.store.slot(index);
        let free = self.add_lap(lap);
        if seq & SKIP != 0 {
            // Nothing to deliver. Release it; failure means a recoverer
            // republished it, which it may (it is still empty: its slot's
            // checksum is some earlier record's, erased as in a release).
            self.forget_seal(&slot.check, lap);
            let _ = slot.seq.compare_exchange(seq, free, Ordering::SeqCst, Ordering::Relaxed);
            return Ok(None);
        }
        let len = slot.len.load(Ordering::Relaxed) as usize;
        let valid = len != 0 && len <= self.record_size && len <= out.len();
        if valid {
            // SAFETY: we claimed this slot (moved `head` past it) and have not released it.
            unsafe { self.store.read(index, &mut out[..len]) };
        }
        if !robbable {
            // Nobody recovers a slot whose holder announces it (see
            // `Announce::robbable`), so the slot is still ours: a plain store
            // releases it. Release: our reads of the record come before the
            // next producer's writes, and so does the checksum's erasure
            // (see `forget_seal`).
            self.forget_seal(&slot.check, lap);
            slot.seq.store(free, Ordering::Release);
            return if valid { Ok(Some(len)) } else { Err(RingError::Corrupt) };
        }
        // Release by CAS: it fails only if a waiter declared us dead and
        // republished the record for another consumer; then it is not ours.
        match slot.seq.compare_exchange(seq, free, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) if valid => Ok(Some(len)),
            Ok(_) => Err(RingError::Corrupt),
            Err(_) => Err(RingError::Robbed),
        }
    }

    /// Removes the oldest record into `out` as [`pop`](Self::pop) does, and
    /// hands it to `commit` (with its position number, see
    /// [`count`](Self::count)) while this call still holds its slot: the
    /// slot is released only after `commit` has saved the record elsewhere
    /// (a lease entry), so that a holder that dies at any instant leaves the
    /// record in exactly one place: the slot (not committed: recovery
    /// publishes it again) or the other place (committed: recovery must then
    /// only release the slot, see [`release_held`](Self::release_held)).
    /// `commit` returns false when it could not save the record; the record
    /// is then published again one lap later and `Corrupt` returned.
    ///
    /// A participant without an announcement (see [`Announce::robbable`])
    /// releases by CAS, and a failing CAS is not an error when the slot was
    /// released on its behalf (`release_held`, by a recovery that judged it
    /// dead and found the record committed).
    pub(crate) fn pop_committed(
        &self,
        out: &mut [u8],
        ann: &impl Announce,
        stall: &mut impl Stall,
        mut commit: impl FnMut(&[u8], u64) -> bool,
    ) -> Result<usize, RingError> {
        debug_assert!(out.len() >= self.record_size);
        let result = loop {
            let step = self.claim_pop(ann, stall).and_then(|claim| {
                let Some(len) = self.read_claimed(claim, out)? else { return Ok(None) };
                if !commit(&out[..len], self.count(claim.lap + claim.index as u64)) {
                    self.republish(claim);
                    return Err(RingError::Corrupt);
                }
                self.release_claimed(claim, ann.robbable()).map(|()| Some(len))
            });
            match step {
                Ok(Some(len)) => break Ok(len),
                Ok(None) => {} // an empty record: the next one
                Err(e) => break Err(e),
            }
        };
        ann.idle();
        result
    }

    /// Copies the record of a slot we claimed into `out` without releasing
    /// the slot. `None`: an empty record (an abandoned push), released here.
    pub(crate) fn read_claimed(&self, claim: Claim, out: &mut [u8]) -> Result<Option<usize>, RingError> {
        let Claim { lap, index, seq } = claim;
        let slot = self.store.slot(index);
        if seq & SKIP != 0 {
            self.forget_seal(&slot.check, lap); // as in `take`
            let _ = slot.seq.compare_exchange(seq, self.add_lap(lap), Ordering::SeqCst, Ordering::Relaxed);
            return Ok(None);
        }
        let len = slot.len.load(Ordering::Relaxed) as usize;
        if len == 0 || len > self.record_size || len > out.len() {
            // As in `take`: a record that cannot be valid is released, reported.
            let _ = slot.seq.compare_exchange(seq, self.add_lap(lap), Ordering::SeqCst, Ordering::Relaxed);
            return Err(RingError::Corrupt);
        }
        // SAFETY: we claimed this slot (moved `head` past it) and have not released it.
        unsafe { self.store.read(index, &mut out[..len]) };
        Ok(Some(len))
    }

    /// Releases a slot whose record we read ([`read_claimed`](Self::read_claimed)) and saved.
    fn release_claimed(&self, claim: Claim, robbable: bool) -> Result<(), RingError> {
        let slot = self.store.slot(claim.index);
        let free = self.add_lap(claim.lap);
        if !robbable {
            // As in `take`: nobody recovers a slot whose holder announces it.
            self.forget_seal(&slot.check, claim.lap);
            slot.seq.store(free, Ordering::Release);
            return Ok(());
        }
        match slot.seq.compare_exchange(claim.seq, free, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            // Released on our behalf by a recovery that found the record
            // saved (and maybe used by the next lap since): a recovery never
            // publishes again the record of a live holder that saves it.
            Err(now) if matches!(self.state(now, free), State::Current { .. } | State::Ahead) => Ok(()),
            Err(_) => Err(RingError::Robbed),
        }
    }

    /// Erases the checksum of a record of lap `lap` whose slot its consumer
    /// is about to release (before the releasing store, which orders it
    /// before the next lap's writes), on an `interval` queue's ring. Its
    /// producers do not seal their records (its syncs do, later): without
    /// this, the next lap's record would be published beside the checksum
    /// of this one, and a crash image holding that slot's header from a
    /// sync after the publication but its bytes from a sync before it
    /// (sectors of a page land independently) would pass for this record
    /// published again one lap later (which recovery accepts, see
    /// `Ring::rebuild`): a record consumed before the last sync would come
    /// back. A robbable consumer (releasing by CAS) does not erase it:
    /// should the CAS fail, the slot holds the record published again,
    /// whose checksum must stay.
    ///
    /// Other rings skip it (one test of a flag): the producers of `always`
    /// queues seal their records before publishing them (the slot header,
    /// 16 bytes at a 16-byte boundary, lands whole, so a published header
    /// never stands beside an older checksum), and nothing reads the
    /// checksum of a queue that is not durable.
    ///
    /// It writes the lap's [`tombstone`](Ring::tombstone), not 0, so that
    /// the seal pass, which may be about to seal this record, can tell
    /// (see `Ring::seal_if_held`). Release: a seal pass that reads the
    /// tombstone of a later lap sees that lap's `seq` too.
    #[inline(always)]
    fn forget_seal(&self, check: &AtomicU32, lap: u64) {
        if self.erase_seals {
            #[cfg(not(loom))]
            check.store(self.tombstone(lap), Ordering::Release);
            // Under loom a swap, the same write: loom leaves a store
            // unordered after a compare-exchange its thread has not seen,
            // and lets later loads read either, which the hardware's single
            // order of writes to a word never does.
            #[cfg(loom)]
            check.swap(self.tombstone(lap), Ordering::Release);
        }
    }

    /// (The seal pass.) Writes `check`, the checksum of the record slot
    /// `index` held at `lap` (`seq`, published) when its bytes were read
    /// just before, if the slot still holds that record and its consumer
    /// has not erased the checksum. Returns whether it wrote it.
    ///
    /// Unchanged `seq` after the copy: nobody consumed or rewrote the
    /// record meanwhile, so the checksum is its own. Its consumer may still
    /// erase the checksum and release the slot at any instant (two stores,
    /// the releasing one possibly not visible yet when the erasure is), and
    /// the checksum must not land after the erasure: the next lap's record
    /// would be published beside it (see `forget_seal`). So the checksum is
    /// written by CAS against the value read before `seq` was looked at,
    /// and not at all when that value is this lap's tombstone (the consumer
    /// erased it): an erasure that comes later in the word's order than
    /// the read makes the CAS fail, or comes after the CAS and wins. (A
    /// value read that a later lap left is a release store, read with
    /// acquire: `seq` then shows that lap, and nothing is written.) A
    /// consumer that releases by CAS (robbable) erases nothing: its
    /// record's checksum may stay, as it does when no pass runs.
    pub(crate) fn seal_if_held(&self, index: usize, lap: u64, seq: u64, check: u32) -> bool {
        let slot = self.store.slot(index);
        let before = slot.check.load(Ordering::Acquire);
        if slot.seq.load(Ordering::Acquire) != seq || before == self.tombstone(lap) {
            return false;
        }
        // Release: see `release_held`.
        slot.check.compare_exchange(before, check, Ordering::Release, Ordering::Relaxed).is_ok()
    }
}

//! A push: claim, wait for the slot's turn, fill and publish it (sealed
//! first for an `always` queue).

use super::seal;
use super::storage::FIRST_LINE_DATA;
use super::{Announce, Claim, Holder, PUBLISHED, Ring, RingError, Stall, Storage, Turn};
use crate::atomics::{AtomicU32, Ordering};

impl<S: Storage> Ring<S> {
    /// Appends `data` (1..=record_size bytes), announcing through `ann`.
    /// Inline always: the compiler otherwise weighs its size against its
    /// callers and may keep it out of line (a call, +25 instructions a push).
    #[inline(always)]
    pub(crate) fn push(&self, data: &[u8], ann: &impl Announce, stall: &mut impl Stall) -> Result<(), RingError> {
        debug_assert!(!data.is_empty() && data.len() <= self.record_size);
        let robbable = ann.robbable();
        let result = self.claim_push(ann, stall).and_then(|claim| self.fill_sealed(claim, data, None, robbable));
        ann.idle();
        result
    }

    /// [`push`](Self::push) of a durable ring: the record is sealed under
    /// `key` (see [`seal`]) before it is published. A function of its own,
    /// called by durable queues instead of `push`: with a test of the seal
    /// in `push` (even one never taken) plain pushes ran slower
    /// (docs/measurements.md).
    #[inline(never)]
    pub(crate) fn push_sealed(
        &self,
        key: u64,
        data: &[u8],
        ann: &impl Announce,
        stall: &mut impl Stall,
    ) -> Result<(), RingError> {
        let result = self.claim_push(ann, stall).and_then(|claim| self.fill_sealed(claim, data, Some(key), true));
        ann.idle();
        result
    }

    /// Claims the next position for a producer: returns a slot that is free
    /// for its lap and that nobody else can reach until we publish it.
    /// Inline always: with two callers (`push` and `push_sealed`) the
    /// compiler kept it out of line, and the call (its saved registers and
    /// spills) cost plain pushes about 45 instructions, 10 % of a push.
    #[inline(always)]
    pub(crate) fn claim_push(&self, ann: &impl Announce, stall: &mut impl Stall) -> Result<Claim, RingError> {
        loop {
            let (lap, index) = self.claim_one(Holder::Producer, ann)?;
            self.prefetch_ahead(index);
            // The position is ours; its slot is free for our lap once its
            // earlier holders are done.
            match self.await_turn(index, lap, Holder::Producer, stall)? {
                Turn::Ready(seq) => return Ok(Claim { lap, index, seq }),
                Turn::Taken => {} // a recovery used the position: claim another
            }
        }
    }

    /// Writes our record into the slot we claimed and publishes it (by CAS:
    /// tests use it to play a producer that may have been robbed).
    #[cfg(test)]
    pub(crate) fn fill(&self, claim: Claim, data: &[u8]) -> Result<(), RingError> {
        self.fill_sealed(claim, data, None, true)
    }

    /// [`fill`](Self::fill), writing the record's checksum under `seal`
    /// (a durable ring's key) before publishing it. `robbable`: see
    /// [`Announce::robbable`]; false publishes with a store.
    #[inline(always)]
    pub(super) fn fill_sealed(
        &self,
        claim: Claim,
        data: &[u8],
        seal: Option<u64>,
        robbable: bool,
    ) -> Result<(), RingError> {
        let slot = self.store.slot(claim.index);
        // The slot's first cache line holds `seq`, which a consumer waiting
        // for this record polls: write the record's later lines first and
        // that line last, so that it is taken back from the poller once.
        // SAFETY: we claimed this slot (moved `tail` past it) and have not
        // published it; head and rest lie within the record.
        unsafe {
            if data.len() >= FIRST_LINE_DATA {
                // The first line's part has a constant length: copied by a
                // few moves rather than a call of memcpy.
                let (head, rest) = data.split_at(FIRST_LINE_DATA);
                self.store.write(claim.index, FIRST_LINE_DATA, rest);
                if let Ok(head) = head.try_into() {
                    self.store.write_first_line(claim.index, head);
                }
            } else {
                self.store.write(claim.index, 0, data);
            }
        }
        slot.len.store(data.len() as u32, Ordering::Relaxed);
        if let Some(key) = seal {
            write_seal(&slot.check, key, claim.lap + claim.index as u64, data);
        }
        if !robbable {
            // Nobody recovers a slot whose holder announces it (see
            // `Announce::robbable`), so the slot is still ours and a plain
            // store publishes it, as `take` releases one. Release: the
            // record and its length come before `seq`. A blocking wake-up
            // orders its waiter-count load after our claiming CAS of `tail`
            // (see `queue::blocking`), not after this store. A CAS here
            // (a locked instruction) waited for the record's stores to
            // reach the cache: the costliest instruction of a push.
            slot.seq.store(claim.lap | PUBLISHED, Ordering::Release);
            return Ok(());
        }
        // Publish by CAS: it fails only if a waiter declared our claim dead
        // and turned the slot into a skipped record.
        match slot.seq.compare_exchange(claim.lap, claim.lap | PUBLISHED, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            Err(_) => Err(RingError::Robbed),
        }
    }
}

/// Writes a durable record's checksum into its slot's `check`.
#[inline(never)]
fn write_seal(check: &AtomicU32, key: u64, pos: u64, data: &[u8]) {
    check.store(seal::seal(key, pos, data), Ordering::Relaxed);
}

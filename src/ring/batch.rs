//! Batches: up to [`MAX_CLAIM`](super::MAX_CLAIM) positions claimed with one CAS, then each
//! slot handled as a single push or pop handles it ([`Ring::push_batch`],
//! [`Ring::pop_batch`]).

use super::{Announce, Claim, Holder, PUBLISHED, Ring, RingError, SKIP, Stall, Storage, Turn};
use crate::atomics::Ordering;

/// How many slots ahead of its claim a batch call prefetches: further than
/// a single push or pop does (see `claim`), since its records come faster.
const PREFETCH_AHEAD_BATCH: usize = 12;

impl<S: Storage> Ring<S> {
    /// Appends the records of `records` (each `each` bytes, 1..=record_size)
    /// in order, claiming their positions [`MAX_CLAIM`](super::MAX_CLAIM) at a time with one
    /// CAS of `tail` (as far as there is room). Returns how many went in, and
    /// the error that stopped it early (`Full` when the ring filled up).
    pub(crate) fn push_batch(
        &self,
        records: &[u8],
        each: usize,
        ann: &impl Announce,
        stall: &mut impl Stall,
    ) -> (usize, Option<RingError>) {
        self.push_batch_with(records, each, None, ann, stall)
    }

    /// [`push_batch`](Self::push_batch) of a durable ring: each record
    /// sealed under `key` (see [`push_sealed`](Self::push_sealed)).
    #[inline(never)]
    pub(crate) fn push_batch_sealed(
        &self,
        key: u64,
        records: &[u8],
        each: usize,
        ann: &impl Announce,
        stall: &mut impl Stall,
    ) -> (usize, Option<RingError>) {
        self.push_batch_with(records, each, Some(key), ann, stall)
    }

    #[inline(always)]
    fn push_batch_with(
        &self,
        records: &[u8],
        each: usize,
        seal: Option<u64>,
        ann: &impl Announce,
        stall: &mut impl Stall,
    ) -> (usize, Option<RingError>) {
        debug_assert!(each > 0 && each <= self.record_size);
        let mut pending = records.chunks_exact(each);
        let mut done = 0;
        let mut stop = None;
        while pending.len() > 0 {
            let want = pending.len() as u64;
            let step = self.each_claimed(Holder::Producer, want, ann, stall, |lap, index, turn| match turn {
                // A recovery used this position: the record goes to the next one.
                Turn::Taken => Ok(()),
                Turn::Ready(seq) => match pending.next() {
                    Some(record) => self.fill_sealed(Claim { lap, index, seq }, record, seal, true).map(|()| done += 1),
                    // More positions than records left (some were taken):
                    // publish this one empty.
                    None => {
                        self.abandon(Claim { lap, index, seq });
                        Ok(())
                    }
                },
            });
            if let Err(e) = step {
                stop = Some(e);
                break;
            }
        }
        ann.idle();
        (done, stop)
    }

    /// Claims up to `want` consecutive positions for `role` with one CAS
    /// (see [`claim_range`](Self::claim_range)) and hands each, once its
    /// slot's turn has come, to `visit` in order. When `visit` or a wait
    /// fails, the positions after it are settled (so that nobody waits for
    /// them) and the error is returned; a position yields at most one record,
    /// so `visit` runs at most `want` times.
    fn each_claimed(
        &self,
        role: Holder,
        want: u64,
        ann: &impl Announce,
        stall: &mut impl Stall,
        mut visit: impl FnMut(u64, usize, Turn) -> Result<(), RingError>,
    ) -> Result<(), RingError> {
        let (first, claimed) = self.claim_range(role, want, ann)?;
        let mut pos = first;
        for n in 0..claimed {
            let step = self.split(pos).and_then(|(lap, index)| {
                pos = self.next(pos, lap, index);
                self.prefetch_at(index, PREFETCH_AHEAD_BATCH);
                let turn = self.await_turn(index, lap, role, stall)?;
                visit(lap, index, turn)
            });
            if let Err(e) = step {
                self.settle_range(role, pos, claimed - n - 1, stall);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Gives up `n` claimed positions from `pos` on (after an error in a
    /// batch), so that nobody waits for them: a producer publishes each
    /// empty, a consumer publishes each record again one lap later (for
    /// another consumer), each slot in its turn.
    fn settle_range(&self, role: Holder, mut pos: u64, n: u64, stall: &mut impl Stall) {
        for _ in 0..n {
            let Ok((lap, index)) = self.split(pos) else { return };
            pos = self.next(pos, lap, index);
            if let Ok(Turn::Ready(seq)) = self.await_turn(index, lap, role, stall) {
                let settled = match role {
                    Holder::Producer => lap | PUBLISHED | SKIP,
                    Holder::Consumer => self.add_lap(lap) | PUBLISHED | (seq & SKIP),
                };
                let slot = self.store.slot(index);
                if slot.seq.compare_exchange(seq, settled, Ordering::SeqCst, Ordering::Relaxed).is_ok()
                    && role == Holder::Consumer
                {
                    self.note_republished(settled, index);
                }
            }
        }
    }

    /// Pops up to `lens.len()` records into `out` (`each >= record_size` bytes
    /// per record), claiming their positions [`MAX_CLAIM`](super::MAX_CLAIM) at a time with
    /// one CAS of `head`; record `i` goes to `out[i * each..]` and its length
    /// to `lens[i]`. Returns how many were taken, and the error that stopped
    /// it early (`Empty` when there were fewer).
    pub(crate) fn pop_batch(
        &self,
        out: &mut [u8],
        each: usize,
        lens: &mut [usize],
        ann: &impl Announce,
        stall: &mut impl Stall,
    ) -> (usize, Option<RingError>) {
        debug_assert!(each >= self.record_size && out.len() >= lens.len() * each);
        let max = lens.len();
        let mut taken = 0;
        let mut stop = None;
        while taken < max {
            let want = (max - taken) as u64;
            let step = self.each_claimed(Holder::Consumer, want, ann, stall, |lap, index, turn| match turn {
                Turn::Ready(seq) => {
                    let dst = &mut out[taken * each..(taken + 1) * each];
                    // `None`: an empty record, nothing to deliver.
                    if let Some(len) = self.take(Claim { lap, index, seq }, dst, ann.robbable())? {
                        lens[taken] = len;
                        taken += 1;
                    }
                    Ok(())
                }
                Turn::Taken => Err(RingError::Corrupt), // await_turn never says this to a consumer
            });
            if let Err(e) = step {
                stop = Some(e);
                break;
            }
        }
        ann.idle();
        (taken, stop)
    }
}

//! Who holds a slot, and the two questions the ring asks about a holder:
//! which positions it announces ([`Announce`], and the intent words that
//! hold announcements) and what to do when it takes too long ([`Stall`]).

use super::MAX_CLAIM;
use crate::atomics::yield_now;

/// Who holds a slot that is taking too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// A producer claimed the position and has not published it.
    Producer,
    /// A consumer took the record and has not released the slot.
    Consumer,
}

/// What to do about a slot held for too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Keep waiting (the policy may have slept).
    Wait,
    /// The holder is dead (or unknown past the unblock timeout): recover.
    Recover,
    /// Give up with this error code (for example, the queue was dropped).
    Abort(u32),
}

/// Policy for slots whose holder does not finish: decides between waiting
/// and recovering, and is told about recoveries.
pub(crate) trait Stall {
    /// Called repeatedly, once spinning and yielding are exhausted, while a
    /// slot stays held. `stalled` identifies what is waited for (the slot's
    /// `seq`: a new value means progress); `at` is the number (a count, see
    /// [`Ring::count`](super::Ring::count)) of the position whose `holder` has not finished.
    fn decide(&mut self, stalled: u64, holder: Holder, at: u64) -> Verdict;
    /// A slot held by `holder` was recovered by this call.
    fn recovered(&mut self, _holder: Holder) {}
}

/// Where a participant announces, before claiming positions, which ones it
/// is claiming, and later that it is done. The holder of a stalled position
/// is the participant whose announcement covers it: a [`Stall`] policy
/// proves the holder dead when no live participant's announcement covers
/// the position. Announcing before the claiming CAS leaves no instant at
/// which a participant holds a position it has not announced.
pub(crate) trait Announce {
    /// About to claim, as `role`, up to [`MAX_CLAIM`] positions from the one
    /// numbered `first` (a count, see [`Ring::count`](super::Ring::count)).
    fn claiming(&self, role: Holder, first: u64);
    /// Holds and claims nothing any more.
    fn idle(&self);
    /// May a slot this participant holds be recovered by another while its
    /// announcement is visible? False only when every [`Stall`] policy of
    /// the ring treats an announced holder as alive and never recovers its
    /// slot (the queue's policy does: see `registry`); then no robbery can
    /// happen, and releasing a slot needs no CAS.
    fn robbable(&self) -> bool {
        true
    }
}

/// An intent word (where an [`Announce`] keeps its announcement) that
/// announces nothing.
pub(crate) const IDLE: u64 = u64::MAX;
/// Intent word bit: the claim is a consumer's (else a producer's).
const CONSUMER_CLAIM: u64 = 1 << 63;

/// The intent word announcing a claim, as `role`, from position number `first`.
#[inline]
pub(crate) fn intent_word(role: Holder, first: u64) -> u64 {
    (first & !CONSUMER_CLAIM) | if role == Holder::Consumer { CONSUMER_CLAIM } else { 0 }
}

/// Does intent word `word` cover position number `at` held as `role`? A
/// claim covers up to [`MAX_CLAIM`] positions from its first.
#[inline]
pub(crate) fn covers(word: u64, role: Holder, at: u64) -> bool {
    let first = word & !CONSUMER_CLAIM;
    word != IDLE && (word & CONSUMER_CLAIM != 0) == (role == Holder::Consumer) && first <= at && at - first < MAX_CLAIM
}

/// Announces nothing: for participants whose stalls need no proof (tests,
/// benchmarks, a single process).
pub(crate) struct Silent;

impl Announce for Silent {
    #[inline]
    fn claiming(&self, _: Holder, _: u64) {}
    #[inline]
    fn idle(&self) {}
}

/// A [`Stall`] policy that never recovers: waits forever for every holder.
pub(crate) struct NeverRecover;

impl Stall for NeverRecover {
    fn decide(&mut self, _: u64, _: Holder, _: u64) -> Verdict {
        yield_now();
        Verdict::Wait
    }
}

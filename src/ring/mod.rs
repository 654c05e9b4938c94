//! The lock-free ring: a bounded multi-producer multi-consumer queue of
//! variable-length records, laid over raw slots that may live in memory shared
//! by several processes.
//!
//! It knows nothing of files, C or the network: the storage is behind the
//! [`Storage`] trait and the question "is the process holding this slot
//! dead?" is asked through the [`Stall`] trait.
//!
//! # Algorithm
//! A bounded MPMC ring in the family of Vyukov's queue (crossbeam's
//! `ArrayQueue`): a sequence word per slot, head and tail moved by CAS. It
//! differs where processes that die at any instruction, and contention
//! between them, demand it:
//!
//! * a position (`head`, `tail`) is `lap + index`, where `lap` is a multiple of
//!   `one_lap` (the next power of two above the capacity): the capacity is
//!   exact and any number, and moving on needs no division;
//! * each slot's `seq` says which lap the slot belongs to and whether its record
//!   is published: `lap` = free for that lap's producer, `lap | PUBLISHED` =
//!   holds that lap's record. A zeroed slot is free for lap 0, so a fresh
//!   file needs no initialisation pass;
//! * a position is claimed first (CAS on `tail` or `head`, judged against a
//!   process-local hint of the other cursor) and its slot looked at only by
//!   its holder, who then waits for its lap's turn: a producer until the
//!   previous lap's record is released, a consumer until its record is
//!   published. Nobody reads a slot it will not use, so a publishing CAS
//!   never waits for a line that a losing competitor pulled away. A slot may
//!   therefore lag its claimed positions by a lap or more while earlier
//!   holders finish;
//! * before claiming positions, a participant announces them in a word of
//!   its own (see [`Announce`]), so that the holder of any position can be
//!   proven dead (no live participant announces it). Publishing and
//!   releasing a slot are compare-and-swaps on `seq`: a slot whose holder
//!   died is moved on by a CAS from a waiter (see [`Stall`]); the holder, had
//!   it only been slow, finds its CAS failing and reports
//!   [`RingError::Robbed`] instead of corrupting anything.
//!
//! Recovery transitions, on the slot's current lap `X` (single CASes on `seq`):
//! * the producer of `X` died before publishing (`seq == X`): `X | PUBLISHED
//!   | SKIP`, an empty record that its consumer steps over;
//! * the consumer of `X` died before releasing (`seq == X | PUBLISHED`):
//!   `X + one_lap | PUBLISHED`, the record published again as the next lap's,
//!   so that it is delivered once more instead of lost (later, and after
//!   records pushed meanwhile); that lap's producer, finding its position
//!   used, claims another. That position may lie beyond the tail: the
//!   furthest such record is noted beside the tail
//!   ([`TailWords::stranded`](storage::TailWords::stranded)), and a
//!   consumer that finds the ring empty moves the tail to it, so that it is
//!   delivered even if no producer comes round.
//!
//! Batches ([`Ring::push_batch`], [`Ring::pop_batch`]) claim several
//! positions with one CAS and then handle each slot as above.
//!
//! By concern: [`claim`] (claiming positions, waiting for a slot's turn),
//! `push` (filling and publishing a slot), `pop` (taking a record and
//! releasing its slot), [`batch`], [`repair`] (recovery of
//! slots whose holders are gone, and of records published again beyond the
//! tail), [`holder`] (who holds a slot: the [`Announce`] and [`Stall`]
//! traits), [`backoff`], [`storage`] (where the slots live), [`seal`] and
//! `passes` (durable rings), `peek`, [`local`] ([`LocalRing`]); this file:
//! the [`Ring`], its positions and laps.

mod backoff;
mod batch;
mod claim;
mod holder;
mod local;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(not(loom))]
mod passes;
#[cfg(not(loom))]
mod peek;
mod pop;
mod push;
mod repair;
pub(crate) mod seal;
mod storage;
#[cfg(all(test, not(loom)))]
mod tests;

pub(crate) use backoff::Backoff;
pub(crate) use holder::{Announce, Holder, IDLE, NeverRecover, Silent, Stall, Verdict, covers, intent_word};
pub use local::LocalRing;
#[cfg(not(loom))]
pub(crate) use passes::Rebuilt;
#[cfg(not(loom))]
pub use peek::Peeked;
#[cfg(not(loom))]
pub(crate) use peek::SnapshotError;
#[cfg(not(loom))]
pub(crate) use storage::MapStorage;
#[cfg(all(test, not(loom)))]
pub(crate) use storage::SlotHeader;
pub(crate) use storage::{CachePadded, HeapStorage, Storage};
#[cfg(not(loom))]
pub(crate) use storage::{Cursors, SLOT_HEADER_BYTES};

use crate::atomics::{AtomicU64, Ordering};

/// `seq` bit: the slot holds a published record for its lap.
pub(crate) const PUBLISHED: u64 = 1;
/// `seq` bit: the published record is empty (its producer died); step over it.
pub(crate) const SKIP: u64 = 1 << 63;
/// Positions and laps live in the low 63 bits (bit 63 is [`SKIP`]); at a
/// billion operations a second they wrap after centuries.
pub(crate) const POS_MASK: u64 = !SKIP;

/// Most positions one CAS claims (batches claim in chunks of this). An
/// announcement covers this many positions from its first.
pub(crate) const MAX_CLAIM: u64 = 64;

/// Largest capacity: keeps `one_lap` well inside the 63-bit position space.
pub const MAX_CAPACITY: u64 = 1 << 40;

/// Why a ring operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RingError {
    /// Push: `capacity` records are queued.
    Full,
    /// Pop: no record is queued.
    Empty,
    /// This call stalled so long that its slot was recovered by another
    /// participant: nothing was pushed (push) or taken (pop).
    Robbed,
    /// The shared state holds impossible values (a corrupted file).
    Corrupt,
    /// The [`Stall`] policy gave up with this code.
    Aborted(u32),
}

/// How a slot's `seq` relates to the lap of a position we hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Belongs to our lap: free (`published == false`) or holding its record.
    Current { published: bool },
    /// Still at an earlier lap, `seq_lap`, whose producer has not published
    /// (`published == false`) or whose consumer has not released the slot.
    /// Positions are claimed before their slot is ready, so a slot can be
    /// behind by a lap or more while its earlier holders finish: we wait our turn.
    Behind { seq_lap: u64, published: bool },
    /// Beyond our lap. A producer's position was used by a republished
    /// record (consumed since); for a consumer this cannot happen.
    Ahead,
    /// No legal value: the shared memory is corrupted.
    Invalid,
}

/// More laps behind than this cannot come from stalled participants (each
/// lap behind needs one holding the slot): it is a corrupted `seq`.
const MAX_LAPS_BEHIND: u64 = 1 << 20;

/// How waiting for our turn at a slot ended.
enum Turn {
    /// The slot is ours to use; its `seq` is this.
    Ready(u64),
    /// (Producer only.) A recovery republished a stranded record into our
    /// position, or declared our claim abandoned: the position is used;
    /// claim another.
    Taken,
}

/// The ring over a [`Storage`].
pub(crate) struct Ring<S> {
    store: S,
    /// Number of slots (exact capacity), `1..=MAX_CAPACITY`.
    cap: u64,
    /// Smallest power of two above `cap`; a position is `lap + index` with
    /// `lap` a multiple of `one_lap` and `index < cap`.
    one_lap: u64,
    /// Largest record, in bytes (the data area of each slot).
    record_size: usize,
    /// A recent value of `head`, private to this process: producers check
    /// for room against it and read the shared (busy) `head` only when it
    /// says the ring is full. `head` only grows, so the hint errs on "full".
    head_hint: CachePadded<AtomicU64>,
    /// The same for consumers: a recent `tail`, erring on "empty".
    tail_hint: CachePadded<AtomicU64>,
    /// Consumers erase a record's checksum when they release its slot (see
    /// `claim::forget_seal`): only an `interval` queue's (its producers do
    /// not seal; elsewhere the next producer writes its own checksum, or
    /// nobody reads it). Set by [`erasing_seals`](Self::erasing_seals).
    erase_seals: bool,
}

/// A slot claimed by a producer (free for `lap`) or a consumer (published
/// at `seq`), held until `fill` or `take` finishes with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    lap: u64,
    index: usize,
    seq: u64,
}

impl<S: Storage> Ring<S> {
    /// A ring of `capacity` slots of `record_size` bytes over `store`, whose
    /// cursors and slot headers are either all zero (a new ring) or left by
    /// an earlier ring of the same geometry.
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`], or `record_size` is 0.
    pub(crate) fn new(store: S, capacity: u64, record_size: usize) -> Ring<S> {
        assert!((1..=MAX_CAPACITY).contains(&capacity), "capacity out of range");
        assert!(record_size > 0, "record size is 0");
        let head = store.cursors().head.0.load(Ordering::Acquire);
        let tail = store.cursors().tail.0.pos.load(Ordering::Acquire);
        Ring {
            store,
            cap: capacity,
            one_lap: one_lap(capacity),
            record_size,
            head_hint: CachePadded(AtomicU64::new(head)),
            tail_hint: CachePadded(AtomicU64::new(tail)),
            erase_seals: false,
        }
    }

    /// This ring, its consumers erasing the checksum of each record whose
    /// slot they release (an `interval` queue's ring: see
    /// `claim::forget_seal`).
    pub(crate) fn erasing_seals(mut self, erase: bool) -> Ring<S> {
        self.erase_seals = erase;
        self
    }

    /// What a consumer of lap `lap` leaves in its slot's checksum when it
    /// releases it (see `claim::forget_seal`): never 0 at lap 0 (a fresh
    /// slot's value), and different at consecutive laps, so that the seal
    /// pass tells a checksum erased by this lap's consumer from one left
    /// by an earlier lap (see `Ring::seal_if_held`).
    #[inline(always)]
    pub(crate) fn tombstone(&self, lap: u64) -> u32 {
        !((lap >> self.one_lap.trailing_zeros()) as u32)
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> u64 {
        self.cap
    }

    /// Largest record.
    pub(crate) fn record_size(&self) -> usize {
        self.record_size
    }

    /// The storage (tests reach into it to corrupt or inspect it).
    #[cfg(test)]
    fn storage(&self) -> &S {
        &self.store
    }

    /// The lap and slot index of position number `at`.
    fn position(&self, at: u64) -> (u64, usize) {
        let lap = ((at / self.cap) << self.one_lap.trailing_zeros()) & POS_MASK;
        (lap, (at % self.cap) as usize)
    }

    /// The position `k` positions after `pos`.
    fn advance(&self, pos: u64, k: u64) -> u64 {
        let count = self.count(pos) + k;
        (((count / self.cap) << self.one_lap.trailing_zeros()) | (count % self.cap)) & POS_MASK
    }

    /// True when no record is queued, read with the sequential consistency that
    /// a sleeper needs after announcing itself (see `queue::blocking`).
    pub(crate) fn is_empty_seqcst(&self) -> bool {
        let cursors = self.store.cursors();
        let head = cursors.head.0.load(Ordering::SeqCst);
        cursors.tail.0.pos.load(Ordering::SeqCst) == head
    }

    /// [`pushed`](Self::pushed), read with the sequential consistency that a
    /// sleeper needs after announcing itself (see `queue::blocking`).
    pub(crate) fn pushed_seqcst(&self) -> u64 {
        self.count(self.store.cursors().tail.0.pos.load(Ordering::SeqCst))
    }

    /// Records claimed by producers so far (pushes, including in-flight ones).
    pub(crate) fn pushed(&self) -> u64 {
        self.count(self.store.cursors().tail.0.pos.load(Ordering::Acquire))
    }

    /// Records claimed by consumers so far.
    pub(crate) fn popped(&self) -> u64 {
        self.count(self.store.cursors().head.0.load(Ordering::Acquire))
    }

    /// Records in the queue (pushed - popped), clamped to `0..=capacity`.
    pub(crate) fn depth(&self) -> u64 {
        let popped = self.popped();
        self.pushed().saturating_sub(popped).min(self.cap)
    }

    /// Number of positions before `pos`: `lap number * capacity + index`.
    pub(crate) fn count(&self, pos: u64) -> u64 {
        let pos = pos & POS_MASK;
        let index = pos & (self.one_lap - 1);
        (pos >> self.one_lap.trailing_zeros()).wrapping_mul(self.cap).wrapping_add(index)
    }

    /// Splits a position into its lap and slot index, refusing impossible ones.
    #[inline]
    fn split(&self, pos: u64) -> Result<(u64, usize), RingError> {
        let index = pos & (self.one_lap - 1);
        if index >= self.cap || pos & SKIP != 0 {
            return Err(RingError::Corrupt);
        }
        Ok((pos & !(self.one_lap - 1), index as usize))
    }

    /// The position after `pos` (`lap + index`).
    #[inline]
    fn next(&self, pos: u64, lap: u64, index: usize) -> u64 {
        if (index as u64) + 1 < self.cap { pos + 1 } else { self.add_lap(lap) }
    }

    /// `pos` one lap later, in the 63-bit position space.
    #[inline]
    fn add_lap(&self, pos: u64) -> u64 {
        pos.wrapping_add(self.one_lap) & POS_MASK
    }

    /// Classifies a slot's `seq` against the lap of a position we hold.
    fn state(&self, seq: u64, lap: u64) -> State {
        let pos = seq & POS_MASK;
        let published = pos & PUBLISHED != 0;
        let seq_lap = pos & !PUBLISHED;
        if seq_lap & (self.one_lap - 1) != 0 || (seq & SKIP != 0 && !published) {
            return State::Invalid;
        }
        if seq_lap == lap {
            return State::Current { published };
        }
        if seq_lap.wrapping_sub(lap) & POS_MASK < 1 << 62 {
            return State::Ahead;
        }
        let laps_behind = (lap.wrapping_sub(seq_lap) & POS_MASK) >> self.one_lap.trailing_zeros();
        if laps_behind <= MAX_LAPS_BEHIND { State::Behind { seq_lap, published } } else { State::Invalid }
    }
}

/// The lap length for a capacity: the smallest power of two above it.
pub(crate) fn one_lap(capacity: u64) -> u64 {
    (capacity + 1).next_power_of_two()
}

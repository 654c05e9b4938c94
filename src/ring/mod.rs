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

#[cfg(not(loom))]
mod passes;
pub(crate) mod seal;
mod storage;

#[cfg(not(loom))]
pub(crate) use passes::Rebuilt;
#[cfg(not(loom))]
pub(crate) use storage::MapStorage;
pub(crate) use storage::{CachePadded, HeapStorage, SlotHeader, Storage};
#[cfg(not(loom))]
pub(crate) use storage::{Cursors, SLOT_HEADER_BYTES};

use crate::atomics::{AtomicU32, AtomicU64, Ordering, fence, spin_hint, yield_now};

/// `seq` bit: the slot holds a published record for its lap.
pub const PUBLISHED: u64 = 1;
/// `seq` bit: the published record is empty (its producer died); step over it.
pub const SKIP: u64 = 1 << 63;
/// Positions and laps live in the low 63 bits (bit 63 is [`SKIP`]); at a
/// billion operations a second they wrap after centuries.
pub const POS_MASK: u64 = !SKIP;

/// Most positions one CAS claims (batches claim in chunks of this). An
/// announcement covers this many positions from its first.
pub const MAX_CLAIM: u64 = 64;

/// How many slots ahead of its claim a thread prefetches into its cache, so
/// that the cache misses of its next call overlap this one (a fresh slot's
/// lines come from memory: without it, single-record pushes ran about 20 %
/// slower here). A prefetch never changes what anyone reads.
const PREFETCH_AHEAD: usize = 4;
/// The same inside a batch call, whose records come faster.
const PREFETCH_AHEAD_BATCH: usize = 12;

/// Largest capacity: keeps `one_lap` well inside the 63-bit position space.
pub const MAX_CAPACITY: u64 = 1 << 40;

/// Who holds a slot that is taking too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// A producer claimed the position and has not published it.
    Producer,
    /// A consumer took the record and has not released the slot.
    Consumer,
}

/// What to do about a slot held for too long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Keep waiting (the policy may have slept).
    Wait,
    /// The holder is dead (or unknown past the unblock timeout): recover.
    Recover,
    /// Give up with this error code (for example, the queue was dropped).
    Abort(u32),
}

/// Policy for slots whose holder does not finish: decides between waiting
/// and recovering, and is told about recoveries.
pub trait Stall {
    /// Called repeatedly, once spinning and yielding are exhausted, while a
    /// slot stays held. `stalled` identifies what is waited for (the slot's
    /// `seq`: a new value means progress); `at` is the number (a count, see
    /// [`Ring::count`]) of the position whose `holder` has not finished.
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
pub trait Announce {
    /// About to claim, as `role`, up to [`MAX_CLAIM`] positions from the one
    /// numbered `first` (a count, see [`Ring::count`]).
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
pub const IDLE: u64 = u64::MAX;
/// Intent word bit: the claim is a consumer's (else a producer's).
const CONSUMER_CLAIM: u64 = 1 << 63;

/// The intent word announcing a claim, as `role`, from position number `first`.
#[inline]
pub fn intent_word(role: Holder, first: u64) -> u64 {
    (first & !CONSUMER_CLAIM) | if role == Holder::Consumer { CONSUMER_CLAIM } else { 0 }
}

/// Does intent word `word` cover position number `at` held as `role`? A
/// claim covers up to [`MAX_CLAIM`] positions from its first.
#[inline]
pub fn covers(word: u64, role: Holder, at: u64) -> bool {
    let first = word & !CONSUMER_CLAIM;
    word != IDLE && (word & CONSUMER_CLAIM != 0) == (role == Holder::Consumer) && first <= at && at - first < MAX_CLAIM
}

/// Announces nothing: for participants whose stalls need no proof (tests,
/// benchmarks, a single process).
pub struct Silent;

impl Announce for Silent {
    #[inline]
    fn claiming(&self, _: Holder, _: u64) {}
    #[inline]
    fn idle(&self) {}
}

/// A [`Stall`] policy that never recovers: waits forever for every holder.
pub struct NeverRecover;

impl Stall for NeverRecover {
    fn decide(&mut self, _: u64, _: Holder, _: u64) -> Verdict {
        yield_now();
        Verdict::Wait
    }
}

/// Why a ring operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
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

/// Record bytes that share a cache line with the slot header.
const FIRST_LINE_DATA: usize = 64 - std::mem::size_of::<SlotHeader>();

/// Where a consumer's wait for its claimed slot starts (32 pauses, about a
/// microsecond): it usually arrives while its producer is still copying, and
/// polling the slot at once would take the line away from that producer,
/// whose publishing CAS must then win it back.
const CONSUMER_FIRST_STEP: u32 = 5;

/// Spin, then yield: bounded busy-waiting for the rare moments when one
/// thread waits for another's in-flight step.
pub(crate) struct Backoff {
    step: u32,
}

#[cfg(not(loom))]
const SPIN_LIMIT: u32 = 6;
#[cfg(not(loom))]
const YIELD_LIMIT: u32 = 10;
#[cfg(loom)]
const SPIN_LIMIT: u32 = 0;
#[cfg(loom)]
const YIELD_LIMIT: u32 = 1;

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { step: 0 }
    }

    /// A backoff whose first waits are already `step` doublings long.
    pub(crate) fn starting_at(step: u32) -> Backoff {
        Backoff { step: step.min(SPIN_LIMIT) }
    }

    /// After a lost CAS: a short exponential spin.
    pub(crate) fn spin(&mut self) {
        for _ in 0..1u32 << self.step.min(SPIN_LIMIT) {
            spin_hint();
        }
        if self.step <= SPIN_LIMIT {
            self.step += 1;
        }
    }

    /// While waiting for another thread: spin, then yield the CPU.
    pub(crate) fn snooze(&mut self) {
        if self.step <= SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                spin_hint();
            }
        } else {
            yield_now();
        }
        if self.step <= YIELD_LIMIT {
            self.step += 1;
        }
    }

    /// Spinning and yielding are exhausted: time to ask the [`Stall`] policy.
    pub(crate) fn is_completed(&self) -> bool {
        self.step > YIELD_LIMIT
    }
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
pub struct Ring<S> {
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
    pub fn new(store: S, capacity: u64, record_size: usize) -> Ring<S> {
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
        }
    }

    /// Number of slots.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// Largest record.
    pub fn record_size(&self) -> usize {
        self.record_size
    }

    /// The storage (tests reach into it to corrupt or inspect it).
    #[cfg(test)]
    fn storage(&self) -> &S {
        &self.store
    }

    /// Appends `data` (1..=record_size bytes), announcing through `ann`.
    #[inline]
    pub fn push(&self, data: &[u8], ann: &impl Announce, stall: &mut impl Stall) -> Result<(), RingError> {
        debug_assert!(!data.is_empty() && data.len() <= self.record_size);
        let result = self.claim_push(ann, stall).and_then(|claim| self.fill(claim, data));
        ann.idle();
        result
    }

    /// [`push`](Self::push) of a durable ring: the record is sealed under
    /// `key` (see [`seal`]) before it is published. A function of its own,
    /// called by durable queues instead of `push`: with a test of the seal
    /// in `push` (even one never taken) plain pushes ran about 15% slower.
    #[inline(never)]
    pub(crate) fn push_sealed(
        &self,
        key: u64,
        data: &[u8],
        ann: &impl Announce,
        stall: &mut impl Stall,
    ) -> Result<(), RingError> {
        let result = self.claim_push(ann, stall).and_then(|claim| self.fill_sealed(claim, data, Some(key)));
        ann.idle();
        result
    }

    /// Claims the next position for a producer: returns a slot that is free
    /// for its lap and that nobody else can reach until we publish it.
    #[inline]
    pub(crate) fn claim_push(&self, ann: &impl Announce, stall: &mut impl Stall) -> Result<Claim, RingError> {
        loop {
            let (pos, _) = self.claim_range(Holder::Producer, 1, ann)?;
            let (lap, index) = self.split(pos)?;
            self.prefetch_ahead(index);
            // The position is ours; its slot is free for our lap once its
            // earlier holders are done.
            match self.await_turn(index, lap, Holder::Producer, stall)? {
                Turn::Ready(seq) => return Ok(Claim { lap, index, seq }),
                Turn::Taken => {} // a recovery used the position: claim another
            }
        }
    }

    /// Claims up to `want` (at most [`MAX_CLAIM`]) consecutive positions with
    /// one CAS of `role`'s cursor (`tail` for a producer, `head` for a
    /// consumer), as far as there are free positions (producer) or positions
    /// producers have claimed (consumer), announcing them first. Returns the
    /// first and how many (at least 1).
    ///
    /// Unlike Vyukov's original, positions are claimed first and their slots
    /// looked at afterwards (`await_turn`): what is available is judged from
    /// the cursors, so a participant never reads the slot of a position that
    /// a competitor wins (that read would make the winner's publishing CAS
    /// wait for the line).
    #[inline]
    fn claim_range(&self, role: Holder, want: u64, ann: &impl Announce) -> Result<(u64, u64), RingError> {
        let cursors = self.store.cursors();
        let cursor = match role {
            Holder::Producer => &cursors.tail.0.pos,
            Holder::Consumer => &cursors.head.0,
        };
        let mut backoff = Backoff::new();
        let mut pos = cursor.load(Ordering::Acquire);
        loop {
            let (lap, index) = self.split(pos)?;
            let available = match self.available(role, pos) {
                Some(n) => n,
                None => {
                    // Our snapshot of the cursor is stale: it must have moved.
                    let current = cursor.load(Ordering::Acquire);
                    if current == pos {
                        return Err(RingError::Corrupt);
                    }
                    pos = current;
                    continue;
                }
            };
            if available == 0 {
                if role == Holder::Consumer && self.reach_stranded() {
                    // The tail moved towards a record published again
                    // beyond it: look again.
                    pos = cursor.load(Ordering::Acquire);
                    continue;
                }
                return Err(match role {
                    Holder::Producer => RingError::Full,
                    Holder::Consumer => RingError::Empty,
                });
            }
            let k = want.min(available).min(MAX_CLAIM);
            // Announce the positions before taking them (see `Announce`).
            ann.claiming(role, self.count(pos));
            let after = if k == 1 { self.next(pos, lap, index) } else { self.advance(pos, k) };
            match cursor.compare_exchange_weak(pos, after, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => return Ok((pos, k)),
                Err(current) => {
                    pos = current;
                    backoff.spin();
                }
            }
        }
    }

    /// How many positions from `pos` (a snapshot of `role`'s cursor) a claim
    /// may take: free ones for a producer, ones producers have claimed for a
    /// consumer. Judged from this process's hint of the other cursor, read
    /// from the shared one only when the hint says none (the hint lags, so
    /// it errs on "none"). `None`: the snapshot `pos` is stale.
    #[inline]
    fn available(&self, role: Holder, pos: u64) -> Option<u64> {
        let cursors = self.store.cursors();
        let (hint, other) = match role {
            Holder::Producer => (&self.head_hint.0, &cursors.head.0),
            Holder::Consumer => (&self.tail_hint.0, &cursors.tail.0.pos),
        };
        // Records between head and tail: 0..=capacity for a true pair.
        let queued = |head: u64, tail: u64| self.count(tail).wrapping_sub(self.count(head));
        let within = |n: u64| (n <= self.cap).then_some(n);
        let hinted = match role {
            Holder::Producer => within(queued(hint.load(Ordering::Relaxed), pos)).map(|used| self.cap - used),
            Holder::Consumer => within(queued(pos, hint.load(Ordering::Relaxed))),
        };
        if let Some(n @ 1..) = hinted {
            return Some(n);
        }
        fence(Ordering::SeqCst);
        let fresh = other.load(Ordering::Acquire);
        hint.store(fresh, Ordering::Relaxed);
        match role {
            Holder::Producer => within(queued(fresh, pos)).map(|used| self.cap - used),
            Holder::Consumer => within(queued(pos, fresh)),
        }
    }

    /// Writes our record into the slot we claimed and publishes it.
    #[inline]
    pub(crate) fn fill(&self, claim: Claim, data: &[u8]) -> Result<(), RingError> {
        self.fill_sealed(claim, data, None)
    }

    /// [`fill`](Self::fill), writing the record's checksum under `seal`
    /// (a durable ring's key) before publishing it.
    #[inline(always)]
    fn fill_sealed(&self, claim: Claim, data: &[u8], seal: Option<u64>) -> Result<(), RingError> {
        let slot = self.store.slot(claim.index);
        // The slot's first cache line holds `seq`, which a consumer waiting
        // for this record polls: write the record's later lines first and
        // that line last, so that it is taken back from the poller once.
        let (head, rest) = data.split_at(data.len().min(FIRST_LINE_DATA));
        // SAFETY: we claimed this slot (moved `tail` past it) and have not
        // published it; head and rest lie within the record.
        unsafe {
            self.store.write(claim.index, head.len(), rest);
            self.store.write(claim.index, 0, head);
        }
        slot.len.store(data.len() as u32, Ordering::Relaxed);
        if let Some(key) = seal {
            write_seal(&slot.check, key, claim.lap + claim.index as u64, data);
        }
        // Publish by CAS: it fails only if a waiter declared our claim dead
        // and turned the slot into a skipped record. SeqCst orders it before
        // the waiter-count load of a blocking wake-up (see `queue`).
        match slot.seq.compare_exchange(claim.lap, claim.lap | PUBLISHED, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            Err(_) => Err(RingError::Robbed),
        }
    }

    /// Removes the oldest record into `out` (at least `record_size` bytes) and
    /// returns its length, announcing through `ann`.
    #[inline]
    pub fn pop(&self, out: &mut [u8], ann: &impl Announce, stall: &mut impl Stall) -> Result<usize, RingError> {
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
    /// position first and waiting for its producer afterwards.
    #[inline]
    pub(crate) fn claim_pop(&self, ann: &impl Announce, stall: &mut impl Stall) -> Result<Claim, RingError> {
        let (pos, _) = self.claim_range(Holder::Consumer, 1, ann)?;
        let (lap, index) = self.split(pos)?;
        self.prefetch_ahead(index);
        match self.await_turn(index, lap, Holder::Consumer, stall)? {
            Turn::Ready(seq) => Ok(Claim { lap, index, seq }),
            Turn::Taken => Err(RingError::Corrupt), // await_turn never says this to a consumer
        }
    }

    /// Waits until slot `index` is ready for the holder of our position (lap
    /// `lap`): free for a producer, published for a consumer. Whoever holds
    /// the slot meanwhile (an earlier lap's producer or consumer, or our own
    /// producer) and takes too long is judged by `stall`; if it is dead, the
    /// slot is moved on by one CAS, acting on its current lap:
    /// - a producer died before publishing lap X: X becomes an empty record
    ///   (`X | PUBLISHED | SKIP`) that its consumer steps over;
    /// - a consumer died before releasing lap X: X's record is published
    ///   again as the next lap's (`X + one_lap | PUBLISHED`), so that it is
    ///   delivered once more; that lap's producer, finding its position
    ///   used, claims another.
    #[inline]
    fn await_turn(&self, index: usize, lap: u64, role: Holder, stall: &mut impl Stall) -> Result<Turn, RingError> {
        // The common case, inline: the slot is already ready for our lap
        // (free of lap `lap` for a producer, published, possibly as an empty
        // record, for a consumer). Anything else goes to the waiting loop.
        let seq = self.store.slot(index).seq.load(Ordering::Acquire);
        let ready = match role {
            Holder::Producer => seq == lap,
            Holder::Consumer => seq & POS_MASK == lap | PUBLISHED,
        };
        if ready {
            return Ok(Turn::Ready(seq));
        }
        self.await_turn_slow(index, lap, role, stall)
    }

    /// [`Ring::await_turn`] when the slot was not ready at first sight.
    #[inline(never)]
    fn await_turn_slow(&self, index: usize, lap: u64, role: Holder, stall: &mut impl Stall) -> Result<Turn, RingError> {
        let slot = self.store.slot(index);
        let mut wait = match role {
            Holder::Producer => Backoff::new(),
            Holder::Consumer => Backoff::starting_at(CONSUMER_FIRST_STEP),
        };
        loop {
            let seq = slot.seq.load(Ordering::Acquire);
            let (holder, holder_lap, recovered) = match (self.state(seq, lap), role) {
                (State::Current { published: false }, Holder::Producer) => return Ok(Turn::Ready(seq)),
                (State::Current { published: true }, Holder::Consumer) => return Ok(Turn::Ready(seq)),
                (State::Current { published: true } | State::Ahead, Holder::Producer) => return Ok(Turn::Taken),
                // Our producer is writing.
                (State::Current { published: false }, Holder::Consumer) => {
                    (Holder::Producer, lap, lap | PUBLISHED | SKIP)
                }
                (State::Behind { seq_lap, published: false }, _) => {
                    (Holder::Producer, seq_lap, seq_lap | PUBLISHED | SKIP)
                }
                (State::Behind { seq_lap, published: true }, _) => {
                    (Holder::Consumer, seq_lap, self.add_lap(seq_lap) | PUBLISHED | (seq & SKIP))
                }
                (State::Ahead | State::Invalid, _) => return Err(RingError::Corrupt),
            };
            if wait.is_completed() {
                match stall.decide(seq, holder, self.count(holder_lap + index as u64)) {
                    Verdict::Wait => {}
                    Verdict::Abort(code) => return Err(RingError::Aborted(code)),
                    Verdict::Recover => {
                        if slot.seq.compare_exchange(seq, recovered, Ordering::SeqCst, Ordering::Acquire).is_ok() {
                            if holder == Holder::Consumer {
                                self.note_republished(recovered, index);
                            }
                            stall.recovered(holder);
                        }
                        continue;
                    }
                }
            }
            wait.snooze();
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
            // republished it, which it may (it is still empty).
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
            // next producer's writes.
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

    /// Gives a claimed slot's record back: published again one lap later,
    /// for another consumer (as a recovery does).
    fn republish(&self, claim: Claim) {
        let again = self.add_lap(claim.lap) | PUBLISHED | (claim.seq & SKIP);
        let slot = self.store.slot(claim.index);
        if slot.seq.compare_exchange(claim.seq, again, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            self.note_republished(again, claim.index);
        }
    }

    /// A record was published again as `seq` (its slot's next lap) in slot
    /// `index`: notes it in the tail line's `stranded`, so that consumers
    /// finding the ring empty reach it even if no producer does.
    fn note_republished(&self, seq: u64, index: usize) {
        let at = self.count((seq & POS_MASK & !PUBLISHED) + index as u64);
        self.store.cursors().tail.0.stranded.fetch_max(at + 1, Ordering::SeqCst);
    }

    /// The lap and slot index of position number `at`.
    fn position(&self, at: u64) -> (u64, usize) {
        let lap = ((at / self.cap) << self.one_lap.trailing_zeros()) & POS_MASK;
        (lap, (at % self.cap) as usize)
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
    pub(crate) fn release_held(&self, at: u64) -> bool {
        let (lap, index) = self.position(at);
        let slot = self.store.slot(index);
        slot.seq.compare_exchange(lap | PUBLISHED, self.add_lap(lap), Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }

    /// Appends the records of `records` (each `each` bytes, 1..=record_size)
    /// in order, claiming their positions [`MAX_CLAIM`] at a time with one
    /// CAS of `tail` (as far as there is room). Returns how many went in, and
    /// the error that stopped it early (`Full` when the ring filled up).
    pub fn push_batch(
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
                    Some(record) => self.fill_sealed(Claim { lap, index, seq }, record, seal).map(|()| done += 1),
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

    /// Publishes a claimed, free slot as an empty record (consumers step over it).
    fn abandon(&self, claim: Claim) {
        let slot = self.store.slot(claim.index);
        let _ = slot.seq.compare_exchange(claim.lap, claim.lap | PUBLISHED | SKIP, Ordering::SeqCst, Ordering::Relaxed);
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
    /// per record), claiming their positions [`MAX_CLAIM`] at a time with
    /// one CAS of `head`; record `i` goes to `out[i * each..]` and its length
    /// to `lens[i]`. Returns how many were taken, and the error that stopped
    /// it early (`Empty` when there were fewer).
    pub fn pop_batch(
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

    /// Prefetches the slot [`PREFETCH_AHEAD`] after `index`, which this
    /// thread's next call likely takes.
    #[inline]
    fn prefetch_ahead(&self, index: usize) {
        self.prefetch_at(index, PREFETCH_AHEAD);
    }

    #[inline]
    fn prefetch_at(&self, index: usize, distance: usize) {
        let ahead = index + distance;
        self.store.prefetch(if ahead >= self.cap as usize { ahead - self.cap as usize } else { ahead });
    }

    /// The position `k` positions after `pos`.
    fn advance(&self, pos: u64, k: u64) -> u64 {
        let count = self.count(pos) + k;
        (((count / self.cap) << self.one_lap.trailing_zeros()) | (count % self.cap)) & POS_MASK
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
    pub fn repair(&self, mut dead: impl FnMut(Holder, u64) -> bool, exclusive: bool) -> (u64, u64) {
        let cursors = self.store.cursors();
        let (mut producers, mut consumers) = (0, 0);
        for index in 0..self.cap as usize {
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            let pos = seq & POS_MASK;
            let (lap, published) = (pos & !PUBLISHED, pos & PUBLISHED != 0);
            if lap & (self.one_lap - 1) != 0 || (seq & SKIP != 0 && !published) {
                continue; // not a legal value: leave it to the callers, who report it
            }
            // The slot's current position, and whether a holder has claimed it.
            let at = self.count(lap + index as u64);
            let (holder, recovered) = if published {
                if at >= self.count(cursors.head.0.load(Ordering::Acquire)) {
                    continue; // a queued record, not taken yet
                }
                (Holder::Consumer, self.add_lap(lap) | PUBLISHED | (seq & SKIP))
            } else {
                if at >= self.count(cursors.tail.0.pos.load(Ordering::Acquire)) {
                    continue; // free, not claimed yet
                }
                (Holder::Producer, lap | PUBLISHED | SKIP)
            };
            if !dead(holder, at) {
                continue;
            }
            if slot.seq.compare_exchange(seq, recovered, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
                match holder {
                    Holder::Producer => producers += 1,
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
    fn reach_stranded(&self) -> bool {
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

    /// True when no record is queued, read with the sequential consistency that
    /// a sleeper needs after announcing itself (see `queue`).
    pub fn is_empty_seqcst(&self) -> bool {
        let cursors = self.store.cursors();
        let head = cursors.head.0.load(Ordering::SeqCst);
        cursors.tail.0.pos.load(Ordering::SeqCst) == head
    }

    /// [`pushed`](Self::pushed), read with the sequential consistency that a
    /// sleeper needs after announcing itself (see `queue`).
    pub fn pushed_seqcst(&self) -> u64 {
        self.count(self.store.cursors().tail.0.pos.load(Ordering::SeqCst))
    }

    /// Records claimed by producers so far (pushes, including in-flight ones).
    pub fn pushed(&self) -> u64 {
        self.count(self.store.cursors().tail.0.pos.load(Ordering::Acquire))
    }

    /// Records claimed by consumers so far.
    pub fn popped(&self) -> u64 {
        self.count(self.store.cursors().head.0.load(Ordering::Acquire))
    }

    /// Records in the queue (pushed - popped), clamped to `0..=capacity`.
    pub fn depth(&self) -> u64 {
        let popped = self.popped();
        self.pushed().saturating_sub(popped).min(self.cap)
    }

    /// Number of positions before `pos`: `lap number * capacity + index`.
    pub fn count(&self, pos: u64) -> u64 {
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

/// Writes a durable record's checksum into its slot's `check`.
#[inline(never)]
fn write_seal(check: &AtomicU32, key: u64, pos: u64, data: &[u8]) {
    check.store(seal::seal(key, pos, data), Ordering::Relaxed);
}

/// The lap length for a capacity: the smallest power of two above it.
pub fn one_lap(capacity: u64) -> u64 {
    (capacity + 1).next_power_of_two()
}

/// What [`crate::Queue::peek`] found at a position.
#[cfg(not(loom))]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// A published record (a copy of it).
    Record(Vec<u8>),
    /// An empty record left by a producer that died: consumers step over it.
    Skipped,
    /// Claimed by a producer that has not published yet, or changed while
    /// it was copied (consumed, or being written again).
    Busy,
}

#[cfg(not(loom))]
impl Ring<MapStorage> {
    /// Copies of up to `max` queued records from the head, oldest first,
    /// without taking them: each with its position number (see
    /// [`count`](Self::count)). Only for inspection: records can be popped
    /// meanwhile; a copy whose slot changed while it was made is reported as
    /// [`Peeked::Busy`], never as a torn record.
    pub fn peek(&self, max: usize) -> Vec<(u64, Peeked)> {
        let cursors = self.store.cursors();
        let mut pos = cursors.head.0.load(Ordering::Acquire);
        let tail = cursors.tail.0.pos.load(Ordering::Acquire);
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.record_size];
        while out.len() < max && self.count(pos) < self.count(tail) {
            let Ok((lap, index)) = self.split(pos) else { break };
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            let found = if seq & POS_MASK != lap | PUBLISHED {
                Peeked::Busy
            } else if seq & SKIP != 0 {
                Peeked::Skipped
            } else {
                let len = (slot.len.load(Ordering::Acquire) as usize).min(self.record_size);
                self.store.snapshot(index, &mut buf[..len]);
                fence(Ordering::Acquire);
                // Unchanged seq after the copy: nobody took or rewrote the slot meanwhile.
                if slot.seq.load(Ordering::Relaxed) == seq && len > 0 {
                    Peeked::Record(buf[..len].to_vec())
                } else {
                    Peeked::Busy
                }
            };
            out.push((self.count(pos), found));
            pos = self.next(pos, lap, index);
        }
        out
    }
}

/// The queue's lock-free ring in this process's heap, with no file, no
/// process registry and no sleeping: what [`crate::Queue`] does for each
/// record, without the sharing between processes. For benchmarks and
/// comparisons with in-process queues.
///
/// ```
/// let ring = tvm::LocalRing::new(2, 8);
/// assert!(ring.push(b"one") && ring.push(b"two"));
/// assert!(!ring.push(b"three"), "full: exactly 2 records");
/// let mut out = [0u8; 8];
/// assert_eq!(ring.pop(&mut out), Some(3));
/// assert_eq!(&out[..3], b"one");
/// ```
pub struct LocalRing(Ring<HeapStorage>);

impl LocalRing {
    /// A ring of exactly `capacity` records of up to `record_size` bytes.
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`], or `record_size` is 0.
    pub fn new(capacity: usize, record_size: usize) -> LocalRing {
        LocalRing(Ring::new(HeapStorage::new(capacity, record_size), capacity as u64, record_size))
    }

    /// Appends `record`; false when the ring is full.
    ///
    /// # Panics
    /// If `record` is empty or longer than the record size.
    pub fn push(&self, record: &[u8]) -> bool {
        assert!(!record.is_empty() && record.len() <= self.0.record_size(), "record size out of range");
        self.0.push(record, &Silent, &mut NeverRecover).is_ok()
    }

    /// Removes the oldest record into `out` and returns its length; `None`
    /// when the ring is empty.
    ///
    /// # Panics
    /// If `out` is shorter than the record size.
    pub fn pop(&self, out: &mut [u8]) -> Option<usize> {
        assert!(out.len() >= self.0.record_size(), "buffer shorter than the record size");
        self.0.pop(out, &Silent, &mut NeverRecover).ok()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Arc;

    fn ring(cap: usize, size: usize) -> Ring<HeapStorage> {
        Ring::new(HeapStorage::new(cap, size), cap as u64, size)
    }

    fn push(r: &Ring<HeapStorage>, v: &[u8]) -> Result<(), RingError> {
        r.push(v, &Silent, &mut NeverRecover)
    }

    fn pop(r: &Ring<HeapStorage>) -> Result<Vec<u8>, RingError> {
        let mut out = vec![0u8; r.record_size()];
        let n = r.pop(&mut out, &Silent, &mut NeverRecover)?;
        out.truncate(n);
        Ok(out)
    }

    #[test]
    fn capacity_is_exact_for_odd_sizes() {
        for cap in [1usize, 2, 3, 5, 7, 100, 127, 128, 129, 1000, 4095] {
            let r = ring(cap, 8);
            for i in 0..cap {
                push(&r, &(i as u64).to_le_bytes()).unwrap_or_else(|e| panic!("cap {cap}: push {i}: {e:?}"));
            }
            assert_eq!(push(&r, b"x"), Err(RingError::Full), "cap {cap}");
            assert_eq!(r.depth(), cap as u64);
            for i in 0..cap {
                assert_eq!(pop(&r).unwrap(), (i as u64).to_le_bytes(), "cap {cap}");
            }
            assert_eq!(pop(&r), Err(RingError::Empty), "cap {cap}");
            assert_eq!(r.depth(), 0);
        }
    }

    #[test]
    fn wraps_around_many_times_in_order() {
        for cap in [1usize, 3, 10, 33] {
            let r = ring(cap, 16);
            let mut next_in = 0u64;
            let mut next_out = 0u64;
            // Irregular batches so that head and tail cross the lap boundary at
            // every offset.
            for round in 0..2000u64 {
                let k = (round * 7 % (cap as u64 + 1)).max(1);
                for _ in 0..k {
                    match push(&r, &next_in.to_le_bytes()) {
                        Ok(()) => next_in += 1,
                        Err(RingError::Full) => break,
                        Err(e) => panic!("{e:?}"),
                    }
                }
                let k = (round * 5 % (cap as u64 + 1)).max(1);
                for _ in 0..k {
                    match pop(&r) {
                        Ok(v) => {
                            assert_eq!(v, next_out.to_le_bytes());
                            next_out += 1;
                        }
                        Err(RingError::Empty) => break,
                        Err(e) => panic!("{e:?}"),
                    }
                }
                assert_eq!(r.depth(), next_in - next_out);
            }
            assert!(next_out > 10 * cap as u64, "cap {cap}: only {next_out} records went round");
            assert_eq!(r.pushed(), next_in);
            assert_eq!(r.popped(), next_out);
        }
    }

    #[test]
    fn lengths_are_kept() {
        let r = ring(4, 300);
        for len in [1usize, 2, 150, 299, 300] {
            let rec: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
            push(&r, &rec).unwrap();
            assert_eq!(pop(&r).unwrap(), rec);
        }
    }

    #[test]
    fn empty_and_full_codes() {
        let r = ring(2, 4);
        assert_eq!(pop(&r), Err(RingError::Empty));
        push(&r, b"a").unwrap();
        push(&r, b"b").unwrap();
        assert_eq!(push(&r, b"c"), Err(RingError::Full));
        assert_eq!(pop(&r).unwrap(), b"a");
        push(&r, b"c").unwrap();
        assert_eq!(push(&r, b"d"), Err(RingError::Full));
        assert_eq!(pop(&r).unwrap(), b"b");
        assert_eq!(pop(&r).unwrap(), b"c");
        assert_eq!(pop(&r), Err(RingError::Empty));
    }

    #[test]
    fn count_matches_positions() {
        let r = ring(5, 1);
        for i in 0..23u64 {
            assert_eq!(r.pushed(), i);
            push(&r, b"x").unwrap();
            pop(&r).unwrap();
        }
    }

    #[test]
    fn corrupted_cursor_or_seq_is_reported_not_followed() {
        let r = ring(5, 8);
        // An index beyond the capacity.
        r.storage().cursors().tail.0.pos.store(6, Ordering::Relaxed);
        assert_eq!(push(&r, b"x"), Err(RingError::Corrupt));
        r.storage().cursors().tail.0.pos.store(0, Ordering::Relaxed);
        // A seq that no lap can produce.
        r.storage().slot(0).seq.store(3, Ordering::Relaxed);
        assert_eq!(push(&r, b"x"), Err(RingError::Corrupt));
        assert_eq!(pop(&r), Err(RingError::Corrupt));
        // A published record with a length beyond the record size.
        let r = ring(5, 8);
        push(&r, b"abc").unwrap();
        r.storage().slot(0).len.store(9, Ordering::Relaxed);
        assert_eq!(pop(&r), Err(RingError::Corrupt));
        // ...after which the queue goes on.
        push(&r, b"def").unwrap();
        assert_eq!(pop(&r).unwrap(), b"def");
    }

    /// A policy for tests: the holders of the positions numbered in `dead`
    /// are dead, others alive.
    struct Dead(Vec<u64>);
    impl Stall for Dead {
        fn decide(&mut self, _: u64, _: Holder, at: u64) -> Verdict {
            if self.0.contains(&at) { Verdict::Recover } else { Verdict::Wait }
        }
    }

    #[test]
    fn abandoned_push_is_skipped() {
        let r = ring(3, 8);
        push(&r, b"one").unwrap();
        // A producer claims position 1 and dies before publishing.
        let c = r.storage().cursors();
        c.tail.0.pos.store(2, Ordering::Relaxed);
        push(&r, b"three").unwrap();
        let mut out = [0u8; 8];
        let mut policy = Dead(vec![1]);
        assert_eq!(r.pop(&mut out, &Silent, &mut policy), Ok(3));
        assert_eq!(&out[..3], b"one");
        assert_eq!(r.pop(&mut out, &Silent, &mut policy), Ok(5));
        assert_eq!(&out[..5], b"three");
        assert_eq!(r.pop(&mut out, &Silent, &mut policy), Err(RingError::Empty));
        // The late producer's publish fails: it reports instead of corrupting.
        assert_eq!(r.fill(Claim { lap: 0, index: 1, seq: 0 }, b"late"), Err(RingError::Robbed));
    }

    #[test]
    fn stranded_record_is_delivered_again() {
        let r = ring(2, 8);
        push(&r, b"a").unwrap();
        push(&r, b"b").unwrap();
        // A consumer takes "a" (position 0: moves head) and dies before releasing.
        r.storage().cursors().head.0.store(1, Ordering::Relaxed);
        let mut policy = Dead(vec![0]);
        // The next push reaches slot 0, finds it stranded, republishes "a"
        // there; the ring then holds "b" and "a", so its own record does not fit.
        assert_eq!(r.push(b"c", &Silent, &mut policy), Err(RingError::Full));
        let mut out = [0u8; 8];
        let mut got = Vec::new();
        while let Ok(n) = r.pop(&mut out, &Silent, &mut policy) {
            got.push(out[..n].to_vec());
        }
        assert_eq!(got, [b"b".to_vec(), b"a".to_vec()]);
        r.push(b"c", &Silent, &mut policy).unwrap();
        assert_eq!(r.pop(&mut out, &Silent, &mut policy), Ok(1));
        assert_eq!(out[0], b'c');
        assert_eq!(r.pop(&mut out, &Silent, &mut policy), Err(RingError::Empty));
    }

    #[test]
    fn repair_recovers_what_nobody_waits_on() {
        let r = ring(4, 8);
        push(&r, b"a").unwrap();
        push(&r, b"b").unwrap();
        // A consumer takes "a" (position 0) and dies holding it.
        r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        // A producer claims position 2 and dies before writing.
        r.claim_push(&Silent, &mut NeverRecover).unwrap();
        // A live producer is in the middle of a push at position 3.
        let live = r.claim_push(&Silent, &mut NeverRecover).unwrap();
        let dead = |_, at: u64| at == 0 || at == 2;
        assert_eq!(r.repair(dead, false), (1, 1));
        // Nothing more to do, and the live holder is untouched.
        assert_eq!(r.repair(dead, false), (0, 0));
        r.fill(live, b"c").unwrap();
        let mut got = Vec::new();
        while let Ok(v) = pop(&r) {
            got.push(v);
        }
        // "b", then the dead producer's skipped claim, "c"; "a" is published
        // again one lap later, beyond the tail: the consumer that finds the
        // ring empty moves the tail to it.
        assert_eq!(got, [b"b".to_vec(), b"c".to_vec(), b"a".to_vec()]);
        push(&r, b"d").unwrap();
        assert_eq!(pop(&r).unwrap(), b"d");
        assert_eq!(pop(&r), Err(RingError::Empty));
    }

    /// The lease crash test's loss (CI, 2026-12-01): a ring filled once, no
    /// producer after; a consumer dies holding a record, which a repair
    /// (not alone) publishes again one lap later, beyond the tail. It must
    /// still be popped once the records before it are, and not be taken for
    /// room by the passing.
    #[test]
    fn a_record_published_again_beyond_the_tail_is_reached_without_pushes() {
        let cap = 300u64;
        let r = ring(cap as usize, 8);
        for v in 0..cap {
            push(&r, &v.to_le_bytes()).unwrap();
        }
        let mut seen = Vec::new();
        for _ in 0..100 {
            seen.push(u64::from_le_bytes(pop(&r).unwrap()[..8].try_into().unwrap()));
        }
        // A consumer takes record 100 and dies holding it; record 101 too,
        // and 102 is held by a live (slow) consumer.
        let dead_claims =
            [r.claim_pop(&Silent, &mut NeverRecover).unwrap(), r.claim_pop(&Silent, &mut NeverRecover).unwrap()];
        let live = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        assert_eq!(dead_claims.len(), 2);
        assert_eq!(r.repair(|_, at| at == 100 || at == 101, false), (0, 2));
        assert_eq!(r.depth(), cap - 103, "published again beyond the tail: not counted yet");
        let mut out = [0u8; 8];
        assert_eq!(r.take(live, &mut out, true), Ok(Some(8)));
        seen.push(u64::from_le_bytes(out));
        while let Ok(v) = pop(&r) {
            seen.push(u64::from_le_bytes(v[..8].try_into().unwrap()));
            // The tail is moved a few positions at a time, never far ahead.
            assert!(r.depth() <= cap - 103 + 2 * MAX_CLAIM);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..cap).collect::<Vec<_>>(), "every record once");
        assert_eq!(r.depth(), 0);
        // The ring goes on normally, at full capacity.
        for v in 0..cap {
            push(&r, &v.to_le_bytes()).unwrap();
        }
        assert_eq!(push(&r, b"x"), Err(RingError::Full));
        for v in 0..cap {
            assert_eq!(pop(&r).unwrap(), v.to_le_bytes());
        }
        assert_eq!(pop(&r), Err(RingError::Empty));
    }

    /// A corrupted `stranded` word (beyond any position a record published
    /// again can hold) is ignored: pops of an empty ring say so at once.
    #[test]
    fn a_corrupted_stranded_mark_is_ignored() {
        let r = std::sync::Arc::new(ring(4, 8));
        push(&r, b"a").unwrap();
        assert_eq!(pop(&r).unwrap(), b"a");
        for bad in [u64::MAX, 1 << 40, 6] {
            r.storage().cursors().tail.0.stranded.store(bad, Ordering::Relaxed);
            // Followed, such a mark made the pop step over empty records
            // it kept making, forever: a failure here, not a hung test.
            let (tx, rx) = std::sync::mpsc::channel();
            let r2 = r.clone();
            std::thread::spawn(move || tx.send(pop(&r2)));
            let got = rx.recv_timeout(std::time::Duration::from_secs(10));
            assert_eq!(got, Ok(Err(RingError::Empty)), "mark {bad}");
            assert_eq!(r.depth(), 0, "mark {bad}: no empty records made");
        }
        // A mark a lap past the head at most is followed (here: nothing
        // but free slots, which become empty records stepped over).
        r.storage().cursors().tail.0.stranded.store(4, Ordering::Relaxed);
        assert_eq!(pop(&r), Err(RingError::Empty));
        assert_eq!(r.pushed(), 4);
        push(&r, b"b").unwrap();
        assert_eq!(pop(&r).unwrap(), b"b");
    }

    /// A consumer that finds the ring empty moves the tail towards a record
    /// published again, but not past a slot an earlier consumer still
    /// holds; once that slot is released, the next one goes on.
    #[test]
    fn reaching_a_stranded_record_waits_for_slots_still_held() {
        let r = ring(4, 8);
        for v in [b"a", b"b", b"c", b"d"] {
            push(&r, v).unwrap();
        }
        // "a" and "b" taken; "a"'s consumer is slow, "b"'s dies.
        let slow = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        let _dead = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        assert_eq!(r.repair(|_, at| at == 1, false), (0, 1));
        assert_eq!(pop(&r).unwrap(), b"c");
        assert_eq!(pop(&r).unwrap(), b"d");
        // "b" lies at position 5 (slot 1, next lap); position 4 is slot 0,
        // still "a"'s: the tail cannot pass it yet.
        assert_eq!(pop(&r), Err(RingError::Empty));
        assert_eq!(r.depth(), 0);
        let mut out = [0u8; 8];
        assert_eq!(r.take(slow, &mut out, true), Ok(Some(1)));
        assert_eq!(out[0], b'a');
        // Now position 4 becomes an empty record, and "b" is reached.
        assert_eq!(pop(&r).unwrap(), b"b");
        assert_eq!(pop(&r), Err(RingError::Empty));
        assert_eq!(r.depth(), 0);
        push(&r, b"e").unwrap();
        assert_eq!(pop(&r).unwrap(), b"e");
    }

    #[test]
    fn exclusive_repair_makes_stranded_records_poppable_at_once() {
        let r = ring(4, 8);
        for v in [b"a", b"b", b"c"] {
            push(&r, v).unwrap();
        }
        // Two consumers take "a" and "b" and die holding them.
        for _ in 0..2 {
            r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        }
        assert_eq!(r.repair(|_, _| true, true), (0, 2));
        let mut got = Vec::new();
        while let Ok(v) = pop(&r) {
            got.push(v);
        }
        assert_eq!(got, [b"c".to_vec(), b"a".to_vec(), b"b".to_vec()]);
        // The ring goes on normally.
        push(&r, b"d").unwrap();
        assert_eq!(pop(&r).unwrap(), b"d");
    }

    fn batch(first: u64, n: u64) -> Vec<u8> {
        (first..first + n).flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn batches_respect_room_and_emptiness() {
        let r = ring(5, 8);
        assert_eq!(r.push_batch(&batch(0, 3), 8, &Silent, &mut NeverRecover), (3, None));
        // Room for 2 more: the batch of 4 stops there, in order.
        assert_eq!(r.push_batch(&batch(3, 4), 8, &Silent, &mut NeverRecover), (2, Some(RingError::Full)));
        assert_eq!(r.push_batch(&batch(9, 1), 8, &Silent, &mut NeverRecover), (0, Some(RingError::Full)));
        let mut out = vec![0u8; 8 * 7];
        let mut lens = [0usize; 7];
        assert_eq!(r.pop_batch(&mut out, 8, &mut lens, &Silent, &mut NeverRecover), (5, Some(RingError::Empty)));
        assert_eq!(out[..40], batch(0, 5)[..]);
        assert_eq!(lens[..5], [8; 5]);
        assert_eq!(r.pop_batch(&mut out, 8, &mut lens, &Silent, &mut NeverRecover), (0, Some(RingError::Empty)));
    }

    #[test]
    fn batches_wrap_around_in_order() {
        for (cap, push, pop) in [(1usize, 1u64, 1usize), (3, 2, 5), (7, 5, 3), (64, 64, 63), (10, 7, 7)] {
            let r = ring(cap, 8);
            let (mut next_in, mut next_out) = (0u64, 0u64);
            let mut out = vec![0u8; 8 * pop];
            let mut lens = vec![0usize; pop];
            for _ in 0..500 {
                let (n, _) = r.push_batch(&batch(next_in, push), 8, &Silent, &mut NeverRecover);
                next_in += n as u64;
                let (n, _) = r.pop_batch(&mut out, 8, &mut lens, &Silent, &mut NeverRecover);
                for i in 0..n {
                    assert_eq!(out[i * 8..(i + 1) * 8], next_out.to_le_bytes(), "cap {cap}");
                    next_out += 1;
                }
            }
            assert!(next_out > 100, "cap {cap}: only {next_out} records");
            assert_eq!(r.depth(), next_in - next_out);
        }
    }

    #[test]
    fn batch_threads_deliver_every_record_once_in_producer_order() {
        const PER: u64 = 50_000;
        let r = Arc::new(ring(37, 16));
        let producers: Vec<_> = (0..2u64)
            .map(|p| {
                let r = r.clone();
                std::thread::spawn(move || {
                    let mut i = 0;
                    while i < PER {
                        let k = (i % 13 + 1).min(PER - i);
                        let recs: Vec<u8> =
                            (i..i + k).flat_map(|v| [p.to_le_bytes(), v.to_le_bytes()].concat()).collect();
                        let (n, err) = r.push_batch(&recs, 16, &Silent, &mut NeverRecover);
                        assert!(matches!(err, None | Some(RingError::Full)), "{err:?}");
                        i += n as u64;
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let taken = Arc::new(AtomicU64::new(0));
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let (r, taken) = (r.clone(), taken.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    let mut out = vec![0u8; 16 * 9];
                    let mut lens = [0usize; 9];
                    while taken.load(Ordering::Relaxed) < 2 * PER {
                        let (n, err) = r.pop_batch(&mut out, 16, &mut lens, &Silent, &mut NeverRecover);
                        assert!(matches!(err, None | Some(RingError::Empty)), "{err:?}");
                        taken.fetch_add(n as u64, Ordering::Relaxed);
                        for rec in out[..n * 16].chunks(16) {
                            got.push((
                                u64::from_le_bytes(rec[..8].try_into().unwrap()),
                                u64::from_le_bytes(rec[8..].try_into().unwrap()),
                            ));
                        }
                        if n == 0 {
                            std::thread::yield_now();
                        }
                    }
                    got
                })
            })
            .collect();
        producers.into_iter().for_each(|t| t.join().unwrap());
        let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
        for c in consumers {
            let got = c.join().unwrap();
            let mut last: HashMap<u64, u64> = HashMap::new();
            for (p, i) in got {
                assert!(last.get(&p).is_none_or(|&prev| i > prev), "producer {p}: order");
                last.insert(p, i);
                seen.entry(p).or_default().push(i);
            }
        }
        for p in 0..2 {
            let mut v = seen.remove(&p).unwrap();
            v.sort_unstable();
            assert!(v.iter().copied().eq(0..PER), "producer {p}: a record missing or duplicated");
        }
    }

    #[test]
    fn threads_deliver_every_record_once_in_producer_order() {
        const PRODUCERS: u64 = 3;
        const CONSUMERS: usize = 3;
        const PER: u64 = 100_000;
        let r = Arc::new(ring(61, 16));
        let mut handles = Vec::new();
        for p in 0..PRODUCERS {
            let r = r.clone();
            handles.push(std::thread::spawn(move || {
                for i in 0..PER {
                    let mut rec = [0u8; 16];
                    rec[..8].copy_from_slice(&p.to_le_bytes());
                    rec[8..].copy_from_slice(&i.to_le_bytes());
                    loop {
                        match r.push(&rec, &Silent, &mut NeverRecover) {
                            Ok(()) => break,
                            Err(RingError::Full) => std::thread::yield_now(),
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                }
                Vec::new()
            }));
        }
        let taken = Arc::new(AtomicU64::new(0));
        for _ in 0..CONSUMERS {
            let r = r.clone();
            let taken = taken.clone();
            handles.push(std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut out = [0u8; 16];
                while taken.load(Ordering::Relaxed) < PRODUCERS * PER {
                    match r.pop(&mut out, &Silent, &mut NeverRecover) {
                        Ok(n) => {
                            assert_eq!(n, 16);
                            taken.fetch_add(1, Ordering::Relaxed);
                            got.push((
                                u64::from_le_bytes(out[..8].try_into().unwrap()),
                                u64::from_le_bytes(out[8..].try_into().unwrap()),
                            ));
                        }
                        Err(RingError::Empty) => std::thread::yield_now(),
                        Err(e) => panic!("{e:?}"),
                    }
                }
                got
            }));
        }
        let mut seen: HashMap<u64, Vec<u64>> = HashMap::new();
        for h in handles {
            let got = h.join().unwrap();
            // Per consumer, each producer's records come in push order.
            let mut last: HashMap<u64, u64> = HashMap::new();
            for &(p, i) in &got {
                if let Some(&prev) = last.get(&p) {
                    assert!(i > prev, "producer {p}: {i} after {prev}");
                }
                last.insert(p, i);
                seen.entry(p).or_default().push(i);
            }
        }
        for p in 0..PRODUCERS {
            let mut v = seen.remove(&p).unwrap();
            v.sort_unstable();
            assert_eq!(v.len() as u64, PER, "producer {p}");
            assert!(v.iter().enumerate().all(|(k, &i)| k as u64 == i), "producer {p}: a record missing or duplicated");
        }
    }
}

/// Model checking with loom: `RUSTFLAGS="--cfg loom" cargo test --release --lib loom`
/// (see `make loom`). Every interleaving of 2-3 threads, up to the
/// preemption bound, is explored; a "dead" process is a thread that claims a
/// slot, says who it is, and stops.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        model_bounded(3, f);
    }

    /// Explores every interleaving with up to `preemptions` forced switches.
    fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        b.max_branches = 100_000;
        b.check(f);
    }

    fn ring(cap: usize) -> Arc<Ring<HeapStorage>> {
        Arc::new(Ring::new(HeapStorage::new(cap, 1), cap as u64, 1))
    }

    /// An announcement kept where tests can see it.
    #[derive(Default)]
    struct Recorder(loom::sync::atomic::AtomicU64);
    impl Announce for Recorder {
        fn claiming(&self, role: Holder, first: u64) {
            self.0.store(intent_word(role, first), Ordering::SeqCst);
        }
        fn idle(&self) {
            self.0.store(IDLE, Ordering::SeqCst);
        }
    }

    /// The queue's rule with these recorders as the live participants: a
    /// holder announced by one of them is alive and waited for; any other is
    /// dead (a test leaves out the recorders of threads that "die", or that
    /// are wrongly believed dead).
    struct Alive(Vec<Arc<Recorder>>);
    impl Stall for Alive {
        fn decide(&mut self, _: u64, holder: Holder, at: u64) -> Verdict {
            if self.0.iter().any(|r| covers(r.0.load(Ordering::SeqCst), holder, at)) {
                thread::yield_now();
                Verdict::Wait
            } else {
                Verdict::Recover
            }
        }
    }

    fn recorder() -> Arc<Recorder> {
        Arc::new(Recorder::default())
    }

    fn push_retry(r: &Ring<HeapStorage>, v: u8, ann: &impl Announce, stall: &mut impl Stall) {
        loop {
            match r.push(&[v], ann, stall) {
                Ok(()) => return,
                Err(RingError::Full) => thread::yield_now(),
                Err(e) => panic!("push {v}: {e:?}"),
            }
        }
    }

    fn try_pop(r: &Ring<HeapStorage>, ann: &impl Announce, stall: &mut impl Stall) -> Option<u8> {
        let mut out = [0u8; 1];
        match r.pop(&mut out, ann, stall) {
            Ok(1) => Some(out[0]),
            Err(RingError::Empty) => None,
            other => panic!("pop: {other:?}"),
        }
    }

    fn pop_n(r: &Ring<HeapStorage>, n: usize, ann: &impl Announce, stall: &mut impl Stall) -> Vec<u8> {
        let mut got = Vec::new();
        while got.len() < n {
            match try_pop(r, ann, stall) {
                Some(v) => got.push(v),
                None => thread::yield_now(),
            }
        }
        got
    }

    #[test]
    fn loom_two_producers_exactly_once_in_order() {
        model(|| {
            let r = ring(3);
            let a = {
                let r = r.clone();
                thread::spawn(move || {
                    r.push(&[1], &Silent, &mut NeverRecover).unwrap();
                    r.push(&[2], &Silent, &mut NeverRecover).unwrap();
                })
            };
            r.push(&[3], &Silent, &mut NeverRecover).unwrap();
            a.join().unwrap();
            let got = pop_n(&r, 3, &Silent, &mut NeverRecover);
            let mut sorted = got.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [1, 2, 3]);
            let pos = |v| got.iter().position(|&x| x == v).unwrap();
            assert!(pos(1) < pos(2), "producer order broken: {got:?}");
            assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), None);
        });
    }

    #[test]
    fn loom_two_consumers_take_each_record_once() {
        model(|| {
            let r = ring(2);
            r.push(&[1], &Silent, &mut NeverRecover).unwrap();
            r.push(&[2], &Silent, &mut NeverRecover).unwrap();
            let other = {
                let r = r.clone();
                thread::spawn(move || try_pop(&r, &Silent, &mut NeverRecover))
            };
            let mine = try_pop(&r, &Silent, &mut NeverRecover);
            let theirs = other.join().unwrap();
            let mut got: Vec<u8> = [mine, theirs].into_iter().flatten().collect();
            got.sort_unstable();
            assert_eq!(got, [1, 2], "each record exactly once");
            assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), None);
        });
    }

    #[test]
    fn loom_batches_race_exactly_once_in_order() {
        model(|| {
            let r = ring(2);
            let p = {
                let r = r.clone();
                thread::spawn(move || {
                    let mut sent = 0u8;
                    while sent < 3 {
                        let recs: Vec<u8> = (sent + 1..=3).collect();
                        let (n, err) = r.push_batch(&recs, 1, &Silent, &mut NeverRecover);
                        assert!(matches!(err, None | Some(RingError::Full)), "{err:?}");
                        sent += n as u8;
                        if n == 0 {
                            thread::yield_now();
                        }
                    }
                })
            };
            let mut got = Vec::new();
            let (mut out, mut lens) = ([0u8; 2], [0usize; 2]);
            while got.len() < 3 {
                let (n, err) = r.pop_batch(&mut out, 1, &mut lens, &Silent, &mut NeverRecover);
                assert!(matches!(err, None | Some(RingError::Empty)), "{err:?}");
                got.extend_from_slice(&out[..n]);
                if n == 0 {
                    thread::yield_now();
                }
            }
            p.join().unwrap();
            assert_eq!(got, [1, 2, 3]);
        });
    }

    #[test]
    fn loom_wrap_around_keeps_fifo() {
        model(|| {
            let r = ring(1);
            let p = {
                let r = r.clone();
                thread::spawn(move || {
                    for v in 1..=3 {
                        push_retry(&r, v, &Silent, &mut NeverRecover);
                    }
                })
            };
            assert_eq!(pop_n(&r, 3, &Silent, &mut NeverRecover), [1, 2, 3]);
            p.join().unwrap();
        });
    }

    #[test]
    fn loom_capacity_is_exact_under_contention() {
        model(|| {
            let r = ring(1);
            let other = {
                let r = r.clone();
                thread::spawn(move || r.push(&[1], &Silent, &mut NeverRecover))
            };
            let mine = r.push(&[2], &Silent, &mut NeverRecover);
            let theirs = other.join().unwrap();
            let outcomes = [mine, theirs];
            assert_eq!(outcomes.iter().filter(|o| o.is_ok()).count(), 1, "{outcomes:?}");
            assert!(outcomes.contains(&Err(RingError::Full)));
        });
    }

    #[test]
    fn loom_pop_racing_push_sees_record_or_empty_never_loses_it() {
        model(|| {
            let r = ring(2);
            let p = {
                let r = r.clone();
                thread::spawn(move || r.push(&[7], &Silent, &mut NeverRecover).unwrap())
            };
            let first = try_pop(&r, &Silent, &mut NeverRecover);
            p.join().unwrap();
            let rest = try_pop(&r, &Silent, &mut NeverRecover);
            assert_eq!((first.is_some() as u8) + (rest.is_some() as u8), 1, "{first:?} {rest:?}");
            assert_eq!(first.or(rest), Some(7));
        });
    }

    /// A record published again beyond the tail (its consumer died, no
    /// producer came round to it) is reached by a consumer that finds the
    /// ring empty, while a producer races it for the tail: each record
    /// exactly once.
    #[test]
    fn loom_stranded_record_reached_while_a_producer_pushes() {
        model(|| {
            let r = ring(3);
            for v in [10, 11, 12] {
                r.push(&[v], &Silent, &mut NeverRecover).unwrap();
            }
            assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), Some(10));
            // 11's consumer dies holding it; 12 is taken.
            let _dead = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
            assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), Some(12));
            // Published again at position 4, beyond the tail (3).
            assert_eq!(r.repair(|_, at| at == 1, false), (0, 1));
            let p = {
                let r = r.clone();
                thread::spawn(move || push_retry(&r, 13, &Silent, &mut NeverRecover))
            };
            let mut got = pop_n(&r, 2, &Silent, &mut NeverRecover);
            p.join().unwrap();
            got.sort_unstable();
            assert_eq!(got, [11, 13]);
            assert_eq!(try_pop(&r, &Silent, &mut NeverRecover), None);
            assert_eq!(r.depth(), 0);
        });
    }

    #[test]
    fn loom_dead_producer_is_skipped() {
        model(|| {
            let r = ring(2);
            let dead = {
                let r = r.clone();
                // Claims a position (announcing it) and dies.
                thread::spawn(move || {
                    let _ = r.claim_push(&*recorder(), &mut NeverRecover).unwrap();
                })
            };
            let (live_ann, main_ann) = (recorder(), recorder());
            let live = {
                let (r, ann) = (r.clone(), live_ann.clone());
                thread::spawn(move || r.push(&[5], &*ann, &mut NeverRecover).unwrap())
            };
            let mut stall = Alive(vec![live_ann]);
            assert_eq!(pop_n(&r, 1, &*main_ann, &mut stall), [5]);
            dead.join().unwrap();
            live.join().unwrap();
            assert_eq!(try_pop(&r, &*main_ann, &mut stall), None);
            // The ring goes on: both slots are usable again.
            r.push(&[6], &*main_ann, &mut stall).unwrap();
            r.push(&[8], &*main_ann, &mut stall).unwrap();
            assert_eq!(pop_n(&r, 2, &*main_ann, &mut stall), [6, 8]);
        });
    }

    #[test]
    fn loom_slow_producer_is_either_delivered_or_told() {
        model(|| {
            let r = ring(2);
            let done = Arc::new(AtomicBool::new(false));
            let slow = {
                let (r, done) = (r.clone(), done.clone());
                thread::spawn(move || {
                    let result = r.push(&[9], &*recorder(), &mut NeverRecover);
                    done.store(true, Ordering::SeqCst);
                    result
                })
            };
            // The producer is wrongly believed dead (an unknown holder past
            // the unblock timeout): the consumer may recover its slot.
            let mut stall = Alive(vec![]);
            let mut delivered = 0;
            loop {
                match try_pop(&r, &Silent, &mut stall) {
                    Some(9) => delivered += 1,
                    Some(v) => panic!("unexpected {v}"),
                    None if done.load(Ordering::SeqCst) => break,
                    None => thread::yield_now(),
                }
            }
            let result = slow.join().unwrap();
            while let Some(v) = try_pop(&r, &Silent, &mut stall) {
                assert_eq!(v, 9);
                delivered += 1;
            }
            match result {
                Ok(()) => assert_eq!(delivered, 1),
                Err(RingError::Robbed) => assert_eq!(delivered, 0),
                Err(e) => panic!("{e:?}"),
            }
        });
    }

    #[test]
    fn loom_dead_consumer_record_is_delivered_again() {
        model(|| {
            let r = ring(1);
            r.push(&[1], &Silent, &mut NeverRecover).unwrap();
            let dead = {
                let r = r.clone();
                // Takes the record (announcing it) and dies.
                thread::spawn(move || {
                    let _ = r.claim_pop(&*recorder(), &mut NeverRecover).unwrap();
                })
            };
            dead.join().unwrap();
            let (producer_ann, main_ann) = (recorder(), recorder());
            let producer = {
                let (r, ann, other) = (r.clone(), producer_ann.clone(), main_ann.clone());
                thread::spawn(move || push_retry(&r, 2, &*ann, &mut Alive(vec![other])))
            };
            let got = pop_n(&r, 2, &*main_ann, &mut Alive(vec![producer_ann]));
            producer.join().unwrap();
            assert_eq!(got, [1, 2]);
        });
    }

    #[test]
    fn loom_slow_consumer_is_either_delivered_or_told() {
        model(|| {
            let r = ring(1);
            r.push(&[1], &Silent, &mut NeverRecover).unwrap();
            let slow = {
                let r = r.clone();
                thread::spawn(move || {
                    let c = r.claim_pop(&*recorder(), &mut NeverRecover).unwrap();
                    let mut out = [0u8; 1];
                    r.take(c, &mut out, true).map(|n| n.map(|_| out[0]))
                })
            };
            // The consumer is wrongly believed dead: the producer may
            // republish the record it holds.
            let main_ann = recorder();
            let producer = {
                let (r, other) = (r.clone(), main_ann.clone());
                thread::spawn(move || push_retry(&r, 2, &Silent, &mut Alive(vec![other])))
            };
            let taken = slow.join().unwrap();
            let mut got = Vec::new();
            loop {
                match try_pop(&r, &*main_ann, &mut NeverRecover) {
                    Some(v) => got.push(v),
                    None if got.contains(&2) => break,
                    None => thread::yield_now(),
                }
            }
            producer.join().unwrap();
            match taken {
                Ok(Some(1)) => assert_eq!(got, [2]),
                Err(RingError::Robbed) => assert_eq!(got, [1, 2]),
                other => panic!("{other:?}"),
            }
        });
    }

    /// A consumer that cannot be robbed (its announcement is honoured by
    /// every policy) releases with a plain store: the producer of the next
    /// lap waits for it, and every record comes out once.
    #[test]
    fn loom_unrobbable_consumer_releases_with_a_store() {
        struct Honoured(Arc<Recorder>);
        impl Announce for Honoured {
            fn claiming(&self, role: Holder, first: u64) {
                self.0.claiming(role, first)
            }
            fn idle(&self) {
                self.0.idle()
            }
            fn robbable(&self) -> bool {
                false
            }
        }
        model(|| {
            let r = ring(1);
            r.push(&[1], &Silent, &mut NeverRecover).unwrap();
            let consumer_ann = recorder();
            let consumer = {
                let (r, ann) = (r.clone(), Honoured(consumer_ann.clone()));
                thread::spawn(move || pop_n(&r, 2, &ann, &mut NeverRecover))
            };
            push_retry(&r, 2, &Silent, &mut Alive(vec![consumer_ann]));
            assert_eq!(consumer.join().unwrap(), [1, 2]);
        });
    }
}

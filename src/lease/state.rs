//! The state machine of one lease entry: a single 64-bit word, changed only
//! by compare-and-swap, so that every change of who holds a record (a new
//! delivery, an acknowledgement, an expiry, a dead holder's record given to
//! another) is one atomic step that exactly one participant wins.
//!
//! | bits | field |
//! |---|---|
//! | 0..3 | [`EntryState`] |
//! | 3..20 | [`Owner`]: the process acting on the entry or holding its lease (0: nobody) |
//! | 20..36 | deliveries of the record so far (saturating) |
//! | 36..64 | generation (wrapping), bumped by every new delivery and every extension |
//!
//! A lease token carries the generation and the ring position of its
//! delivery: it is honoured only while the word is `Leased` with that
//! generation, so a token that has gone stale (acknowledged, expired and
//! delivered again, extended since) never acts on another delivery.
//!
//! The transitions, and who makes them (`g` the generation):
//!
//! ```text
//! Free(g)    -> Filling(g+1, me)      a consumer claims the entry for a record of the ring
//! Filling(g) -> Leased(g, 1)          ... saved the record: committed (then the ring slot is released)
//! Filling(g) -> Free(g)               ... found no record (or died: the sweeper)
//! Leased(g)  -> Free(g)               acknowledged
//! Leased(g)  -> Filling(g+1, me)      acknowledged, and claimed at once for the holder's next record
//! Leased(g)  -> Busy(g)               the holder extends or releases
//! Busy(g)    -> Leased(g+1)           ... extended (the token is updated)
//! Busy(g)    -> Ready(g) / Dead(g)    ... released (or, at the delivery limit, dead-lettered)
//! Leased(g)  -> Dead(g, me)           the holder rejects it (dead letter)
//! Dead(g)    -> Free(g)               ... moved to the dead-letter queue (or dropped)
//! Dead(g)    -> Leased(g)             ... the dead-letter queue refused it: the holder keeps it
//! Leased(g)  -> Ready(g) / Doomed(g)  the sweeper: the lease ran out, or its holder died
//! Ready(g)   -> Taking(g+1, me)       a consumer takes a record up for a new delivery
//! Taking(g)  -> Leased(g, d+1)        ... leased to it
//! Taking(g)  -> Free(g)               ... taken for good by a plain pop
//! Doomed(g)  -> Dead(g, me)           a sweeper moves it to the dead-letter queue
//! orphans (their owner died): Filling -> Free, Taking/Busy/Leased -> Ready, Dead -> Doomed
//! ```
//!
//! Under `--cfg loom` this module is model-checked together with the ring
//! (`make loom`): expiry racing an acknowledgement or an extension, two
//! consumers taking the same record, and a consumer that dies between
//! saving a record from the ring and releasing its slot.

use crate::atomics::{AtomicU32, AtomicU64, Ordering};

/// What an entry holds, and who may change it (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum EntryState {
    /// Unused: a consumer may claim it.
    Free = 0,
    /// Claimed by its owner for a record it is taking from the ring; the
    /// entry's `pos` says which position it is claiming; no record yet.
    Filling = 1,
    /// Holds a record leased to its owner until the entry's deadline.
    Leased = 2,
    /// Holds a record that its owner is taking up for a new delivery.
    Taking = 3,
    /// Holds a record whose holder (its owner) is extending or releasing it.
    Busy = 4,
    /// Holds a record waiting to be delivered again, from the entry's
    /// deadline on.
    Ready = 5,
    /// Holds a record bound for the dead-letter queue; nobody is moving it.
    Doomed = 6,
    /// Holds a record that its owner is moving to the dead-letter queue.
    Dead = 7,
}

impl EntryState {
    fn from_bits(b: u64) -> EntryState {
        match b & 7 {
            0 => EntryState::Free,
            1 => EntryState::Filling,
            2 => EntryState::Leased,
            3 => EntryState::Taking,
            4 => EntryState::Busy,
            5 => EntryState::Ready,
            6 => EntryState::Doomed,
            _ => EntryState::Dead,
        }
    }

    /// Does the entry hold a record (committed: saved from the ring)?
    pub(crate) fn holds_record(self) -> bool {
        !matches!(self, EntryState::Free | EntryState::Filling)
    }
}

/// A process, as lease entries name it: its entry in the queue's process
/// table and the low 8 bits of that entry's registration number, so that a
/// later process registered in the same entry is not taken for it. 0: nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner(pub u32);

impl Owner {
    /// Nobody.
    pub(crate) const NONE: Owner = Owner(0);
    /// Most process-table entries an owner can name.
    pub(crate) const MAX_ENTRIES: usize = 256;

    /// The process registered in table entry `index` (< 256) as its
    /// `registration`-th holder.
    pub(crate) fn new(index: usize, registration: u32) -> Owner {
        debug_assert!(index < Self::MAX_ENTRIES);
        Owner((((index as u32) + 1) << 8) | (registration & 0xff))
    }

    /// `(table entry, low 8 bits of the registration)`, `None` for nobody.
    pub(crate) fn entry(self) -> Option<(usize, u32)> {
        (self.0 >> 8).checked_sub(1).map(|i| (i as usize, self.0 & 0xff))
    }
}

const ST_BITS: u32 = 3;
const OWNER_SHIFT: u32 = ST_BITS;
const OWNER_BITS: u32 = 17;
const DELIV_SHIFT: u32 = OWNER_SHIFT + OWNER_BITS;
const DELIV_BITS: u32 = 16;
const GEN_SHIFT: u32 = DELIV_SHIFT + DELIV_BITS;
/// Generations wrap at this many bits.
pub(crate) const GEN_BITS: u32 = 64 - GEN_SHIFT;
/// Deliveries count up to this and stay there.
pub(crate) const MAX_DELIVERIES: u32 = (1 << DELIV_BITS) - 1;
const _: () = assert!(GEN_BITS == 28);
// The largest owner, (MAX_ENTRIES << 8) | 0xff, fits the field.
const _: () = assert!(((Owner::MAX_ENTRIES as u32 + 1) << 8) <= 1 << OWNER_BITS);

/// An entry's state word, unpacked on demand. Any 64 bits are a value (a
/// corrupted word names some state, owner and generation; it cannot make
/// anyone read outside the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Word(pub u64);

impl Word {
    /// The word of these fields (the generation is cut to [`GEN_BITS`], the
    /// deliveries saturate at [`MAX_DELIVERIES`]).
    pub(crate) fn new(st: EntryState, owner: Owner, deliveries: u32, generation: u32) -> Word {
        let generation = u64::from(generation) & ((1 << GEN_BITS) - 1);
        let deliveries = u64::from(deliveries.min(MAX_DELIVERIES));
        let owner = u64::from(owner.0) & ((1 << OWNER_BITS) - 1);
        Word(st as u64 | owner << OWNER_SHIFT | deliveries << DELIV_SHIFT | generation << GEN_SHIFT)
    }

    /// The state.
    pub(crate) fn state(self) -> EntryState {
        EntryState::from_bits(self.0)
    }

    /// Who acts on the entry or holds its lease.
    pub(crate) fn owner(self) -> Owner {
        Owner(((self.0 >> OWNER_SHIFT) & ((1 << OWNER_BITS) - 1)) as u32)
    }

    /// Deliveries of the record so far (1 on its first).
    pub(crate) fn deliveries(self) -> u32 {
        ((self.0 >> DELIV_SHIFT) & u64::from(MAX_DELIVERIES)) as u32
    }

    /// The generation.
    pub(crate) fn generation(self) -> u32 {
        (self.0 >> GEN_SHIFT) as u32
    }

    fn next_gen(self) -> u32 {
        self.generation().wrapping_add(1)
    }

    /// `Free -> Filling`: claimed by `me` for a record of the ring.
    pub(crate) fn claimed(self, me: Owner) -> Word {
        Word::new(EntryState::Filling, me, 0, self.next_gen())
    }

    /// `Filling -> Leased`: the record is saved; its first delivery.
    pub(crate) fn committed(self) -> Word {
        Word::new(EntryState::Leased, self.owner(), 1, self.generation())
    }

    /// `Ready -> Taking`: taken up by `me` for a new delivery.
    pub(crate) fn taken(self, me: Owner) -> Word {
        Word::new(EntryState::Taking, me, self.deliveries(), self.next_gen())
    }

    /// `Taking -> Leased`: delivered once more, to the taker.
    pub(crate) fn delivered(self) -> Word {
        Word::new(EntryState::Leased, self.owner(), self.deliveries().saturating_add(1), self.generation())
    }

    /// `Leased -> Busy`: its holder is extending or releasing it.
    pub(crate) fn busy(self) -> Word {
        Word::new(EntryState::Busy, self.owner(), self.deliveries(), self.generation())
    }

    /// `Busy -> Leased`: extended (a new generation: tokens of the old
    /// deadline are stale).
    pub(crate) fn extended(self) -> Word {
        Word::new(EntryState::Leased, self.owner(), self.deliveries(), self.next_gen())
    }

    /// `-> Ready`: waiting to be delivered again; nobody holds it.
    pub(crate) fn ready(self) -> Word {
        Word::new(EntryState::Ready, Owner::NONE, self.deliveries(), self.generation())
    }

    /// `-> Doomed`: bound for the dead-letter queue; nobody is moving it.
    pub(crate) fn doomed(self) -> Word {
        Word::new(EntryState::Doomed, Owner::NONE, self.deliveries(), self.generation())
    }

    /// `-> Dead`: `me` is moving it to the dead-letter queue.
    pub(crate) fn dying(self, me: Owner) -> Word {
        Word::new(EntryState::Dead, me, self.deliveries(), self.generation())
    }

    /// `Dead -> Leased`: the dead-letter queue refused it; its holder `me`
    /// keeps its lease (same generation: its token stays good).
    pub(crate) fn back_to_holder(self) -> Word {
        Word::new(EntryState::Leased, self.owner(), self.deliveries(), self.generation())
    }

    /// `-> Free`: done with (acknowledged, consumed, dead-lettered, or no
    /// record after all).
    pub(crate) fn free(self) -> Word {
        Word::new(EntryState::Free, Owner::NONE, 0, self.generation())
    }

    /// What becomes of an entry whose owner is dead, given the delivery
    /// limit (`max_deliveries`, 0: none): `None` when nothing is to be done
    /// (no owner, or a `Leased` entry whose ring slot must be released
    /// first, which the caller does).
    pub(crate) fn orphaned(self, max_deliveries: u32) -> Option<Word> {
        match self.state() {
            EntryState::Free | EntryState::Ready | EntryState::Doomed => None,
            EntryState::Filling => Some(self.free()),
            EntryState::Taking | EntryState::Busy | EntryState::Leased => Some(self.undelivered(max_deliveries)),
            EntryState::Dead => Some(self.doomed()),
        }
    }

    /// A delivery that ended without an acknowledgement (lease ran out,
    /// holder died, released): `Ready` for another delivery, or `Doomed`
    /// when the record has been delivered `max_deliveries` times (0: no
    /// limit).
    pub(crate) fn undelivered(self, max_deliveries: u32) -> Word {
        if max_deliveries > 0 && self.deliveries() >= max_deliveries { self.doomed() } else { self.ready() }
    }
}

/// What a recovery does with a ring slot whose consumer looks dead (no live
/// process announces its position), given the lease entry `word` whose
/// `pos` names that position, if any, and whether that entry's owner is
/// alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotAction {
    /// The consumer is a lease consumer still at work: wait for it.
    Wait,
    /// The record is saved in the lease entry: release the slot only.
    Release,
    /// The record is only in the slot: publish it again (the ring's own
    /// recovery of a dead consumer).
    Republish,
}

/// See [`SlotAction`]. `entry`: the state of the entry whose `pos` names the
/// slot's position and whether its owner is alive, or `None` if no entry
/// names it (a plain pop's slot).
pub(crate) fn slot_action(entry: Option<(Word, bool)>) -> SlotAction {
    match entry {
        Some((w, _)) if w.state().holds_record() => SlotAction::Release,
        Some((w, true)) if w.state() == EntryState::Filling => SlotAction::Wait,
        _ => SlotAction::Republish,
    }
}

/// The head of one lease entry in the queue file (64 bytes); the record's
/// bytes follow it. Every field is written only by the participant that
/// holds the entry exclusively (`Filling`, `Taking`, `Busy`, `Dead`, or a
/// sweeper acting on a dead owner's entry) before the transition that
/// publishes it, and read after the state word.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Entry {
    /// The [`Word`].
    pub(crate) state: AtomicU64,
    /// Position number (in the ring's count) of the record, written when
    /// the position is announced, before it is claimed.
    pub(crate) pos: AtomicU64,
    /// `Leased`: when the lease runs out; `Ready`: when the record may be
    /// delivered again (monotonic clock, nanoseconds).
    pub(crate) deadline_ns: AtomicU64,
    /// When the current delivery began (monotonic nanoseconds).
    pub(crate) leased_ns: AtomicU64,
    /// Length of the record, 1..=record size.
    pub(crate) len: AtomicU32,
    /// Durable queues: the checksum of the record saved in the entry (over
    /// the queue's key, `pos`, and the record's bytes), written before the
    /// commit, so that a recovery after a machine crash tells an entry
    /// whose head and record reached the disk from different moments.
    /// Zero on other queues.
    pub(crate) check: AtomicU32,
    /// Words of the table's indexes (`lease::bits`): in the entries at the
    /// table's end, the leaf words of the free set (`bits[0]`) and of the
    /// set of records waiting for another delivery (`bits[1]`); unused
    /// (zero) in the others. Hints: not part of the entry's state.
    pub(crate) bits: [AtomicU64; 2],
    /// Zero; reserved.
    pub(crate) reserved2: AtomicU64,
}

impl Entry {
    /// The state word.
    #[inline]
    pub(crate) fn word(&self) -> Word {
        Word(self.state.load(Ordering::Acquire))
    }

    /// One transition: `from -> to`, if the word is still `from`; returns
    /// `to`, or the word found. SeqCst: ordered with the ring's CASes and
    /// with the sleepers' checks.
    #[inline]
    pub(crate) fn change(&self, from: Word, to: Word) -> Result<Word, Word> {
        self.state.compare_exchange(from.0, to.0, Ordering::SeqCst, Ordering::Acquire).map(|_| to).map_err(Word)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_saturate() {
        let me = Owner::new(255, 0x1234);
        let w = Word::new(EntryState::Busy, me, 70_000, (1 << 28) + 5);
        assert_eq!((w.state(), w.owner(), w.deliveries(), w.generation()), (EntryState::Busy, me, MAX_DELIVERIES, 5));
        assert_eq!(me.entry(), Some((255, 0x34)));
        assert_eq!(Owner::NONE.entry(), None);
        for bits in [0u64, u64::MAX, 0x5555_5555_5555_5555] {
            let w = Word(bits);
            assert_eq!(Word::new(w.state(), w.owner(), w.deliveries(), w.generation()), w, "any word is a value");
        }
    }

    #[test]
    fn a_record_goes_round_with_a_new_generation_each_delivery() {
        let me = Owner::new(3, 1);
        let other = Owner::new(4, 9);
        let free = Word::new(EntryState::Free, Owner::NONE, 0, 7);
        let leased = free.claimed(me).committed();
        assert_eq!(
            (leased.state(), leased.owner(), leased.deliveries(), leased.generation()),
            (EntryState::Leased, me, 1, 8)
        );
        let again = leased.undelivered(0).taken(other).delivered();
        assert_eq!((again.owner(), again.deliveries(), again.generation()), (other, 2, 9));
        let extended = again.busy().extended();
        assert_eq!((extended.state(), extended.generation()), (EntryState::Leased, 10));
        assert_eq!(extended.undelivered(2).state(), EntryState::Doomed, "delivered twice, limit 2");
        assert_eq!(extended.undelivered(3).state(), EntryState::Ready);
        assert_eq!(extended.dying(me).back_to_holder(), Word::new(EntryState::Leased, me, 2, 10));
        assert_eq!(extended.free().claimed(me).generation(), 11);
    }

    #[test]
    fn orphans_and_slots() {
        let me = Owner::new(0, 0);
        let filling = Word::new(EntryState::Free, Owner::NONE, 0, 0).claimed(me);
        assert_eq!(filling.orphaned(0).map(Word::state), Some(EntryState::Free));
        assert_eq!(filling.committed().orphaned(0).map(Word::state), Some(EntryState::Ready));
        assert_eq!(filling.committed().orphaned(1).map(Word::state), Some(EntryState::Doomed));
        assert_eq!(filling.committed().dying(me).orphaned(0).map(Word::state), Some(EntryState::Doomed));
        assert_eq!(filling.committed().ready().orphaned(0), None);
        assert_eq!(slot_action(None), SlotAction::Republish);
        assert_eq!(slot_action(Some((filling, true))), SlotAction::Wait);
        assert_eq!(slot_action(Some((filling, false))), SlotAction::Republish);
        assert_eq!(slot_action(Some((filling.committed(), false))), SlotAction::Release);
        assert_eq!(slot_action(Some((filling.committed().ready(), true))), SlotAction::Release);
    }
}

/// Model checking with loom (`make loom`): every interleaving of 2-3
/// threads, up to the preemption bound. Time is not modelled: a participant
/// that "finds the lease expired" is one that acts on the deadline it read.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::ring::{Announce, HeapStorage, Holder, Ring, RingError, Stall, Verdict};
    use loom::sync::Arc;
    use loom::sync::atomic::AtomicBool;
    use loom::thread;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.max_branches = 100_000;
        b.check(f);
    }

    const OLD: u64 = 100;
    const NEW: u64 = 200;
    const ME: Owner = Owner(1 << 8);
    const OTHER: Owner = Owner(2 << 8);

    /// An entry holding a record leased to `ME` until `OLD`.
    fn leased() -> Arc<Entry> {
        let e = Arc::new(Entry::default());
        let w = Word::new(EntryState::Free, Owner::NONE, 0, 0).claimed(ME).committed();
        e.deadline_ns.store(OLD, Ordering::SeqCst);
        e.state.store(w.0, Ordering::SeqCst);
        e
    }

    /// The sweeper's expiry: acts on the deadline it read (`OLD`: ran out).
    fn expire(e: &Entry) -> bool {
        let w = e.word();
        w.state() == EntryState::Leased
            && e.deadline_ns.load(Ordering::SeqCst) == OLD
            && e.change(w, w.undelivered(0)).is_ok()
    }

    /// A consumer taking up a `Ready` record.
    fn take(e: &Entry, me: Owner) -> bool {
        let w = e.word();
        w.state() == EntryState::Ready
            && e.change(w, w.taken(me)).map(|t| e.change(t, t.delivered()).is_ok()).unwrap_or(false)
    }

    #[test]
    fn loom_ack_races_expiry_one_wins() {
        model(|| {
            let e = leased();
            let token = e.word();
            let holder = {
                let e = e.clone();
                // The holder's clock says the lease is still good.
                thread::spawn(move || e.word() == token && e.change(token, token.free()).is_ok())
            };
            let expired = expire(&e);
            let taken = expired && take(&e, OTHER);
            let acked = holder.join().unwrap();
            assert!(acked != expired, "acknowledged {acked}, expired {expired}");
            assert_eq!(taken, expired, "an expired record goes to the next consumer");
            if taken {
                let w = e.word();
                assert_eq!((w.owner(), w.deliveries()), (OTHER, 2));
                assert_ne!(w.generation(), token.generation(), "the old token is stale");
            }
        });
    }

    #[test]
    fn loom_extension_races_expiry_never_both() {
        model(|| {
            let e = leased();
            let extender = {
                let e = e.clone();
                thread::spawn(move || {
                    let w = e.word();
                    if w.state() != EntryState::Leased || e.change(w, w.busy()).is_err() {
                        return None;
                    }
                    e.deadline_ns.store(NEW, Ordering::SeqCst);
                    let busy = w.busy();
                    e.change(busy, busy.extended()).ok()
                })
            };
            let expired = expire(&e);
            let extended = extender.join().unwrap();
            assert!(!(expired && extended.is_some()), "extended and expired at once");
            let w = e.word();
            match extended {
                Some(to) => assert_eq!((w, e.deadline_ns.load(Ordering::SeqCst)), (to, NEW)),
                None => assert_eq!(w.state(), EntryState::Ready),
            }
        });
    }

    #[test]
    fn loom_two_consumers_take_a_ready_record_once() {
        model(|| {
            let e = leased();
            let w = e.word();
            e.change(w, w.ready()).unwrap();
            let other = {
                let e = e.clone();
                thread::spawn(move || take(&e, OTHER))
            };
            let mine = take(&e, ME);
            let theirs = other.join().unwrap();
            assert!(mine != theirs);
            assert_eq!(e.word().owner(), if mine { ME } else { OTHER });
        });
    }

    // ---- A lease consumer and the ring -------------------------------------

    /// An `interval` queue's ring (its releases erase checksums, also on
    /// behalf of a dead consumer: `release_held`).
    fn ring() -> Arc<Ring<HeapStorage>> {
        let r = Arc::new(Ring::new(HeapStorage::new(1, 1), 1, 1).erasing_seals(true));
        r.push(&[1], &crate::ring::Silent, &mut crate::ring::NeverRecover).unwrap();
        r
    }

    /// A lease consumer's announcement: its intent (robbable: a thread
    /// without an intent word, whose holding others may judge only through
    /// the entry) and the entry's position.
    struct LeaseAnn(Arc<Entry>);
    impl Announce for LeaseAnn {
        fn claiming(&self, _: Holder, first: u64) {
            self.0.pos.store(first, Ordering::SeqCst);
        }
        fn idle(&self) {}
    }

    /// The queue's policy toward a consumer that looks dead (it announces
    /// nothing), for the entry `e` whose owner is alive or not.
    struct Policy {
        ring: Arc<Ring<HeapStorage>>,
        entry: Arc<Entry>,
        owner_alive: Arc<AtomicBool>,
    }
    impl Stall for Policy {
        fn decide(&mut self, _: u64, holder: Holder, at: u64) -> Verdict {
            if holder == Holder::Producer {
                return Verdict::Recover;
            }
            let w = self.entry.word();
            let named = self.entry.pos.load(Ordering::SeqCst) == at && w.state() != EntryState::Free;
            let found = named.then(|| (w, self.owner_alive.load(Ordering::SeqCst)));
            match slot_action(found) {
                SlotAction::Wait => {
                    thread::yield_now();
                    Verdict::Wait
                }
                SlotAction::Release => {
                    self.ring.release_held(at);
                    Verdict::Wait
                }
                SlotAction::Republish => Verdict::Recover,
            }
        }
    }

    /// Saves a record read from the ring in the entry (its data: `saved`).
    fn commit(e: &Entry, filling: Word, saved: &AtomicU64, rec: &[u8]) -> bool {
        saved.store(u64::from(rec[0]), Ordering::SeqCst);
        e.change(filling, filling.committed()).is_ok()
    }

    /// What can be taken now: a record waiting in the entry, then the ring's.
    fn drain(r: &Ring<HeapStorage>, e: &Entry, saved: &AtomicU64, got: &mut Vec<u8>) {
        if take(e, OTHER) {
            got.push(saved.load(Ordering::SeqCst) as u8);
        }
        let mut out = [0u8; 1];
        while let Ok(1) = r.pop(&mut out, &crate::ring::Silent, &mut crate::ring::NeverRecover) {
            got.push(out[0]);
        }
    }

    /// The sweeper's treatment of an entry whose owner is dead: a committed
    /// record's slot is released first, then the record made ready.
    fn sweep_dead(r: &Ring<HeapStorage>, e: &Entry) {
        let w = e.word();
        if w.state() == EntryState::Leased {
            let pos = e.pos.load(Ordering::SeqCst);
            if r.holds(pos) {
                r.release_held(pos);
            }
        }
        if let Some(to) = w.orphaned(0) {
            let _ = e.change(w, to);
        }
    }

    /// A lease consumer dies after claiming its entry and reading the record,
    /// before (`commits == false`) or after saving it, and before releasing
    /// the slot. The next lap's producer and the sweeper then recover, in any
    /// order: the record is delivered exactly once, from the ring or from the
    /// entry, never from both.
    fn dead_consumer(commits: bool) {
        model(move || {
            let (r, e, saved) = (ring(), Arc::new(Entry::default()), Arc::new(AtomicU64::new(0)));
            let free = e.word();
            let filling = free.claimed(ME);
            e.change(free, filling).unwrap();
            let ann = LeaseAnn(e.clone());
            let claim = r.claim_pop(&ann, &mut crate::ring::NeverRecover).unwrap();
            let mut out = [0u8; 1];
            assert_eq!(r.read_claimed(claim, &mut out), Ok(Some(1)));
            if commits {
                assert!(commit(&e, filling, &saved, &out));
            }
            // Dead from here on.
            let alive = Arc::new(AtomicBool::new(false));
            let producer = {
                let mut policy = Policy { ring: r.clone(), entry: e.clone(), owner_alive: alive.clone() };
                let r = r.clone();
                thread::spawn(move || {
                    loop {
                        match r.push(&[2], &crate::ring::Silent, &mut policy) {
                            Ok(()) => return,
                            Err(RingError::Full) => thread::yield_now(),
                            Err(e) => panic!("{e:?}"),
                        }
                    }
                })
            };
            sweep_dead(&r, &e);
            let mut got = Vec::new();
            while got.len() < 2 {
                drain(&r, &e, &saved, &mut got);
                thread::yield_now();
            }
            producer.join().unwrap();
            drain(&r, &e, &saved, &mut got);
            got.sort_unstable();
            assert_eq!(got, [1, 2], "committed: {commits}");
        });
    }

    #[test]
    fn loom_lease_consumer_dies_before_saving_the_record() {
        dead_consumer(false);
    }

    #[test]
    fn loom_lease_consumer_dies_after_saving_the_record() {
        dead_consumer(true);
    }

    /// A live lease consumer without an announcement, believed dead by the
    /// next lap's producer: the producer judges it by its entry (waits while
    /// it fills, releases the slot once the record is saved) and the consumer
    /// finds its slot released on its behalf: one delivery, from its lease.
    #[test]
    fn loom_live_lease_consumer_is_never_robbed() {
        model(|| {
            let (r, e, saved) = (ring(), Arc::new(Entry::default()), Arc::new(AtomicU64::new(0)));
            let consumer = {
                let (r, e, saved) = (r.clone(), e.clone(), saved.clone());
                thread::spawn(move || {
                    let free = e.word();
                    let filling = free.claimed(ME);
                    e.change(free, filling).unwrap();
                    let mut out = [0u8; 1];
                    let ann = LeaseAnn(e.clone());
                    r.pop_committed(&mut out, &ann, &mut crate::ring::NeverRecover, |rec, _| {
                        commit(&e, filling, &saved, rec)
                    })
                })
            };
            let alive = Arc::new(AtomicBool::new(true));
            let mut policy = Policy { ring: r.clone(), entry: e.clone(), owner_alive: alive };
            loop {
                match r.push(&[2], &crate::ring::Silent, &mut policy) {
                    Ok(()) => break,
                    Err(RingError::Full) => thread::yield_now(),
                    Err(e) => panic!("{e:?}"),
                }
            }
            assert_eq!(consumer.join().unwrap(), Ok(1));
            assert_eq!(e.word().state(), EntryState::Leased);
            assert_eq!(saved.load(Ordering::SeqCst), 1);
            let mut out = [0u8; 1];
            assert_eq!(r.pop(&mut out, &crate::ring::Silent, &mut crate::ring::NeverRecover), Ok(1));
            assert_eq!(out[0], 2, "the leased record is not delivered again by the ring");
        });
    }
}

//! The claim and turn protocol: a participant claims positions with one
//! CAS of a cursor, waits for its slot's turn, and then fills and publishes
//! the slot (push) or takes its record and releases it (pop); and the pop
//! that hands a record over before releasing its slot (queues with leases).

use super::seal;
use super::storage::FIRST_LINE_DATA;
use super::{Announce, Backoff, Claim, Holder, MAX_CLAIM, POS_MASK, PUBLISHED, Ring, RingError, SKIP};
use super::{Stall, State, Storage, Turn, Verdict};
use crate::atomics::{AtomicU32, Ordering, fence};

/// How many slots ahead of its claim a thread prefetches into its cache, so
/// that the cache misses of its next call overlap this one (a fresh slot's
/// lines come from memory: without it, single-record pushes ran about 20 %
/// slower here). A prefetch never changes what anyone reads.
const PREFETCH_AHEAD: usize = 4;

/// Where a consumer's wait for its claimed slot starts (32 pauses, about a
/// microsecond): it usually arrives while its producer is still copying, and
/// polling the slot at once would take the line away from that producer,
/// whose publishing CAS must then win it back.
const CONSUMER_FIRST_STEP: u32 = 5;

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
    /// in `push` (even one never taken) plain pushes ran about 15% slower.
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

    /// Claims one position for `role`, as [`claim_range`](Self::claim_range)
    /// with `want` 1 does, and returns it. The
    /// common case inline: the cursor's position is valid, this process's
    /// hint of the other cursor says it is available, and the CAS wins.
    /// Anything else (a stale hint, a lost CAS, an empty or full ring, a
    /// corrupted cursor) starts over in `claim_range`, which reads the
    /// cursor again: the same steps as its loop, whose first pass this is.
    /// Returns the position's lap and slot index.
    #[inline(always)]
    fn claim_one(&self, role: Holder, ann: &impl Announce) -> Result<(u64, usize), RingError> {
        let cursors = self.store.cursors();
        let (cursor, hint) = match role {
            Holder::Producer => (&cursors.tail.0.pos, &self.head_hint.0),
            Holder::Consumer => (&cursors.head.0, &self.tail_hint.0),
        };
        let pos = cursor.load(Ordering::Acquire);
        let index = pos & (self.one_lap - 1);
        if index < self.cap && pos & SKIP == 0 {
            let at = self.count(pos);
            let other = self.count(hint.load(Ordering::Relaxed));
            // Free positions (producer) or claimed ones (consumer) by the
            // hint: at least one, as `available` judges it.
            let room = match role {
                Holder::Producer => at.wrapping_sub(other) < self.cap,
                Holder::Consumer => other.wrapping_sub(at).wrapping_sub(1) < self.cap,
            };
            if room {
                let lap = pos & !(self.one_lap - 1);
                // Announce the position before taking it (see `Announce`).
                ann.claiming(role, at);
                let after = self.next(pos, lap, index as usize);
                if cursor.compare_exchange(pos, after, Ordering::SeqCst, Ordering::Acquire).is_ok() {
                    return Ok((lap, index as usize));
                }
            }
        }
        let (pos, _) = self.claim_range(role, 1, ann)?;
        self.split(pos)
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
    pub(super) fn claim_range(&self, role: Holder, want: u64, ann: &impl Announce) -> Result<(u64, u64), RingError> {
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
    pub(super) fn available(&self, role: Holder, pos: u64) -> Option<u64> {
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
    pub(super) fn await_turn(
        &self,
        index: usize,
        lap: u64,
        role: Holder,
        stall: &mut impl Stall,
    ) -> Result<Turn, RingError> {
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

    /// Publishes a claimed, free slot as an empty record (consumers step over it).
    pub(super) fn abandon(&self, claim: Claim) {
        let slot = self.store.slot(claim.index);
        let _ = slot.seq.compare_exchange(claim.lap, claim.lap | PUBLISHED | SKIP, Ordering::SeqCst, Ordering::Relaxed);
    }

    /// Prefetches the slot [`PREFETCH_AHEAD`] after `index`, which this
    /// thread's next call likely takes.
    #[inline]
    fn prefetch_ahead(&self, index: usize) {
        self.prefetch_at(index, PREFETCH_AHEAD);
    }

    #[inline]
    pub(super) fn prefetch_at(&self, index: usize, distance: usize) {
        let ahead = index + distance;
        self.store.prefetch(if ahead >= self.cap as usize { ahead - self.cap as usize } else { ahead });
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

/// Writes a durable record's checksum into its slot's `check`.
#[inline(never)]
fn write_seal(check: &AtomicU32, key: u64, pos: u64, data: &[u8]) {
    check.store(seal::seal(key, pos, data), Ordering::Relaxed);
}

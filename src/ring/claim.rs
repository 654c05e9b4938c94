//! The claim and turn protocol: a participant claims positions with one
//! CAS of a cursor and waits for its slot's turn; then it fills and
//! publishes the slot (`push`) or takes its record and releases it
//! (`pop`). Each claim prefetches the slot its thread likely takes next.

use super::{Announce, Backoff, Claim, Holder, MAX_CLAIM, POS_MASK, PUBLISHED, Ring, RingError, SKIP};
use super::{Stall, State, Storage, Turn, Verdict};
use crate::atomics::{Ordering, fence};

/// How many slots ahead of its claim a thread prefetches into its cache, so
/// that the cache misses of its next call overlap this one (a fresh slot's
/// lines come from memory: docs/measurements.md). A prefetch never changes
/// what anyone reads.
const PREFETCH_AHEAD: usize = 4;

/// Where a consumer's wait for its claimed slot starts (32 pauses, about a
/// microsecond): it usually arrives while its producer is still copying, and
/// polling the slot at once would take the line away from that producer,
/// whose publishing CAS must then win it back.
const CONSUMER_FIRST_STEP: u32 = 5;

impl<S: Storage> Ring<S> {
    /// Claims one position for `role`, as [`claim_range`](Self::claim_range)
    /// with `want` 1 does, and returns it. The
    /// common case inline: the cursor's position is valid, this process's
    /// hint of the other cursor says it is available, and the CAS wins.
    /// Anything else (a stale hint, a lost CAS, an empty or full ring, a
    /// corrupted cursor) starts over in `claim_range`, which reads the
    /// cursor again: the same steps as its loop, whose first pass this is.
    /// Returns the position's lap and slot index.
    #[inline(always)]
    pub(super) fn claim_one(&self, role: Holder, ann: &impl Announce) -> Result<(u64, usize), RingError> {
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

    /// Publishes a claimed, free slot as an empty record (consumers step over it).
    pub(super) fn abandon(&self, claim: Claim) {
        let slot = self.store.slot(claim.index);
        let _ = slot.seq.compare_exchange(claim.lap, claim.lap | PUBLISHED | SKIP, Ordering::SeqCst, Ordering::Relaxed);
    }

    /// Prefetches the slot [`PREFETCH_AHEAD`] after `index`, which this
    /// thread's next call likely takes.
    #[inline]
    pub(super) fn prefetch_ahead(&self, index: usize) {
        self.prefetch_at(index, PREFETCH_AHEAD);
    }

    #[inline]
    pub(super) fn prefetch_at(&self, index: usize, distance: usize) {
        let ahead = index + distance;
        self.store.prefetch(if ahead >= self.cap as usize { ahead - self.cap as usize } else { ahead });
    }
}

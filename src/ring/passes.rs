//! The passes over a durable ring's slots: sealing what was published
//! since the last sync ([`Ring::seal_published`], which every `interval`
//! sync runs first), finding the consumed watermark a sync records
//! ([`Ring::released_until`]), and rebuilding the ring from its slots after
//! a machine crash ([`Ring::rebuild`]).
//!
//! After a crash the file holds, page by page (even sector by sector), the
//! state of different instants: the cursors are only hints. Producers
//! publish out of order, so the whole ring is scanned: a slot is kept when
//! its header says "published", its checksum (see [`super::seal`]) matches
//! the queue, the position and the bytes, and its position is not below the
//! consumed watermark. The kept records define the new head and tail; the
//! positions between them that hold nothing become empty records (skips).

use super::seal::seal;
use super::{POS_MASK, PUBLISHED, Ring, SKIP, State, Storage};
use crate::atomics::Ordering;
#[cfg(not(loom))]
use {super::MapStorage, std::sync::atomic::fence};

/// How many laps back a record's checksum is looked for: a record whose
/// consumer died is published again one lap later with its checksum
/// unchanged (see [`Ring::repair`]), and so is one moved by a rebuild.
const SEAL_LAPS: u64 = 64;

/// What [`Ring::rebuild`] found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Rebuilt {
    /// Records kept.
    pub(crate) kept: u64,
    /// Published slots whose checksum did not match (torn, or not written).
    pub(crate) torn: u64,
    /// Valid records below the consumed watermark (consumed before the
    /// last sync), dropped.
    pub(crate) stale: u64,
    /// Kept records moved to a later position, because newer records lie
    /// more than a lap ahead of them.
    pub(crate) moved: u64,
    /// Positions between kept records that are now empty records.
    pub(crate) holes: u64,
    /// The new head and tail, counted (see [`Ring::count`]).
    pub(crate) head: u64,
    pub(crate) tail: u64,
}

impl<S: Storage> Ring<S> {
    /// Counts, from `from` on, the positions whose slots consumers have
    /// released (or whose records were published again after their
    /// consumer died), stopping at the first that is not or after `limit`
    /// positions, and at `head`. Returns the count reached: every position
    /// below it has been consumed. Safe while others work (it only reads).
    pub(crate) fn released_until(&self, from: u64, limit: u64) -> u64 {
        let head = self.popped();
        let mut at = from;
        while at < head && at - from < limit {
            let Ok((lap, index)) = self.split(self.advance(0, at)) else { break };
            let seq = self.store.slot(index).seq.load(Ordering::Acquire);
            if self.state(seq, lap) != State::Ahead {
                break;
            }
            at += 1;
        }
        at
    }

    /// Is `check` the checksum of the record in slot `index` (`len` bytes,
    /// copied into `buf`) at lap `lap` or one of the [`SEAL_LAPS`] before it?
    fn sealed(&self, key: u64, index: usize, lap: u64, len: usize, check: u32, buf: &mut [u8]) -> bool {
        // SAFETY: rebuild runs alone (no other thread or process uses the
        // ring), so the slot is ours; len <= record_size (checked by the caller).
        unsafe { self.store.read(index, &mut buf[..len]) };
        (0..SEAL_LAPS)
            .map_while(|k| lap.checked_sub(k * self.one_lap))
            .any(|l| seal(key, l + index as u64, &buf[..len]) == check)
    }

    /// (Alone only: no other thread or process may use the ring.) Rebuilds
    /// head, tail and every slot's `seq` from what the slots hold, for a
    /// ring whose producers sealed their records under `key`, never
    /// keeping a record below position count `consumed`. See the module
    /// documentation. Every kept record stays deliverable exactly once.
    #[cfg(test)]
    pub(crate) fn rebuild(&self, key: u64, consumed: u64) -> Rebuilt {
        self.rebuild_from(key, consumed, 0)
    }

    /// [`rebuild`](Self::rebuild), with the new tail at least `floor`:
    /// positions below it were taken before (by leases whose records now
    /// live in the lease table, which names them by position), so that no
    /// later push is given one of them again.
    pub(crate) fn rebuild_from(&self, key: u64, consumed: u64, floor: u64) -> Rebuilt {
        let cap = self.cap;
        let mut r = Rebuilt::default();
        let mut buf = vec![0u8; self.record_size];
        // Slot index -> the position count of its kept record.
        let mut kept: Vec<Option<u64>> = vec![None; cap as usize];
        for (index, entry) in kept.iter_mut().enumerate() {
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            let pos = seq & POS_MASK;
            if pos & PUBLISHED == 0 || seq & SKIP != 0 {
                continue; // free, or an empty record: nothing to keep
            }
            let lap = pos & !PUBLISHED;
            let len = slot.len.load(Ordering::Relaxed) as usize;
            let check = slot.check.load(Ordering::Relaxed);
            let valid = lap & (self.one_lap - 1) == 0 && (1..=self.record_size).contains(&len);
            if !valid || !self.sealed(key, index, lap, len, check, &mut buf) {
                r.torn += 1;
                continue;
            }
            let at = self.count(lap + index as u64);
            if at < consumed {
                r.stale += 1;
                continue;
            }
            *entry = Some(at);
        }
        let newest = kept.iter().flatten().max().copied().max(floor.checked_sub(1).filter(|&f| f >= consumed));
        let (head, mut tail) = match newest {
            None => (consumed, consumed),
            Some(m) => (consumed.max((m + 1).saturating_sub(cap)), m + 1),
        };
        // The count in [head, head + cap) that falls on slot `index`.
        let window = |index: u64| head + (index + cap - head % cap) % cap;
        for (index, entry) in kept.iter_mut().enumerate() {
            if let Some(at) = entry.as_mut() {
                if *at < head {
                    // More than a lap behind the newest record: its slot's
                    // position in the new window takes it (as a record whose
                    // consumer died is published again a lap later).
                    *at = window(index as u64);
                    tail = tail.max(*at + 1);
                    r.moved += 1;
                }
                r.kept += 1;
            }
        }
        for (index, entry) in kept.iter().enumerate() {
            let at = window(index as u64);
            let (lap, _) = self.split(self.advance(0, at)).unwrap_or((0, index));
            let slot = self.store.slot(index);
            let seq = if entry.is_some() {
                lap | PUBLISHED
            } else if at < tail {
                r.holes += 1;
                slot.len.store(0, Ordering::Relaxed);
                lap | PUBLISHED | SKIP
            } else {
                lap
            };
            if entry.is_none() {
                // Whatever checksum it held (a tombstone too, see
                // `forget_seal`) belongs to no record now: a tombstone of
                // the lap it is given would stop the seal pass from sealing
                // that lap's record (see `seal_if_held`).
                slot.check.store(0, Ordering::Relaxed);
            }
            slot.seq.store(seq, Ordering::Release);
        }
        let cursors = self.store.cursors();
        cursors.head.0.store(self.advance(0, head), Ordering::SeqCst);
        cursors.tail.0.pos.store(self.advance(0, tail), Ordering::SeqCst);
        // Every kept record lies below the new tail: nothing is stranded.
        cursors.tail.0.stranded.store(0, Ordering::SeqCst);
        self.head_hint.0.store(self.advance(0, head), Ordering::Relaxed);
        self.tail_hint.0.store(self.advance(0, tail), Ordering::Relaxed);
        r.head = head;
        r.tail = tail;
        r
    }
}

#[cfg(not(loom))]
impl Ring<MapStorage> {
    /// (An `interval` ring's syncer, holding the sync lock.) Writes the
    /// checksum of every record published at the position counts
    /// `from..to`, whose producers did not seal them, so that the sync that
    /// follows makes them recoverable; others may push and pop meanwhile.
    /// Returns the first position whose record was not published yet (its
    /// producer is still writing it: the next pass starts there), or `to`.
    ///
    /// `to` counts claims, so a slot may still hold a record more than a
    /// lap behind it: a consumer took it and has not released it (or died
    /// holding it: it is published again, one lap later, and must be
    /// recoverable), while a producer claimed the slot's next lap and waits
    /// for it. So the pass is not cut at one lap back from `to`: it starts
    /// at `from`, or at the oldest position a slot is at when that is later
    /// (nothing older is in the ring).
    pub(crate) fn seal_published(&self, key: u64, from: u64, to: u64) -> u64 {
        let mut buf = vec![0u8; self.record_size];
        let start = if to.saturating_sub(from) > self.cap { from.max(self.oldest_in_slots()) } else { from };
        let mut open = to;
        for at in start..to {
            let Ok((lap, index)) = self.split(self.advance(0, at)) else { break };
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            match self.state(seq, lap) {
                State::Current { published: true } if seq & SKIP == 0 => self.seal_slot(key, index, lap, seq, &mut buf),
                // Claimed, not yet published (or its slot still held at an
                // earlier lap): the next pass starts here (the flushers see
                // the sealed mark behind the tail, and sync again).
                State::Current { published: false } | State::Behind { .. } => open = open.min(at),
                // Consumed (and maybe claimed again at a later lap, which
                // the next pass covers), or an empty record.
                _ => {}
            }
        }
        open
    }

    /// The oldest position count any slot is at (holding its record, or
    /// free or claimed for it): no position before it is in the ring.
    fn oldest_in_slots(&self) -> u64 {
        (0..self.cap as usize)
            .filter_map(|index| {
                let seq = self.store.slot(index).seq.load(Ordering::Acquire);
                let lap = seq & POS_MASK & !PUBLISHED;
                (lap & (self.one_lap - 1) == 0).then(|| self.count(lap + index as u64))
            })
            .min()
            .unwrap_or(0)
    }

    /// Writes the checksum of the record slot `index` holds at `lap`
    /// (`seq`, published), unless the slot changed while it was read.
    fn seal_slot(&self, key: u64, index: usize, lap: u64, seq: u64, buf: &mut [u8]) {
        let slot = self.store.slot(index);
        let len = slot.len.load(Ordering::Acquire) as usize;
        if !(1..=self.record_size).contains(&len) {
            return; // a corrupted length: the pops report it
        }
        self.store.snapshot(index, &mut buf[..len]);
        let check = seal(key, lap + index as u64, &buf[..len]);
        // The copy before the look at `seq` (in `seal_if_held`).
        fence(Ordering::Acquire);
        self.seal_if_held(index, lap, seq, check);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{HeapStorage, NeverRecover, Silent};
    use super::*;

    fn ring(cap: u64) -> Ring<HeapStorage> {
        Ring::new(HeapStorage::new(cap as usize, 8), cap, 8)
    }

    /// An `interval` queue's ring: its consumers erase checksums.
    fn interval_ring(cap: u64) -> Ring<HeapStorage> {
        ring(cap).erasing_seals(true)
    }

    fn pop_all(r: &Ring<HeapStorage>) -> Vec<Vec<u8>> {
        let mut out = [0u8; 8];
        let mut v = Vec::new();
        while let Ok(n) = r.pop(&mut out, &Silent, &mut NeverRecover) {
            v.push(out[..n].to_vec());
        }
        v
    }

    /// A consumer that announces its claims: it releases with a store.
    struct Announced;

    impl super::super::Announce for Announced {
        fn claiming(&self, _: super::super::Holder, _: u64) {}
        fn idle(&self) {}
        fn robbable(&self) -> bool {
            false
        }
    }

    /// An `interval` ring (its producers do not seal; its syncs' pass does):
    /// after a record is consumed and the next lap's record published in its
    /// slot, unsealed, a crash image may hold the slot's header (published,
    /// next lap) with the consumed record's bytes (sectors of a page land
    /// independently). The consumed record must not pass for one published
    /// again a lap later: its consumer erased its checksum.
    #[test]
    fn a_consumed_record_never_passes_for_the_next_laps_record() {
        let r = two_sealed_records();
        let mut out = [0u8; 8];
        assert_eq!(r.pop(&mut out, &Announced, &mut NeverRecover).unwrap(), 5);
        the_next_laps_record_torn_keeps_only_record_1(&r);
    }

    /// An interval ring of 2 slots holding records `[0; 5]` and `[1; 5]`,
    /// each sealed as the sync's pass seals it.
    fn two_sealed_records() -> Ring<HeapStorage> {
        let r = interval_ring(2);
        for i in 0..2u8 {
            r.push(&[i; 5], &Silent, &mut NeverRecover).unwrap();
            r.storage().slot(i as usize).check.store(seal(42, u64::from(i), &[i; 5]), Ordering::Relaxed);
        }
        r
    }

    /// Slot 0 was released: the next lap's record goes there (position 2,
    /// not sealed yet), and a crash image holds slot 0's header as now and
    /// its bytes as before. The rebuild must take it for torn, not for the
    /// released record published again, and keep only record 1.
    fn the_next_laps_record_torn_keeps_only_record_1(r: &Ring<HeapStorage>) {
        r.push(&[9; 5], &Silent, &mut NeverRecover).unwrap();
        // SAFETY: nobody else uses the ring.
        unsafe { r.storage().write(0, 0, &[0u8; 5]) };
        let got = r.rebuild(42, 1);
        assert_eq!((got.kept, got.torn), (1, 1), "{got:?}");
        assert_eq!(pop_all(r), vec![vec![1; 5]]);
    }

    /// As above, for a record whose consumer saved it elsewhere (a lease
    /// entry) and died holding its slot: the recovery that releases the
    /// slot on its behalf (`release_held`) erases its checksum as the
    /// consumer's release would have.
    #[test]
    fn a_record_released_for_a_dead_consumer_never_passes_for_the_next_laps_record() {
        let r = two_sealed_records();
        // The consumer of position 0 copies the record out and dies holding the slot.
        let claim = r.claim_pop(&Silent, &mut NeverRecover).unwrap();
        let mut out = [0u8; 8];
        assert_eq!(r.read_claimed(claim, &mut out).unwrap(), Some(5));
        assert!(r.release_held(0));
        assert!(!r.release_held(0), "released once");
        the_next_laps_record_torn_keeps_only_record_1(&r);
    }

    /// The seal pass read a record (published at lap 0) and computed its
    /// checksum; meanwhile its consumer erased the checksum, and its
    /// releasing store is not visible yet: the pass must not write the
    /// checksum back (the slot is about to hold the next lap's record).
    #[test]
    fn a_seal_pass_never_writes_back_a_checksum_its_consumer_erased() {
        let r = interval_ring(2);
        r.push(&[7; 5], &Silent, &mut NeverRecover).unwrap();
        let check = seal(42, 0, &[7; 5]);
        let slot = r.storage().slot(0);
        // The consumer's erasure, as `forget_seal` does it, before its release.
        slot.check.store(r.tombstone(0), Ordering::Relaxed);
        assert!(!r.seal_if_held(0, 0, PUBLISHED, check));
        assert_eq!(slot.check.load(Ordering::Relaxed), r.tombstone(0));
        // Not yet erased: sealed.
        r.push(&[8; 5], &Silent, &mut NeverRecover).unwrap();
        let check1 = seal(42, 1, &[8; 5]);
        assert!(r.seal_if_held(1, 0, PUBLISHED, check1));
        assert_eq!(r.storage().slot(1).check.load(Ordering::Relaxed), check1);
        // The next lap's record beside the previous lap's tombstone: sealed.
        let mut out = [0u8; 8];
        assert_eq!(r.pop(&mut out, &Announced, &mut NeverRecover).unwrap(), 5);
        assert_eq!(r.pop(&mut out, &Announced, &mut NeverRecover).unwrap(), 5);
        assert_eq!(slot.check.load(Ordering::Relaxed), r.tombstone(0));
        r.push(&[9; 5], &Silent, &mut NeverRecover).unwrap();
        let lap1 = r.add_lap(0);
        let check2 = seal(42, lap1, &[9; 5]);
        assert!(r.seal_if_held(0, lap1, lap1 | PUBLISHED, check2));
        assert_eq!(slot.check.load(Ordering::Relaxed), check2);
        // Once released, never.
        assert_eq!(r.pop(&mut out, &Announced, &mut NeverRecover).unwrap(), 5);
        assert!(!r.seal_if_held(0, lap1, lap1 | PUBLISHED, check2));
        assert_eq!(slot.check.load(Ordering::Relaxed), r.tombstone(lap1));
    }

    /// A slot a rebuild leaves without a record holds no checksum, not
    /// even a tombstone: a tombstone of the lap it is given would stop the
    /// seal pass from sealing the record published there next.
    #[test]
    fn a_slot_a_rebuild_frees_is_sealed_again_at_its_lap() {
        let r = interval_ring(2);
        r.push(&[7; 5], &Silent, &mut NeverRecover).unwrap();
        let mut out = [0u8; 8];
        assert_eq!(r.pop(&mut out, &Announced, &mut NeverRecover).unwrap(), 5);
        // The image: the consumer's erasure landed, its release did not.
        let slot = r.storage().slot(0);
        slot.seq.store(PUBLISHED, Ordering::Relaxed);
        let got = r.rebuild(42, 0);
        assert_eq!((got.kept, got.torn, got.head, got.tail), (0, 1, 0, 0), "{got:?}");
        assert_eq!(slot.check.load(Ordering::Relaxed), 0);
        r.push(&[8; 5], &Silent, &mut NeverRecover).unwrap();
        assert!(r.seal_if_held(0, 0, PUBLISHED, seal(42, 0, &[8; 5])));
    }

    #[test]
    fn a_rebuild_keeps_published_records_and_skips_holes() {
        let r = ring(8);
        for i in 0..6u8 {
            r.push_sealed(42, &[i; 3], &Silent, &mut NeverRecover).unwrap();
        }
        let mut out = [0u8; 8];
        r.pop(&mut out, &Silent, &mut NeverRecover).unwrap();
        assert_eq!(r.released_until(0, 100), 1);
        // A torn record (its checksum no longer matches) and a stale cursor.
        r.storage().slot(3).len.store(2, Ordering::Relaxed);
        r.storage().cursors().tail.0.pos.store(0, Ordering::Relaxed);
        let got = r.rebuild(42, 1);
        assert_eq!((got.kept, got.torn, got.stale, got.holes, got.head, got.tail), (4, 1, 0, 1, 1, 6));
        assert_eq!(pop_all(&r), vec![vec![1; 3], vec![2; 3], vec![4; 3], vec![5; 3]]);
        // The queue works on after it, across laps.
        for i in 0..20u8 {
            r.push_sealed(42, &[i], &Silent, &mut NeverRecover).unwrap();
            assert_eq!(pop_all(&r), vec![vec![i]]);
        }
    }

    #[test]
    fn a_rebuild_never_keeps_a_record_below_the_watermark_and_moves_old_laps() {
        let r = ring(4);
        for i in 0..4u8 {
            r.push_sealed(42, &[i], &Silent, &mut NeverRecover).unwrap();
        }
        // Slot 0 still says "published at lap 0" (its release never reached
        // the disk), while slot 1 holds position 5, a lap later.
        let mut out = [0u8; 8];
        r.pop(&mut out, &Silent, &mut NeverRecover).unwrap();
        r.pop(&mut out, &Silent, &mut NeverRecover).unwrap();
        r.push_sealed(42, &[4], &Silent, &mut NeverRecover).unwrap();
        r.push_sealed(42, &[5], &Silent, &mut NeverRecover).unwrap();
        r.storage().slot(0).seq.store(PUBLISHED, Ordering::Relaxed);
        r.storage().slot(0).check.store(seal(42, 0, &[4]), Ordering::Relaxed);
        // Watermark 1: position 0 was consumed before the last sync.
        let got = r.rebuild(42, 1);
        assert_eq!((got.kept, got.stale, got.moved), (3, 1, 0), "{got:?}");
        assert_eq!(pop_all(&r), vec![vec![2], vec![3], vec![5]]);
        // A record more than a lap behind the newest one is moved, not lost.
        let r = ring(4);
        for i in 0..4u8 {
            r.push_sealed(42, &[i], &Silent, &mut NeverRecover).unwrap();
        }
        for _ in 0..4 {
            r.pop(&mut out, &Silent, &mut NeverRecover).unwrap();
        }
        for i in 4..8u8 {
            r.push_sealed(42, &[i], &Silent, &mut NeverRecover).unwrap();
        }
        for _ in 0..3 {
            r.pop(&mut out, &Silent, &mut NeverRecover).unwrap();
        }
        r.push_sealed(42, &[8], &Silent, &mut NeverRecover).unwrap();
        // Slot 3 as the disk may have it: record 7 sealed at position 3 (lap 0).
        r.storage().slot(3).seq.store(PUBLISHED, Ordering::Relaxed);
        r.storage().slot(3).check.store(seal(42, 3, &[7]), Ordering::Relaxed);
        let got = r.rebuild(42, 0);
        assert_eq!((got.kept, got.moved, got.holes, got.head, got.tail), (2, 1, 2, 5, 9), "{got:?}");
        assert_eq!(pop_all(&r), vec![vec![7], vec![8]]);
        // Another queue's records (another key) are not kept.
        let r = ring(4);
        r.push_sealed(42, &[9], &Silent, &mut NeverRecover).unwrap();
        assert_eq!(r.rebuild(43, 0).torn, 1);
        assert!(pop_all(&r).is_empty());
    }
}

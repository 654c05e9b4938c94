//! The lease table of a queue file: a control block, then one entry per
//! lease the queue may have in flight (its maximum of leases), each an
//! [`Entry`] head and the record's bytes.
//!
//! What the queue does with it ([`crate::Queue::pop_lease`] and the other
//! lease calls) is built from the operations here, each a few CASes on one
//! entry's state word:
//! - [`claim`](LeaseTable::claim) a free entry, [`commit`](LeaseTable::commit)
//!   a record taken from the ring into it (before its slot is released);
//! - [`take_ready`](LeaseTable::take_ready) a record waiting to be delivered
//!   again, [`deliver`](LeaseTable::deliver) it;
//! - [`sweep`](LeaseTable::sweep): leases that ran out, and entries of
//!   holders that died, become records waiting for another delivery (or for
//!   the dead-letter queue). One process sweeps at a time, under a lock word
//!   that a dead sweeper's successor takes over.
//!
//! Hot paths touch the entry they use and a few read-mostly hint words. A
//! consumer whose own entry (the one its thread freed last) is in use
//! finds a free one through the table's free index, and records waiting
//! for another delivery through the ready index ([`super::bits`]): a few
//! loads and one read-modify-write, whatever the number of leases in
//! flight. Every whole-table scan is the sweep's, which runs at most once
//! per period (which grows with the table) for holders that died, and at
//! lease deadlines, batched for big tables (see [`LeaseTable::sweep`]), or a
//! rare event's (a recovery, `tvmq stat`).

use super::bits::{Index, IndexWords};
use super::state::{Entry, EntryState, Owner, Word};
use crate::ring::CachePadded;
use crate::shm::{SharedMap, SharedRef, ShmSafe};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the table's control block.
pub(crate) const CONTROL_BYTES: u64 = 4096;
/// Bytes of an entry's head.
pub(crate) const ENTRY_HEAD: u64 = 64;
const _: () = assert!(size_of::<Entry>() as u64 == ENTRY_HEAD);
const _: () = assert!(size_of::<LeaseControl>() as u64 <= CONTROL_BYTES);

/// How often the table is swept for holders that died, at least (plus a
/// millisecond per 1,024 entries, so that big tables are not scanned
/// constantly). Leases that run out are found at their deadline.
pub(crate) const SWEEP_PERIOD_NS: u64 = 10_000_000;

/// Bytes one entry takes: its head, and the record rounded up to 64 bytes.
pub(crate) fn entry_stride(record_size: u64) -> Option<u64> {
    record_size.checked_add(63).map(|r| ENTRY_HEAD + r / 64 * 64)
}

/// Bytes of a lease table of `entries` entries of records of up to
/// `record_size` bytes, rounded up to a page; `None` if it overflows.
pub(crate) fn table_bytes(entries: u64, record_size: u64) -> Option<u64> {
    let bytes = entries.checked_mul(entry_stride(record_size)?)?.checked_add(CONTROL_BYTES)?;
    bytes.checked_add(4095).map(|b| b / 4096 * 4096)
}

/// Words read by every lease call, written rarely. Instants are monotonic
/// nanoseconds; `u64::MAX`: never. Zero (a new file): due at once.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Hints {
    /// The periodic sweep (for holders that died) is due at this instant;
    /// never while no entry is in use.
    pub(crate) next_sweep_ns: AtomicU64,
    /// No lease runs out before this instant (the earliest deadline known).
    pub(crate) next_deadline_ns: AtomicU64,
    /// No record waiting for another delivery is due before this instant.
    /// These hints err early, never late, except for races that the next
    /// sweep corrects.
    pub(crate) next_ready_ns: AtomicU64,
}

/// Who sweeps.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Sweeping {
    /// The sweeping process's [`Owner`] (0: nobody).
    pub(crate) sweeper: AtomicU64,
    /// When the last sweep ended (monotonic nanoseconds).
    pub(crate) last_ns: AtomicU64,
}

/// Counters of lease events (none is touched by a delivery that is
/// acknowledged in time).
#[repr(C)]
#[derive(Default)]
pub(crate) struct LeaseCounters {
    /// Records delivered again (to any consumer).
    pub(crate) redelivered: AtomicU64,
    /// Leases that ran out.
    pub(crate) expired: AtomicU64,
    /// Leases (and takings) of holders that died.
    pub(crate) orphaned: AtomicU64,
    /// Leases released by their holders.
    pub(crate) released: AtomicU64,
    /// Records moved to the dead-letter queue.
    pub(crate) dead_lettered: AtomicU64,
    /// Records rejected or past the delivery limit with no dead-letter queue: dropped.
    pub(crate) dropped: AtomicU64,
    /// Late calls refused with `LEASE_EXPIRED`.
    pub(crate) late: AtomicU64,
}

/// The control block at the start of the table.
#[repr(C)]
#[derive(Default)]
pub(crate) struct LeaseControl {
    pub(crate) hints: CachePadded<Hints>,
    pub(crate) sweeping: CachePadded<Sweeping>,
    pub(crate) counters: CachePadded<LeaseCounters>,
    /// The summaries of the free index (`LeaseTable::free`).
    pub(crate) free_index: CachePadded<IndexWords>,
    /// The summaries of the ready index (`LeaseTable::ready`).
    pub(crate) ready_index: CachePadded<IndexWords>,
}

// SAFETY: atomics and reserved integers only: any bits are a value.
unsafe impl ShmSafe for Entry {}
// SAFETY: as above.
unsafe impl ShmSafe for Hints {}
// SAFETY: as above.
unsafe impl ShmSafe for Sweeping {}
// SAFETY: as above.
unsafe impl ShmSafe for LeaseCounters {}
// SAFETY: as above.
unsafe impl ShmSafe for IndexWords {}
// SAFETY: as above.
unsafe impl ShmSafe for LeaseControl {}

/// A queue file's lease table, mapped.
pub(crate) struct LeaseTable {
    control: SharedRef<LeaseControl>,
    /// Entry 0; `count * stride` bytes from here lie in the mapping that
    /// `control` keeps alive (checked by `new`).
    entries: *mut u8,
    stride: usize,
    count: usize,
    record_size: usize,
    /// Durable queues: the key their saved records are sealed under (see
    /// `Entry::check`).
    seal: Option<u64>,
    /// The free entries (a hint: see `lease::bits`).
    free: Index,
    /// The entries whose record waits for another delivery (a hint).
    ready: Index,
    /// [`period`](Self::period), worked out once (it is read by every lease).
    period_ns: u64,
}

// SAFETY: the pointer leads into a shared mapping that `control` keeps
// alive; the entries' heads are atomics, and record bytes are only written
// by the participant holding the entry exclusively (the state machine).
unsafe impl Send for LeaseTable {}
// SAFETY: as above.
unsafe impl Sync for LeaseTable {}

/// What a sweep found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Swept {
    /// Records made ready for another delivery now (sleepers may want them).
    pub(crate) ready: u64,
    /// Entries bound for the dead-letter queue (the caller moves them).
    pub(crate) doomed: u64,
}

/// What [`LeaseTable::reboot`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rebooted {
    /// Leases (and takings, releases) in flight that the restart ended.
    pub(crate) ended: u64,
    /// Records waiting for another delivery now.
    pub(crate) ready: u64,
    /// Records bound for the dead-letter queue.
    pub(crate) doomed: u64,
    /// Entries whose record did not match its checksum (freed).
    pub(crate) torn: u64,
    /// Of the records kept, those whose ring slot still held them (released now).
    pub(crate) in_ring: u64,
    /// The position after the newest one an entry names (0: none).
    pub(crate) floor: u64,
}

/// A leased or waiting record as [`LeaseTable::snapshot`] copies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) entry: usize,
    pub(crate) word: Word,
    pub(crate) pos: u64,
    pub(crate) deadline_ns: u64,
    pub(crate) leased_ns: u64,
    pub(crate) record: Vec<u8>,
}

impl LeaseTable {
    /// The table at `offset` in `map`: `count` entries for records of up to
    /// `record_size` bytes. `None` if it does not fit in the mapping.
    pub(crate) fn new(map: &SharedMap, offset: usize, count: usize, record_size: usize) -> Option<LeaseTable> {
        let control = map.view::<LeaseControl>(offset)?;
        let stride = usize::try_from(entry_stride(record_size as u64)?).ok()?;
        let start = offset.checked_add(CONTROL_BYTES as usize)?;
        if count == 0 || !map.fits(start, count.checked_mul(stride)?, align_of::<Entry>()) {
            return None;
        }
        // SAFETY: `start` is inside the mapping (checked just above).
        let entries = unsafe { map.base().add(start) };
        if count > super::MAX_ENTRIES as usize {
            return None;
        }
        // SAFETY: the entries and the control block lie in the mapping,
        // which `control` keeps alive as long as the table; 64 | stride.
        let (free, ready) = unsafe {
            (
                Index::new(entries, stride, count, 0, &control.free_index.0, true),
                Index::new(entries, stride, count, 1, &control.ready_index.0, false),
            )
        };
        let period_ns = SWEEP_PERIOD_NS + (count as u64 / 1024) * 1_000_000;
        Some(LeaseTable { control, entries, stride, count, record_size, seal: None, free, ready, period_ns })
    }

    /// The table of a durable queue: saved records are sealed under `key`.
    pub(crate) fn sealed(self, key: u64) -> LeaseTable {
        LeaseTable { seal: Some(key), ..self }
    }

    /// Entries (the maximum of leases in flight).
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The control block.
    #[inline]
    pub(crate) fn control(&self) -> &LeaseControl {
        &self.control
    }

    /// Entry `i`'s head.
    ///
    /// # Panics
    /// If `i` is not below [`len`](Self::len).
    #[inline]
    pub(crate) fn entry(&self, i: usize) -> &Entry {
        assert!(i < self.count, "lease entry out of range");
        // SAFETY: i < count, so the head lies in the mapping (checked by
        // `new`), aligned: the stride is a multiple of 64.
        unsafe { &*self.entries.add(i * self.stride).cast::<Entry>() }
    }

    /// The start of entry `i`'s record bytes (`record_size` of them).
    fn data(&self, i: usize) -> *mut u8 {
        assert!(i < self.count, "lease entry out of range");
        // SAFETY: in bounds as in `entry`; the stride leaves `record_size`
        // bytes after the head.
        unsafe { self.entries.add(i * self.stride + ENTRY_HEAD as usize) }
    }

    /// Claims a free entry for `me`: entry `start` (the calling thread's
    /// own) if it is free, else one the free index gives, the first from
    /// `start` on: its index and `Filling` word, or `None` when the index
    /// holds no free entry (every entry in use, or the free ones hidden by a
    /// process killed between an entry's change and its bit's, until the
    /// next sweep).
    #[inline]
    pub(crate) fn claim(&self, start: usize, me: Owner) -> Option<(usize, Word)> {
        // No division on this path (it is on every lease): `start` is
        // almost always below twice the count.
        let n = self.count;
        let i = if start < n {
            start
        } else if start < 2 * n {
            start - n
        } else {
            start % n
        };
        // The thread's own entry: claimed without touching the index (its
        // bit, if set, goes stale: the next reader of the index clears it).
        let e = self.entry(i);
        let w = e.word();
        if w.state() == EntryState::Free {
            if let Ok(filling) = e.change(w, w.claimed(me)) {
                return Some((i, filling));
            }
        }
        self.claim_indexed(i, me)
    }

    /// [`claim`](Self::claim) through the free index.
    #[cold]
    fn claim_indexed(&self, start: usize, me: Owner) -> Option<(usize, Word)> {
        // Each turn clears a bit, or finds it cleared by another claimer:
        // bounded by the bits set, which only frees set again.
        loop {
            let i = self.free.next_wrapping(start)?;
            if !self.free.remove(i) {
                continue;
            }
            let e = self.entry(i);
            let w = Word(e.state.load(Ordering::SeqCst));
            if w.state() == EntryState::Free {
                if let Ok(filling) = e.change(w, w.claimed(me)) {
                    return Some((i, filling));
                }
                // Claimed by its thread meanwhile (without the index): its
                // free sets the bit again.
            }
        }
    }

    /// Frees entry `i` (its word `from`, held by the caller): the state
    /// change, then the free index. False if the word was not `from`.
    #[inline]
    pub(crate) fn free(&self, i: usize, from: Word) -> bool {
        if self.entry(i).change(from, from.free()).is_err() {
            return false;
        }
        self.free.insert(i);
        true
    }

    /// Entry `i` was made to wait for another delivery (`Ready`) by the
    /// caller: puts it in the ready index.
    pub(crate) fn made_ready(&self, i: usize) {
        self.ready.insert(i);
    }

    /// Saves `rec`, taken from the ring at position number `pos`, in entry
    /// `i` (`Filling` as `filling`) and leases it until `deadline_ns`: the
    /// commit point. False if the entry was not ours any more (a corrupted
    /// table), or `rec` is empty or longer than the record size.
    ///
    /// # Safety
    /// The caller holds entry `i` as `filling` (the word its claim
    /// returned), not yet committed or given back: no other thread of this
    /// process writes or reads the entry's record meanwhile (snapshots
    /// copy it with volatile reads, and keep a copy only if the state word
    /// did not change). The table cannot check this: an entry's word lives
    /// in memory any process may write.
    pub(crate) unsafe fn commit(
        &self,
        i: usize,
        filling: Word,
        rec: &[u8],
        pos: u64,
        now: u64,
        deadline_ns: u64,
    ) -> bool {
        if rec.is_empty() || rec.len() > self.record_size {
            return false;
        }
        let e = self.entry(i);
        // SAFETY: entry i is `Filling`, ours (the caller's contract): nobody
        // else writes its record; rec fits.
        unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), self.data(i), rec.len()) };
        e.len.store(rec.len() as u32, Ordering::Relaxed);
        e.pos.store(pos, Ordering::Relaxed);
        if let Some(key) = self.seal {
            e.check.store(crate::ring::seal::seal(key, pos, rec), Ordering::Relaxed);
        }
        e.leased_ns.store(now, Ordering::Relaxed);
        e.deadline_ns.store(deadline_ns, Ordering::Relaxed);
        e.change(filling, filling.committed()).is_ok()
    }

    /// Gives back an entry claimed for a record that did not come.
    pub(crate) fn abandon(&self, i: usize, filling: Word) {
        self.free(i, filling);
    }

    /// Copies entry `i`'s record into `out` (at least the record size); its
    /// length, or `None` if the stored length is impossible (corruption).
    ///
    /// # Safety
    /// The caller holds entry `i` (`Taking`, `Leased`, `Busy` or `Dead` as
    /// its owner), or no other thread of this process can reach the table
    /// (a recovery before the queue is opened): nobody writes the entry's
    /// record while it is copied. The table cannot check this (see
    /// [`commit`](Self::commit)).
    pub(crate) unsafe fn read(&self, i: usize, out: &mut [u8]) -> Option<usize> {
        let len = self.entry(i).len.load(Ordering::Relaxed) as usize;
        if len == 0 || len > self.record_size || len > out.len() {
            return None;
        }
        // SAFETY: nobody writes entry i's record meanwhile (the caller's
        // contract); len <= record_size bytes lie in the entry.
        unsafe { std::ptr::copy_nonoverlapping(self.data(i), out.as_mut_ptr(), len) };
        Some(len)
    }

    /// Takes up, for `me`, a record due for another delivery (`Ready` with
    /// its deadline passed), looking from entry `start` on: its index and
    /// `Taking` word. Looks only when the hint says one may be due, and then
    /// only at the entries of the ready index (not due yet ones included).
    pub(crate) fn take_ready(&self, now: u64, me: Owner, start: usize) -> Option<(usize, Word)> {
        let hint = &self.control.hints.0.next_ready_ns;
        let seen = hint.load(Ordering::Acquire);
        if now < seen {
            return None;
        }
        let start = start % self.count;
        let mut next = u64::MAX;
        // From `start` to the end, then from 0 to `start`.
        let (mut at, mut wrapped) = (start, false);
        loop {
            let found = self.ready.next(at).filter(|&i| !wrapped || i < start);
            let Some(i) = found else {
                if wrapped || start == 0 {
                    break;
                }
                (at, wrapped) = (0, true);
                continue;
            };
            at = i + 1;
            let e = self.entry(i);
            let w = Word(e.state.load(Ordering::SeqCst));
            if w.state() != EntryState::Ready {
                // A stale bit: cleared, then set again if the entry came
                // back meanwhile (see `lease::bits`).
                if self.ready.remove(i) && e.word().state() == EntryState::Ready {
                    self.ready.insert(i);
                }
                continue;
            }
            let due = e.deadline_ns.load(Ordering::Relaxed);
            if due > now {
                next = next.min(due);
                continue;
            }
            if let Ok(taking) = e.change(w, w.taken(me)) {
                // Ours until we free it or deliver it: nobody makes it
                // `Ready` before this clear.
                self.ready.remove(i);
                self.control.counters.0.redelivered.fetch_add(1, Ordering::Relaxed);
                return Some((i, taking));
            }
        }
        // None due: note when the next one is (unless the hint moved meanwhile).
        let _ = hint.compare_exchange(seen, next, Ordering::AcqRel, Ordering::Relaxed);
        None
    }

    /// Leases the record of entry `i` (`Taking` as `taking`) to its taker
    /// until `deadline_ns`: its new `Leased` word, or `None` if the entry was
    /// not ours any more (a corrupted table).
    pub(crate) fn deliver(&self, i: usize, taking: Word, now: u64, deadline_ns: u64) -> Option<Word> {
        let e = self.entry(i);
        e.leased_ns.store(now, Ordering::Relaxed);
        e.deadline_ns.store(deadline_ns, Ordering::Relaxed);
        e.change(taking, taking.delivered()).ok()
    }

    /// Notes a lease that runs out at `deadline` (given at `now`), so that
    /// the sweep that ends it comes no later, and that the periodic sweep
    /// runs while it is in flight. A load of each hint; a write only when
    /// it moves them.
    #[inline]
    pub(crate) fn leased_until(&self, now: u64, deadline: u64) {
        let h = &self.control.hints.0;
        if h.next_deadline_ns.load(Ordering::Relaxed) > deadline {
            h.next_deadline_ns.fetch_min(deadline, Ordering::AcqRel);
        }
        let period = now.saturating_add(self.period());
        if h.next_sweep_ns.load(Ordering::Relaxed) > period {
            h.next_sweep_ns.fetch_min(period, Ordering::AcqRel);
        }
    }

    /// Notes a record waiting for another delivery from `at` on. SeqCst: a
    /// sleeper that announced itself and then checks [`ready_due`](Self::ready_due) either
    /// sees it or is woken by the caller (who wakes after this).
    pub(crate) fn ready_at(&self, at: u64) {
        self.control.hints.0.next_ready_ns.fetch_min(at, Ordering::SeqCst);
    }

    /// Is a sweep due (the periodic one, or a lease that ran out)?
    #[inline]
    pub(crate) fn sweep_due(&self, now: u64) -> bool {
        let h = &self.control.hints.0;
        now >= h.next_sweep_ns.load(Ordering::Relaxed) || now >= h.next_deadline_ns.load(Ordering::Relaxed)
    }

    /// May a record waiting for another delivery be due? (SeqCst: see
    /// [`ready_at`](Self::ready_at).)
    #[inline]
    pub(crate) fn ready_due(&self, now: u64) -> bool {
        now >= self.control.hints.0.next_ready_ns.load(Ordering::SeqCst)
    }

    /// When a sleeping consumer should look again: a lease running out or a
    /// waiting record coming due (the periodic sweep can wait for the
    /// sleeper's own slices).
    pub(crate) fn next_event_ns(&self) -> u64 {
        let h = &self.control.hints.0;
        h.next_deadline_ns.load(Ordering::Relaxed).min(h.next_ready_ns.load(Ordering::Relaxed))
    }

    /// The periodic sweep's period: [`SWEEP_PERIOD_NS`], plus a millisecond
    /// per 1,024 entries.
    #[inline]
    pub(crate) fn period(&self) -> u64 {
        self.period_ns
    }

    /// How late a sweep for leases that ran out may come, so that one sweep
    /// ends those that run out close together: a millisecond per 16,384
    /// entries (none below that), so that ending leases costs a big table
    /// at most a scan per this time (100,000 entries: 6 ms late at most,
    /// against the scan's 0.1-0.3 ms).
    fn batch_ns(&self) -> u64 {
        (self.count as u64 / 16_384) * 1_000_000
    }

    /// Sweeps the table as `me`, if no other live process is sweeping:
    /// leases that ran out at `now`, and entries whose owner is dead
    /// (`alive` says, for any owner), are settled: a record becomes `Ready`
    /// for another delivery (at once) or `Doomed` (delivered
    /// `max_deliveries` times: bound for the dead-letter queue); a claim
    /// without a record is freed. A dead consumer's committed record whose
    /// ring slot it still holds has that slot released first (`holds` and
    /// `release_held`, the ring's). With `force`, sweeps even if the
    /// schedule says it is not due. `None`: another process is sweeping.
    // The three closures are the caller's view of liveness and of the ring.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sweep(
        &self,
        now: u64,
        me: Owner,
        max_deliveries: u32,
        force: bool,
        mut alive: impl FnMut(Owner) -> bool,
        holds: impl Fn(u64) -> bool,
        release_held: impl Fn(u64) -> bool,
    ) -> Option<Swept> {
        let h = &self.control.hints.0;
        // The hint value this sweep set when it took its turn (a sweeper that
        // dies leaves the next turn one period later).
        let later = now.saturating_add(self.period());
        if !force {
            // One caller takes this turn: the one that moves the schedule.
            let (sweep, deadline) =
                (h.next_sweep_ns.load(Ordering::Acquire), h.next_deadline_ns.load(Ordering::Acquire));
            let took = if now >= deadline {
                h.next_deadline_ns.compare_exchange(deadline, later, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            } else {
                now >= sweep
                    && h.next_sweep_ns.compare_exchange(sweep, later, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            };
            if !took {
                return None;
            }
        }
        let lock = &self.control.sweeping.0.sweeper;
        let mut holder = lock.load(Ordering::Acquire);
        loop {
            if holder != 0 && alive(Owner(holder as u32)) {
                return None;
            }
            match lock.compare_exchange(holder, u64::from(me.0), Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now_holder) => holder = now_holder,
            }
        }
        let swept = self.sweep_locked(now, later, max_deliveries, &mut alive, holds, release_held);
        self.control.sweeping.0.last_ns.store(now, Ordering::Relaxed);
        let _ = lock.compare_exchange(u64::from(me.0), 0, Ordering::AcqRel, Ordering::Relaxed);
        Some(swept)
    }

    fn sweep_locked(
        &self,
        now: u64,
        later: u64,
        max_deliveries: u32,
        alive: &mut impl FnMut(Owner) -> bool,
        holds: impl Fn(u64) -> bool,
        release_held: impl Fn(u64) -> bool,
    ) -> Swept {
        let counters = &self.control.counters.0;
        let (mut next_deadline, mut next_ready, mut in_use) = (u64::MAX, u64::MAX, false);
        let mut swept = Swept::default();
        // HolderIs per owner, asked once per sweep.
        let mut known: Vec<(Owner, bool)> = Vec::new();
        let mut is_alive = |o: Owner| match known.iter().find(|k| k.0 == o) {
            Some(k) => k.1,
            None => {
                let a = alive(o);
                known.push((o, a));
                a
            }
        };
        // Leases that run out within this much of one another are ended by
        // one sweep (big tables: a scan per lease deadline would cost a
        // scan per lease).
        let batch = self.batch_ns();
        for i in 0..self.count {
            let e = self.entry(i);
            let w = e.word();
            in_use |= w.state() != EntryState::Free;
            let owner_dead = match w.state() {
                EntryState::Free => {
                    // Repairs the index (an entry hidden by a process killed
                    // between its change and its bit's); a load if it is fine.
                    self.free.insert(i);
                    continue;
                }
                EntryState::Ready => {
                    next_ready = next_ready.min(e.deadline_ns.load(Ordering::Relaxed));
                    self.ready.insert(i);
                    continue;
                }
                EntryState::Doomed => {
                    swept.doomed += 1;
                    continue;
                }
                EntryState::Leased => {
                    let dead = !is_alive(w.owner());
                    let deadline = e.deadline_ns.load(Ordering::Relaxed);
                    let pos = e.pos.load(Ordering::Relaxed);
                    if dead {
                        // It died holding the record, maybe before releasing
                        // its slot: the record is here, so the slot is only
                        // released (never published again).
                        if holds(pos) {
                            release_held(pos);
                        }
                    } else if now < deadline || holds(pos) {
                        // Running, or its live holder is between saving the
                        // record and releasing its slot (still in the call).
                        next_deadline = next_deadline.min(deadline.max(now + 1).saturating_add(batch));
                        continue;
                    }
                    dead
                }
                EntryState::Filling | EntryState::Taking | EntryState::Busy | EntryState::Dead => {
                    if is_alive(w.owner()) {
                        continue;
                    }
                    true
                }
            };
            let to = match w.state() {
                EntryState::Leased => w.undelivered(max_deliveries),
                _ => match w.orphaned(max_deliveries) {
                    Some(to) => to,
                    None => continue,
                },
            };
            if owner_dead && to.state() == EntryState::Ready {
                // Due now. Its owner is dead and the sweep lock is ours, so
                // nobody else writes the entry. (A lease that ran out is due
                // already, and its live holder may be extending it: not written.)
                e.deadline_ns.store(now, Ordering::Relaxed);
            }
            if e.change(w, to).is_err() {
                continue;
            }
            if w.state() != EntryState::Filling {
                let c = if owner_dead { &counters.orphaned } else { &counters.expired };
                c.fetch_add(1, Ordering::Relaxed);
            }
            match to.state() {
                EntryState::Ready => {
                    self.ready.insert(i);
                    swept.ready += 1;
                    next_ready = next_ready.min(now);
                }
                EntryState::Doomed => swept.doomed += 1,
                EntryState::Free => self.free.insert(i),
                _ => {}
            }
        }
        self.free.repair_summaries();
        self.ready.repair_summaries();
        let h = &self.control.hints.0;
        // A hint at or before now made this sweep due, and `later` is what
        // the sweep set when it took its turn: both are replaced. A value
        // below ours set meanwhile (a new lease) is kept.
        let settle = |hint: &AtomicU64, ours: u64| {
            let _ = hint.fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                Some(if cur <= now || cur == later { ours } else { cur.min(ours) })
            });
        };
        settle(&h.next_deadline_ns, next_deadline);
        settle(&h.next_sweep_ns, if in_use { now.saturating_add(self.period()) } else { u64::MAX });
        if next_ready != u64::MAX {
            self.ready_at(next_ready);
        }
        swept
    }

    /// (Recovery after a machine restart, alone: nobody else uses the
    /// queue.) Every holder of the previous boot is gone, and the
    /// monotonic instants stored (deadlines, hints) belong to that boot's
    /// clock. So every lease in flight ends as a holder's death ends it:
    /// its record waits for another delivery at once, its delivery count
    /// kept (or, at `max_deliveries`, is bound for the dead-letter queue);
    /// a record being moved to the dead-letter queue is bound for it again;
    /// a claim without a record is freed; waiting records are due at once.
    /// A record saved here whose ring slot still holds it (its consumer's
    /// slot release was not on disk yet) has that slot released with
    /// `release_held`, so that it is delivered once, from here. Returns
    /// what it found; its `floor` is the position after the newest one an
    /// entry names (the ring must not give those positions again).
    ///
    /// # Safety
    /// No other thread of this process reaches the table meanwhile (it
    /// reads every entry's record without holding it): the recovery of the
    /// first attach after a restart, before any queue of the file is open.
    pub(crate) unsafe fn reboot(&self, max_deliveries: u32, release_held: impl Fn(u64) -> bool) -> Rebooted {
        let mut found = Rebooted::default();
        let mut buf = vec![0u8; self.record_size];
        // The indexes on disk are hints from another moment: rebuilt.
        self.free.clear_all();
        self.ready.clear_all();
        for i in 0..self.count {
            let e = self.entry(i);
            let w = e.word();
            // SAFETY: no other thread of this process reaches the table
            // (the caller's contract).
            if w.state().holds_record() && !unsafe { self.seal_matches(i, &mut buf) } {
                // Its head and its record reached the disk from different
                // moments: the entry was reused after its record was
                // acknowledged, or the record now named was not saved when
                // the last sync began (its slot was not released then, so
                // the ring has it).
                found.torn += 1;
                e.state.store(w.free().0, Ordering::SeqCst);
                self.free.insert(i);
                continue;
            }
            let to = match w.state() {
                EntryState::Free => {
                    self.free.insert(i);
                    continue;
                }
                EntryState::Filling => w.free(),
                EntryState::Ready | EntryState::Doomed => w,
                EntryState::Leased | EntryState::Taking | EntryState::Busy => {
                    found.ended += 1;
                    w.undelivered(max_deliveries)
                }
                EntryState::Dead => w.doomed(),
            };
            if to.state().holds_record() {
                let pos = e.pos.load(Ordering::Relaxed);
                if release_held(pos) {
                    found.in_ring += 1;
                }
                found.floor = found.floor.max(pos.saturating_add(1));
                e.deadline_ns.store(0, Ordering::Relaxed);
                e.leased_ns.store(0, Ordering::Relaxed);
                match to.state() {
                    EntryState::Ready => found.ready += 1,
                    _ => found.doomed += 1,
                }
            }
            e.state.store(to.0, Ordering::SeqCst);
            match to.state() {
                EntryState::Free => self.free.insert(i),
                EntryState::Ready => self.ready.insert(i),
                _ => {}
            }
        }
        let h = &self.control.hints.0;
        let in_use = found.ready + found.doomed > 0;
        h.next_sweep_ns.store(if in_use { 0 } else { u64::MAX }, Ordering::SeqCst);
        h.next_deadline_ns.store(u64::MAX, Ordering::SeqCst);
        h.next_ready_ns.store(if found.ready > 0 { 0 } else { u64::MAX }, Ordering::SeqCst);
        let sw = &self.control.sweeping.0;
        sw.sweeper.store(0, Ordering::SeqCst);
        sw.last_ns.store(0, Ordering::Relaxed);
        self.control.counters.0.orphaned.fetch_add(found.ended, Ordering::Relaxed);
        found
    }

    /// Does entry `i`'s record match its checksum (a table without a seal:
    /// yes)? `buf`: room for a record.
    ///
    /// # Safety
    /// As [`read`](Self::read).
    unsafe fn seal_matches(&self, i: usize, buf: &mut [u8]) -> bool {
        let Some(key) = self.seal else { return true };
        let e = self.entry(i);
        // SAFETY: the caller's contract.
        match unsafe { self.read(i, buf) } {
            Some(len) => {
                crate::ring::seal::seal(key, e.pos.load(Ordering::Relaxed), &buf[..len])
                    == e.check.load(Ordering::Relaxed)
            }
            None => false,
        }
    }

    /// Copies every entry that holds a record (leased, waiting, bound for
    /// the dead-letter queue), for inspection: an entry that changes while it
    /// is copied is left out, never shown torn.
    pub(crate) fn snapshot(&self, max: usize) -> Vec<Snapshot> {
        let mut out = Vec::new();
        for i in 0..self.count {
            if out.len() >= max {
                break;
            }
            let e = self.entry(i);
            let w = e.word();
            if !w.state().holds_record() {
                continue;
            }
            let len = (e.len.load(Ordering::Relaxed) as usize).min(self.record_size);
            let (pos, deadline_ns, leased_ns) = (
                e.pos.load(Ordering::Relaxed),
                e.deadline_ns.load(Ordering::Relaxed),
                e.leased_ns.load(Ordering::Relaxed),
            );
            let mut record = vec![0u8; len];
            let src = self.data(i);
            for (k, b) in record.iter_mut().enumerate() {
                // SAFETY: k < len <= record_size, inside entry i's record; a
                // volatile read of bytes another process may be writing, as
                // a snapshot is taken (validated by the state word below).
                *b = unsafe { std::ptr::read_volatile(src.add(k)) };
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if e.word() == w && len > 0 {
                out.push(Snapshot { entry: i, word: w, pos, deadline_ns, leased_ns, record });
            }
        }
        out
    }
}

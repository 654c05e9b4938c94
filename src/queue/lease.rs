//! Acknowledged consumption on a [`Queue`]: [`Queue::pop_lease`] and the
//! calls that end or extend a lease ([`Queue::ack`], [`Queue::release`],
//! [`Queue::reject`], [`Queue::extend_lease`]), built from the lease table
//! ([`crate::lease::table`]), the ring and the process registry.
//!
//! A leased record is saved in an entry of the table before its ring slot is
//! released ([`crate::ring::Ring::pop_committed`]): a full queue is never
//! held up by slow consumers, and a consumer killed at any instant leaves
//! the record in exactly one place. The entry names its holder (process
//! table entry and registration), so a holder that dies is proven dead by
//! the registry's locks, as a ring slot's holder is; its records are
//! delivered again at the next sweep, which runs at least every 10 ms while
//! consumers work, at every lease deadline, and when a process attaches
//! after a death (`repair`).

use super::{HeldIntent, Idle, Intent, NO_WORD, Patience, Queue, Wait};
use crate::clock::{mono_after, mono_after_res, mono_ns, mono_res_ns};
use crate::error::*;
use crate::lease::state::{Owner, SlotAction, St, Word, slot_action};
use crate::lease::table::LeaseTable;
use crate::registry::INTENTS;
use crate::ring::{Announce, Holder, RingError};
use crate::spec::LeaseSpec;
use parking_lot::Mutex;
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A queue's lease table and settings, and this process's name in it.
pub(crate) struct Leases {
    pub(crate) table: LeaseTable,
    settings: LeaseSpec,
    /// This process, as entries name their holder (`None`: not registered,
    /// cannot hold leases).
    me: Option<Owner>,
    /// Where this process's threads start looking for a free entry: thread
    /// `k` at `base + k`, so that a thread finds the entry it just freed.
    base: usize,
    /// The queue's lease time in nanoseconds, and the step of the lease
    /// clock ([`mono_res_ns`]): worked out once, as every lease uses them.
    default_ns: u64,
    res_ns: u64,
    /// The dead-letter queue, opened when first needed.
    dead_letter: Mutex<Option<Arc<Queue>>>,
    /// A sweep on a thread that leaves dead-letter moves to others (see
    /// [`Queue::sweeps_move_dead_letters`]) found records bound for the
    /// dead-letter queue: [`Queue::move_dead_letters`] is due.
    burial_due: AtomicBool,
}

std::thread_local! {
    /// Whether sweeps run on this thread move the records they doom to the
    /// dead-letter queue themselves (see [`Queue::sweeps_move_dead_letters`]).
    static SWEEPS_BURY: Cell<bool> = const { Cell::new(true) };
}

impl Leases {
    pub(crate) fn new(table: LeaseTable, settings: LeaseSpec, me: Option<(usize, u32)>) -> Leases {
        let base = me.map_or(0, |(index, _)| index * INTENTS) % table.len();
        let me = me.filter(|&(index, _)| index < Owner::MAX_ENTRIES).map(|(index, r)| Owner::new(index, r));
        let (default_ns, res_ns) = (settings.lease_ms.saturating_mul(1_000_000), mono_res_ns());
        Leases {
            table,
            settings,
            me,
            base,
            default_ns,
            res_ns,
            dead_letter: Mutex::new(None),
            burial_due: AtomicBool::new(false),
        }
    }
}

/// How a recovery treats a ring slot held by a lease consumer that looks
/// dead (see [`Queue::lease_slot_verdict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseSlot {
    /// Its consumer, alive, is saving the record: wait.
    Wait,
    /// The record is saved in the lease table: the slot was released.
    Released,
}

/// What [`Queue::ack_pop_lease`] hands on to the lease that follows the
/// acknowledgement.
struct Acked {
    /// The entry it freed, or claimed for the next record.
    entry: usize,
    /// The time it read.
    now: u64,
    /// `Some(Filling word)`: it claimed the entry (see `ack_pop_lease_held`).
    claimed: Option<Word>,
}

/// A delivery taken with [`Queue::pop_lease`]: the token that acknowledges,
/// releases, rejects or extends it. It names its queue, its lease entry and
/// the generation of the delivery, so a token that has gone stale (the lease
/// ran out and the record went to another consumer, it was acknowledged
/// already, or extended since) is refused with `LEASE_EXPIRED` and never acts
/// on another consumer's delivery; a token of another queue is refused with
/// `LEASE_INVALID`. Any process may use it (it is plain data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    queue: u32,
    entry: u32,
    incarnation: u64,
    pos: u64,
    generation: u32,
    deliveries: u32,
    deadline_ns: u64,
}

impl Lease {
    /// How many times the record has been delivered, this delivery included
    /// (1 on its first).
    pub fn deliveries(&self) -> u32 {
        self.deliveries
    }

    /// The queue it was taken from.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Time left until the lease runs out (zero once it has).
    pub fn remaining(&self) -> Duration {
        Duration::from_nanos(self.deadline_ns.saturating_sub(mono_ns()))
    }

    /// The delivery's identity within its queue: (the record's position,
    /// its lease entry and the delivery's generation as one word). Two
    /// deliveries never share it (the generation changes at every change of
    /// hands and extension), so it names a delivery on the wire (`tvmq
    /// serve`'s lease ids) as the token does.
    pub fn delivery_id(&self) -> (u64, u64) {
        (self.pos, u64::from(self.entry) << 32 | u64::from(self.generation))
    }

    /// The token as five words (for the C ABI's `TvmLease`).
    pub(crate) fn to_words(self) -> [u64; 5] {
        [
            u64::from(self.queue) | u64::from(self.entry) << 32,
            self.incarnation,
            self.pos,
            u64::from(self.generation) | u64::from(self.deliveries) << 32,
            self.deadline_ns,
        ]
    }

    /// The token of [`to_words`](Self::to_words) (any words make a token;
    /// the queue refuses those that are not its own).
    pub(crate) fn from_words(w: [u64; 5]) -> Lease {
        Lease {
            queue: w[0] as u32,
            entry: (w[0] >> 32) as u32,
            incarnation: w[1],
            pos: w[2],
            generation: w[3] as u32,
            deliveries: (w[3] >> 32) as u32,
            deadline_ns: w[4],
        }
    }
}

/// What a lease entry holds, as [`Queue::peek_leases`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    /// Leased to a consumer.
    Leased,
    /// Waiting to be delivered again (its lease ran out, its holder died,
    /// or it was released), from `due` on.
    Waiting,
    /// Bound for the dead-letter queue, which has not taken it yet.
    DeadLetter,
    /// Being changed by its holder (extended, released, dead-lettered, taken up).
    Busy,
}

/// A record of the lease table, as [`Queue::peek_leases`] copies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedRecord {
    /// Its entry in the lease table.
    pub entry: usize,
    /// What the entry holds.
    pub state: LeaseState,
    /// Deliveries of the record so far.
    pub deliveries: u32,
    /// The position it had in the queue (records pushed before it).
    pub position: u64,
    /// Since its current delivery began (`Leased`), or since it was last
    /// delivered.
    pub age: Duration,
    /// Until the lease runs out (`Leased`), or until it may be delivered
    /// again (`Waiting`); zero when that time has passed.
    pub due: Duration,
    /// A copy of the record.
    pub record: Vec<u8>,
}

/// Leases of a queue, for `tvmq stat`: gauges from a scan of the table, and
/// counters since the queue was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseStats {
    /// Leases held by consumers now.
    pub in_flight: u64,
    /// Age of the oldest lease in flight.
    pub oldest: Option<Duration>,
    /// Records waiting to be delivered again.
    pub waiting: u64,
    /// Records bound for the dead-letter queue that it has not taken yet
    /// (it is full, missing, or its records are shorter).
    pub dead_letter_pending: u64,
    /// Records delivered again (after a lease ran out, its holder died, or
    /// it was released).
    pub redelivered: u64,
    /// Leases that ran out.
    pub expired: u64,
    /// Leases of consumers that died.
    pub orphaned: u64,
    /// Leases released by their holders.
    pub released: u64,
    /// Records moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Records rejected (or past the delivery limit) on a queue without a
    /// dead-letter queue: dropped.
    pub dropped: u64,
    /// Calls refused with `LEASE_EXPIRED`.
    pub late: u64,
}

/// The announcement of a lease consumer: its intent word, and the position
/// it claims in its lease entry, so that a recovery that finds its slot held
/// judges it by the entry (see [`Queue::lease_slot_verdict`]).
struct LeaseIntent<'a> {
    intent: Intent<'a>,
    pos: &'a AtomicU64,
}

impl Announce for LeaseIntent<'_> {
    #[inline]
    fn claiming(&self, role: Holder, first: u64) {
        self.intent.claiming(role, first);
        // Release: visible to whoever sees the claim that follows.
        self.pos.store(first, Ordering::Release);
    }

    #[inline]
    fn idle(&self) {
        self.intent.idle();
    }

    #[inline]
    fn robbable(&self) -> bool {
        self.intent.robbable()
    }
}

/// A thread's intent, announced as [`Intent`] announces it, under a type
/// of its own: pops of queues with leases then call an instance of
/// `Ring::pop` of their own, and the plain pop's instance keeps its single
/// caller, which the compiler inlines as it did before leases (a second
/// caller made it stop: plain pops 175 -> 230 ms for 4,000,000 records).
pub(super) struct Own<'a>(pub(super) Intent<'a>);

impl Announce for Own<'_> {
    #[inline]
    fn claiming(&self, role: Holder, first: u64) {
        self.0.claiming(role, first);
    }

    #[inline]
    fn idle(&self) {
        self.0.idle();
    }

    #[inline]
    fn robbable(&self) -> bool {
        self.0.robbable()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Queue {
    /// The lease table, or `NOT_SUPPT_OPT` for a plain queue.
    fn leases(&self) -> Result<&Leases> {
        self.leases.as_deref().ok_or_else(|| {
            Error::new(
                NOT_SUPPT_OPT,
                format!("queue {} has no leases (create it with leases: tvmq create --lease-ms ...)", self.id()),
            )
        })
    }

    /// This process's name as a lease holder, or, when it has no entry in
    /// the process table (nobody could prove it dead, so it may not hold
    /// leases), why: `LEASE_LIMIT` (more than 256 processes attached), or
    /// `SHM_ERR_NOMEM` and the disk's error (no room to reserve one).
    fn holder(&self, l: &Leases) -> Result<Owner> {
        l.me.ok_or_else(|| self.registry.no_entry_error(self.path()))
    }

    /// The lease time asked for, or the queue's default.
    fn lease_ns(l: &Leases, lease: Duration) -> u64 {
        Self::lease_time_ns(l, nanos(lease))
    }

    /// [`lease_ns`](Self::lease_ns) of a time in nanoseconds (0: the
    /// queue's lease time).
    #[inline]
    fn lease_time_ns(l: &Leases, ns: u64) -> u64 {
        if ns == 0 { l.default_ns } else { ns }
    }

    /// Removes the oldest record into `out`, as [`pop`](Self::pop) does, and
    /// leases it for `lease` (zero: the queue's lease time): it stays this
    /// consumer's until [`ack`](Self::ack), [`release`](Self::release) or
    /// [`reject`](Self::reject), or the lease runs out (then, or at once if
    /// this process dies, it is delivered again, its delivery count raised).
    /// Records waiting to be delivered again come before the queue's.
    /// Returns the record's length and the lease.
    ///
    /// Errors: those of `pop`; `LEASE_LIMIT` (the queue's maximum of leases
    /// are in flight; at once, whatever `wait` says; or this process has no
    /// entry in its process table: 256 others are attached);
    /// `SHM_ERR_NOMEM` (no room on the queue file's file system for this
    /// process's entry when it attached: the system's error is in the
    /// message); `NOT_SUPPT_OPT` (the queue has no leases); `CONDIT_IS_NIL`
    /// (`lease` longer than [`MAX_LEASE_MS`](crate::MAX_LEASE_MS), a year).
    pub fn pop_lease(&self, out: &mut [u8], wait: Wait, lease: Duration) -> Result<(usize, Lease)> {
        crate::spec::check_call_time(lease, "a lease time")?;
        self.pop_lease_held(out, wait, nanos(lease), None)
    }

    /// [`pop_lease`](Self::pop_lease), the lease time in nanoseconds (0:
    /// the queue's), announcing through the intent word `held` keeps
    /// (looked up when it is `None` or another queue's).
    #[inline(always)]
    pub(crate) fn pop_lease_held(
        &self,
        out: &mut [u8],
        wait: Wait,
        lease: u64,
        held: Option<&HeldIntent>,
    ) -> Result<(usize, Lease)> {
        let l = self.leases()?;
        if out.len() < self.record_size() {
            return Err(self.short_buffer(out.len()));
        }
        self.pop_lease_after(l, out, wait, lease, None, held)
    }

    /// Acknowledges the delivery `done`, as [`ack`](Self::ack) does, then
    /// leases the next record as [`pop_lease`](Self::pop_lease) does, in
    /// one call: what a consumer that works record after record does, for
    /// less than the two calls (one look-up of the lease table and one
    /// read of the clock for both, and the acknowledged entry, claimed by
    /// the same change of its word, takes the next record).
    ///
    /// The outer result is the acknowledgement's: on its error (those of
    /// `ack`, and a buffer shorter than a record or a lease time longer than
    /// [`MAX_LEASE_MS`](crate::MAX_LEASE_MS), `CONDIT_IS_NIL`, checked
    /// first) nothing was taken, and, but for `SYNC_FAILED`, `done` is not
    /// acknowledged.
    /// The inner result is the lease's (those of `pop_lease`), the
    /// acknowledgement being done.
    pub fn ack_pop_lease(
        &self,
        done: &Lease,
        out: &mut [u8],
        wait: Wait,
        lease: Duration,
    ) -> Result<Result<(usize, Lease)>> {
        crate::spec::check_call_time(lease, "a lease time")?;
        self.ack_pop_lease_held(done, out, wait, nanos(lease), None)
    }

    /// [`ack_pop_lease`](Self::ack_pop_lease), the lease time in
    /// nanoseconds (0: the queue's), announcing through the intent word
    /// `held` keeps (looked up when it is `None` or another queue's).
    pub(crate) fn ack_pop_lease_held(
        &self,
        done: &Lease,
        out: &mut [u8],
        wait: Wait,
        lease: u64,
        held: Option<&HeldIntent>,
    ) -> Result<Result<(usize, Lease)>> {
        if out.len() < self.record_size() {
            return Err(self.short_buffer(out.len()));
        }
        let (l, i, w, now) = self.held_lease(done)?;
        // The acknowledged entry is claimed at once for the next record
        // (`Leased -> Filling`: one change of its word, where `free` then
        // `claim` make two, to the same word), unless a record waiting for
        // another delivery comes first (taken into an entry of its own) or
        // this process cannot hold leases (the lease then fails below).
        let handover = l.me.filter(|_| !l.table.ready_due(now));
        let claimed = match handover {
            Some(me) => Some(l.table.entry(i).change(w, w.claimed(me)).map_err(|_| self.late(l))?),
            None if l.table.free(i, w) => None,
            None => return Err(self.late(l)),
        };
        if let Err(e) = self.lease_durably() {
            // Acknowledged (not durably): nothing is taken.
            if let Some(filling) = claimed {
                l.table.abandon(i, filling);
            }
            return Err(e);
        }
        let acked = Acked { entry: i, now, claimed };
        Ok(self.pop_lease_after(l, out, wait, lease, Some(acked), held))
    }

    /// [`pop_lease`](Self::pop_lease), `out` at least a record long; after
    /// an acknowledgement ([`Acked`]), the queue was checked and the clock
    /// read by it. Announces through the intent word `held` keeps when it
    /// is this queue's.
    #[inline(always)]
    fn pop_lease_after(
        &self,
        l: &Leases,
        out: &mut [u8],
        wait: Wait,
        lease: u64,
        mut acked: Option<Acked>,
        held: Option<&HeldIntent>,
    ) -> Result<(usize, Lease)> {
        let out = &mut out[..self.record_size()];
        let me = self.holder(l)?;
        let lease_ns = Self::lease_time_ns(l, lease);
        let (intent, slot) = self.intent_slot_held(held);
        // Reduced modulo the table's length by `claim` and `take_ready`:
        // the entry this thread freed last (`base + slot` by default, as
        // `ack` of its previous lease freed it).
        let start = match &acked {
            Some(a) => a.entry,
            None => l.base + if slot == NO_WORD { INTENTS - 1 } else { slot },
        };
        let mut idle = Idle::new(wait);
        loop {
            let (now, claimed) = match acked.take() {
                Some(a) => (a.now, a.claimed),
                None => {
                    self.check_usable()?;
                    (mono_ns(), None)
                }
            };
            self.upkeep(l, now);
            // The hint's load inline: the call is on every lease otherwise
            // (about 50 instructions of a call that returns nothing). An
            // entry claimed by the acknowledgement was claimed after the
            // same look found nothing due.
            if claimed.is_none() && l.table.ready_due(now) {
                if let Some(got) = self.take_waiting(l, out, me, start, now, lease_ns) {
                    return got;
                }
            }
            let claim = match claimed {
                Some(filling) => Some((start, filling)),
                None => l.table.claim(start, me),
            };
            let (i, filling) = match claim {
                Some(claimed) => claimed,
                None => {
                    // Every entry is in use: leases may have run out, holders
                    // died (or a killed process hid free entries from the
                    // index). Swept at once, unless a sweep ended a moment
                    // ago: a full table is not scanned at every call.
                    let last = l.table.control().sweeping.0.last_ns.load(Ordering::Relaxed);
                    if now >= last.saturating_add(l.table.period() / 16) {
                        self.sweep(l, now, true);
                    }
                    if let Some(got) = self.take_waiting(l, out, me, start, now, lease_ns) {
                        return got;
                    }
                    l.table.claim(start, me).ok_or_else(|| {
                        let max = l.table.len();
                        Error::new(LEASE_LIMIT, format!("{max} leases in flight on queue {}", self.id()))
                    })?
                }
            };
            let entry = l.table.entry(i);
            let ann = LeaseIntent { intent: Intent(intent.0), pos: &entry.pos };
            let mut patience = Patience::new(self);
            // The lease runs from `now` (read above: one read of the clock
            // per lease), unless the ring made this pop wait (below).
            let deadline = mono_after_res(now, lease_ns, l.res_ns);
            // A closure of values (a few words), not of references to them.
            let (table, queue) = (&l.table, self);
            let got = self.ring.pop_committed(out, &ann, &mut patience, move |rec, at| {
                let saved = table.commit(i, filling, rec, at, now, deadline);
                if saved {
                    // `always`: the saved record is on stable storage before
                    // its slot is released (which the kernel may write back
                    // at any time): a machine crash finds it in the table,
                    // in the ring (recovery then drops the slot), or both.
                    // A failed sync is counted in the file, as a pop's is.
                    // Never put off (`defer_syncs`): the slot's release
                    // must not reach the disk before the saved record.
                    // `interval`: the next sync persists the table.
                    if let Some(d) = &queue.always {
                        let _ = d.sync_now();
                    } else {
                        queue.leases_flagged();
                    }
                }
                saved
            });
            match got {
                Ok(n) => {
                    // A full-size record (the common case) leaves nothing to
                    // zero: no call to memset for 0 bytes.
                    if n < out.len() {
                        out[n..].fill(0);
                    }
                    let (mut now, mut deadline) = (now, deadline);
                    if patience.stalled.is_some() {
                        // It waited for a slow (or dead) producer: the lease
                        // starts now. The entry is ours (leased to us); a
                        // sweep that read the earlier deadline meanwhile
                        // could only have ended a lease this wait outlasted.
                        now = mono_ns();
                        deadline = mono_after(now, lease_ns);
                        entry.leased_ns.store(now, Ordering::Relaxed);
                        entry.deadline_ns.store(deadline, Ordering::Relaxed);
                    }
                    l.table.leased_until(now, deadline);
                    // The position the commit saved (the entry is ours).
                    let pos = entry.pos.load(Ordering::Relaxed);
                    let lease = self.lease(i, filling.committed(), pos, deadline);
                    return Ok((n, lease));
                }
                Err(RingError::Empty) => l.table.abandon(i, filling),
                Err(e) => {
                    l.table.abandon(i, filling);
                    if e == RingError::Robbed {
                        // Saved, but the slot was taken over (a corrupted
                        // slot): the record is not ours.
                        l.table.free(i, filling.committed());
                    }
                    return Err(self.ring_error(e));
                }
            }
            self.idle(&mut idle)?;
        }
    }

    /// The token of the delivery `word` (`Leased`) of entry `i`.
    fn lease(&self, i: usize, word: Word, pos: u64, deadline_ns: u64) -> Lease {
        Lease {
            queue: self.id(),
            entry: i as u32,
            incarnation: self.info.created_ns,
            pos,
            generation: word.generation(),
            deliveries: word.deliveries(),
            deadline_ns,
        }
    }

    /// A record due for another delivery, leased to `me`: `None` if there
    /// is none.
    fn take_waiting(
        &self,
        l: &Leases,
        out: &mut [u8],
        me: Owner,
        start: usize,
        now: u64,
        lease_ns: u64,
    ) -> Option<Result<(usize, Lease)>> {
        let (i, taking) = l.table.take_ready(now, me, start)?;
        let Some(n) = l.table.read(i, out) else {
            l.table.free(i, taking);
            return Some(Err(self.lease_corrupt("a waiting record has an impossible length")));
        };
        let deadline = mono_after(now, lease_ns);
        let Some(leased) = l.table.deliver(i, taking, now, deadline) else {
            return Some(Err(self.lease_corrupt("a lease entry changed under its taker")));
        };
        // `always`: the raised delivery count is durable before the record
        // is delivered (counted in the file if the sync fails).
        let _ = self.lease_durably();
        l.table.leased_until(now, deadline);
        out[n..].fill(0);
        let pos = l.table.entry(i).pos.load(Ordering::Relaxed);
        Some(Ok((n, self.lease(i, leased, pos, deadline))))
    }

    /// (Plain pops on a queue with leases.) Takes for good a record due for
    /// another delivery, into `out`; `None` if there is none.
    pub(super) fn pop_waiting(&self, out: &mut [u8]) -> Result<Option<usize>> {
        let Some(l) = &self.leases else { return Ok(None) };
        let now = mono_ns();
        self.upkeep(l, now);
        let Some(me) = l.me else { return Ok(None) };
        let Some((i, taking)) = l.table.take_ready(now, me, l.base) else { return Ok(None) };
        let n = l.table.read(i, out);
        l.table.free(i, taking);
        self.popped_durably();
        self.leases_flagged();
        n.map(Some).ok_or_else(|| self.lease_corrupt("a waiting record has an impossible length"))
    }

    fn lease_corrupt(&self, what: &str) -> Error {
        Error::new(SHM_ERR_INVAL, format!("{}: lease table: {what}", self.path().display()))
    }

    /// Refuses a late call: `LEASE_EXPIRED`, counted.
    #[cold]
    fn late(&self, l: &Leases) -> Error {
        l.table.control().counters.0.late.fetch_add(1, Ordering::Relaxed);
        Error::code_only(LEASE_EXPIRED)
    }

    /// Refuses a token of another queue (or of an earlier incarnation of
    /// this one): `LEASE_INVALID`.
    #[cold]
    fn foreign_lease(&self) -> Error {
        Error::new(LEASE_INVALID, format!("not a lease of queue {} (this incarnation)", self.id()))
    }

    /// The entry of a lease that is still good: its table, index, `Leased`
    /// word and the time now. `LEASE_INVALID` for a token of another queue,
    /// `LEASE_EXPIRED` for one that ran out or was ended.
    #[inline(always)]
    fn held_lease(&self, lease: &Lease) -> Result<(&Leases, usize, Word, u64)> {
        self.check_usable()?;
        let foreign = || self.foreign_lease();
        if lease.queue != self.id() || lease.incarnation != self.info.created_ns {
            return Err(foreign());
        }
        let l = self.leases.as_ref().ok_or_else(foreign)?;
        let i = lease.entry as usize;
        if i >= l.table.len() {
            return Err(foreign());
        }
        let e = l.table.entry(i);
        let w = e.word();
        if w.st() != St::Leased || w.generation() != lease.generation || e.pos.load(Ordering::Relaxed) != lease.pos {
            return Err(self.late(l));
        }
        let now = mono_ns();
        if now > e.deadline_ns.load(Ordering::Relaxed) {
            return Err(self.late(l));
        }
        Ok((l, i, w, now))
    }

    /// Acknowledges a delivery: the record is done and gone.
    ///
    /// Errors: `LEASE_EXPIRED` (the lease ran out, maybe to another
    /// consumer, or was already ended), `LEASE_INVALID` (a lease of another
    /// queue), `SHM_ERR_EIDRM` (the queue was dropped).
    ///
    /// On a durable queue with the `always` policy it returns once the
    /// acknowledgement is on stable storage (sharing syncs with other
    /// callers); `SYNC_FAILED` if that sync failed: the record is
    /// acknowledged, but a machine crash may deliver it again.
    #[inline(always)]
    pub fn ack(&self, lease: &Lease) -> Result<()> {
        let (l, i, w, _) = self.held_lease(lease)?;
        if !l.table.free(i, w) {
            return Err(self.late(l));
        }
        self.lease_durably()
    }

    /// With the `always` policy: returns once the changes this thread made
    /// to the lease table (and everything before them) are on stable
    /// storage. The lease table lies in the range every sync writes. With
    /// `interval`: tells the flushers that the table changed (the next sync
    /// persists it).
    #[inline]
    fn lease_durably(&self) -> Result<()> {
        match (&self.always, &self.durable) {
            (Some(d), _) => d.sync(),
            (None, _) => {
                self.leases_flagged();
                Ok(())
            }
        }
    }

    /// With `interval`: tells the flushers that the lease table changed
    /// (the next sync persists it).
    #[inline]
    fn leases_flagged(&self) {
        if let (None, Some(d)) = (&self.always, &self.durable) {
            d.leases_changed();
        }
    }

    /// The lease of a delivery now runs out `lease` from now (zero: the
    /// queue's lease time). The token is updated: copies of the old one are
    /// stale.
    ///
    /// Errors: those of [`ack`](Self::ack); `CONDIT_IS_NIL` (`lease_time`
    /// longer than [`MAX_LEASE_MS`](crate::MAX_LEASE_MS), a year).
    pub fn extend_lease(&self, lease: &mut Lease, lease_time: Duration) -> Result<()> {
        crate::spec::check_call_time(lease_time, "a lease time")?;
        let (l, i, w, now) = self.held_lease(lease)?;
        let e = l.table.entry(i);
        let busy = e.change(w, w.held()).map_err(|_| self.late(l))?;
        let deadline = mono_after(now, Self::lease_ns(l, lease_time));
        e.deadline_ns.store(deadline, Ordering::Relaxed);
        let extended = busy.extended();
        e.change(busy, extended).map_err(|_| self.lease_corrupt("an entry changed while its holder extended it"))?;
        l.table.leased_until(now, deadline);
        lease.generation = extended.generation();
        lease.deadline_ns = deadline;
        Ok(())
    }

    /// Puts a delivered record back: it may be delivered again `delay` from
    /// now (to any consumer, its delivery count raised). A record delivered
    /// the queue's maximum of deliveries goes to the dead-letter queue
    /// instead, as [`reject`](Self::reject) sends it.
    ///
    /// Errors: those of [`ack`](Self::ack), and of `reject` for a record at
    /// its delivery limit; `CONDIT_IS_NIL` (`delay` longer than
    /// [`MAX_LEASE_MS`](crate::MAX_LEASE_MS), a year).
    pub fn release(&self, lease: &Lease, delay: Duration) -> Result<()> {
        crate::spec::check_call_time(delay, "a release delay")?;
        let (l, i, w, now) = self.held_lease(lease)?;
        let max = l.settings.max_deliveries;
        if max > 0 && w.deliveries() >= max {
            return self.reject_entry(l, i, w);
        }
        let e = l.table.entry(i);
        let busy = e.change(w, w.held()).map_err(|_| self.late(l))?;
        let due = mono_after(now, nanos(delay));
        e.deadline_ns.store(due, Ordering::Relaxed);
        e.change(busy, busy.ready())
            .map_err(|_| self.lease_corrupt("an entry changed while its holder released it"))?;
        l.table.made_ready(i);
        l.table.control().counters.0.released.fetch_add(1, Ordering::Relaxed);
        l.table.ready_at(due);
        // A sleeping consumer takes it (or sets its alarm by it).
        self.wake_one();
        Ok(())
    }

    /// Moves a delivered record to the queue's dead-letter queue, or drops
    /// it when the queue has none; counted either way.
    ///
    /// Errors: those of [`ack`](Self::ack); those of pushing into the
    /// dead-letter queue (`TBL_NOT_FOUND`, `DATA_SPC_FULL`, `RECD_TOO_LONG`),
    /// after which the lease is still held.
    pub fn reject(&self, lease: &Lease) -> Result<()> {
        let (l, i, w, _) = self.held_lease(lease)?;
        self.reject_entry(l, i, w)
    }

    fn reject_entry(&self, l: &Leases, i: usize, w: Word) -> Result<()> {
        let me = self.holder(l)?;
        let e = l.table.entry(i);
        let dying = e.change(w, w.dying(me)).map_err(|_| self.late(l))?;
        self.dead_letter(l, i, dying).inspect_err(|_| {
            // Refused: the holder keeps its lease.
            let _ = e.change(dying, dying.kept());
        })
    }

    /// Moves the record of entry `i` (`Dead` as `dying`, ours) to the
    /// dead-letter queue (or drops it), then frees the entry.
    fn dead_letter(&self, l: &Leases, i: usize, dying: Word) -> Result<()> {
        let mut record = vec![0u8; self.record_size()];
        let n = l.table.read(i, &mut record).ok_or_else(|| self.lease_corrupt("a record has an impossible length"))?;
        let counters = &l.table.control().counters.0;
        match l.settings.dead_letter {
            None => counters.dropped.fetch_add(1, Ordering::Relaxed),
            Some(id) => {
                // push_many, not push: a call site of `push` here makes the
                // compiler stop inlining it into lPush (10% off plain pushes).
                let q = self.dead_letter_queue(l, id)?;
                if let (0, e) = q.push_many(&record[..n], n) {
                    return Err(e.unwrap_or_else(|| Error::code_only(DATA_SPC_FULL)));
                }
                counters.dead_lettered.fetch_add(1, Ordering::Relaxed)
            }
        };
        l.table.free(i, dying);
        // `always`: a record moved on does not come back after a machine
        // crash (counted in the file if the sync fails: it may then be in
        // both queues).
        let _ = self.lease_durably();
        Ok(())
    }

    /// The dead-letter queue, opened on first use (again if it was dropped).
    fn dead_letter_queue(&self, l: &Leases, id: u32) -> Result<Arc<Queue>> {
        let mut held = l.dead_letter.lock();
        if let Some(q) = held.as_ref().filter(|q| !q.is_dropped()) {
            return Ok(q.clone());
        }
        let dir = self.path().parent().unwrap_or(std::path::Path::new("."));
        let q = Arc::new(Queue::open(dir, id).map_err(|e| {
            Error::new(e.code(), format!("dead-letter queue {id} of queue {}: {}", self.id(), e.what()))
        })?);
        *held = Some(q.clone());
        Ok(q)
    }

    /// Is the process a lease entry names still attached? (Unknown counts
    /// as alive: its leases then run out at their deadline.)
    fn owner_alive(&self, o: Owner) -> bool {
        o.entry().is_some_and(|(index, low8)| self.registry.registration_alive(index, low8) != Some(false))
    }

    /// Sweeps if a sweep is due (a lease ran out, or the periodic look for
    /// holders that died): a load of two hint words otherwise.
    #[inline]
    fn upkeep(&self, l: &Leases, now: u64) {
        if l.table.sweep_due(now) {
            self.sweep(l, now, false);
        }
    }

    /// See [`LeaseTable::sweep`]; then wakes sleepers for the records made
    /// ready, and moves the doomed ones to the dead-letter queue.
    #[cold]
    fn sweep(&self, l: &Leases, now: u64, force: bool) {
        let Some(me) = l.me else { return };
        let max = l.settings.max_deliveries;
        let swept = l.table.sweep(
            now,
            me,
            max,
            force,
            |o| self.owner_alive(o),
            |at| self.ring.holds(at),
            |at| self.ring.release_held(at),
        );
        let Some(swept) = swept else { return };
        if swept.ready > 0 {
            self.wake(u32::try_from(swept.ready).unwrap_or(u32::MAX));
        }
        if swept.doomed > 0 {
            if SWEEPS_BURY.with(Cell::get) {
                self.bury(l, me);
            } else {
                l.burial_due.store(true, Ordering::SeqCst);
            }
        }
    }

    /// (For a server's event-loop threads.) Whether the lease sweeps that
    /// calls on this thread run (inside [`pop_lease`](Self::pop_lease),
    /// [`pop`](Self::pop) and others, on any queue) move the records they
    /// find bound for the dead-letter queue themselves (the default). A
    /// move pushes into the dead-letter queue, which may open its file and
    /// sync it: a thread that serves other clients meanwhile says `false`,
    /// and the records wait (`dead-letter-pending` in the stats) until
    /// [`move_dead_letters`](Self::move_dead_letters) runs elsewhere, as
    /// [`dead_letters_due`](Self::dead_letters_due) asks.
    pub fn sweeps_move_dead_letters(on_this_thread: bool) {
        SWEEPS_BURY.with(|c| c.set(on_this_thread));
    }

    /// Did a sweep on a thread that leaves dead-letter moves to others find
    /// records bound for the dead-letter queue (see
    /// [`sweeps_move_dead_letters`](Self::sweeps_move_dead_letters))? True
    /// once per such finding: the caller then has
    /// [`move_dead_letters`](Self::move_dead_letters) run (elsewhere). A
    /// load when there is nothing; false for a queue without leases.
    #[inline]
    pub fn dead_letters_due(&self) -> bool {
        self.leases
            .as_ref()
            .is_some_and(|l| l.burial_due.load(Ordering::Relaxed) && l.burial_due.swap(false, Ordering::SeqCst))
    }

    /// Moves every record bound for the dead-letter queue there (or drops
    /// it, counted, on a queue without one), until the dead-letter queue
    /// refuses one (tried again at a later sweep). May open the dead-letter
    /// queue and wait for its sync.
    pub fn move_dead_letters(&self) {
        let Some(l) = &self.leases else { return };
        let Some(me) = l.me else { return };
        self.bury(l, me);
    }

    /// Moves every doomed record to the dead-letter queue (or drops it),
    /// until the dead-letter queue refuses one (tried again at later sweeps).
    fn bury(&self, l: &Leases, me: Owner) {
        for i in 0..l.table.len() {
            let e = l.table.entry(i);
            let w = e.word();
            if w.st() != St::Doomed {
                continue;
            }
            let Ok(dying) = e.change(w, w.dying(me)) else { continue };
            if self.dead_letter(l, i, dying).is_err() {
                let _ = e.change(dying, dying.doomed());
                return;
            }
        }
    }

    /// (Repair.) Sweeps the lease table now.
    pub(super) fn lease_repair(&self) {
        if let Some(l) = &self.leases {
            self.sweep(l, mono_ns(), true);
        }
    }

    /// A recovery found the ring slot of position number `at` held by a
    /// consumer that looks dead (nobody alive announces it): if a lease
    /// entry names that position, the slot is its consumer's, judged by the
    /// entry: waited for while its owner (alive) saves the record, released
    /// once the record is saved (the record then lives in the table). `None`
    /// when no entry names it (a plain pop's slot, or a lease consumer that
    /// died before saving the record): the ring publishes the record again.
    pub(super) fn lease_slot_verdict(&self, at: u64) -> Option<LeaseSlot> {
        let l = self.leases.as_ref()?;
        let found = (0..l.table.len()).find_map(|i| {
            let e = l.table.entry(i);
            let w = e.word();
            let named = w.st() != St::Free && e.pos.load(Ordering::Acquire) == at && e.word() == w;
            named.then(|| (w, self.owner_alive(w.owner())))
        });
        match slot_action(found) {
            SlotAction::Wait => Some(LeaseSlot::Wait),
            SlotAction::Release => {
                self.ring.release_held(at);
                Some(LeaseSlot::Released)
            }
            SlotAction::Republish => None,
        }
    }

    /// The leases of the queue (`None` for a plain queue).
    pub fn lease_stats(&self) -> Option<LeaseStats> {
        let l = self.leases.as_ref()?;
        let now = mono_ns();
        let (mut in_flight, mut oldest, mut waiting, mut pending) = (0, None::<u64>, 0, 0);
        for i in 0..l.table.len() {
            let e = l.table.entry(i);
            match e.word().st() {
                St::Leased | St::Taking | St::Busy | St::Dead => {
                    in_flight += 1;
                    let since = e.leased_ns.load(Ordering::Relaxed);
                    oldest = Some(oldest.map_or(since, |o| o.min(since)));
                }
                St::Ready => waiting += 1,
                St::Doomed => pending += 1,
                St::Free | St::Filling => {}
            }
        }
        let c = &l.table.control().counters.0;
        Some(LeaseStats {
            in_flight,
            oldest: oldest.map(|since| Duration::from_nanos(now.saturating_sub(since))),
            waiting,
            dead_letter_pending: pending,
            redelivered: c.redelivered.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            orphaned: c.orphaned.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            late: c.late.load(Ordering::Relaxed),
        })
    }

    /// Copies of up to `max` records of the lease table (leased, waiting
    /// for another delivery, bound for the dead-letter queue), without
    /// touching them; for inspection (works on an [`inspect`](Self::inspect)
    /// view). Empty for a plain queue.
    pub fn peek_leases(&self, max: usize) -> Vec<LeasedRecord> {
        let Some(l) = &self.leases else { return Vec::new() };
        let now = mono_ns();
        l.table
            .snapshot(max)
            .into_iter()
            .map(|s| LeasedRecord {
                entry: s.entry,
                state: match s.word.st() {
                    St::Leased => LeaseState::Leased,
                    St::Ready => LeaseState::Waiting,
                    St::Doomed => LeaseState::DeadLetter,
                    _ => LeaseState::Busy,
                },
                deliveries: s.word.deliveries(),
                position: s.pos,
                age: Duration::from_nanos(now.saturating_sub(s.leased_ns)),
                due: Duration::from_nanos(s.deadline_ns.saturating_sub(now)),
                record: s.record,
            })
            .collect()
    }
}

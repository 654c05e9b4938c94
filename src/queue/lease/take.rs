//! Taking a record on lease: [`Queue::pop_lease`], the acknowledgement
//! and the next lease in one call ([`Queue::ack_pop_lease`]), a record due
//! for another delivery taken first, and plain pops of such records.

use super::token::Lease;
use super::{Leases, nanos};
use crate::clock::{mono_after, mono_after_res, mono_ns};
use crate::error::*;
use crate::lease::state::{Owner, Word};
use crate::queue::blocking::Idle;
use crate::queue::participant::{Intent, KeptIntent, LeaseIntent, NO_WORD, Patience};
use crate::queue::{Queue, Wait};
use crate::registry::INTENTS;
use crate::ring::RingError;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What [`Queue::ack_pop_lease`] hands on to the lease that follows the
/// acknowledgement.
struct Acked {
    /// The entry it freed, or claimed for the next record.
    entry: usize,
    /// The time it read.
    now: u64,
    /// `Some(Filling word)`: it claimed the entry (see `ack_pop_lease_kept`).
    claimed: Option<Word>,
}

impl Queue {
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
        self.pop_lease_kept(out, wait, nanos(lease), None)
    }

    /// [`pop_lease`](Self::pop_lease), the lease time in nanoseconds (0:
    /// the queue's), announcing through the intent word `kept` keeps
    /// (looked up when it is `None` or another queue's).
    #[inline(always)]
    pub(crate) fn pop_lease_kept(
        &self,
        out: &mut [u8],
        wait: Wait,
        lease: u64,
        kept: Option<&KeptIntent>,
    ) -> Result<(usize, Lease)> {
        let l = self.leases()?;
        if out.len() < self.record_size() {
            return Err(self.short_buffer(out.len()));
        }
        self.pop_lease_after(l, out, wait, lease, None, kept)
    }

    /// Acknowledges the delivery `done`, as [`ack`](Self::ack) does, then
    /// leases the next record as [`pop_lease`](Self::pop_lease) does, in
    /// one call: what a consumer that works record after record does, for
    /// less than the two calls (one look-up of the lease table and one
    /// read of the clock for both, and the acknowledged entry, claimed by
    /// the same change of its word, takes the next record).
    ///
    /// Errors: the outer result is the acknowledgement's: on its error
    /// (those of `ack`, `RECD_TOO_LONG` for a buffer shorter than a
    /// record, and `CONDIT_IS_NIL` for a lease time longer than
    /// [`MAX_LEASE_MS`](crate::MAX_LEASE_MS), a year, checked first)
    /// nothing was taken, and, but for
    /// `SYNC_FAILED`, `done` is not acknowledged. The inner result is the
    /// lease's (those of `pop_lease`), the acknowledgement being done.
    pub fn ack_pop_lease(
        &self,
        done: &Lease,
        out: &mut [u8],
        wait: Wait,
        lease: Duration,
    ) -> Result<Result<(usize, Lease)>> {
        crate::spec::check_call_time(lease, "a lease time")?;
        self.ack_pop_lease_kept(done, out, wait, nanos(lease), None)
    }

    /// [`ack_pop_lease`](Self::ack_pop_lease), the lease time in
    /// nanoseconds (0: the queue's), announcing through the intent word
    /// `kept` keeps (looked up when it is `None` or another queue's).
    pub(crate) fn ack_pop_lease_kept(
        &self,
        done: &Lease,
        out: &mut [u8],
        wait: Wait,
        lease: u64,
        kept: Option<&KeptIntent>,
    ) -> Result<Result<(usize, Lease)>> {
        if out.len() < self.record_size() {
            return Err(self.short_buffer(out.len()));
        }
        let (l, i, w, now) = self.current_lease(done)?;
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
        Ok(self.pop_lease_after(l, out, wait, lease, Some(acked), kept))
    }

    /// [`pop_lease`](Self::pop_lease), `out` at least a record long; after
    /// an acknowledgement ([`Acked`]), the queue was checked and the clock
    /// read by it. Announces through the intent word `kept` keeps when it
    /// is this queue's.
    #[inline(always)]
    fn pop_lease_after(
        &self,
        l: &Leases,
        out: &mut [u8],
        wait: Wait,
        lease: u64,
        mut acked: Option<Acked>,
        kept: Option<&KeptIntent>,
    ) -> Result<(usize, Lease)> {
        let out = &mut out[..self.record_size()];
        let me = self.holder(l)?;
        let lease_ns = Self::lease_time_ns(l, lease);
        let (intent, slot) = self.intent_slot_kept(kept);
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
                // SAFETY: entry i is ours as `filling` (claimed above, not
                // committed or given back).
                let saved = unsafe { table.commit(i, filling, rec, at, now, deadline) };
                if saved {
                    // `always`: the saved record is on stable storage before
                    // its slot is released (which the kernel may write back
                    // at any time): a machine crash finds it in the table,
                    // in the ring (recovery then drops the slot), or both.
                    // A failed sync is counted in the file, as a pop's is.
                    // Never put off (`defer_syncs`): the slot's release
                    // must not reach the disk before the saved record.
                    // `interval`: the next sync persists the table.
                    if let Some(d) = queue.always() {
                        let _ = d.sync_undeferred();
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
                    let lease = self.token(i, filling.committed(), pos, deadline);
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
        // SAFETY: entry i is ours, `Taking` (take_ready).
        let Some(n) = (unsafe { l.table.read(i, out) }) else {
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
        Some(Ok((n, self.token(i, leased, pos, deadline))))
    }

    /// (Plain pops on a queue with leases.) Takes for good a record due for
    /// another delivery, into `out`; `None` if there is none.
    pub(in crate::queue) fn pop_waiting(&self, out: &mut [u8]) -> Result<Option<usize>> {
        let Some(l) = &self.leases else { return Ok(None) };
        let now = mono_ns();
        self.upkeep(l, now);
        let Some(me) = l.me else { return Ok(None) };
        let Some((i, taking)) = l.table.take_ready(now, me, l.base) else { return Ok(None) };
        // SAFETY: entry i is ours, `Taking` (take_ready), until it is freed.
        let n = unsafe { l.table.read(i, out) };
        l.table.free(i, taking);
        self.popped_durably();
        self.leases_flagged();
        n.map(Some).ok_or_else(|| self.lease_corrupt("a waiting record has an impossible length"))
    }
}

//! The calls that end or extend a delivery: [`Queue::ack`],
//! [`Queue::extend_lease`], [`Queue::release`], [`Queue::reject`].

use super::token::Lease;
use super::{Leases, nanos};
use crate::clock::mono_after;
use crate::error::*;
use crate::lease::state::Word;
use crate::queue::Queue;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl Queue {
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
        let (l, i, w, _) = self.current_lease(lease)?;
        if !l.table.free(i, w) {
            return Err(self.late(l));
        }
        self.lease_durably()
    }

    /// The lease of a delivery now runs out `lease` from now (zero: the
    /// queue's lease time). The token is updated: copies of the old one are
    /// stale.
    ///
    /// Errors: those of [`ack`](Self::ack); `CONDIT_IS_NIL` (`lease_time`
    /// longer than [`MAX_LEASE_MS`](crate::MAX_LEASE_MS), a year).
    pub fn extend_lease(&self, lease: &mut Lease, lease_time: Duration) -> Result<()> {
        crate::spec::check_call_time(lease_time, "a lease time")?;
        let (l, i, w, now) = self.current_lease(lease)?;
        let e = l.table.entry(i);
        let busy = e.change(w, w.busy()).map_err(|_| self.late(l))?;
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
        let (l, i, w, now) = self.current_lease(lease)?;
        let max = l.settings.max_deliveries;
        if max > 0 && w.deliveries() >= max {
            return self.reject_entry(l, i, w);
        }
        let e = l.table.entry(i);
        let busy = e.change(w, w.busy()).map_err(|_| self.late(l))?;
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
        let (l, i, w, _) = self.current_lease(lease)?;
        self.reject_entry(l, i, w)
    }

    fn reject_entry(&self, l: &Leases, i: usize, w: Word) -> Result<()> {
        let me = self.holder(l)?;
        let e = l.table.entry(i);
        let dying = e.change(w, w.dying(me)).map_err(|_| self.late(l))?;
        // SAFETY: entry i is ours as `dying` (the change just made).
        unsafe { self.move_to_dead_letter_queue(l, i, dying) }.inspect_err(|_| {
            // Refused: the holder keeps its lease.
            let _ = e.change(dying, dying.back_to_holder());
        })
    }
}

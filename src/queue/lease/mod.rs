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
//!
//! By concern: this file holds [`Leases`] (a queue's table and settings)
//! and what the others share; `token` the [`Lease`] token and its checks,
//! `take` taking a record on lease, `end` the calls that end or extend
//! one, `sweep` the sweeps that end leases run out or orphaned,
//! `dead_letter` moving records to the dead-letter queue, `verdict` how a
//! recovery judges a lease consumer's ring slot, `inspect` the statistics
//! and the view of the table.

mod dead_letter;
mod end;
mod inspect;
mod sweep;
mod take;
mod token;
mod verdict;

pub use inspect::{LeaseState, LeaseStats, LeasedRecord};
pub use token::Lease;
pub(crate) use verdict::LeaseSlot;

use super::Queue;
use crate::clock::mono_res_ns;
use crate::error::*;
use crate::lease::state::Owner;
use crate::lease::table::LeaseTable;
use crate::registry::INTENTS;
use crate::spec::LeaseSpec;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
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
    /// The dead-letter queue, found when first needed (see
    /// [`DeadLetterQueue`]).
    dead_letter: Mutex<DeadLetterQueue>,
    /// The table that attached the queue, if one did (see [`Attacher`]).
    attacher: Option<Weak<dyn Attacher>>,
    /// A sweep on a thread that leaves dead-letter moves to others (see
    /// [`Queue::sweeps_move_dead_letters`]) found records bound for the
    /// dead-letter queue: [`Queue::move_dead_letters`] is due.
    dead_letters_due: AtomicBool,
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
            dead_letter: Mutex::new(DeadLetterQueue::NotYet),
            attacher: None,
            dead_letters_due: AtomicBool::new(false),
        }
    }
}

/// A table of attached queues ([`crate::Attachments`]), as a queue it
/// attached reaches it: the queue's dead-letter queue is the table's, so
/// that a process attaches it once. (A trait: the table lies above queues.)
pub(crate) trait Attacher: Send + Sync {
    /// Queue `id` of the table, attached if it is not.
    fn attach(self: Arc<Self>, id: u32) -> Result<Arc<Queue>>;
}

/// How a queue holds its dead-letter queue.
enum DeadLetterQueue {
    NotYet,
    /// The attaching table's, held weakly: the table keeps it, and two
    /// queues that are each other's dead-letter queue do not keep each
    /// other (a cycle of `Arc`s would keep both mapped, and registered in
    /// their process tables, for the life of the process).
    Attached(Weak<Queue>),
    /// Opened for this queue, which no table attached: held. It cannot
    /// hold this queue back (an instance opened after it, holding only
    /// instances opened later still).
    Opened(Arc<Queue>),
}

impl Queue {
    /// (For [`crate::Attachments`].) This queue was attached by `table`:
    /// its dead-letter queue is looked up there. Before the queue is
    /// shared.
    pub(crate) fn attached_by(&mut self, table: Weak<dyn Attacher>) {
        if let Some(l) = self.leases.as_deref_mut() {
            l.attacher = Some(table);
            // One opened meanwhile (by a sweep at open) is let go.
            *l.dead_letter.get_mut() = DeadLetterQueue::NotYet;
        }
    }
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Queue {
    /// The lease table, or `NOT_SUPPT_OPT` for a plain queue.
    pub(super) fn leases(&self) -> Result<&Leases> {
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
    pub(super) fn holder(&self, l: &Leases) -> Result<Owner> {
        l.me.ok_or_else(|| self.registry.no_entry_error(self.path()))
    }

    /// The lease time asked for, or the queue's default.
    pub(super) fn lease_ns(l: &Leases, lease: Duration) -> u64 {
        Self::lease_time_ns(l, nanos(lease))
    }

    /// [`lease_ns`](Self::lease_ns) of a time in nanoseconds (0: the
    /// queue's lease time).
    #[inline]
    pub(super) fn lease_time_ns(l: &Leases, ns: u64) -> u64 {
        if ns == 0 { l.default_ns } else { ns }
    }

    pub(super) fn lease_corrupt(&self, what: &str) -> Error {
        Error::new(SHM_ERR_INVAL, format!("{}: lease table: {what}", self.path().display()))
    }

    /// Refuses a late call: `LEASE_EXPIRED`, counted.
    #[cold]
    pub(super) fn late(&self, l: &Leases) -> Error {
        l.table.control().counters.0.late.fetch_add(1, Ordering::Relaxed);
        Error::code_only(LEASE_EXPIRED)
    }

    /// With the `always` policy: returns once the changes this thread made
    /// to the lease table (and everything before them) are on stable
    /// storage. The lease table lies in the range every sync writes. With
    /// `interval`: tells the flushers that the table changed (the next sync
    /// persists it).
    #[inline]
    pub(super) fn lease_durably(&self) -> Result<()> {
        match self.always() {
            Some(d) => d.sync(),
            None => {
                self.leases_flagged();
                Ok(())
            }
        }
    }

    /// With `interval`: tells the flushers that the lease table changed
    /// (the next sync persists it).
    #[inline]
    pub(super) fn leases_flagged(&self) {
        if let Some(d) = self.durable.as_deref().filter(|d| !d.is_always()) {
            d.leases_changed();
        }
    }
}

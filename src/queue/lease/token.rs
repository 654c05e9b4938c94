//! The token of a delivery ([`Lease`]), and the check that a token still
//! names a delivery its holder may end.

use super::Leases;
use crate::clock::mono_ns;
use crate::error::*;
use crate::lease::state::{EntryState, Word};
use crate::queue::Queue;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A delivery taken with [`Queue::pop_lease`]: the token that acknowledges,
/// releases, rejects or extends it. It names its queue, its lease entry and
/// the generation of the delivery, so a token that has gone stale (the lease
/// ran out and the record went to another consumer, it was acknowledged
/// already, or extended since) is refused with `LEASE_EXPIRED` and never acts
/// on another consumer's delivery; a token of another queue is refused with
/// `LEASE_INVALID`. Any process may use it (it is plain data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub(super) queue: u32,
    pub(super) entry: u32,
    pub(super) incarnation: u64,
    pub(super) pos: u64,
    pub(super) generation: u32,
    pub(super) deliveries: u32,
    pub(super) deadline_ns: u64,
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

    /// Time left until the lease runs out (zero once it has: a call on it
    /// then fails with `LEASE_EXPIRED`). On the lease clock, which moves
    /// by ticks of 1 to 4 ms.
    pub fn remaining(&self) -> Duration {
        // It runs out once the clock is past its deadline.
        Duration::from_nanos(self.deadline_ns.saturating_add(1).saturating_sub(mono_ns()))
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

impl Queue {
    /// The token of the delivery `word` (`Leased`) of entry `i`.
    pub(super) fn token(&self, i: usize, word: Word, pos: u64, deadline_ns: u64) -> Lease {
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
    pub(super) fn current_lease(&self, lease: &Lease) -> Result<(&Leases, usize, Word, u64)> {
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
        if w.state() != EntryState::Leased
            || w.generation() != lease.generation
            || e.pos.load(Ordering::Relaxed) != lease.pos
        {
            return Err(self.late(l));
        }
        let now = mono_ns();
        if now > e.deadline_ns.load(Ordering::Relaxed) {
            return Err(self.late(l));
        }
        Ok((l, i, w, now))
    }
}

//! What the lease table holds, for `tvmq stat` and inspection:
//! [`Queue::lease_stats`], [`Queue::peek_leases`].

use crate::clock::mono_ns;
use crate::lease::state::EntryState;
use crate::queue::Queue;
use std::sync::atomic::Ordering;
use std::time::Duration;

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

impl Queue {
    /// The leases of the queue (`None` for a plain queue): the gauges read
    /// from every entry of the lease table (its
    /// [`lease_scan_len`](Self::lease_scan_len) entries: milliseconds for
    /// the largest tables), the counters as they are kept.
    pub fn lease_stats(&self) -> Option<LeaseStats> {
        let l = self.leases.as_ref()?;
        let now = mono_ns();
        let (mut in_flight, mut oldest, mut waiting, mut pending) = (0, None::<u64>, 0, 0);
        for i in 0..l.table.len() {
            let e = l.table.entry(i);
            match e.word().state() {
                EntryState::Leased | EntryState::Taking | EntryState::Busy | EntryState::Dead => {
                    in_flight += 1;
                    let since = e.leased_ns.load(Ordering::Relaxed);
                    oldest = Some(oldest.map_or(since, |o| o.min(since)));
                }
                EntryState::Ready => waiting += 1,
                EntryState::Doomed => pending += 1,
                EntryState::Free | EntryState::Filling => {}
            }
        }
        let c = self.lease_counters()?;
        Some(LeaseStats {
            in_flight,
            oldest: oldest.map(|since| Duration::from_nanos(now.saturating_sub(since))),
            waiting,
            dead_letter_pending: pending,
            ..c
        })
    }

    /// The counters of [`lease_stats`](Self::lease_stats) alone, its gauges
    /// zero: no scan of the table (`None` for a plain queue).
    pub(crate) fn lease_counters(&self) -> Option<LeaseStats> {
        let l = self.leases.as_ref()?;
        let c = &l.table.control().counters.0;
        Some(LeaseStats {
            in_flight: 0,
            oldest: None,
            waiting: 0,
            dead_letter_pending: 0,
            redelivered: c.redelivered.load(Ordering::Relaxed),
            expired: c.expired.load(Ordering::Relaxed),
            orphaned: c.orphaned.load(Ordering::Relaxed),
            released: c.released.load(Ordering::Relaxed),
            dead_lettered: c.dead_lettered.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            late: c.late.load(Ordering::Relaxed),
        })
    }

    /// The entries that [`lease_stats`](Self::lease_stats) and
    /// [`snapshot`](Self::snapshot) read one by one for their gauges (leases
    /// in flight, records waiting): the lease table's size (`--max-leases`,
    /// up to 1,048,576), 0 for a plain queue. A reader of many queues
    /// budgets its scans with it (`tvmq_watch`'s collector); when these
    /// gauges are kept as counters that change with each lease, as
    /// `redelivered` is, no scan is needed and this is 0.
    pub fn lease_scan_len(&self) -> usize {
        self.leases.as_ref().map_or(0, |l| l.table.len())
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
                state: match s.word.state() {
                    EntryState::Leased => LeaseState::Leased,
                    EntryState::Ready => LeaseState::Waiting,
                    EntryState::Doomed => LeaseState::DeadLetter,
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

//! One cheap read of every counter a watcher shows (`tvmq top`, the
//! Prometheus exposition, `lQueueStats`): [`Queue::snapshot`]. Unlike
//! [`Queue::stats`] with [`Queue::processes`], it costs no system call per
//! entry of the process table, so that a reader can take one of ten thousand
//! queues every second without slowing them.

use super::Queue;
use crate::spec::Durability;
use std::sync::atomic::Ordering;

/// A queue's counters and gauges at one instant, as [`Queue::snapshot`]
/// reads them. The counters (`_total` in the Prometheus names) only grow
/// while the queue exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Snapshot {
    /// Largest record, in bytes.
    pub record_size: u64,
    /// Exact capacity, in records.
    pub capacity: u64,
    /// Records queued now (leased records not included).
    pub depth: u64,
    /// Records pushed since the queue was created (recoveries not counted).
    pub pushed: u64,
    /// Records popped (or leased) since the queue was created.
    pub popped: u64,
    /// Threads of every process asleep in a blocking pop now.
    pub waiters: u64,
    /// Processes attached with an entry in the queue's process table now
    /// (views opened with [`Queue::inspect`], as this reader's, are not).
    pub processes: u64,
    /// Leases held by consumers now (0 for a plain queue).
    pub leases_in_flight: u64,
    /// Records waiting in the lease table to be delivered again.
    pub leases_waiting: u64,
    /// Records delivered again after a lease ran out, its holder died or
    /// it was released.
    pub redelivered: u64,
    /// Leases that ran out.
    pub expired: u64,
    /// Records moved to the dead-letter queue.
    pub dead_lettered: u64,
    /// Syncs completed since the file was created (0 unless durable).
    pub syncs: u64,
    /// When the last sync completed, nanoseconds since the Unix epoch (0:
    /// none, or not durable).
    pub last_sync_ns: u64,
    /// The queue is durable.
    pub durable: Option<Durability>,
    /// The queue has leases.
    pub leases: bool,
    /// The queue has been dropped (a reader should let go of it).
    pub dropped: bool,
}

impl Queue {
    /// Every counter a watcher shows, read at once from the shared file:
    /// the ring's positions, the waiter count, the process table (one
    /// `fcntl` per process attached, none per free entry), the lease
    /// table's states and counters, the durable sync counters. Works on
    /// [`inspect`](Self::inspect) views (they are how a watcher reads
    /// queues without being counted among their processes). Cannot fail.
    pub fn snapshot(&self) -> Snapshot {
        let s = self.stats();
        let lease = self.lease_stats();
        // The two sync words alone ([`Queue::durable_stats`] also reads the
        // boot id from /proc and works out the watermark).
        let sync = &self.control().sync.0;
        let durable = self.info.durability.is_some();
        Snapshot {
            record_size: self.info.record_size,
            capacity: self.info.capacity,
            depth: s.depth,
            pushed: s.pushed,
            popped: s.popped,
            waiters: u64::from(s.waiters),
            processes: u64::from(self.registry.live_count()),
            leases_in_flight: lease.as_ref().map_or(0, |l| l.in_flight),
            leases_waiting: lease.as_ref().map_or(0, |l| l.waiting),
            redelivered: lease.as_ref().map_or(0, |l| l.redelivered),
            expired: lease.as_ref().map_or(0, |l| l.expired),
            dead_lettered: lease.as_ref().map_or(0, |l| l.dead_lettered),
            syncs: if durable { sync.done.load(Ordering::Relaxed) } else { 0 },
            last_sync_ns: if durable { sync.last_sync_ns.load(Ordering::Relaxed) } else { 0 },
            durable: self.info.durability,
            leases: self.info.leases.is_some(),
            dropped: s.dropped,
        }
    }
}

//! One cheap read of every counter a watcher shows (`tvmq top`, the
//! Prometheus exposition, `lQueueStats`): [`Queue::snapshot`], and
//! [`Queue::snapshot_without_lease_scan`], whose cost does not grow with a
//! leased queue's table. Unlike
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
    /// `fcntl` per process attached, none per free entry; an
    /// [`inspect_detached`](Self::inspect_detached) view opens its file
    /// again for them), the lease table's states and counters, the durable
    /// sync counters. Works on [`inspect`](Self::inspect) views (they are
    /// how a watcher reads queues without being counted among their
    /// processes). Cannot fail.
    ///
    /// The lease table's gauges (`leases_in_flight`, `leases_waiting`) are
    /// read entry by entry ([`lease_scan_len`](Self::lease_scan_len) of
    /// them); a reader of many queues takes
    /// [`snapshot_without_lease_scan`](Self::snapshot_without_lease_scan)
    /// and scans within a budget of its own.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = self.snapshot_without_lease_scan();
        if let Some(l) = self.lease_stats() {
            (s.leases_in_flight, s.leases_waiting) = (l.in_flight, l.waiting);
        }
        s
    }

    /// [`snapshot`](Self::snapshot) but for the two gauges it reads from
    /// every entry of the lease table: `leases_in_flight` and
    /// `leases_waiting` are 0 (read them with
    /// [`lease_stats`](Self::lease_stats)). Its cost does not grow with the
    /// lease table. Cannot fail.
    pub fn snapshot_without_lease_scan(&self) -> Snapshot {
        let s = self.stats();
        let lease = self.lease_counters();
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
            leases_in_flight: 0,
            leases_waiting: 0,
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

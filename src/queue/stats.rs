//! Counters and gauges of a queue, and the processes attached to it.

use super::Queue;
use std::sync::atomic::Ordering;

/// A live process attached to a queue, as its process table shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Its entry in the table.
    pub entry: usize,
    /// Its process id.
    pub pid: u32,
    /// When it attached, nanoseconds since the Unix epoch.
    pub since_ns: u64,
    /// Its threads asleep in a blocking pop.
    pub sleepers: u32,
}

/// Counters and gauges of a queue, for `tvmq stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Records pushed (positions claimed by producers, less recoveries).
    pub pushed: u64,
    /// Records popped (positions taken by consumers, less recoveries).
    pub popped: u64,
    /// Records queued now.
    pub depth: u64,
    /// Threads (of every process) announced as asleep in a blocking pop.
    pub waiters: u32,
    /// The queue has been dropped.
    pub dropped: bool,
    /// Claims of dead producers turned into skipped records.
    pub recovered_pushes: u64,
    /// Records held by dead consumers delivered again.
    pub recovered_pops: u64,
    /// Calls that failed because their slot was recovered while they stalled.
    pub robbed: u64,
    /// Sleepers of dead processes taken off the waiter count.
    pub reconciled_waiters: u64,
    /// Time of the last recovery, nanoseconds since the Unix epoch (0: never).
    pub last_recovery_ns: u64,
}

impl Queue {
    /// Counters and gauges.
    pub fn stats(&self) -> Stats {
        let c = self.control();
        let s = &c.counters.0;
        // Positions used by recoveries (a republished record, an empty record
        // in place of an abandoned push) are not records pushed or popped.
        let recovered = s.recovered_pushes.load(Ordering::Relaxed) + s.recovered_pops.load(Ordering::Relaxed);
        Stats {
            pushed: self.ring.pushed().saturating_sub(recovered),
            popped: self.ring.popped().saturating_sub(recovered),
            depth: self.ring.depth(),
            waiters: c.wake.0.waiters.load(Ordering::Relaxed),
            dropped: self.is_dropped(),
            recovered_pushes: s.recovered_pushes.load(Ordering::Relaxed),
            recovered_pops: s.recovered_pops.load(Ordering::Relaxed),
            robbed: s.robbed.load(Ordering::Relaxed),
            reconciled_waiters: s.reconciled_waiters.load(Ordering::Relaxed),
            last_recovery_ns: s.last_recovery_ns.load(Ordering::Relaxed),
        }
    }

    /// Records currently queued.
    pub fn depth(&self) -> u64 {
        self.ring.depth()
    }

    /// The live processes attached to the queue (those with an entry in its
    /// process table).
    pub fn processes(&self) -> Vec<Process> {
        self.registry
            .live()
            .into_iter()
            .map(|(entry, pid, since_ns, sleepers)| Process { entry, pid, since_ns, sleepers })
            .collect()
    }
}

//! The durability state of a durable queue, for `tvmq stat`: its syncs and
//! what its last recovery after a machine restart found.

use super::marks::best_mark;
use super::recover::stored_boot_id;
use crate::file::layout::Control;
use crate::spec::Durability;
use std::sync::atomic::Ordering;

/// The durability state of a durable queue, for `tvmq stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableStats {
    /// The queue's policy.
    pub policy: Durability,
    /// When the last sync completed, nanoseconds since the Unix epoch (0: none yet).
    pub last_sync_ns: u64,
    /// How long it took, nanoseconds.
    pub last_sync_took_ns: u64,
    /// Syncs completed since the file was created.
    pub syncs: u64,
    /// Syncs that failed.
    pub failures: u64,
    /// (`interval`.) A flusher found changes that no sync covers yet (it
    /// looks every sixteenth of the interval), or the last sync failed.
    pub dirty: bool,
    /// The consumed watermark of the last sync: positions below it were consumed.
    pub watermark: u64,
    /// The machine restarted since processes last attached: the next
    /// process to attach rebuilds the queue from its slots.
    pub recovery_pending: bool,
    /// What the last recovery after a machine restart found (`None`: none ran).
    pub last_recovery: Option<RecoveryStats>,
}

/// What a recovery after a machine restart found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryStats {
    /// When it ran, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// Records kept.
    pub kept: u64,
    /// Slots dropped because their checksum did not match: torn writes, or
    /// records whose write had not reached the disk (none acknowledged).
    pub torn: u64,
    /// Records dropped because they were consumed before the last sync.
    pub stale: u64,
    /// Kept records moved to a later position (they lay more than a lap
    /// behind the newest one).
    pub moved: u64,
    /// Empty positions between kept records (skipped by consumers).
    pub holes: u64,
    /// The consumed watermark recovery started from.
    pub watermark: u64,
    /// Recoveries run on this queue file.
    pub runs: u64,
}

/// The durability state of a durable queue from its control block (also
/// for read-only views).
pub(crate) fn stats(control: &Control, policy: Durability, created_ns: u64) -> DurableStats {
    let w = &control.sync.0;
    let r = &control.recovery.0;
    let at = r.at_ns.load(Ordering::Relaxed);
    DurableStats {
        policy,
        last_sync_ns: w.last_sync_ns.load(Ordering::Relaxed),
        last_sync_took_ns: w.last_sync_took_ns.load(Ordering::Relaxed),
        syncs: w.done.load(Ordering::Relaxed),
        failures: w.failures.load(Ordering::Relaxed),
        dirty: w.dirty.load(Ordering::Relaxed) != 0,
        watermark: best_mark(control, created_ns).map_or(0, |m| m.1),
        recovery_pending: crate::clock::boot_id().is_some_and(|b| b != stored_boot_id(control)),
        last_recovery: (at != 0).then(|| RecoveryStats {
            at_ns: at,
            kept: r.kept.load(Ordering::Relaxed),
            torn: r.torn.load(Ordering::Relaxed),
            stale: r.stale.load(Ordering::Relaxed),
            moved: r.moved.load(Ordering::Relaxed),
            holes: r.holes.load(Ordering::Relaxed),
            watermark: r.watermark.load(Ordering::Relaxed),
            runs: r.runs.load(Ordering::Relaxed),
        }),
    }
}

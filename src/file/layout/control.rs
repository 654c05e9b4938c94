//! The mutable shared state at [`CONTROL_OFFSET`] ([`Control`]): the ring's
//! cursors, the futex and waiter count, the dropped flag, counters, and for
//! durable queues the sync words, the last recovery's findings and the two
//! copies of the consumed watermark.

use super::offsets::{CONTROL_OFFSET, TABLE_OFFSET};
use crate::ring::{CachePadded, Cursors};
use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, AtomicU64};

const _: () = assert!(size_of::<Control>() as u64 <= TABLE_OFFSET - CONTROL_OFFSET);

/// The futex word and the waiter count, on a line of their own.
#[repr(C)]
#[derive(Default)]
pub(crate) struct WakeWords {
    /// Bumped by a producer before waking sleepers; sleepers wait on it.
    pub(crate) futex: AtomicU32,
    /// Threads announced as (about to be) asleep; producers skip the wake-up
    /// system call while it is 0.
    pub(crate) waiters: AtomicU32,
}

/// Read on every call, written once: kept apart from the busy lines.
#[repr(C)]
#[derive(Default)]
pub(crate) struct StateWords {
    /// Non-zero once the queue has been dropped.
    pub(crate) dropped: AtomicU32,
    /// Processes attached without an entry in the process table (it was
    /// full): while non-zero, no stalled holder can be proven dead.
    pub(crate) unregistered: AtomicU32,
}

/// Counters of rare events (not touched by normal pushes and pops).
#[repr(C)]
#[derive(Default)]
pub(crate) struct Counters {
    /// Claims of dead producers turned into skipped (empty) records.
    pub(crate) recovered_pushes: AtomicU64,
    /// Records of dead consumers delivered again.
    pub(crate) recovered_pops: AtomicU64,
    /// Calls that failed because their own slot had been recovered.
    pub(crate) robbed: AtomicU64,
    /// Sleepers of dead processes taken off the waiter count.
    pub(crate) reconciled_waiters: AtomicU64,
    /// Time of the last recovery, nanoseconds since the Unix epoch.
    pub(crate) last_recovery_ns: AtomicU64,
}

/// The shared state of a durable queue's syncs (unused by other queues).
/// See `crate::durable` for the protocol.
#[repr(C)]
#[derive(Default)]
pub(crate) struct SyncWords {
    /// 0: no sync in progress; else the syncer, named by its process-table
    /// entry and registration (see `crate::durable::lock`).
    pub(crate) lock: AtomicU32,
    /// Bumped when a sync ends (or its syncer gives up); waiters sleep on it.
    pub(crate) futex: AtomicU32,
    /// Threads (of every process) asleep waiting for a sync.
    pub(crate) waiters: AtomicU32,
    /// `interval` queues: set by a flusher that found pushes or pops no
    /// sync covers (or by a failed sync), cleared as a sync begins: the
    /// flushers time their syncs from it.
    pub(crate) dirty: AtomicU32,
    /// Syncs started: a change made before this count was read is covered
    /// by sync number `started + 1` and every later one.
    pub(crate) started: AtomicU64,
    /// The highest sync number that has completed.
    pub(crate) done: AtomicU64,
    /// When the lock was taken, nanoseconds since the Unix epoch.
    pub(crate) locked_ns: AtomicU64,
    /// When the last sync completed, nanoseconds since the Unix epoch.
    pub(crate) last_sync_ns: AtomicU64,
    /// How long the last sync took, nanoseconds.
    pub(crate) last_sync_took_ns: AtomicU64,
    /// Syncs that failed (the system call returned an error).
    pub(crate) failures: AtomicU64,
    /// When `dirty` was last set: the last time a flusher found the queue
    /// unchanged before it found the change (so no later than the oldest
    /// change not yet synced), nanoseconds since the Unix epoch.
    pub(crate) dirty_ns: AtomicU64,
    /// The boot id (`/proc/sys/kernel/random/boot_id`) of the machine on which
    /// processes last attached: another value at attach means the machine
    /// restarted since, and the ring is rebuilt from its slots.
    pub(crate) boot_id: [AtomicU64; 2],
    /// Calls that needed a sync (each counted once): the syncer of an
    /// `always` queue gathers callers by it (see `Durable::gather`).
    pub(crate) arrivals: AtomicU32,
    /// `arrivals` when the last sync started.
    pub(crate) batch_start: AtomicU32,
    /// Callers waiting for a sync when the last one ended, its syncer included.
    pub(crate) callers: AtomicU32,
    /// `interval` queues with leases: set by a lease call that changed the
    /// lease table in a way a sync must carry (a delivery count raised, an
    /// entry freed), when it finds it clear; cleared as a sync begins. (It
    /// fills a hole that alignment left before `sealed`: no offset moved.)
    pub(crate) leases_changed: AtomicU32,
    /// `interval` queues, whose producers do not seal their records: the
    /// position count from which the next sync seals what was published
    /// (the last sync sealed every published record below it).
    pub(crate) sealed: AtomicU64,
    /// `interval` queues: the position count from which the next sync
    /// copies into the image the slots consumers released (the last sync
    /// copied every released slot below it).
    pub(crate) released: AtomicU64,
}

/// What the last recovery after a machine restart found (durable queues).
#[repr(C)]
#[derive(Default)]
pub(crate) struct RecoveryWords {
    /// When it ran, nanoseconds since the Unix epoch (0: never).
    pub(crate) at_ns: AtomicU64,
    /// Records kept (valid and not consumed).
    pub(crate) kept: AtomicU64,
    /// Slots dropped because their checksum did not match (torn writes, or
    /// a record whose write had not reached the disk).
    pub(crate) torn: AtomicU64,
    /// Valid records dropped because they lie below the consumed watermark.
    pub(crate) stale: AtomicU64,
    /// Kept records moved to a later position (more than a lap behind the newest).
    pub(crate) moved: AtomicU64,
    /// Positions between kept records that held nothing: now empty records.
    pub(crate) holes: AtomicU64,
    /// Recoveries run on this file.
    pub(crate) runs: AtomicU64,
    /// The consumed watermark the recovery started from.
    pub(crate) watermark: AtomicU64,
}

/// One copy of the consumed watermark, alone in a 512-byte sector (a
/// sector reaches the disk whole or not at all). Two copies are kept and
/// written alternately, as LMDB keeps its meta pages: a torn write spoils
/// one copy, and the other (older) one still holds.
#[repr(C, align(512))]
#[derive(Default)]
pub(crate) struct Mark {
    /// Generation: the valid copy with the higher one is the current one.
    pub(crate) generation: AtomicU64,
    /// Every position numbered below this has been consumed (its slot
    /// released) as of the sync that wrote the copy.
    pub(crate) consumed: AtomicU64,
    /// Positions claimed by producers at that sync (`tail`, counted).
    pub(crate) pushed: AtomicU64,
    /// When the sync started, nanoseconds since the Unix epoch.
    pub(crate) synced_ns: AtomicU64,
    /// FNV-1a 64 of the four words above (and the queue's creation time).
    pub(crate) check: AtomicU64,
}

/// The mutable shared state at [`CONTROL_OFFSET`].
#[repr(C)]
#[derive(Default)]
pub(crate) struct Control {
    pub(crate) cursors: Cursors,
    pub(crate) wake: CachePadded<WakeWords>,
    pub(crate) state: CachePadded<StateWords>,
    pub(crate) counters: CachePadded<Counters>,
    /// Durable queues only (zero elsewhere).
    pub(crate) sync: CachePadded<SyncWords>,
    /// Durable queues only (zero elsewhere).
    pub(crate) recovery: CachePadded<RecoveryWords>,
    /// Durable queues only (zero elsewhere): the consumed watermark, twice.
    pub(crate) marks: [Mark; 2],
}

// SAFETY: the control block is atomics only: any bits are a value.
unsafe impl crate::shm::ShmSafe for WakeWords {}
// SAFETY: as above.
unsafe impl crate::shm::ShmSafe for StateWords {}
// SAFETY: as above.
unsafe impl crate::shm::ShmSafe for Counters {}
// SAFETY: as above.
unsafe impl crate::shm::ShmSafe for SyncWords {}
// SAFETY: as above.
unsafe impl crate::shm::ShmSafe for RecoveryWords {}
// SAFETY: as above.
unsafe impl crate::shm::ShmSafe for Mark {}
// SAFETY: as above.
unsafe impl crate::shm::ShmSafe for Control {}
const _: () = assert!(size_of::<SyncWords>() <= 128 && size_of::<RecoveryWords>() <= 128);
// `leases_changed` took the alignment hole before `sealed`: the words after it kept their offsets.
const _: () = assert!(offset_of!(SyncWords, sealed) == 104 && size_of::<SyncWords>() == 120);
const _: () = assert!(offset_of!(Control, marks) % 512 == 0 && CONTROL_OFFSET % 512 == 0);

/// File offset of the boot id in the control block ([`SyncWords::boot_id`]),
/// which creation stamps.
pub(crate) const BOOT_ID_OFFSET: u64 =
    CONTROL_OFFSET + offset_of!(Control, sync) as u64 + offset_of!(SyncWords, boot_id) as u64;

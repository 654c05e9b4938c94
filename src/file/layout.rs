//! The layout of a queue file (versions 1 and 2) and the validation of its
//! header. No I/O here: the bytes come from [`super::map`] and [`super::create`].
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 4 KiB | [`Info`]: magic, version, geometry, name, fields, checksum (immutable) |
//! | 4096 | 4 KiB | [`Control`]: ring cursors, futex and waiter count, dropped flag, counters; for durable queues the sync words, the last recovery's findings and the two copies of the consumed watermark |
//! | 8192 | 1,056 KiB | process table ([`crate::registry`]); version 2: 256 heads of 64 bytes (16 KiB), then 256 intent pages of 4 KiB at [`SPARSE_START`], then 16 KiB unused; version 1: 256 entries of 4,224 bytes |
//! | [`DATA_OFFSET`] | capacity x stride | slots: 16-byte header + record, stride = 16 + record size rounded up to 8 |
//! | [`lease_table_offset`] (queues with leases only) | see [`crate::lease::table`] | lease table: control block, then max leases x (64-byte head + record rounded up to 64) |
//!
//! All-zero control, table and slots are the valid initial state, so a new
//! file is its header plus zero pages. A version 2 file on tmpfs is made
//! sparse: [`SPARSE_START`]..[`DATA_OFFSET`] (the intent pages) is left a
//! hole, and a page of it is allocated only when a process takes the entry
//! it belongs to, so a queue used by a few processes costs 24 KiB plus 4 KiB
//! a process beyond its slots (and the 1 MiB hole counts in the file's
//! length, not in `du` or in the memory of the processes that map it). The
//! offsets of everything else are those of version 1, which differs only in
//! the process table (see [`crate::registry::TableLayout`]).

use crate::error::*;
use crate::registry::{HEADS_BYTES, MAX_PROCS, TABLE_BYTES, TableLayout};
use crate::ring::{CachePadded, Cursors, MAX_CAPACITY, SLOT_HEADER_BYTES, one_lap};
use crate::schema::{Field, MAX_FIELD_NAME, MAX_FIELDS, kind_of};
use crate::spec::{Durability, MAX_INTERVAL_MS, MAX_LEASE_MS, MAX_LEASES, MAX_NAME, MAX_PART, MAX_RECORD_SIZE, Spec};
use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// First bytes of every queue file.
pub(crate) const MAGIC: [u8; 8] = *b"TVMQUEUE";
/// Layout version this library writes.
pub(crate) const VERSION: u32 = 2;
/// The oldest layout version this library reads (1: the process table's
/// entries interleaved with their intent words).
pub(crate) const OLDEST_VERSION: u32 = 1;
/// Bytes reserved for [`Info`].
pub(crate) const INFO_BYTES: u64 = 4096;
/// File offset of [`Control`].
pub(crate) const CONTROL_OFFSET: u64 = 4096;
/// File offset of the process table.
pub(crate) const TABLE_OFFSET: u64 = 8192;
/// File offset of slot 0.
pub(crate) const DATA_OFFSET: u64 = TABLE_OFFSET + TABLE_BYTES as u64;
/// Layout version 2: where the part of the process table that a new file
/// leaves unallocated (the intent pages) starts; it ends at [`DATA_OFFSET`].
pub(crate) const SPARSE_START: u64 = TABLE_OFFSET + HEADS_BYTES as u64;
const _: () = assert!(SPARSE_START % 4096 == 0);
/// Bytes of a queue name and of a partition text in the header (the last
/// one is always NUL: at most 63 and 31 bytes are kept).
pub(crate) const NAME_BYTES: usize = MAX_NAME + 1;
pub(crate) const PART_BYTES: usize = MAX_PART + 1;
const FIELD_NAME_BYTES: usize = MAX_FIELD_NAME + 1;

/// One field of a record layout, as stored in the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FieldDesc {
    /// NUL-padded name.
    pub(crate) name: [u8; FIELD_NAME_BYTES],
    pub(crate) offset: u32,
    pub(crate) len: u32,
    /// A [`crate::schema::FieldKind`] number.
    pub(crate) kind: u32,
    pub(crate) reserved: u32,
}

/// The immutable header at offset 0. Every field is checked on open.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Info {
    pub(crate) magic: [u8; 8],
    pub(crate) version: u32,
    pub(crate) info_bytes: u32,
    pub(crate) control_offset: u64,
    pub(crate) table_offset: u64,
    pub(crate) data_offset: u64,
    /// Exact size of the file.
    pub(crate) file_size: u64,
    pub(crate) record_size: u64,
    /// Exact number of records the queue holds.
    pub(crate) capacity: u64,
    /// `(capacity + 1).next_power_of_two()`.
    pub(crate) one_lap: u64,
    /// Bytes per slot: 16 + record size rounded up to 8.
    pub(crate) slot_stride: u64,
    pub(crate) created_ns: u64,
    /// How long a waiter waits for a slot whose holder cannot be proven dead
    /// or alive before recovering it.
    pub(crate) unblock_timeout_ms: u64,
    pub(crate) id: u32,
    /// Permission bits the file was created with.
    pub(crate) mode: u32,
    /// Entries in the process table.
    pub(crate) proc_slots: u32,
    pub(crate) field_count: u32,
    pub(crate) name: [u8; NAME_BYTES],
    pub(crate) part: [u8; PART_BYTES],
    pub(crate) fields: [FieldDesc; MAX_FIELDS],
    /// FNV-1a 64 of every byte above.
    pub(crate) checksum: u64,
}

const _: () = assert!(size_of::<Info>() as u64 + size_of::<Options>() as u64 <= INFO_BYTES);

/// File offset of [`Options`], right after [`Info`].
pub(crate) const OPTIONS_OFFSET: usize = size_of::<Info>();
const _: () = assert!(OPTIONS_OFFSET % 8 == 0);

/// [`Options::flags`] bit: `spin_us` is set.
pub(crate) const OPT_SPIN: u64 = 1;
/// [`Options::flags`] bit: the queue is durable ([`Options::durable`] holds its policy).
pub(crate) const OPT_DURABLE: u64 = 2;

/// [`DurableOptions::policy`]: every push and pop returns once it is on stable storage.
pub(crate) const POLICY_ALWAYS: u64 = 1;
/// [`DurableOptions::policy`]: a flusher syncs at most `interval_ms` after a change.
pub(crate) const POLICY_INTERVAL: u64 = 2;

/// The durability policy of a queue, in [`Options::durable`] (64 bytes,
/// fixed by the layout of [`Options`]). All zero: not durable.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DurableOptions {
    /// [`POLICY_ALWAYS`] or [`POLICY_INTERVAL`] (0 when not durable).
    pub(crate) policy: u64,
    /// For [`POLICY_INTERVAL`]: the longest time, in milliseconds, between a
    /// change and the sync that makes it durable (1..=[`MAX_INTERVAL_MS`]);
    /// 0 otherwise.
    pub(crate) interval_ms: u64,
    /// Zero; room for later durability settings.
    pub(crate) reserved: [u64; 6],
}
const _: () = assert!(size_of::<DurableOptions>() == 64);

/// [`Options::flags`] bit: the queue has leases ([`LeaseOptions`] is set,
/// and the file ends with a lease table). Bit 2 is left to durable queues.
pub(crate) const OPT_LEASES: u64 = 4;

/// [`Options::flags`] bit: the file ends with an image of the slots (the
/// durable copy of an `interval` queue, or of an `always` queue without
/// leases made by this version, written by its syncs with direct I/O: see
/// [`image_offset`] and `crate::durable`).
pub(crate) const OPT_IMAGE: u64 = 8;

/// The settings of acknowledged consumption, in [`Options::leases`] (all
/// zero without [`OPT_LEASES`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaseOptions {
    /// Lease time of `lPopLease(..., 0, ...)`, in milliseconds, >= 1.
    pub(crate) lease_ms: u64,
    /// Deliveries after which a record that is not acknowledged goes to the
    /// dead-letter queue (0: no limit), at most [`crate::lease::state::MAX_DELIVERIES`].
    pub(crate) max_deliveries: u64,
    /// Entries of the lease table: leases in flight at most, 1..=[`MAX_LEASES`].
    pub(crate) max_leases: u64,
    /// The dead-letter queue's id, when `has_dead_letter` is 1.
    pub(crate) dead_letter: u32,
    /// 1: rejected records (and those past the delivery limit) go to queue
    /// `dead_letter`; 0: they are dropped (counted).
    pub(crate) has_dead_letter: u32,
    /// Zero; reserved.
    pub(crate) reserved: [u64; 4],
}
const _: () = assert!(size_of::<LeaseOptions>() == 64);

/// Per-queue settings added after layout version 1, in the header's unused
/// bytes after [`Info`]. A file made before them holds zeros there, which
/// mean "as before" (and an all-zero block needs no checksum), so such files
/// open unchanged; a block that is not all zero must match its checksum.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Options {
    /// Which of the settings below are set ([`OPT_SPIN`]).
    pub(crate) flags: u64,
    /// Blocking pops spin this many microseconds before they sleep; -1: they
    /// never sleep.
    pub(crate) spin_us: i64,
    /// The durability policy, set with [`OPT_DURABLE`] (all zero without it).
    pub(crate) durable: DurableOptions,
    /// The settings of acknowledged consumption ([`OPT_LEASES`]).
    pub(crate) leases: LeaseOptions,
    /// Zero; room for later settings.
    pub(crate) reserved: [u64; 13],
    /// FNV-1a 64 of the bytes above, or 0 when they are all zero.
    pub(crate) checksum: u64,
}

#[cfg(test)]
thread_local! {
    /// Tests: an `always` queue created by this thread has no image, as
    /// the files of earlier versions (synced with `msync` in place).
    pub(crate) static LEGACY_ALWAYS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Does this thread make `always` queues without an image (tests only)?
#[cfg(test)]
fn legacy_always() -> bool {
    LEGACY_ALWAYS.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn legacy_always() -> bool {
    false
}

impl Options {
    /// The options of a new queue.
    pub(crate) fn new(spec: &Spec) -> Options {
        let mut o = Options::default();
        if let Some(us) = spec.spin_us {
            o.flags |= OPT_SPIN;
            o.spin_us = us;
        }
        if let Some(d) = spec.durability {
            o.flags |= OPT_DURABLE;
            o.durable = match d {
                Durability::Always => {
                    // Not with leases: such a queue's live part stays in its
                    // file (its lease table is persisted in place), and each
                    // sync would then be two device flushes, the table's and
                    // the image's, where syncing the file in place is one
                    // (lease+ack 2.0 / 5.5 / 10.3 K/s at 1 / 4 / 10 threads
                    // with an image, 3.5 / 8.3 / 17.5 K/s in place).
                    if spec.leases.is_none() && !legacy_always() {
                        o.flags |= OPT_IMAGE;
                    }
                    DurableOptions { policy: POLICY_ALWAYS, ..Default::default() }
                }
                Durability::Interval(ms) => {
                    o.flags |= OPT_IMAGE;
                    DurableOptions { policy: POLICY_INTERVAL, interval_ms: u64::from(ms), ..Default::default() }
                }
            };
        }
        if let Some(l) = &spec.leases {
            o.flags |= OPT_LEASES;
            o.leases = LeaseOptions {
                lease_ms: l.lease_ms,
                max_deliveries: u64::from(l.max_deliveries),
                max_leases: l.max_leases,
                dead_letter: l.dead_letter.unwrap_or(0),
                has_dead_letter: u32::from(l.dead_letter.is_some()),
                reserved: [0; 4],
            };
        }
        o.checksum = o.compute_checksum();
        o
    }

    /// The options in the header bytes `raw` (from offset 0 of the file).
    pub(crate) fn from_header(raw: &[u8]) -> Option<Options> {
        let bytes = raw.get(OPTIONS_OFFSET..OPTIONS_OFFSET + size_of::<Options>())?;
        // SAFETY: Options is plain integers: any bytes are a value, and
        // `bytes` holds size_of::<Options>() of them.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Options>()) })
    }

    /// The block's bytes, as written to the file at [`OPTIONS_OFFSET`].
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: Options is repr(C) u64s and i64s, without padding.
        unsafe { std::slice::from_raw_parts((self as *const Options).cast::<u8>(), size_of::<Options>()) }
    }

    fn compute_checksum(&self) -> u64 {
        let body = &self.as_bytes()[..offset_of!(Options, checksum)];
        if body.iter().all(|&b| b == 0) {
            return 0;
        }
        fnv1a(body)
    }

    /// Checks the block: its checksum, no unknown flag, values in range.
    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |what: String| Err(Error::new(SHM_ERR_INVAL, what));
        if self.checksum != self.compute_checksum() {
            return bad("header options checksum mismatch: the header was modified or corrupted".into());
        }
        let unknown = self.durable.reserved.iter().chain(&self.reserved).any(|&r| r != 0)
            || (self.flags & OPT_LEASES == 0 && self.leases != LeaseOptions::default());
        if self.flags & !(OPT_SPIN | OPT_DURABLE | OPT_LEASES | OPT_IMAGE) != 0 || unknown {
            return Err(Error::new(VER_NOT_MATCH, "queue file has options this library does not know"));
        }
        if self.flags & OPT_SPIN != 0 && self.spin_us < -1 {
            return bad(format!("spin time {} us out of range", self.spin_us));
        }
        if self.flags & OPT_LEASES != 0 {
            let l = &self.leases;
            if !(1..=MAX_LEASE_MS).contains(&l.lease_ms)
                || !(1..=MAX_LEASES).contains(&l.max_leases)
                || l.max_deliveries > u64::from(crate::lease::state::MAX_DELIVERIES)
                || l.has_dead_letter > 1
                || l.reserved != [0; 4]
            {
                return bad(format!("lease settings out of range: {l:?}"));
            }
        }
        if self.flags & OPT_IMAGE != 0 && self.flags & OPT_DURABLE == 0 {
            return bad("a slot image without the interval policy".into());
        }
        let d = &self.durable;
        match (self.flags & OPT_DURABLE != 0, d.policy) {
            (false, _) if d.policy != 0 || d.interval_ms != 0 => {
                bad("durability settings without the durable flag".into())
            }
            (false, _) => Ok(()),
            (true, POLICY_ALWAYS) if d.interval_ms == 0 => Ok(()),
            (true, POLICY_INTERVAL) if (1..=MAX_INTERVAL_MS).contains(&d.interval_ms) => Ok(()),
            (true, POLICY_ALWAYS | POLICY_INTERVAL) => {
                bad(format!("durable interval {} ms out of range", d.interval_ms))
            }
            (true, p) => Err(Error::new(VER_NOT_MATCH, format!("durability policy {p} unknown to this library"))),
        }
    }

    /// The durability policy of the queue, if it is durable (of a validated block).
    pub(crate) fn durability(&self) -> Option<Durability> {
        if self.flags & OPT_DURABLE == 0 {
            return None;
        }
        match self.durable.policy {
            POLICY_ALWAYS => Some(Durability::Always),
            _ => Some(Durability::Interval(u32::try_from(self.durable.interval_ms).unwrap_or(u32::MAX))),
        }
    }

    /// Does the file end with an image of the slots ([`OPT_IMAGE`])?
    pub(crate) fn image(&self) -> bool {
        self.flags & OPT_IMAGE != 0
    }

    /// The lease settings, if the queue has leases.
    pub(crate) fn leases(&self) -> Option<&LeaseOptions> {
        (self.flags & OPT_LEASES != 0).then_some(&self.leases)
    }

    /// Entries of the queue's lease table (0: no leases).
    pub(crate) fn lease_entries(&self) -> u64 {
        self.leases().map_or(0, |l| l.max_leases)
    }

    /// The spin time set for the queue, if any (-1: never sleep).
    pub(crate) fn spin_us(&self) -> Option<i64> {
        (self.flags & OPT_SPIN != 0).then_some(self.spin_us)
    }
}

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}
const _: () = assert!(size_of::<Control>() as u64 <= TABLE_OFFSET - CONTROL_OFFSET);
const _: () = assert!(DATA_OFFSET % 4096 == 0);

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
    /// 0: no sync in progress; else the pid of the process syncing.
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

/// Bytes one record slot takes in a queue file, for records of up to
/// `record_size` bytes: a 16-byte header, then the record rounded up to 8
/// bytes (320 for the seed's 304-byte record). A queue file is about
/// capacity x this.
pub fn slot_stride(record_size: u64) -> u64 {
    SLOT_HEADER_BYTES as u64 + record_size.div_ceil(8) * 8
}

/// The stride of a queue's slots: [`slot_stride`], rounded up to 16 bytes
/// for a durable queue, so that no slot header straddles two 512-byte
/// sectors (its `seq` and its checksum reach the disk together: see
/// `ring::seal`).
pub(crate) fn stride_for(record_size: u64, durable: bool) -> u64 {
    let s = slot_stride(record_size);
    if durable { s.div_ceil(16) * 16 } else { s }
}

/// Exact file size of a plain (not durable) queue with a lease table of
/// `leases` entries (0: no leases), or `None` if it overflows.
#[cfg(test)]
pub(crate) fn file_size(rows: u64, record_size: u64, leases: u64) -> Option<u64> {
    file_size_for(rows, record_size, false, false, leases)
}

/// Exact file size of a queue, durable or not, with an image of its slots
/// (`image`: see [`image_offset`]) and a lease table of `leases` entries
/// (0: none), or `None` if it overflows or the combination is not supported
/// (an image without durability).
pub(crate) fn file_size_for(rows: u64, record_size: u64, durable: bool, image: bool, leases: u64) -> Option<u64> {
    let slots_end = rows.checked_mul(stride_for(record_size, durable))?.checked_add(DATA_OFFSET)?;
    if image {
        let slots = page_up(rows.checked_mul(stride_for(record_size, true))?)?;
        return if durable {
            image_offset(rows, record_size, leases)?.checked_add(IMAGE_MARKS_BYTES + slots)
        } else {
            None
        };
    }
    if leases == 0 {
        return Some(slots_end);
    }
    lease_table_offset(rows, record_size, durable)?.checked_add(crate::lease::table::table_bytes(leases, record_size)?)
}

impl Spec {
    /// The size of the file this queue needs, or `None` if it overflows.
    pub fn file_size(&self) -> Option<u64> {
        file_size_for(
            self.rows,
            self.record_size,
            self.durability.is_some(),
            // An `interval` or `always` queue has an image (in tests an
            // `always` queue may be made without, as earlier versions made them).
            Options::new(self).image(),
            self.leases.as_ref().map_or(0, |l| l.max_leases),
        )
    }
}

/// Bytes of the image's first part, the copy of the control page that holds
/// the consumed watermark (`Control::marks`).
pub(crate) const IMAGE_MARKS_BYTES: u64 = 4096;

/// `n` rounded up to a multiple of 4096.
fn page_up(n: u64) -> Option<u64> {
    n.checked_add(4095).map(|e| e / 4096 * 4096)
}

/// File offset of the image of a queue with one ([`OPT_IMAGE`]), after
/// its slots on a page boundary: a copy of the page of the control block
/// that holds the watermark ([`IMAGE_MARKS_BYTES`]), then a copy of the
/// slots as they lie from [`DATA_OFFSET`]. Syncs write it with direct I/O
/// from the live slots, so that the live pages are never written back by
/// the page cache for durability (see `crate::durable`); only recovery
/// after a machine crash reads it. A queue with leases (`leases` entries,
/// 0: none) keeps its lease table between the slots and the image; the
/// table is synced in place (see `crate::durable::image`).
pub(crate) fn image_offset(rows: u64, record_size: u64, leases: u64) -> Option<u64> {
    let slots_end = page_up(rows.checked_mul(stride_for(record_size, true))?.checked_add(DATA_OFFSET)?)?;
    if leases == 0 {
        return Some(slots_end);
    }
    slots_end.checked_add(crate::lease::table::table_bytes(leases, record_size)?)
}

/// File offset of the lease table (after the slots, on a page boundary;
/// a durable queue's slots have their own stride: see [`stride_for`]).
pub(crate) fn lease_table_offset(rows: u64, record_size: u64, durable: bool) -> Option<u64> {
    let slots_end = rows.checked_mul(stride_for(record_size, durable))?.checked_add(DATA_OFFSET)?;
    slots_end.checked_add(4095).map(|e| e / 4096 * 4096)
}

/// Copies `s` into `dst`, keeping a NUL at the end; cuts on a character boundary.
fn copy_str(dst: &mut [u8], s: &str) {
    let mut n = s.len().min(dst.len() - 1);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    dst[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// The text before the first NUL, if there is a NUL and the text is UTF-8.
fn c_str(bytes: &[u8]) -> Option<&str> {
    let end = bytes.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&bytes[..end]).ok()
}

impl Info {
    /// The header of a new queue (its geometry is assumed checked).
    pub(crate) fn new(id: u32, spec: &Spec, file_size: u64) -> Result<Info> {
        if spec.fields.len() > MAX_FIELDS {
            return Err(Error::new(
                FLD_DEF_SPILL,
                format!("{} fields are too many for a queue: at most {MAX_FIELDS}", spec.fields.len()),
            ));
        }
        let empty = FieldDesc { name: [0; FIELD_NAME_BYTES], offset: 0, len: 0, kind: 0, reserved: 0 };
        let mut fields = [empty; MAX_FIELDS];
        for (slot, f) in fields.iter_mut().zip(&spec.fields) {
            f.check(spec.record_size)?;
            copy_str(&mut slot.name, &f.name);
            slot.offset = f.offset;
            slot.len = f.len;
            slot.kind = f.kind.code();
        }
        let mut info = Info {
            magic: MAGIC,
            version: VERSION,
            info_bytes: INFO_BYTES as u32,
            control_offset: CONTROL_OFFSET,
            table_offset: TABLE_OFFSET,
            data_offset: DATA_OFFSET,
            file_size,
            record_size: spec.record_size,
            capacity: spec.rows,
            one_lap: one_lap(spec.rows),
            slot_stride: stride_for(spec.record_size, spec.durability.is_some()),
            created_ns: crate::clock::now_ns(),
            unblock_timeout_ms: spec.unblock_timeout_ms,
            id,
            mode: spec.mode,
            proc_slots: MAX_PROCS as u32,
            field_count: spec.fields.len() as u32,
            name: [0; NAME_BYTES],
            part: [0; PART_BYTES],
            fields,
            checksum: 0,
        };
        copy_str(&mut info.name, &spec.name);
        copy_str(&mut info.part, &spec.part);
        info.checksum = info.compute_checksum();
        Ok(info)
    }

    /// A header from the first bytes of a file (`None` if too few).
    pub(crate) fn from_bytes(raw: &[u8]) -> Option<Info> {
        if raw.len() < size_of::<Info>() {
            return None;
        }
        // SAFETY: Info is plain data (integers and byte arrays): any bytes
        // are a value, and `raw` holds at least size_of::<Info>() of them.
        Some(unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<Info>()) })
    }

    /// The header's bytes, as written to the file.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: Info is repr(C) plain data without padding (checked by the
        // layout test), so all its bytes are initialised.
        unsafe { std::slice::from_raw_parts((self as *const Info).cast::<u8>(), size_of::<Info>()) }
    }

    /// FNV-1a 64 of the header bytes before the checksum.
    pub(crate) fn compute_checksum(&self) -> u64 {
        fnv1a(&self.as_bytes()[..offset_of!(Info, checksum)])
    }

    /// How the process table lies in the file (of a validated header).
    pub(crate) fn table_layout(&self) -> TableLayout {
        if self.version == 1 { TableLayout::Interleaved } else { TableLayout::Split }
    }

    /// The byte range of the file that is a hole when it is new (layout
    /// version 2: the intent pages), if any.
    pub(crate) fn sparse_range(&self) -> Option<(u64, u64)> {
        (self.table_layout() == TableLayout::Split).then_some((SPARSE_START, DATA_OFFSET))
    }

    /// The queue's name.
    pub(crate) fn name(&self) -> &str {
        c_str(&self.name).unwrap_or("")
    }

    /// The partition text given at creation.
    pub(crate) fn part(&self) -> &str {
        c_str(&self.part).unwrap_or("")
    }

    /// The record layout (of a validated header: fields with unknown kinds
    /// are left out).
    pub(crate) fn fields(&self) -> Vec<Field> {
        self.fields[..(self.field_count as usize).min(MAX_FIELDS)]
            .iter()
            .filter_map(|f| {
                let name = c_str(&f.name).unwrap_or("").to_string();
                let kind = kind_of(&name, f.kind).ok()?;
                Some(Field { name, offset: f.offset, len: f.len, kind })
            })
            .collect()
    }

    /// Checks every field of a header read from a file of `file_len` bytes
    /// (expected to be queue `id`, if given), durable or not, whose options
    /// (validated) give it a lease table of `leases` entries (0: none).
    pub(crate) fn validate(
        &self,
        file_len: u64,
        id: Option<u32>,
        durable: bool,
        image: bool,
        leases: u64,
    ) -> Result<()> {
        let bad = |what: String| Err(Error::new(SHM_ERR_INVAL, what));
        if self.magic != MAGIC {
            return bad("not a tvmq queue file (bad magic)".into());
        }
        if !(OLDEST_VERSION..=VERSION).contains(&self.version) {
            return Err(Error::new(
                VER_NOT_MATCH,
                format!(
                    "queue file has layout version {}, this library reads versions {OLDEST_VERSION} to {VERSION}",
                    self.version
                ),
            ));
        }
        if self.checksum != self.compute_checksum() {
            return bad("header checksum mismatch: the header was modified or corrupted".into());
        }
        if u64::from(self.info_bytes) != INFO_BYTES
            || self.control_offset != CONTROL_OFFSET
            || self.table_offset != TABLE_OFFSET
            || self.data_offset != DATA_OFFSET
            || self.proc_slots as usize != MAX_PROCS
        {
            return bad(format!("header offsets do not match layout version {}", self.version));
        }
        if !(1..=MAX_RECORD_SIZE).contains(&self.record_size) {
            return bad(format!("record size {} out of range", self.record_size));
        }
        if !(1..=MAX_CAPACITY).contains(&self.capacity) {
            return bad(format!("capacity {} out of range", self.capacity));
        }
        if self.one_lap != one_lap(self.capacity) || self.slot_stride != stride_for(self.record_size, durable) {
            return bad("header geometry is inconsistent".into());
        }
        if file_size_for(self.capacity, self.record_size, durable, image, leases) != Some(self.file_size) {
            return bad(format!("header says {} bytes, its geometry needs another size", self.file_size));
        }
        if self.file_size != file_len {
            return bad(format!(
                "file is {file_len} bytes, its header says {} (truncated or extended)",
                self.file_size
            ));
        }
        if self.field_count as usize > MAX_FIELDS {
            return bad(format!("{} fields in header", self.field_count));
        }
        for f in &self.fields[..self.field_count as usize] {
            let name =
                c_str(&f.name).ok_or_else(|| Error::new(SHM_ERR_INVAL, "field name is not NUL-terminated UTF-8"))?;
            let kind = kind_of(name, f.kind).map_err(|e| Error::new(SHM_ERR_INVAL, e.what().to_string()))?;
            Field { name: name.to_string(), offset: f.offset, len: f.len, kind }
                .check(self.record_size)
                .map_err(|e| Error::new(SHM_ERR_INVAL, e.what().to_string()))?;
        }
        if c_str(&self.name).is_none() || c_str(&self.part).is_none() {
            return bad("queue name is not NUL-terminated UTF-8".into());
        }
        if let Some(id) = id {
            if self.id != id {
                return bad(format!("file of queue {id} holds queue {}", self.id));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::SlotHeader;

    #[test]
    fn info_has_no_padding() {
        // Sum of field sizes == struct size: every byte is covered by the checksum.
        let fields = 8 + 4 + 4 + 10 * 8 + 4 * 4 + NAME_BYTES + PART_BYTES + MAX_FIELDS * size_of::<FieldDesc>() + 8;
        assert_eq!(size_of::<Info>(), fields);
        assert_eq!(size_of::<FieldDesc>(), FIELD_NAME_BYTES + 16);
        assert_eq!(size_of::<SlotHeader>(), SLOT_HEADER_BYTES);
    }

    #[test]
    fn sizes() {
        assert_eq!(slot_stride(304), 320);
        assert_eq!(slot_stride(1), 24);
        assert_eq!(file_size(4_000_000, 304, 0), Some(DATA_OFFSET + 4_000_000 * 320));
        assert_eq!(file_size(u64::MAX, 8, 0), None);
        // With leases: the table after the slots, on a page boundary: a
        // 4 KiB control block and entries of 64 + 320 bytes.
        assert_eq!(lease_table_offset(3, 304, false), Some(DATA_OFFSET + 4096));
        assert_eq!(file_size(3, 304, 10), Some(DATA_OFFSET + 4096 + 4096 + 4096));
        assert_eq!(file_size(3, 304, 11), Some(DATA_OFFSET + 4096 + 4096 + 8192));
        assert_eq!(file_size(1 << 40, 1 << 30, 1 << 20), None);
    }

    #[test]
    fn long_names_are_cut_on_char_boundaries() {
        let mut b = [0u8; 8];
        copy_str(&mut b, "ééééé");
        assert_eq!(c_str(&b), Some("ééé"));
    }
}

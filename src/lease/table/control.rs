//! The table's control block ([`LeaseControl`]: hints, the sweeper,
//! counters, the indexes' summaries) and the table's size.

use super::super::bits::IndexWords;
use super::super::state::Entry;
use crate::ring::CachePadded;
use crate::shm::ShmSafe;
use std::sync::atomic::AtomicU64;

/// Bytes of the table's control block.
pub(crate) const CONTROL_BYTES: u64 = 4096;
/// Bytes of an entry's head.
pub(crate) const ENTRY_HEAD: u64 = 64;
const _: () = assert!(size_of::<Entry>() as u64 == ENTRY_HEAD);
const _: () = assert!(size_of::<LeaseControl>() as u64 <= CONTROL_BYTES);

/// How often the table is swept for holders that died, at least (plus a
/// millisecond per 1,024 entries, so that big tables are not scanned
/// constantly). Leases that run out are found at their deadline.
pub(crate) const SWEEP_PERIOD_NS: u64 = 10_000_000;

/// Bytes one entry takes: its head, and the record rounded up to 64 bytes.
pub(crate) fn entry_stride(record_size: u64) -> Option<u64> {
    record_size.checked_add(63).map(|r| ENTRY_HEAD + r / 64 * 64)
}

/// Bytes of a lease table of `entries` entries of records of up to
/// `record_size` bytes, rounded up to a page; `None` if it overflows.
pub(crate) fn table_bytes(entries: u64, record_size: u64) -> Option<u64> {
    let bytes = entries.checked_mul(entry_stride(record_size)?)?.checked_add(CONTROL_BYTES)?;
    bytes.checked_add(4095).map(|b| b / 4096 * 4096)
}

/// Words read by every lease call, written rarely. Instants are monotonic
/// nanoseconds; `u64::MAX`: never. Zero (a new file): due at once.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Hints {
    /// The periodic sweep (for holders that died) is due at this instant;
    /// never while no entry is in use.
    pub(crate) next_sweep_ns: AtomicU64,
    /// No lease runs out before this instant (the earliest deadline known).
    pub(crate) next_deadline_ns: AtomicU64,
    /// No record waiting for another delivery is due before this instant.
    /// These hints err early, never late, except for races that the next
    /// sweep corrects.
    pub(crate) next_ready_ns: AtomicU64,
}

/// Who sweeps.
#[repr(C)]
#[derive(Default)]
pub(crate) struct Sweeping {
    /// The sweeping process's [`Owner`] (0: nobody).
    pub(crate) sweeper: AtomicU64,
    /// When the last sweep ended (monotonic nanoseconds).
    pub(crate) last_ns: AtomicU64,
}

/// Counters of lease events (none is touched by a delivery that is
/// acknowledged in time).
#[repr(C)]
#[derive(Default)]
pub(crate) struct LeaseCounters {
    /// Records delivered again (to any consumer).
    pub(crate) redelivered: AtomicU64,
    /// Leases that ran out.
    pub(crate) expired: AtomicU64,
    /// Leases (and takings) of holders that died.
    pub(crate) orphaned: AtomicU64,
    /// Leases released by their holders.
    pub(crate) released: AtomicU64,
    /// Records moved to the dead-letter queue.
    pub(crate) dead_lettered: AtomicU64,
    /// Records rejected or past the delivery limit with no dead-letter queue: dropped.
    pub(crate) dropped: AtomicU64,
    /// Late calls refused with `LEASE_EXPIRED`.
    pub(crate) late: AtomicU64,
}

/// The control block at the start of the table.
#[repr(C)]
#[derive(Default)]
pub(crate) struct LeaseControl {
    pub(crate) hints: CachePadded<Hints>,
    pub(crate) sweeping: CachePadded<Sweeping>,
    pub(crate) counters: CachePadded<LeaseCounters>,
    /// The summaries of the free index (`LeaseTable::free`).
    pub(crate) free_index: CachePadded<IndexWords>,
    /// The summaries of the ready index (`LeaseTable::ready`).
    pub(crate) ready_index: CachePadded<IndexWords>,
}

// SAFETY: atomics and reserved integers only: any bits are a value.
unsafe impl ShmSafe for Entry {}
// SAFETY: as above.
unsafe impl ShmSafe for Hints {}
// SAFETY: as above.
unsafe impl ShmSafe for Sweeping {}
// SAFETY: as above.
unsafe impl ShmSafe for LeaseCounters {}
// SAFETY: as above.
unsafe impl ShmSafe for IndexWords {}
// SAFETY: as above.
unsafe impl ShmSafe for LeaseControl {}

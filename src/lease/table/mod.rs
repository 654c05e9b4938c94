//! The lease table of a queue file: a control block, then one entry per
//! lease the queue may have in flight (its maximum of leases), each an
//! [`Entry`] head and the record's bytes.
//!
//! What the queue does with it ([`crate::Queue::pop_lease`] and the other
//! lease calls) is built from the operations here, each a few CASes on one
//! entry's state word:
//! - [`claim`](LeaseTable::claim) a free entry, [`commit`](LeaseTable::commit)
//!   a record taken from the ring into it (before its slot is released);
//! - [`take_ready`](LeaseTable::take_ready) a record waiting to be delivered
//!   again, [`deliver`](LeaseTable::deliver) it;
//! - [`sweep`](LeaseTable::sweep): leases that ran out, and entries of
//!   holders that died, become records waiting for another delivery (or for
//!   the dead-letter queue). One process sweeps at a time, under a lock word
//!   that a dead sweeper's successor takes over.
//!
//! Hot paths touch the entry they use and a few read-mostly hint words. A
//! consumer whose own entry (the one its thread freed last) is in use
//! finds a free one through the table's free index, and records waiting
//! for another delivery through the ready index ([`super::bits`]): a few
//! loads and one read-modify-write, whatever the number of leases in
//! flight. Every whole-table scan is the sweep's, which runs at most once
//! per period (which grows with the table) for holders that died, and at
//! lease deadlines, batched for big tables (see [`LeaseTable::sweep`]), or a
//! rare event's (a recovery, `tvmq stat`).
//!
//! By concern: this file holds [`LeaseTable`] (the mapped table) and its
//! access to entries; `control` the control block and the table's size,
//! `entries` the operations of the lease calls, `hints` the read-mostly
//! words that tell them when a sweep or a waiting record is due, `sweep`
//! the sweeps, `reboot` the settling after a machine restart, `snapshot`
//! the copy for inspection.

mod control;
mod entries;
mod hints;
mod reboot;
mod snapshot;
mod sweep;

pub(crate) use control::*;

use super::bits::Index;
use super::state::Entry;
use crate::shm::{SharedMap, SharedRef};

/// A queue file's lease table, mapped.
pub(crate) struct LeaseTable {
    control: SharedRef<LeaseControl>,
    /// Entry 0; `count * stride` bytes from here lie in the mapping that
    /// `control` keeps alive (checked by `new`).
    entries: *mut u8,
    stride: usize,
    count: usize,
    record_size: usize,
    /// Durable queues: the key their saved records are sealed under (see
    /// `Entry::check`).
    seal: Option<u64>,
    /// The free entries (a hint: see `lease::bits`).
    free: Index,
    /// The entries whose record waits for another delivery (a hint).
    ready: Index,
    /// [`period`](Self::period), worked out once (it is read by every lease).
    period_ns: u64,
}

// SAFETY: the pointer leads into a shared mapping that `control` keeps
// alive; the entries' heads are atomics, and record bytes are only written
// by the participant holding the entry exclusively (the state machine).
unsafe impl Send for LeaseTable {}
// SAFETY: as above.
unsafe impl Sync for LeaseTable {}

impl LeaseTable {
    /// The table at `offset` in `map`: `count` entries for records of up to
    /// `record_size` bytes. `None` if it does not fit in the mapping.
    pub(crate) fn new(map: &SharedMap, offset: usize, count: usize, record_size: usize) -> Option<LeaseTable> {
        let control = map.view::<LeaseControl>(offset)?;
        let stride = usize::try_from(entry_stride(record_size as u64)?).ok()?;
        let start = offset.checked_add(CONTROL_BYTES as usize)?;
        if count == 0 || !map.fits(start, count.checked_mul(stride)?, align_of::<Entry>()) {
            return None;
        }
        // SAFETY: `start` is inside the mapping (checked just above).
        let entries = unsafe { map.base().add(start) };
        if count > super::MAX_ENTRIES as usize {
            return None;
        }
        // SAFETY: the entries and the control block lie in the mapping,
        // which `control` keeps alive as long as the table; 64 | stride.
        let (free, ready) = unsafe {
            (
                Index::new(entries, stride, count, 0, &control.free_index.0, true),
                Index::new(entries, stride, count, 1, &control.ready_index.0, false),
            )
        };
        let period_ns = SWEEP_PERIOD_NS + (count as u64 / 1024) * 1_000_000;
        Some(LeaseTable { control, entries, stride, count, record_size, seal: None, free, ready, period_ns })
    }

    /// The table of a durable queue: saved records are sealed under `key`.
    pub(crate) fn sealed(self, key: u64) -> LeaseTable {
        LeaseTable { seal: Some(key), ..self }
    }

    /// Entries (the maximum of leases in flight).
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// The control block.
    #[inline]
    pub(crate) fn control(&self) -> &LeaseControl {
        &self.control
    }

    /// Entry `i`'s head.
    ///
    /// # Panics
    /// If `i` is not below [`len`](Self::len).
    #[inline]
    pub(crate) fn entry(&self, i: usize) -> &Entry {
        assert!(i < self.count, "lease entry out of range");
        // SAFETY: i < count, so the head lies in the mapping (checked by
        // `new`), aligned: the stride is a multiple of 64.
        unsafe { &*self.entries.add(i * self.stride).cast::<Entry>() }
    }

    /// The start of entry `i`'s record bytes (`record_size` of them).
    fn data(&self, i: usize) -> *mut u8 {
        assert!(i < self.count, "lease entry out of range");
        // SAFETY: in bounds as in `entry`; the stride leaves `record_size`
        // bytes after the head.
        unsafe { self.entries.add(i * self.stride + ENTRY_HEAD as usize) }
    }
}

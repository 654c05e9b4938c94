//! Acknowledged consumption: a record taken with a lease stays its
//! consumer's until it is acknowledged, released, rejected, or the lease runs
//! out, and is then delivered again (see `docs/leases.md`).
//!
//! A leased record leaves the ring at once (its slot is released, so a slow
//! consumer never holds producers back) for an entry of the queue file's
//! lease table, which keeps the record, its deadline, its delivery count and
//! its holder. [`state`] is the entry's state machine (model-checked with the
//! ring under loom); [`table`] is the table in the file: claiming entries,
//! committing records, taking them up again, the sweep that finds leases
//! that ran out and holders that died; [`bits`] indexes its free entries and
//! its waiting records, so that no lease call scans the table.

#[cfg(not(loom))]
pub(crate) mod bits;
pub(crate) mod state;
#[cfg(not(loom))]
pub(crate) mod table;

/// Most entries a lease table may have (`spec::MAX_LEASES` is this figure):
/// the indexes of `bits` are sized for it.
pub(crate) const MAX_ENTRIES: u64 = 1 << 20;

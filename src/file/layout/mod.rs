//! The layout of a queue file (versions 1 and 2) and the validation of its
//! header. No I/O here: the bytes come from
//! [`super::map`] and [`super::create`].
//!
//! | offset | size | content |
//! |---|---|---|
//! | 0 | 4 KiB | [`Header`]: magic, version, geometry, name, fields, checksum (immutable) |
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
//!
//! By part: `offsets` (where the parts lie), `header` ([`Header`]),
//! `options` ([`Options`], and the size of the file a `Spec` needs),
//! `control` ([`Control`]), `geometry` (strides, the lease table's and the
//! image's offsets, file sizes), `fnv` (the checksum).

mod control;
mod fnv;
mod geometry;
mod header;
mod offsets;
mod options;

pub(crate) use control::*;
pub(crate) use fnv::fnv1a;
#[cfg(test)]
pub(crate) use geometry::file_size;
pub use geometry::slot_stride;
pub(crate) use geometry::{IMAGE_MARKS_BYTES, image_offset, lease_table_offset, stride_for};
pub(crate) use header::*;
pub(crate) use offsets::*;
pub(crate) use options::*;

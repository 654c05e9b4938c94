//! Where the parts of a queue file lie (see the table of `layout`).

use crate::registry::{HEADS_BYTES, TABLE_BYTES};

/// Bytes reserved for [`Header`].
pub(crate) const HEADER_BYTES: u64 = 4096;
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
const _: () = assert!(DATA_OFFSET % 4096 == 0);

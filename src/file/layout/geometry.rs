//! The geometry of a queue file: the slots' stride, the offsets of the
//! lease table and of the image, and the file's exact size.

use super::offsets::DATA_OFFSET;
use crate::ring::SLOT_HEADER_BYTES;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}

//! The header at offset 0 of a queue file ([`Header`]): magic, version,
//! geometry, name, record layout and checksum, written once at creation
//! and checked on every open.

use super::fnv::fnv1a;
use super::geometry::{file_size_for, stride_for};
use super::offsets::{CONTROL_OFFSET, DATA_OFFSET, HEADER_BYTES, SPARSE_START, TABLE_OFFSET};
use crate::error::*;
use crate::registry::{MAX_PROCS, TableLayout};
use crate::ring::{MAX_CAPACITY, one_lap};
use crate::schema::{Field, MAX_FIELD_NAME, MAX_FIELDS, kind_of};
use crate::spec::{MAX_NAME, MAX_PART, MAX_RECORD_SIZE, Spec};
use std::mem::offset_of;

/// First bytes of every queue file.
pub(crate) const MAGIC: [u8; 8] = *b"TVMQUEUE";
/// Layout version this library writes.
pub(crate) const VERSION: u32 = 2;
/// The oldest layout version this library reads (1: the process table's
/// entries interleaved with their intent words).
pub(crate) const OLDEST_VERSION: u32 = 1;
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
pub(crate) struct Header {
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

impl Header {
    /// The header of a new queue (its geometry is assumed checked).
    pub(crate) fn new(id: u32, spec: &Spec, file_size: u64) -> Result<Header> {
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
        let mut info = Header {
            magic: MAGIC,
            version: VERSION,
            info_bytes: HEADER_BYTES as u32,
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
    pub(crate) fn from_bytes(raw: &[u8]) -> Option<Header> {
        if raw.len() < size_of::<Header>() {
            return None;
        }
        // SAFETY: Header is plain data (integers and byte arrays): any bytes
        // are a value, and `raw` holds at least size_of::<Header>() of them.
        Some(unsafe { std::ptr::read_unaligned(raw.as_ptr().cast::<Header>()) })
    }

    /// The header's bytes, as written to the file.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        // SAFETY: Header is repr(C) plain data without padding (checked by the
        // layout test), so all its bytes are initialised.
        unsafe { std::slice::from_raw_parts((self as *const Header).cast::<u8>(), size_of::<Header>()) }
    }

    /// FNV-1a 64 of the header bytes before the checksum.
    pub(crate) fn compute_checksum(&self) -> u64 {
        fnv1a(&self.as_bytes()[..offset_of!(Header, checksum)])
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

    /// The byte ranges of a new file that are allocated (and, on tmpfs,
    /// cleared) when it is made: all but its hole ([`Header::sparse_range`]).
    pub(crate) fn allocated_ranges(&self) -> Vec<(u64, u64)> {
        match self.sparse_range() {
            Some((start, end)) => {
                [(0, start.min(self.file_size)), (end, self.file_size)].into_iter().filter(|(a, b)| a < b).collect()
            }
            None => vec![(0, self.file_size)],
        }
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
        if u64::from(self.info_bytes) != HEADER_BYTES
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
    use crate::ring::{SLOT_HEADER_BYTES, SlotHeader};

    #[test]
    fn info_has_no_padding() {
        // Sum of field sizes == struct size: every byte is covered by the checksum.
        let fields = 8 + 4 + 4 + 10 * 8 + 4 * 4 + NAME_BYTES + PART_BYTES + MAX_FIELDS * size_of::<FieldDesc>() + 8;
        assert_eq!(size_of::<Header>(), fields);
        assert_eq!(size_of::<FieldDesc>(), FIELD_NAME_BYTES + 16);
        assert_eq!(size_of::<SlotHeader>(), SLOT_HEADER_BYTES);
    }

    #[test]
    fn long_names_are_cut_on_char_boundaries() {
        let mut b = [0u8; 8];
        copy_str(&mut b, "ééééé");
        assert_eq!(c_str(&b), Some("ééé"));
    }
}

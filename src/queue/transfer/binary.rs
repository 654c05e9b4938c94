//! The binary export format (see `transfer`): its header, its records,
//! and its import, numbers turned around for an export of the other byte
//! order.

use super::batch::Batched;
use super::{bad_file, io_error};
use crate::error::*;
use crate::queue::Queue;
use crate::schema::{Field, FieldKind};
use std::io::{BufRead, Read, Write};

/// First bytes of a binary export.
pub(super) const MAGIC: &[u8; 8] = b"TVMQDUMP";
/// The format version written: 2 (1 had no byte order).
const VERSION: u32 = 2;
/// The byte order field: the records' numbers are little-endian.
const LITTLE_ENDIAN: u32 = 1;
/// The byte order field: the records' numbers are big-endian.
const BIG_ENDIAN: u32 = 2;
/// This machine's byte order, as the byte order field names it.
const NATIVE: u32 = if cfg!(target_endian = "big") { BIG_ENDIAN } else { LITTLE_ENDIAN };

/// Writes the header of queue `q`'s export.
pub(super) fn write_header(q: &Queue, w: &mut impl Write) -> Result<()> {
    let mut h = Vec::new();
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&VERSION.to_le_bytes());
    h.extend_from_slice(&NATIVE.to_le_bytes());
    h.extend_from_slice(&(q.record_size() as u64).to_le_bytes());
    h.extend_from_slice(&q.capacity().to_le_bytes());
    let fields = &q.info().fields;
    h.extend_from_slice(&(fields.len() as u32).to_le_bytes());
    for f in fields {
        h.push(f.name.len() as u8);
        h.extend_from_slice(f.name.as_bytes());
        for v in [f.offset, f.len, f.kind.code()] {
            h.extend_from_slice(&v.to_le_bytes());
        }
    }
    w.write_all(&h).map_err(|e| io_error("writing the export", &e))
}

/// Writes one record: its length, its bytes.
pub(super) fn write_record(w: &mut impl Write, rec: &[u8]) -> std::io::Result<()> {
    w.write_all(&(rec.len() as u32).to_le_bytes())?;
    w.write_all(rec)
}

/// Writes the end: a length of 0, the number of records written.
pub(super) fn write_end(w: &mut impl Write, n: u64) -> std::io::Result<()> {
    w.write_all(&0u32.to_le_bytes())?;
    w.write_all(&n.to_le_bytes())
}

/// Pushes the records of a binary export (through `pushes`, into its
/// queue), counting them in `n`.
pub(super) fn import(pushes: &mut Batched<'_>, r: &mut impl BufRead, n: &mut u64) -> Result<()> {
    let q = pushes.queue();
    let mut magic = [0u8; 8];
    read_exact(r, &mut magic)?;
    let version = read_u32(r)?;
    let order = match version {
        1 => NATIVE,
        VERSION => read_u32(r)?,
        _ => {
            return Err(Error::new(
                VER_NOT_MATCH,
                format!("export format version {version}: this tvmq reads 1 and {VERSION}"),
            ));
        }
    };
    if order != LITTLE_ENDIAN && order != BIG_ENDIAN {
        return Err(bad_file(format!("byte order {order} in its header")));
    }
    let size = read_u64(r)?;
    let _capacity = read_u64(r)?;
    if size > q.record_size() as u64 {
        return Err(Error::new(
            RECD_TOO_LONG,
            format!("the export holds records of up to {size} bytes; queue {} takes {}", q.id(), q.record_size()),
        ));
    }
    let nfields = read_u32(r)?;
    if nfields as usize > crate::schema::MAX_FIELDS {
        return Err(bad_file(format!("{nfields} fields in its header")));
    }
    let mut fields = Vec::with_capacity(nfields as usize);
    for _ in 0..nfields {
        let mut len = [0u8; 1];
        read_exact(r, &mut len)?;
        let mut name = vec![0u8; usize::from(len[0])];
        read_exact(r, &mut name)?;
        let (offset, len, kind) = (read_u32(r)?, read_u32(r)?, read_u32(r)?);
        // Only the kinds matter here (which bytes hold numbers); a field
        // of an unknown kind is not one to convert.
        if let Some(kind) = FieldKind::from_code(kind) {
            fields.push(Field { name: String::from_utf8_lossy(&name).into_owned(), offset, len, kind });
        }
    }
    let swap = order != NATIVE;
    if swap && fields.is_empty() {
        return Err(Error::new(
            VER_NOT_MATCH,
            "the export's records are in the other byte order and it has no field list to convert them by",
        ));
    }
    let mut rec = vec![0u8; q.record_size()];
    loop {
        let len = read_u32(r)? as usize;
        if len == 0 {
            let count = read_u64(r)?;
            if count != *n {
                return Err(bad_file(format!("it ends saying {count} records; {n} were read")));
            }
            return Ok(());
        }
        if len > size as usize {
            return Err(bad_file(format!("record {} is {len} bytes long, above its record size {size}", *n + 1)));
        }
        read_exact(r, &mut rec[..len])?;
        if swap {
            for f in &fields {
                f.swap_byte_order(&mut rec[..len]);
            }
        }
        pushes.push(&rec[..len])?;
        *n += 1;
    }
}

pub(super) fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<()> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => bad_file("cut short"),
        _ => io_error("reading the export", &e),
    })
}

pub(super) fn read_u32(r: &mut impl Read) -> Result<u32> {
    let mut b = [0u8; 4];
    read_exact(r, &mut b)?;
    Ok(u32::from_le_bytes(b))
}

pub(super) fn read_u64(r: &mut impl Read) -> Result<u64> {
    let mut b = [0u8; 8];
    read_exact(r, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

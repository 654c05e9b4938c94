//! Emptying a queue ([`Queue::truncate`]) and copying its records to and
//! from a file ([`Queue::export`], [`Queue::import`]), for lTruncate,
//! lExportFile, lImportFile, lDumpTable and `tvmq export` / `tvmq import`.
//!
//! # Export formats
//! **Binary** (any queue; byte for byte): the magic `TVMQDUMP`, then
//! little-endian numbers: the format version (u32, 2), the byte order of
//! the numbers in its records (u32: 1 little-endian, 2 big-endian: the
//! exporting machine's, as its C programs wrote their structs), the
//! queue's record size (u64) and capacity (u64), its field count (u32) and
//! each field (name length u8, name, offset u32, length u32, kind u32);
//! then each record as its length (u32, 1 to the record size) and its
//! bytes; then a length of 0 and the number of records (u64), which an
//! import checks. An import on a machine of the other byte order turns
//! each `FIELD_LONG` and `FIELD_DOUB` field of 2, 4 or 8 bytes around, by
//! the export's field list (records without one cannot be converted: it
//! refuses them). Version 1, without the byte order, is read as written by
//! a machine of this one's order (byte for byte, as before).
//!
//! **Text** (queues with a field list, as STVM writes them): one line per
//! record, its fields in the list's order separated by the separator:
//! `FIELD_CHAR` as its bytes up to the first NUL, `FIELD_LONG` as a signed
//! decimal (1, 2, 4 or 8 bytes), `FIELD_DOUB` as a decimal that reads back
//! to the same value (4 or 8 bytes). In a char field, a backslash, a
//! control byte and any byte of the separator are written `\xHH`, so that a
//! line always splits back into its fields. Bytes outside the fields (padding)
//! are not written: an import zero-fills them. Text has no byte order:
//! numbers are read from and written to records in this machine's.
//!
//! By concern: `truncate` (emptying), `binary` and `text` (the formats),
//! `batch` (an import's pushes, synced per batch on an `always` queue);
//! this file the calls that choose between them.

mod batch;
mod binary;
#[cfg(test)]
mod tests;
mod text;
mod truncate;

use super::Queue;
use crate::error::*;
use crate::ring::SnapshotError;
use std::io::{BufRead, Write};

/// How [`Queue::export`] writes records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportFormat {
    /// Byte for byte, with a header naming the queue's geometry (any queue).
    Binary,
    /// One text line per record, its fields separated by this (non-empty)
    /// separator: only for a queue with a field list.
    Text(String),
}

/// A failed read or write of the export file: `SVR_EXCEPTION`.
fn io_error(what: &str, e: &std::io::Error) -> Error {
    Error::new(SVR_EXCEPTION, format!("{what}: {e}"))
}

/// Not an export this version reads: `SHM_ERR_INVAL`.
fn bad_file(why: impl Into<String>) -> Error {
    Error::new(SHM_ERR_INVAL, format!("not a tvmq export: {}", why.into()))
}

impl Queue {
    /// Writes a copy of the records queued at one instant to `w`, oldest
    /// first, in `format`, without taking any (see the module's formats).
    /// Producers and consumers may go on meanwhile: the copy is still that
    /// of the instant, unless producers write a whole lap of the ring over
    /// records not yet copied (consumers ahead of the export on a nearly
    /// full queue): then it fails with `MQUE_WAIT_ERR`, and what was written
    /// is incomplete. Memory: one record and the writer's buffer. On a
    /// queue with leases, records leased or waiting to be delivered again
    /// are not in the ring and not exported. Returns the records written.
    /// Errors: `FIELD_NOT_DEF` (text for a queue without fields),
    /// `CONDIT_IS_NIL` (a separator empty, or with a letter, digit, `+`,
    /// `-`, `.`, backslash or line end, which a field's text can hold), `IDX_DATA_MISM` (a field of a
    /// length text cannot show), `MQUE_WAIT_ERR`, `SVR_EXCEPTION` (writing
    /// failed), `SHM_ERR_INVAL` (corrupted queue).
    pub fn export(&self, w: &mut impl Write, format: &ExportFormat) -> Result<u64> {
        let fields = &self.info().fields;
        match format {
            ExportFormat::Binary => binary::write_header(self, w)?,
            ExportFormat::Text(sep) => {
                if fields.is_empty() {
                    return Err(Error::new(
                        FIELD_NOT_DEF,
                        format!("queue {} has no field list: export it in binary form", self.id()),
                    ));
                }
                text::check_sep(sep)?;
                for f in fields {
                    text::text_width(f)?;
                }
            }
        }
        let mut line = Vec::new();
        let written = self.ring.snapshot(self.unblock_timeout(), |rec| match format {
            ExportFormat::Binary => binary::write_record(w, rec),
            ExportFormat::Text(sep) => {
                line.clear();
                text::format_line(&mut line, fields, rec, sep.as_bytes());
                w.write_all(&line)
            }
        });
        let n = match written {
            Ok(Ok(n)) => n,
            Ok(Err(e)) => return Err(io_error("writing the export", &e)),
            Err(SnapshotError::Lapped) => {
                return Err(Error::new(
                    MQUE_WAIT_ERR,
                    format!(
                        "queue {}: producers filled a whole lap over records not yet exported (consumers \
                         ran ahead of the export on a nearly full queue): the copy would not be that of \
                         one instant; export again, or with the consumers paused",
                        self.id()
                    ),
                ));
            }
            Err(SnapshotError::Stalled) => {
                return Err(Error::new(
                    MQUE_WAIT_ERR,
                    format!("queue {}: a record stayed unpublished past the unblock timeout", self.id()),
                ));
            }
            Err(SnapshotError::Corrupt) => return Err(self.ring_error(crate::ring::RingError::Corrupt)),
        };
        if *format == ExportFormat::Binary {
            binary::write_end(w, n).map_err(|e| io_error("writing the export", &e))?;
        }
        w.flush().map_err(|e| io_error("writing the export", &e))?;
        Ok(n)
    }

    /// Pushes the records of an export read from `r`: the binary form
    /// (recognised by its magic) or, otherwise, text lines whose fields are
    /// separated by `sep` (the queue must have a field list). Records are
    /// appended after those queued. Returns how many went in, and the error
    /// that stopped it.
    ///
    /// Errors (alongside the count): `DATA_SPC_FULL` when the queue filled
    /// (the records before stay pushed), `RECD_TOO_LONG` (a binary export of a queue with
    /// longer records: checked before any push), `SHM_ERR_INVAL` (not an
    /// export, or cut short: the records before the damage are pushed),
    /// `FIELD_NOT_DEF`, `FLD_NOT_EXIST` / `IDX_DATA_MISM` (a text line that
    /// does not fit the field list, with its number), `VER_NOT_MATCH` (a
    /// format version this library does not read, or a binary export of the
    /// other byte order without a field list to convert its records by),
    /// `SVR_EXCEPTION` (reading failed), and those of [`push`](Self::push).
    /// A binary export of the other byte order has its numbers turned
    /// around (see the module's formats). On an `always` queue the pushes
    /// share one sync per 1,024 records (and one at the end), not one
    /// each: the count returned is on stable storage, unless a sync failed
    /// (`SYNC_FAILED`, reported before any other error: the records are in
    /// the queue, not known to be on stable storage).
    pub fn import(&self, r: &mut impl BufRead, sep: &str) -> (u64, Option<Error>) {
        let binary = match r.fill_buf() {
            Ok(b) => b.starts_with(binary::MAGIC),
            Err(e) => return (0, Some(io_error("reading the export", &e))),
        };
        let mut n = 0;
        let mut pushes = batch::Batched::new(self);
        let res =
            if binary { binary::import(&mut pushes, r, &mut n) } else { text::import(&mut pushes, r, sep, &mut n) };
        let synced = pushes.sync();
        (n, synced.err().or(res.err()))
    }
}

//! Emptying a queue ([`Queue::truncate`]) and copying its records to and
//! from a file ([`Queue::export`], [`Queue::import`]), for lTruncate,
//! lExportFile, lImportFile, lDumpTable and `tvmq export` / `tvmq import`.
//!
//! # Export formats
//! **Binary** (any queue; byte for byte): the magic `TVMQDUMP`, then
//! little-endian numbers: the format version (u32, 1), the queue's record
//! size (u64) and capacity (u64), its field count (u32) and each field (name
//! length u8, name, offset u32, length u32, kind u32); then each record as
//! its length (u32, 1 to the record size) and its bytes; then a length of 0
//! and the number of records (u64), which an import checks.
//!
//! **Text** (queues with a field list, as STVM writes them): one line per
//! record, its fields in the list's order separated by the separator:
//! `FIELD_CHAR` as its bytes up to the first NUL, `FIELD_LONG` as a signed
//! decimal (1, 2, 4 or 8 bytes), `FIELD_DOUB` as a decimal that reads back
//! to the same value (4 or 8 bytes). In a char field, a backslash, a
//! control byte and any byte of the separator are written `\xHH`, so that a
//! line always splits back into its fields. Bytes outside the fields (padding)
//! are not written: an import zero-fills them.

use super::Queue;
use crate::error::*;
use crate::ring::SnapshotError;
use crate::schema::{Field, FieldKind};
use std::io::{BufRead, Read, Write};

const MAGIC: &[u8; 8] = b"TVMQDUMP";
const VERSION: u32 = 1;

/// How [`Queue::export`] writes records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportFormat {
    /// Byte for byte, with a header naming the queue's geometry (any queue).
    Binary,
    /// One text line per record, its fields separated by this (non-empty)
    /// separator: only for a queue with a field list.
    Text(String),
}

/// Checks a text separator: not empty, and made of no byte a field's text
/// can hold unescaped (letters, digits, `+`, `-`, `.`, a backslash, line
/// ends), so that every line splits back into its fields.
fn check_sep(sep: &str) -> Result<()> {
    if sep.is_empty() {
        return Err(Error::new(CONDIT_IS_NIL, "an empty separator"));
    }
    if let Some(c) = sep.bytes().find(|c| c.is_ascii_alphanumeric() || b"+-.\\\n\r".contains(c)) {
        return Err(Error::new(
            CONDIT_IS_NIL,
            format!(
                "separator {sep:?}: {:?} can be part of a field's text (use punctuation such as | , ; or a tab)",
                char::from(c)
            ),
        ));
    }
    Ok(())
}

fn io_error(what: &str, e: &std::io::Error) -> Error {
    Error::new(SVR_EXCEPTION, format!("{what}: {e}"))
}

fn bad_file(why: impl Into<String>) -> Error {
    Error::new(SHM_ERR_INVAL, format!("not a tvmq export: {}", why.into()))
}

impl Queue {
    /// Removes the records queued when the call starts (the depth read
    /// then), by popping them: other consumers may take some meanwhile and
    /// producers go on pushing (records pushed after the start may go too
    /// when others took some of the first ones, never more than that count).
    /// Every record goes exactly once, to a consumer or to nowhere; no
    /// attached process notices anything but the records gone, and nobody
    /// is woken. On a queue with leases, the records waiting to be
    /// delivered again go too; those leased by consumers stay theirs.
    /// Returns how many records it removed.
    pub fn truncate(&self) -> Result<u64> {
        let mut left = self.depth();
        if let Some(s) = self.lease_stats() {
            left += s.waiting;
        }
        self.discard(left)
    }

    /// Pops and discards up to `n` records (fewer when the queue runs
    /// empty), 64 with each claim, as consumers would take them: records
    /// waiting to be delivered again come first on a queue with leases. On
    /// a durable queue each batch of 64 makes a sync, unless the caller
    /// puts them off ([`defer_syncs`](Self::defer_syncs)). Returns how many
    /// records it removed; an error other than running empty stops it.
    pub fn discard(&self, n: u64) -> Result<u64> {
        let mut left = n;
        let each = self.record_size();
        let mut scratch = vec![0u8; each * 64];
        let mut lens = [0usize; 64];
        let mut removed = 0;
        while left > 0 {
            let chunk = left.min(64) as usize;
            let (n, err) = self.pop_into(&mut scratch[..chunk * each], each, &mut lens[..chunk], super::Wait::NoWait);
            removed += n as u64;
            left -= n as u64;
            match err {
                None => {}
                Some(e) if e.code() == NO_DATA_FOUND => break,
                Some(e) => return Err(e),
            }
        }
        Ok(removed)
    }

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
            ExportFormat::Binary => self.write_header(w)?,
            ExportFormat::Text(sep) => {
                if fields.is_empty() {
                    return Err(Error::new(
                        FIELD_NOT_DEF,
                        format!("queue {} has no field list: export it in binary form", self.id()),
                    ));
                }
                check_sep(sep)?;
                for f in fields {
                    text_width(f)?;
                }
            }
        }
        let mut line = Vec::new();
        let written = self.ring.snapshot(self.unblock_timeout(), |rec| match format {
            ExportFormat::Binary => {
                w.write_all(&(rec.len() as u32).to_le_bytes())?;
                w.write_all(rec)
            }
            ExportFormat::Text(sep) => {
                line.clear();
                format_line(&mut line, fields, rec, sep.as_bytes());
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
            w.write_all(&0u32.to_le_bytes())
                .and_then(|()| w.write_all(&n.to_le_bytes()))
                .map_err(|e| io_error("writing the export", &e))?;
        }
        w.flush().map_err(|e| io_error("writing the export", &e))?;
        Ok(n)
    }

    fn write_header(&self, w: &mut impl Write) -> Result<()> {
        let mut h = Vec::new();
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&VERSION.to_le_bytes());
        h.extend_from_slice(&(self.record_size() as u64).to_le_bytes());
        h.extend_from_slice(&self.capacity().to_le_bytes());
        let fields = &self.info().fields;
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

    /// Pushes the records of an export read from `r`: the binary form
    /// (recognised by its magic) or, otherwise, text lines whose fields are
    /// separated by `sep` (the queue must have a field list). Records are
    /// appended after those queued. Returns how many went in, and the error
    /// that stopped it: `DATA_SPC_FULL` when the queue filled (the records
    /// before stay pushed), `RECD_TOO_LONG` (a binary export of a queue with
    /// longer records: checked before any push), `SHM_ERR_INVAL` (not an
    /// export, or cut short: the records before the damage are pushed),
    /// `FIELD_NOT_DEF`, `FLD_NOT_EXIST` / `IDX_DATA_MISM` (a text line that
    /// does not fit the field list, with its number), and those of
    /// [`push`](Self::push). On an `always` queue the pushes share one sync
    /// per 1,024 records (and one at the end), not one each: the
    /// count returned is on stable storage, unless a sync failed
    /// (`SYNC_FAILED`, reported before any other error: the records are in
    /// the queue, not known to be on stable storage).
    pub fn import(&self, r: &mut impl BufRead, sep: &str) -> (u64, Option<Error>) {
        let binary = match r.fill_buf() {
            Ok(b) => b.starts_with(MAGIC),
            Err(e) => return (0, Some(io_error("reading the export", &e))),
        };
        let mut n = 0;
        let mut batch = Batched { q: self, ticket: None, pending: 0 };
        let res = if binary {
            self.import_binary(r, &mut n, &mut batch)
        } else {
            self.import_text(r, sep, &mut n, &mut batch)
        };
        let synced = batch.sync();
        (n, synced.err().or(res.err()))
    }

    fn import_binary(&self, r: &mut impl BufRead, n: &mut u64, batch: &mut Batched<'_>) -> Result<()> {
        let mut magic = [0u8; 8];
        read_exact(r, &mut magic)?;
        let version = read_u32(r)?;
        if version != VERSION {
            return Err(Error::new(
                VER_NOT_MATCH,
                format!("export format version {version}: this tvmq reads {VERSION}"),
            ));
        }
        let size = read_u64(r)?;
        let _capacity = read_u64(r)?;
        if size > self.record_size() as u64 {
            return Err(Error::new(
                RECD_TOO_LONG,
                format!(
                    "the export holds records of up to {size} bytes; queue {} takes {}",
                    self.id(),
                    self.record_size()
                ),
            ));
        }
        let nfields = read_u32(r)?;
        if nfields as usize > crate::schema::MAX_FIELDS {
            return Err(bad_file(format!("{nfields} fields in its header")));
        }
        for _ in 0..nfields {
            let mut len = [0u8; 1];
            read_exact(r, &mut len)?;
            let mut name = vec![0u8; usize::from(len[0]) + 12];
            read_exact(r, &mut name)?;
        }
        let mut rec = vec![0u8; self.record_size()];
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
            batch.push(&rec[..len])?;
            *n += 1;
        }
    }

    fn import_text(&self, r: &mut impl BufRead, sep: &str, n: &mut u64, batch: &mut Batched<'_>) -> Result<()> {
        let fields = &self.info().fields;
        if fields.is_empty() {
            return Err(Error::new(
                FIELD_NOT_DEF,
                format!("queue {} has no field list: only a binary export can be imported into it", self.id()),
            ));
        }
        check_sep(sep)?;
        let mut line = Vec::new();
        let mut rec = vec![0u8; self.record_size()];
        let mut number = 0u64;
        loop {
            line.clear();
            let got = r.read_until(b'\n', &mut line).map_err(|e| io_error("reading the export", &e))?;
            if got == 0 {
                return Ok(());
            }
            number += 1;
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.is_empty() {
                continue;
            }
            rec.fill(0);
            parse_line(&line, fields, sep.as_bytes(), &mut rec)
                .map_err(|e| Error::new(e.code(), format!("line {number}: {}", e.detail())))?;
            batch.push(&rec)?;
            *n += 1;
        }
    }
}

/// Records an import pushes into an `always` queue between two syncs.
pub(crate) const IMPORT_BATCH: u64 = 1024;

/// The pushes of an import: on an `always` queue their syncs are put off
/// ([`Queue::defer_syncs`]) and waited for once per [`IMPORT_BATCH`].
struct Batched<'a> {
    q: &'a Queue,
    /// The sync that covers the pushes since the last one (none yet: `None`).
    ticket: Option<super::SyncTicket>,
    pending: u64,
}

impl Batched<'_> {
    fn push(&mut self, rec: &[u8]) -> Result<()> {
        let (r, ticket) = self.q.defer_syncs(|q| q.push(rec));
        r?;
        self.ticket = self.ticket.max(ticket);
        self.pending += 1;
        if self.pending >= IMPORT_BATCH { self.sync() } else { Ok(()) }
    }

    /// Waits for the sync that covers the pushes so far.
    fn sync(&mut self) -> Result<()> {
        self.pending = 0;
        match self.ticket.take() {
            Some(t) => self.q.sync_ticket(t),
            None => Ok(()),
        }
    }
}

fn read_exact(r: &mut impl Read, buf: &mut [u8]) -> Result<()> {
    r.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => bad_file("cut short"),
        _ => io_error("reading the export", &e),
    })
}

fn read_u32(r: &mut impl Read) -> Result<u32> {
    let mut b = [0u8; 4];
    read_exact(r, &mut b)?;
    Ok(u32::from_le_bytes(b))
}

fn read_u64(r: &mut impl Read) -> Result<u64> {
    let mut b = [0u8; 8];
    read_exact(r, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Checks that text can show field `f` (char of any length, long of 1, 2,
/// 4 or 8 bytes, double of 4 or 8).
fn text_width(f: &Field) -> Result<()> {
    let ok = match f.kind {
        FieldKind::Char => true,
        FieldKind::Long => matches!(f.len, 1 | 2 | 4 | 8),
        FieldKind::Double => matches!(f.len, 4 | 8),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            IDX_DATA_MISM,
            format!(
                "field {:?} of kind {} is {} bytes long: text shows only 1/2/4/8-byte longs and 4/8-byte doubles",
                f.name,
                f.kind.c_name(),
                f.len
            ),
        ))
    }
}

/// The bytes of field `f` in `rec` (zeros past the record's end).
fn field_bytes(f: &Field, rec: &[u8]) -> [u8; 8] {
    let mut b = [0u8; 8];
    let start = (f.offset as usize).min(rec.len());
    let end = (f.offset as usize + f.len as usize).min(rec.len());
    b[..end - start].copy_from_slice(&rec[start..end]);
    b
}

fn format_line(out: &mut Vec<u8>, fields: &[Field], rec: &[u8], sep: &[u8]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(sep);
        }
        match f.kind {
            FieldKind::Char => {
                let start = (f.offset as usize).min(rec.len());
                let end = (f.offset as usize + f.len as usize).min(rec.len());
                for &c in rec[start..end].iter().take_while(|&&c| c != 0) {
                    if c < 0x20 || c == 0x7f || c == b'\\' || sep.contains(&c) {
                        let _ = write!(out, "\\x{c:02x}");
                    } else {
                        out.push(c);
                    }
                }
            }
            FieldKind::Long => {
                let b = field_bytes(f, rec);
                let v = match f.len {
                    1 => i64::from(b[0] as i8),
                    2 => i64::from(i16::from_ne_bytes([b[0], b[1]])),
                    4 => i64::from(i32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
                    _ => i64::from_ne_bytes(b),
                };
                let _ = write!(out, "{v}");
            }
            FieldKind::Double => {
                let b = field_bytes(f, rec);
                let _ = match f.len {
                    4 => write!(out, "{:?}", f32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
                    _ => write!(out, "{:?}", f64::from_ne_bytes(b)),
                };
            }
        }
    }
    out.push(b'\n');
}

/// Splits `line` at each `sep`.
fn split<'a>(line: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + sep.len() <= line.len() {
        if &line[i..i + sep.len()] == sep {
            parts.push(&line[start..i]);
            i += sep.len();
            start = i;
        } else {
            i += 1;
        }
    }
    parts.push(&line[start..]);
    parts
}

fn parse_line(line: &[u8], fields: &[Field], sep: &[u8], rec: &mut [u8]) -> Result<()> {
    let parts = split(line, sep);
    if parts.len() != fields.len() {
        return Err(Error::new(FLD_NOT_EXIST, format!("{} fields where the queue has {}", parts.len(), fields.len())));
    }
    for (f, part) in fields.iter().zip(parts) {
        let dst = &mut rec[f.offset as usize..(f.offset + f.len) as usize];
        let bad = |what: &str| {
            Error::new(IDX_DATA_MISM, format!("field {:?}: {:?} is not {what}", f.name, String::from_utf8_lossy(part)))
        };
        match f.kind {
            FieldKind::Char => {
                let mut text = Vec::with_capacity(part.len());
                let mut i = 0;
                while i < part.len() {
                    if part[i] == b'\\' {
                        let hex = part.get(i + 2..i + 4).filter(|_| part.get(i + 1) == Some(&b'x'));
                        let v = hex
                            .and_then(|h| std::str::from_utf8(h).ok())
                            .and_then(|h| u8::from_str_radix(h, 16).ok())
                            .ok_or_else(|| bad("text with \\xHH escapes"))?;
                        text.push(v);
                        i += 4;
                    } else {
                        text.push(part[i]);
                        i += 1;
                    }
                }
                if text.len() > dst.len() {
                    return Err(bad(&format!("at most {} bytes", dst.len())));
                }
                dst[..text.len()].copy_from_slice(&text);
            }
            FieldKind::Long => {
                let v: i64 = std::str::from_utf8(part)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| bad("an integer"))?;
                let fits = match f.len {
                    1 => i8::try_from(v).map(|x| dst.copy_from_slice(&x.to_ne_bytes())).is_ok(),
                    2 => i16::try_from(v).map(|x| dst.copy_from_slice(&x.to_ne_bytes())).is_ok(),
                    4 => i32::try_from(v).map(|x| dst.copy_from_slice(&x.to_ne_bytes())).is_ok(),
                    8 => {
                        dst.copy_from_slice(&v.to_ne_bytes());
                        true
                    }
                    _ => false,
                };
                if !fits {
                    return Err(bad(&format!("an integer of {} bytes", f.len)));
                }
            }
            FieldKind::Double => {
                let s = std::str::from_utf8(part).ok().map(str::trim).ok_or_else(|| bad("a number"))?;
                match f.len {
                    4 => dst.copy_from_slice(&s.parse::<f32>().map_err(|_| bad("a number"))?.to_ne_bytes()),
                    8 => dst.copy_from_slice(&s.parse::<f64>().map_err(|_| bad("a number"))?.to_ne_bytes()),
                    _ => return Err(bad("a 4- or 8-byte double")),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::FieldKind;

    fn fields() -> Vec<Field> {
        let f = |name: &str, offset, len, kind| Field { name: name.into(), offset, len, kind };
        vec![
            f("name", 0, 8, FieldKind::Char),
            f("n", 8, 8, FieldKind::Long),
            f("x", 16, 8, FieldKind::Double),
            f("i", 24, 4, FieldKind::Long),
            f("y", 28, 4, FieldKind::Double),
        ]
    }

    #[test]
    fn text_lines_round_trip_with_escapes() {
        let mut rec = vec![0u8; 32];
        rec[..7].copy_from_slice(b"a|b\\c\n\x01");
        rec[8..16].copy_from_slice(&(-42i64).to_ne_bytes());
        rec[16..24].copy_from_slice(&0.1f64.to_ne_bytes());
        rec[24..28].copy_from_slice(&i32::MIN.to_ne_bytes());
        rec[28..32].copy_from_slice(&1.5e-3f32.to_ne_bytes());
        let mut line = Vec::new();
        format_line(&mut line, &fields(), &rec, b"|");
        assert_eq!(line, b"a\\x7cb\\x5cc\\x0a\\x01|-42|0.1|-2147483648|0.0015\n");
        let mut back = vec![0u8; 32];
        parse_line(&line[..line.len() - 1], &fields(), b"|", &mut back).unwrap();
        assert_eq!(back, rec);
        assert_eq!(parse_line(b"a|1|2", &fields(), b"|", &mut back).unwrap_err().code(), FLD_NOT_EXIST);
        assert_eq!(parse_line(b"a|x|2|3|4", &fields(), b"|", &mut back).unwrap_err().code(), IDX_DATA_MISM);
        assert_eq!(parse_line(b"a|1|2|99999999999|4", &fields(), b"|", &mut back).unwrap_err().code(), IDX_DATA_MISM);
        assert_eq!(parse_line(b"123456789|1|2|3|4", &fields(), b"|", &mut back).unwrap_err().code(), IDX_DATA_MISM);
        assert_eq!(split(b"a::b::", b"::"), vec![&b"a"[..], b"b", b""]);
        for good in ["|", ",", "::", "\t", ";"] {
            assert!(check_sep(good).is_ok(), "{good:?}");
        }
        for bad in ["", "x", "1", "-", ".", "\\", "\n", "a|"] {
            assert_eq!(check_sep(bad).unwrap_err().code(), CONDIT_IS_NIL, "{bad:?}");
        }
    }
}

#[cfg(test)]
mod queue_tests {
    use super::*;
    use crate::queue::Wait;
    use crate::spec::Spec;
    use crate::test_support::TempDir;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    #[test]
    fn binary_round_trip_truncate_and_a_full_import() {
        let dir = TempDir::new("transfer", "binary");
        Queue::create(dir.path(), 1, &Spec::new(100, 16)).unwrap();
        Queue::create(dir.path(), 2, &Spec::new(3, 16)).unwrap();
        let q = Queue::open(dir.path(), 1).unwrap();
        for i in 0..10u8 {
            q.push(&vec![i; usize::from(i) + 1]).unwrap();
        }
        let mut file = Vec::new();
        assert_eq!(q.export(&mut file, &ExportFormat::Binary).unwrap(), 10);
        assert_eq!(q.depth(), 10, "nothing consumed");
        assert_eq!(q.export(&mut Vec::new(), &ExportFormat::Text("|".into())).unwrap_err().code(), FIELD_NOT_DEF);
        assert_eq!(q.truncate().unwrap(), 10);
        assert_eq!(q.depth(), 0);
        assert_eq!(q.import(&mut &file[..], ""), (10, None));
        let mut out = [0u8; 16];
        for i in 0..10u8 {
            let n = q.pop(&mut out, Wait::NoWait).unwrap();
            assert_eq!(&out[..n], &vec![i; usize::from(i) + 1][..]);
        }
        let small = Queue::open(dir.path(), 2).unwrap();
        let (n, stop) = small.import(&mut &file[..], "");
        assert_eq!((n, stop.map(|e| e.code())), (3, Some(DATA_SPC_FULL)));
        let cut = &file[..file.len() - 3];
        let (_, stop) = q.import(&mut &cut[..], "");
        assert_eq!(stop.map(|e| e.code()), Some(SHM_ERR_INVAL));
    }

    /// An import into an `always` queue syncs once per batch of
    /// `IMPORT_BATCH` records (and once at the end), not once per record:
    /// 3,000 records take 3 syncs; every record is in, in order.
    #[test]
    fn an_import_into_an_always_queue_syncs_per_batch() {
        let dir = crate::test_support::DiskDir::new("import-batch");
        let mut spec = Spec::new(4000, 16);
        spec.durability = Some(crate::spec::Durability::Always);
        Queue::create(dir.path(), 1, &Spec::new(4000, 16)).unwrap();
        Queue::create(dir.path(), 2, &spec).unwrap();
        let source = Queue::open(dir.path(), 1).unwrap();
        for i in 0..3000u32 {
            source.push(&i.to_le_bytes()).unwrap();
        }
        let mut file = Vec::new();
        assert_eq!(source.export(&mut file, &ExportFormat::Binary).unwrap(), 3000);
        let q = Queue::open(dir.path(), 2).unwrap();
        let before = q.durable_stats().unwrap().syncs;
        assert_eq!(q.import(&mut &file[..], ""), (3000, None));
        let syncs = q.durable_stats().unwrap().syncs - before;
        assert_eq!(syncs, 3000u64.div_ceil(IMPORT_BATCH), "{syncs} syncs for 3,000 records");
        let mut out = [0u8; 16];
        let ((), popped) = q.defer_syncs(|q| {
            for i in 0..3000u32 {
                let n = q.pop(&mut out, Wait::NoWait).unwrap();
                assert_eq!(&out[..n], &i.to_le_bytes());
            }
        });
        q.sync_ticket(popped.unwrap()).unwrap();
        drop((q, source));
        Queue::drop_queue(dir.path(), 1).unwrap();
        Queue::drop_queue(dir.path(), 2).unwrap();
    }

    /// With a consumer and a producer working throughout (paced, so that
    /// they cannot lap the export), each export is a run of consecutive
    /// records (one instant), never one with a gap.
    #[test]
    fn an_export_is_one_instant_while_a_consumer_runs() {
        let dir = TempDir::new("transfer", "instant");
        Queue::create(dir.path(), 1, &Spec::new(40_000, 8)).unwrap();
        let q = Arc::new(Queue::open(dir.path(), 1).unwrap());
        for i in 0..20_000u64 {
            q.push(&i.to_le_bytes()).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(20_000));
        let consumer = {
            let (q, stop) = (q.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut out = [0u8; 8];
                let mut want = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10 {
                        if q.pop(&mut out, Wait::NoWait).is_ok() {
                            assert_eq!(u64::from_le_bytes(out), want);
                            want += 1;
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            })
        };
        let producer = {
            let (q, stop, next) = (q.clone(), stop.clone(), next.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..10 {
                        let i = next.load(Ordering::Relaxed);
                        if q.push(&i.to_le_bytes()).is_ok() {
                            next.store(i + 1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_micros(100));
                }
            })
        };
        for _ in 0..20 {
            let mut file = Vec::new();
            let n = q.export(&mut file, &ExportFormat::Binary).unwrap();
            let mut copy = Vec::new();
            let mut r = &file[..];
            let mut magic = [0u8; 8];
            r.read_exact(&mut magic).unwrap();
            let (_, _, _, _) = (read_u32(&mut r), read_u64(&mut r), read_u64(&mut r), read_u32(&mut r));
            for _ in 0..n {
                let len = read_u32(&mut r).unwrap() as usize;
                let mut rec = [0u8; 8];
                r.read_exact(&mut rec[..len]).unwrap();
                copy.push(u64::from_le_bytes(rec));
            }
            assert!(copy.windows(2).all(|w| w[1] == w[0] + 1), "a gap in an export");
        }
        stop.store(true, Ordering::Relaxed);
        consumer.join().unwrap();
        producer.join().unwrap();
    }
}

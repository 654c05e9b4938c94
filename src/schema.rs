//! The record layout a queue may carry: named fields with an offset, a
//! length and a kind (STVM's `FIELD_CHAR`, `FIELD_LONG`, `FIELD_DOUB`),
//! stored in the queue file so that tools can show and decode records.
//! No I/O here.

use crate::error::Error;
use crate::error::{FLD_DEF_SPILL, FTYPE_NOT_DEF, Result};

/// Most fields a record layout can describe.
pub const MAX_FIELDS: usize = 64;
/// Longest field name, in bytes.
pub const MAX_FIELD_NAME: usize = 31;

/// What a field holds, numbered as STVM numbers it (the numbers are stored
/// in queue files and are the values of `FIELD_CHAR`, `FIELD_LONG` and
/// `FIELD_DOUB` in `tvm.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FieldKind {
    /// Characters (`char[n]`): a string up to its first NUL.
    Char = 1,
    /// A `long` integer (8 bytes on x86-64).
    Long = 2,
    /// A `double`.
    Double = 4,
}

impl FieldKind {
    /// The kind numbered `code`, if it is one.
    pub fn from_code(code: u32) -> Option<FieldKind> {
        match code {
            1 => Some(FieldKind::Char),
            2 => Some(FieldKind::Long),
            4 => Some(FieldKind::Double),
            _ => None,
        }
    }

    /// The kind's number.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The kind as C spells it: `char`, `long`, `double`.
    pub fn c_name(self) -> &'static str {
        match self {
            FieldKind::Char => "char",
            FieldKind::Long => "long",
            FieldKind::Double => "double",
        }
    }
}

/// One field of a record layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// 1 to [`MAX_FIELD_NAME`] bytes, no NUL.
    pub name: String,
    /// Where the field starts in the record.
    pub offset: u32,
    /// Its length in bytes (at least 1).
    pub len: u32,
    /// What it holds.
    pub kind: FieldKind,
}

impl Field {
    /// Checks the field against a record size: a name of the right length,
    /// and bytes that lie inside the record.
    ///
    /// Errors: `FLD_DEF_SPILL` (an empty or too long name, a NUL in it, or
    /// bytes outside the record).
    pub fn check(&self, record_size: u64) -> Result<()> {
        if self.name.is_empty() || self.name.len() > MAX_FIELD_NAME || self.name.contains('\0') {
            return Err(Error::new(
                FLD_DEF_SPILL,
                format!("field name {:?} must be 1 to {MAX_FIELD_NAME} bytes, without NUL", self.name),
            ));
        }
        if self.len == 0 || u64::from(self.offset) + u64::from(self.len) > record_size {
            return Err(Error::new(
                FLD_DEF_SPILL,
                format!(
                    "field {:?} (offset {}, length {}) lies outside a {record_size}-byte record",
                    self.name, self.offset, self.len
                ),
            ));
        }
        Ok(())
    }
}

/// A field's value in a record, as [`Field::value`] reads it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue<'a> {
    /// A `FIELD_CHAR` field: its bytes up to the first NUL.
    Text(&'a [u8]),
    /// A `FIELD_LONG` field of 1, 2, 4 or 8 bytes, sign-extended.
    Long(i64),
    /// A `FIELD_DOUB` field of 4 bytes (a C `float`).
    Float(f32),
    /// A `FIELD_DOUB` field of 8 bytes.
    Double(f64),
    /// A number of a length C has no such type for (a 3-byte `long`, say):
    /// its bytes.
    Bytes(&'a [u8]),
}

impl Field {
    /// The field's bytes in `rec`, cut at the record's end (a record shorter
    /// than the layout: the missing bytes read as zero, as a pop delivers
    /// them).
    fn bytes<'a>(&self, rec: &'a [u8]) -> &'a [u8] {
        let start = (self.offset as usize).min(rec.len());
        let end = (self.offset as usize).saturating_add(self.len as usize).min(rec.len());
        &rec[start..end]
    }

    /// The field's value in `rec`, a record as the queue holds it: numbers
    /// in this machine's byte order (the C program that pushed the record
    /// wrote its struct so; exports in the other order are converted when
    /// imported: see [`Queue::import`](crate::Queue::import)). The one
    /// decoder of fields: the text export and `tvmq peek` both use it.
    pub fn value<'a>(&self, rec: &'a [u8]) -> FieldValue<'a> {
        let bytes = self.bytes(rec);
        // Zero-extended: a record shorter than the layout.
        let mut b = [0u8; 8];
        let n = bytes.len().min(8);
        b[..n].copy_from_slice(&bytes[..n]);
        match (self.kind, self.len) {
            (FieldKind::Char, _) => {
                let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
                FieldValue::Text(&bytes[..end])
            }
            (FieldKind::Long, 1) => FieldValue::Long(i64::from(b[0] as i8)),
            (FieldKind::Long, 2) => FieldValue::Long(i64::from(i16::from_ne_bytes([b[0], b[1]]))),
            (FieldKind::Long, 4) => FieldValue::Long(i64::from(i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))),
            (FieldKind::Long, 8) => FieldValue::Long(i64::from_ne_bytes(b)),
            (FieldKind::Double, 4) => FieldValue::Float(f32::from_ne_bytes([b[0], b[1], b[2], b[3]])),
            (FieldKind::Double, 8) => FieldValue::Double(f64::from_ne_bytes(b)),
            _ => FieldValue::Bytes(bytes),
        }
    }

    /// Turns the number in this field of `rec` into the other byte order
    /// (a `FIELD_LONG` or `FIELD_DOUB` of 2, 4 or 8 bytes: its bytes
    /// reversed; text and other lengths are left as they are).
    pub(crate) fn swap_byte_order(&self, rec: &mut [u8]) {
        let numeric = matches!(self.kind, FieldKind::Long | FieldKind::Double) && matches!(self.len, 2 | 4 | 8);
        let (start, end) = (self.offset as usize, self.offset as usize + self.len as usize);
        if let Some(b) = rec.get_mut(start..end).filter(|_| numeric) {
            b.reverse();
        }
    }
}

/// The kind numbered `code`, or `FTYPE_NOT_DEF` naming the field.
pub(crate) fn kind_of(name: &str, code: u32) -> Result<FieldKind> {
    FieldKind::from_code(code)
        .ok_or_else(|| Error::new(FTYPE_NOT_DEF, format!("field {name:?} has an unknown kind {code} (use 1, 2 or 4)")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_keep_stvm_numbers() {
        for (k, n) in [(FieldKind::Char, 1), (FieldKind::Long, 2), (FieldKind::Double, 4)] {
            assert_eq!(k.code(), n);
            assert_eq!(FieldKind::from_code(n), Some(k));
        }
        for n in [0, 3, 5, 8, u32::MAX] {
            assert_eq!(FieldKind::from_code(n), None);
            assert_eq!(kind_of("x", n).unwrap_err().code(), FTYPE_NOT_DEF);
        }
    }

    #[test]
    fn values_are_read_by_kind_and_length_in_this_machines_order() {
        let f = |offset, len, kind| Field { name: "f".into(), offset, len, kind };
        let mut rec = vec![0u8; 40];
        rec[..5].copy_from_slice(b"ab\0cd");
        rec[8..16].copy_from_slice(&(-5i64).to_ne_bytes());
        rec[16..20].copy_from_slice(&(-7i32).to_ne_bytes());
        rec[20..22].copy_from_slice(&300i16.to_ne_bytes());
        rec[22] = 0xff;
        rec[24..32].copy_from_slice(&0.1f64.to_ne_bytes());
        rec[32..36].copy_from_slice(&1.5f32.to_ne_bytes());
        assert_eq!(f(0, 8, FieldKind::Char).value(&rec), FieldValue::Text(b"ab"));
        assert_eq!(f(8, 8, FieldKind::Long).value(&rec), FieldValue::Long(-5));
        assert_eq!(f(16, 4, FieldKind::Long).value(&rec), FieldValue::Long(-7));
        assert_eq!(f(20, 2, FieldKind::Long).value(&rec), FieldValue::Long(300));
        assert_eq!(f(22, 1, FieldKind::Long).value(&rec), FieldValue::Long(-1));
        assert_eq!(f(24, 8, FieldKind::Double).value(&rec), FieldValue::Double(0.1));
        assert_eq!(f(32, 4, FieldKind::Double).value(&rec), FieldValue::Float(1.5));
        assert_eq!(f(20, 3, FieldKind::Long).value(&rec), FieldValue::Bytes(&rec[20..23]));
        // A record shorter than the layout: the missing bytes are zero.
        let mut half = [0u8; 8];
        half[..4].copy_from_slice(&rec[8..12]);
        assert_eq!(f(8, 8, FieldKind::Long).value(&rec[..12]), FieldValue::Long(i64::from_ne_bytes(half)));
        assert_eq!(f(8, 8, FieldKind::Long).value(&rec[..4]), FieldValue::Long(0));
        // The other byte order, and back.
        let mut other = rec.clone();
        f(8, 8, FieldKind::Long).swap_byte_order(&mut other);
        assert_eq!(&other[8..16], &(-5i64).to_ne_bytes().iter().rev().copied().collect::<Vec<u8>>()[..]);
        f(0, 8, FieldKind::Char).swap_byte_order(&mut other);
        assert_eq!(&other[..8], &rec[..8], "text is not a number");
        f(8, 8, FieldKind::Long).swap_byte_order(&mut other);
        assert_eq!(other, rec);
    }

    #[test]
    fn fields_must_lie_inside_the_record_and_have_a_name() {
        let f = |name: &str, offset, len| Field { name: name.into(), offset, len, kind: FieldKind::Char };
        assert!(f("a", 0, 8).check(8).is_ok());
        assert!(f("a", 7, 1).check(8).is_ok());
        for (bad, why) in [
            (f("a", 8, 1), "starts at the end"),
            (f("a", 0, 9), "too long"),
            (f("a", u32::MAX, u32::MAX), "overflowing"),
            (f("a", 0, 0), "empty"),
            (f("", 0, 1), "no name"),
            (f(&"n".repeat(32), 0, 1), "name too long"),
            (f("a\0b", 0, 1), "NUL in name"),
        ] {
            assert_eq!(bad.check(8).unwrap_err().code(), FLD_DEF_SPILL, "{why}");
        }
    }
}

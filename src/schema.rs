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
    /// and bytes that lie inside the record (`FLD_DEF_SPILL` otherwise).
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

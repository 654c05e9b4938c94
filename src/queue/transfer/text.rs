//! The text export format (see `transfer`): one line per record, its
//! fields (decoded by [`Field::value`]) separated by the separator.

use super::batch::Batched;
use super::io_error;
use crate::error::*;
use crate::schema::{Field, FieldKind, FieldValue};
use std::io::{BufRead, Write};

/// Checks a text separator: not empty, and made of no byte a field's text
/// can hold unescaped (letters, digits, `+`, `-`, `.`, a backslash, line
/// ends), so that every line splits back into its fields.
pub(super) fn check_sep(sep: &str) -> Result<()> {
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

/// Checks that text can show field `f` (char of any length, long of 1, 2,
/// 4 or 8 bytes, double of 4 or 8).
pub(super) fn text_width(f: &Field) -> Result<()> {
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

/// Appends the text line of record `rec` (its fields in the order of
/// `fields`, decoded by [`Field::value`]) to `out`.
pub(super) fn format_line(out: &mut Vec<u8>, fields: &[Field], rec: &[u8], sep: &[u8]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(sep);
        }
        match f.value(rec) {
            FieldValue::Text(text) => {
                for &c in text {
                    if c < 0x20 || c == 0x7f || c == b'\\' || sep.contains(&c) {
                        let _ = write!(out, "\\x{c:02x}");
                    } else {
                        out.push(c);
                    }
                }
            }
            FieldValue::Long(v) => {
                let _ = write!(out, "{v}");
            }
            FieldValue::Float(v) => {
                let _ = write!(out, "{v:?}");
            }
            FieldValue::Double(v) => {
                let _ = write!(out, "{v:?}");
            }
            // Refused before the export starts (see `text_width`).
            FieldValue::Bytes(_) => {}
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

/// Pushes the records of the text lines read from `r` (through `pushes`,
/// into its queue), counting them in `n`.
pub(super) fn import(pushes: &mut Batched<'_>, r: &mut impl BufRead, sep: &str, n: &mut u64) -> Result<()> {
    let q = pushes.queue();
    let fields = &q.info().fields;
    if fields.is_empty() {
        return Err(Error::new(
            FIELD_NOT_DEF,
            format!(
                "not a binary export (it does not begin with TVMQDUMP), and queue {} has no field list to read \
                 text lines with",
                q.id()
            ),
        ));
    }
    check_sep(sep)?;
    let mut line = Vec::new();
    let mut rec = vec![0u8; q.record_size()];
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
            .map_err(|e| Error::new(e.code(), format!("line {number}: {}", e.what())))?;
        pushes.push(&rec)?;
        *n += 1;
    }
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

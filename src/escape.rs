//! Names printed for people: a queue name (or a key a client sent) can hold
//! any bytes, and printed raw it could move a terminal's cursor, recolour
//! it or reorder the text around it. Both `tvmq list` and the server's
//! INFO and error replies print names through [`escape_name`].

use std::borrow::Cow;
use std::fmt::Write as _;

/// `name` as text safe to print: control characters (C0, DEL, C1) and the
/// bidirectional-text controls as `\xHH` or `\u{HHHH}`, bytes that are not
/// UTF-8 as `\xHH`, a backslash as `\\`; anything else as it is (borrowed
/// when nothing needs escaping).
///
/// ```
/// assert_eq!(tvm::escape_name(b"QUEUE_USER_INFO"), "QUEUE_USER_INFO");
/// assert_eq!(tvm::escape_name(b"a\x1b[31mb\\"), "a\\x1b[31mb\\\\");
/// assert_eq!(tvm::escape_name(b"\xff\xc3\xa9"), "\\xffé");
/// ```
pub fn escape_name(name: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(name) {
        if !s.chars().any(needs_escape) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(name.len() + 8);
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x80 && needs_escape(c) => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c if needs_escape(c) => {
                    let _ = write!(out, "\\u{{{:x}}}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c == '\\'
        || c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_bad_bytes_are_escaped_the_rest_kept() {
        assert!(matches!(escape_name(b"plain name-1"), Cow::Borrowed("plain name-1")));
        assert_eq!(escape_name(b"a\r\nb\0\x7f"), "a\\x0d\\x0ab\\x00\\x7f");
        assert_eq!(escape_name("c1\u{9b}bidi\u{202e}x".as_bytes()), "c1\\u{9b}bidi\\u{202e}x");
        assert_eq!(escape_name(b"back\\slash"), "back\\\\slash");
        assert_eq!(escape_name(b"\xc3"), "\\xc3");
        assert_eq!(escape_name("é✓".as_bytes()), "é✓");
    }
}

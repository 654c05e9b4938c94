//! Names printed for people: a queue name (or a key a client sent) can hold
//! any bytes, and printed raw it could move a terminal's cursor, recolour
//! it or reorder the text around it, or, holding blanks, pass for several
//! columns of a table. The server's error replies print names through
//! [`escape_name`] (between quotes); `tvmq list`, `tvmq stat` and the
//! server's INFO, which print a name as one word among others, through
//! [`escape_word`].

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

/// `name` as one word: [`escape_name`], and every blank (any Unicode white
/// space: a space as `\x20`, a no-break space as `\u{a0}`, ...) escaped
/// too, so that no name can pass for several words (columns of a table,
/// fields of a line); an empty name is `-`, and a name that is `-` is
/// `\x2d`, so that every name is a word of its own.
///
/// ```
/// assert_eq!(tvm::escape_word(b"QUEUE_USER_INFO"), "QUEUE_USER_INFO");
/// assert_eq!(tvm::escape_word(b"a b\t"), "a\\x20b\\x09");
/// assert_eq!(tvm::escape_word("x\u{a0}y".as_bytes()), "x\\u{a0}y");
/// assert_eq!(tvm::escape_word(b""), "-");
/// assert_eq!(tvm::escape_word(b"-"), "\\x2d");
/// ```
pub fn escape_word(name: &[u8]) -> Cow<'_, str> {
    match name {
        b"" => return Cow::Borrowed("-"),
        b"-" => return Cow::Borrowed("\\x2d"),
        _ => {}
    }
    let escaped = escape_name(name);
    if !escaped.chars().any(char::is_whitespace) {
        return escaped;
    }
    let mut out = String::with_capacity(escaped.len() + 8);
    for c in escaped.chars() {
        match c {
            c if c.is_whitespace() && (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_whitespace() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
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

    #[test]
    fn words_have_no_blank_and_are_never_empty() {
        assert!(matches!(escape_word(b"plain-1"), Cow::Borrowed("plain-1")));
        assert_eq!(escape_word(b"x   16  /fake"), "x\\x20\\x20\\x2016\\x20\\x20/fake");
        assert_eq!(escape_word("a\u{2003}b\u{3000}c\r".as_bytes()), "a\\u{2003}b\\u{3000}c\\x0d");
        assert_eq!(escape_word(b""), "-");
        assert_eq!(escape_word(b"-"), "\\x2d");
        assert_eq!(escape_word(b"--"), "--");
        for name in [&b"a b"[..], b"\xc2\xa0", b" ", b"\t\n", "\u{85}".as_bytes()] {
            let w = escape_word(name);
            assert!(!w.is_empty() && !w.chars().any(|c| c.is_whitespace() || c.is_control()), "{name:?}: {w:?}");
        }
    }
}

//! Writing: replies (server side) and commands (client side), appended to a `Vec<u8>`.

use std::fmt::{self, Write as _};

use crate::num::{put_i64_line, put_len_line};

/// The protocol version a connection speaks, chosen by the client with `HELLO`: it decides
/// how the RESP3 types are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Proto {
    /// RESP2, the default: maps, sets and pushes are arrays, doubles and verbatim strings are
    /// bulk strings, booleans are integers, nulls are `$-1`.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// Appends `line` with CR and LF replaced by spaces, so that it cannot end the line early.
#[inline]
fn put_sanitized(out: &mut Vec<u8>, line: &[u8]) {
    let start = out.len();
    out.extend_from_slice(line);
    for b in &mut out[start..] {
        if *b == b'\r' || *b == b'\n' {
            *b = b' ';
        }
    }
}

/// Appends CRLF: the end of a bulk string whose bytes were appended by the caller after
/// [`bulk_header`] (or after [`command_with_last`]).
#[inline]
pub fn crlf(out: &mut Vec<u8>) {
    out.extend_from_slice(b"\r\n");
}

/// Appends a simple string reply, `+<text>\r\n` (e.g. `+OK`). CR and LF in `text` are
/// replaced by spaces.
#[inline]
pub fn simple(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'+');
    put_sanitized(out, text);
    crlf(out);
}

/// Appends an error reply, `-<text>\r\n`. `text` starts with the error code, e.g.
/// `ERR unknown command` or `WRONGTYPE Operation against a key holding the wrong kind of
/// value`. CR and LF in `text` are replaced by spaces, so that a client-provided string inside
/// the message cannot inject a reply.
#[inline]
pub fn error(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'-');
    put_sanitized(out, text);
    crlf(out);
}

/// Appends an integer reply, `:<v>\r\n`.
#[inline]
pub fn integer(out: &mut Vec<u8>, v: i64) {
    put_i64_line(out, b':', v);
}

/// Appends the header of a bulk string of `len` bytes, `$<len>\r\n`: the caller then appends
/// exactly `len` bytes and [`crlf`]. This lets a value be copied straight from where it is
/// stored into the output.
#[inline]
pub fn bulk_header(out: &mut Vec<u8>, len: usize) {
    put_len_line(out, b'$', len);
}

/// Appends a bulk string reply, `$<len>\r\n<bytes>\r\n`; `bytes` may hold anything.
#[inline]
pub fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len() + 16);
    bulk_header(out, bytes.len());
    out.extend_from_slice(bytes);
    crlf(out);
}

/// Appends the RESP2 null bulk string, `$-1\r\n` (what `GET` of a missing key returns).
#[inline]
pub fn null_bulk(out: &mut Vec<u8>) {
    out.extend_from_slice(b"$-1\r\n");
}

/// Appends the RESP2 null array, `*-1\r\n` (what `BLPOP` returns on timeout).
#[inline]
pub fn null_array(out: &mut Vec<u8>) {
    out.extend_from_slice(b"*-1\r\n");
}

/// Appends the header of an array of `n` elements, `*<n>\r\n`: the caller then appends the
/// `n` replies.
#[inline]
pub fn array_header(out: &mut Vec<u8>, n: usize) {
    put_len_line(out, b'*', n);
}

/// Appends a null: `$-1\r\n` in RESP2, `_\r\n` in RESP3.
#[inline]
pub fn null(out: &mut Vec<u8>, proto: Proto) {
    match proto {
        Proto::Resp2 => null_bulk(out),
        Proto::Resp3 => out.extend_from_slice(b"_\r\n"),
    }
}

/// Appends the header of a map of `n` key-value pairs: the caller then appends `2 * n`
/// replies, key then value. RESP2 has no maps: it is an array of `2 * n` elements, `*<2n>`;
/// RESP3 writes `%<n>`.
#[inline]
pub fn map_header(out: &mut Vec<u8>, proto: Proto, n: usize) {
    match proto {
        Proto::Resp2 => put_len_line(out, b'*', n.saturating_mul(2)),
        Proto::Resp3 => put_len_line(out, b'%', n),
    }
}

/// Appends the header of a set of `n` elements: `*<n>` in RESP2, `~<n>` in RESP3.
#[inline]
pub fn set_header(out: &mut Vec<u8>, proto: Proto, n: usize) {
    put_len_line(out, if proto == Proto::Resp3 { b'~' } else { b'*' }, n);
}

/// Appends the header of an out-of-band push message of `n` elements (pub/sub messages):
/// `*<n>` in RESP2, `><n>` in RESP3.
#[inline]
pub fn push_header(out: &mut Vec<u8>, proto: Proto, n: usize) {
    put_len_line(out, if proto == Proto::Resp3 { b'>' } else { b'*' }, n);
}

/// Appends a boolean: the integer `:1` or `:0` in RESP2, `#t` or `#f` in RESP3.
#[inline]
pub fn boolean(out: &mut Vec<u8>, proto: Proto, v: bool) {
    out.extend_from_slice(match (proto, v) {
        (Proto::Resp2, true) => b":1\r\n",
        (Proto::Resp2, false) => b":0\r\n",
        (Proto::Resp3, true) => b"#t\r\n",
        (Proto::Resp3, false) => b"#f\r\n",
    });
}

/// A fixed buffer for formatting a double without allocating.
struct Digits {
    buf: [u8; 40],
    len: usize,
}

impl fmt::Write for Digits {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        self.buf.get_mut(self.len..end).ok_or(fmt::Error)?.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The shortest text that reads back as exactly `v`: `inf`, `-inf`, `nan`, plain decimal
/// notation between 1e-4 and 1e16, exponent notation (`1e300`, `1.5e-7`) beyond.
fn format_double(v: f64) -> Digits {
    let mut d = Digits { buf: [0; 40], len: 0 };
    // At most 17 significant digits, a sign, a point, 4 leading zeros or an exponent: the
    // 40 bytes are never exceeded, and the result is ignored only for that impossible case.
    let _ = if v.is_nan() {
        d.write_str("nan")
    } else if v.is_infinite() {
        d.write_str(if v > 0.0 { "inf" } else { "-inf" })
    } else if v == 0.0 || (1e-4..1e16).contains(&v.abs()) {
        write!(d, "{v}")
    } else {
        write!(d, "{v:e}")
    };
    d
}

/// Appends a floating point number: a bulk string in RESP2, `,<v>\r\n` in RESP3. The text is
/// the shortest that reads back as exactly `v` (`3`, `0.1`, `1e300`, `inf`, `-inf`, `nan`).
pub fn double(out: &mut Vec<u8>, proto: Proto, v: f64) {
    let d = format_double(v);
    let text = &d.buf[..d.len];
    match proto {
        Proto::Resp2 => bulk(out, text),
        Proto::Resp3 => {
            out.push(b',');
            out.extend_from_slice(text);
            crlf(out);
        }
    }
}

/// Appends a verbatim string, text meant to be shown as is, whose `format` is `txt` or `mkd`:
/// a bulk string of `text` in RESP2, `=<len>\r\n<format>:<text>\r\n` in RESP3.
pub fn verbatim(out: &mut Vec<u8>, proto: Proto, format: &[u8; 3], text: &[u8]) {
    match proto {
        Proto::Resp2 => bulk(out, text),
        Proto::Resp3 => {
            out.reserve(text.len() + 20);
            put_len_line(out, b'=', text.len() + 4);
            out.extend_from_slice(format);
            out.push(b':');
            out.extend_from_slice(text);
            crlf(out);
        }
    }
}

/// Appends a command for a server: `*<n>\r\n` then `$<len>\r\n<arg>\r\n` for every argument
/// (the command name first). Arguments may hold any bytes.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.reserve(args.iter().map(|a| a.len() + 16).sum::<usize>() + 16);
    array_header(out, args.len());
    for arg in args {
        bulk(out, arg);
    }
}

/// Appends a command whose last argument, of `last_len` bytes, the caller writes itself:
/// `args` (the command name first) are written as [`command`] does, then the header
/// `$<last_len>\r\n` of one more argument. The caller then appends exactly `last_len` bytes and
/// [`crlf`]; this saves a copy of a large value that is produced piecewise.
pub fn command_with_last(out: &mut Vec<u8>, args: &[&[u8]], last_len: usize) {
    out.reserve(args.iter().map(|a| a.len() + 16).sum::<usize>() + 32 + last_len);
    array_header(out, args.len() + 1);
    for arg in args {
        bulk(out, arg);
    }
    bulk_header(out, last_len);
}

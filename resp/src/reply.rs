//! Client side: replies parsed from a buffer, borrowing from it.

use crate::Limits;
use crate::error::ProtocolError;
use crate::num::{fast_number_line, find_byte, parse_i64};

/// A reply from a server, RESP2 or RESP3, borrowing its strings from the parsed buffer.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply<'a> {
    /// A simple string, `+OK`.
    Simple(&'a [u8]),
    /// An error, `-ERR message`: the text after `-`, error code included.
    Error(&'a [u8]),
    /// An integer, `:42`.
    Integer(i64),
    /// A bulk string, `$3\r\nfoo`: any bytes.
    Bulk(&'a [u8]),
    /// A null: RESP2's null bulk string `$-1` and null array `*-1`, RESP3's `_`.
    Null,
    /// An array, `*<n>`.
    Array(Vec<Reply<'a>>),
    /// A RESP3 map, `%<n>`: key-value pairs in the order received.
    Map(Vec<(Reply<'a>, Reply<'a>)>),
    /// A RESP3 set, `~<n>`.
    Set(Vec<Reply<'a>>),
    /// A RESP3 out-of-band push message, `><n>` (pub/sub messages, invalidations).
    Push(Vec<Reply<'a>>),
    /// A RESP3 double, `,3.14` (also `inf`, `-inf`, `nan`).
    Double(f64),
    /// A RESP3 boolean, `#t` or `#f`.
    Boolean(bool),
    /// A RESP3 big number, `(3492890328409238509324850943850943825024385`: its digits (with
    /// the sign, if any).
    BigNumber(&'a [u8]),
    /// A RESP3 verbatim string, `=<len>\r\ntxt:<text>`.
    Verbatim {
        /// The format of the text: `txt` (plain text) or `mkd` (markdown).
        format: [u8; 3],
        /// The text.
        text: &'a [u8],
    },
    /// A RESP3 blob error, `!<len>\r\n<text>`: an error whose text may hold any bytes.
    BlobError(&'a [u8]),
}

impl<'a> Reply<'a> {
    /// The value of an [`Integer`](Self::Integer).
    pub fn as_int(&self) -> Option<i64> {
        match *self {
            Self::Integer(v) => Some(v),
            _ => None,
        }
    }

    /// The bytes of a string: [`Bulk`](Self::Bulk), [`Simple`](Self::Simple), the text of a
    /// [`Verbatim`](Self::Verbatim), or the digits of a [`BigNumber`](Self::BigNumber).
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Self::Bulk(b) | Self::Simple(b) | Self::BigNumber(b) | Self::Verbatim { text: b, .. } => Some(b),
            _ => None,
        }
    }

    /// The elements of an [`Array`](Self::Array), a [`Set`](Self::Set) or a
    /// [`Push`](Self::Push).
    pub fn as_array(&self) -> Option<&[Reply<'a>]> {
        match self {
            Self::Array(v) | Self::Set(v) | Self::Push(v) => Some(v),
            _ => None,
        }
    }

    /// Whether the reply is an [`Error`](Self::Error) or a [`BlobError`](Self::BlobError).
    pub fn is_error(&self) -> bool {
        matches!(self, Self::Error(_) | Self::BlobError(_))
    }

    /// The text of an [`Error`](Self::Error) or a [`BlobError`](Self::BlobError), error code
    /// included (`ERR ...`, `WRONGTYPE ...`).
    pub fn error_text(&self) -> Option<&'a [u8]> {
        match *self {
            Self::Error(t) | Self::BlobError(t) => Some(t),
            _ => None,
        }
    }

    /// Whether the reply is a [`Null`](Self::Null).
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }
}

/// The kinds of aggregate replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Agg {
    Array,
    Set,
    Push,
    Map,
    /// RESP3 attributes, `|<n>`: a map of metadata before the reply it describes, skipped.
    Attribute,
}

/// One element of the reply stream: a whole scalar, or the header of an aggregate.
enum Token<'a> {
    Scalar(Reply<'a>),
    /// The kind and the number of replies that follow (twice the pairs of a map).
    Aggregate(Agg, usize),
}

/// The line after the type byte at `pos`, and the position after its CRLF; `None` if the
/// buffer ends first.
#[inline]
fn line<'a>(buf: &'a [u8], pos: usize, limits: &Limits) -> Result<Option<(&'a [u8], usize)>, ProtocolError> {
    let from = pos + 1;
    let window_end = buf.len().min(pos.saturating_add(limits.max_inline_len).saturating_add(1));
    let found = buf.get(from..window_end).and_then(|hay| find_byte(hay, b'\r')).map(|i| from + i);
    match found {
        None if buf.len() - pos > limits.max_inline_len => Err(ProtocolError::TooBigReplyLine),
        None => Ok(None),
        Some(cr) => match buf.get(cr + 1) {
            None => Ok(None),
            Some(b'\n') => Ok(Some((&buf[from..cr], cr + 2))),
            Some(_) => Err(ProtocolError::LineNotTerminated),
        },
    }
}

/// `len` bytes from `body`, which must be followed by CRLF; `None` if the buffer ends first.
#[inline]
fn blob(buf: &[u8], body: usize, len: usize) -> Result<Option<(&[u8], usize)>, ProtocolError> {
    let end = body.checked_add(len).ok_or(ProtocolError::InvalidBulkLength)?;
    let after = end.checked_add(2).ok_or(ProtocolError::InvalidBulkLength)?;
    if buf.len() < after {
        return Ok(None);
    }
    if &buf[end..after] != b"\r\n" {
        return Err(ProtocolError::BulkNotTerminated);
    }
    Ok(Some((&buf[body..end], after)))
}

/// The element of type `kind` (`agg` for an aggregate) whose line holds the number `v` and
/// ends before `next`: a count, an integer, or a length followed by that many bytes.
#[inline]
fn number_token<'a>(
    buf: &'a [u8],
    kind: u8,
    agg: Option<Agg>,
    v: i64,
    next: usize,
    limits: &Limits,
) -> Result<Option<(Token<'a>, usize)>, ProtocolError> {
    if let Some(agg) = agg {
        if v == -1 && agg == Agg::Array {
            return Ok(Some((Token::Scalar(Reply::Null), next)));
        }
        let n = usize::try_from(v).map_err(|_| ProtocolError::InvalidMultibulkLength)?;
        let n = match agg {
            Agg::Map | Agg::Attribute => n.checked_mul(2).ok_or(ProtocolError::InvalidMultibulkLength)?,
            _ => n,
        };
        return Ok(Some((Token::Aggregate(agg, n), next)));
    }
    if kind == b':' {
        return Ok(Some((Token::Scalar(Reply::Integer(v)), next)));
    }
    // `$`, `=` and `!`: a length then that many bytes.
    if v == -1 && kind == b'$' {
        return Ok(Some((Token::Scalar(Reply::Null), next)));
    }
    let len = match usize::try_from(v) {
        Ok(len) if len <= limits.max_bulk_len => len,
        _ => return Err(ProtocolError::InvalidBulkLength),
    };
    let Some((body, after)) = blob(buf, next, len)? else { return Ok(None) };
    let scalar = match kind {
        b'$' => Reply::Bulk(body),
        b'!' => Reply::BlobError(body),
        _ => match body {
            [a, b, c, b':', text @ ..] => Reply::Verbatim { format: [*a, *b, *c], text },
            _ => return Err(ProtocolError::InvalidVerbatim),
        },
    };
    Ok(Some((Token::Scalar(scalar), after)))
}

/// The element that starts at `pos` and the position after it; `None` if the buffer ends
/// first.
#[inline]
fn token<'a>(buf: &'a [u8], pos: usize, limits: &Limits) -> Result<Option<(Token<'a>, usize)>, ProtocolError> {
    let Some(&kind) = buf.get(pos) else { return Ok(None) };
    let agg = match kind {
        b'*' => Some(Agg::Array),
        b'~' => Some(Agg::Set),
        b'>' => Some(Agg::Push),
        b'%' => Some(Agg::Map),
        b'|' => Some(Agg::Attribute),
        b'+' | b'-' | b':' | b'$' | b'_' | b',' | b'#' | b'(' | b'=' | b'!' => None,
        other => return Err(ProtocolError::UnexpectedReplyType(other)),
    };
    let numeric = agg.is_some() || matches!(kind, b':' | b'$' | b'=' | b'!');
    if numeric {
        if let Some((v, next)) = fast_number_line(buf, pos, limits.max_inline_len) {
            return number_token(buf, kind, agg, v, next, limits);
        }
    }
    let Some((text, next)) = line(buf, pos, limits)? else { return Ok(None) };
    if numeric {
        if text == b"?" && kind != b':' {
            return Err(ProtocolError::Streamed);
        }
        let v = match kind {
            // RESP3 allows a `+` sign; otherwise Redis's integer rules.
            b':' => {
                let digits = match text.split_first() {
                    Some((b'+', rest)) if rest.first() != Some(&b'-') => rest,
                    _ => text,
                };
                parse_i64(digits).ok_or(ProtocolError::InvalidInteger)?
            }
            _ if agg.is_some() => parse_i64(text).ok_or(ProtocolError::InvalidMultibulkLength)?,
            _ => parse_i64(text).ok_or(ProtocolError::InvalidBulkLength)?,
        };
        return number_token(buf, kind, agg, v, next, limits);
    }
    let scalar = match kind {
        b'+' => Reply::Simple(text),
        b'-' => Reply::Error(text),
        b'_' if text.is_empty() => Reply::Null,
        b'_' => return Err(ProtocolError::InvalidNull),
        b'#' => match text {
            b"t" => Reply::Boolean(true),
            b"f" => Reply::Boolean(false),
            _ => return Err(ProtocolError::InvalidBoolean),
        },
        b',' => Reply::Double(parse_double(text).ok_or(ProtocolError::InvalidDouble)?),
        // `(`
        _ => {
            let digits = match text.split_first() {
                Some((b'+' | b'-', rest)) => rest,
                _ => text,
            };
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(ProtocolError::InvalidBigNumber);
            }
            Reply::BigNumber(text)
        }
    };
    Ok(Some((Token::Scalar(scalar), next)))
}

/// A RESP3 double: decimal or exponent notation, `inf`, `-inf`, `nan`.
fn parse_double(text: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(text).ok()?;
    // Rust also reads "infinity" and "NaN", which is harmless; but not an empty string or
    // blanks, which is what matters.
    s.parse().ok()
}

/// A level of nesting while measuring a reply: how many elements it still waits for, and
/// whether it is an attribute (which is not an element of its parent).
#[derive(Clone, Copy, Debug, Default)]
struct Level {
    remaining: usize,
    attribute: bool,
}

/// A stack of [`Level`]s that allocates only beyond 16 levels.
struct Levels {
    inline: [Level; 16],
    len: usize,
    spill: Vec<Level>,
}

impl Levels {
    fn new() -> Self {
        Self { inline: [Level::default(); 16], len: 0, spill: Vec::new() }
    }

    fn push(&mut self, level: Level) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = level,
            None => self.spill.push(level),
        }
        self.len += 1;
    }

    fn top(&mut self) -> Option<&mut Level> {
        let i = self.len.checked_sub(1)?;
        match self.inline.get_mut(i) {
            Some(level) => Some(level),
            None => self.spill.last_mut(),
        }
    }

    fn pop(&mut self) {
        if self.len > self.inline.len() {
            self.spill.pop();
        }
        self.len = self.len.saturating_sub(1);
    }
}

/// The length of the complete reply at the start of `buf`, without building it; `Ok(None)` if
/// `buf` ends before the reply does.
///
/// It checks everything [`parse_reply`] checks, with the same errors, and returns what it
/// would consume: a client uses it to skip replies it does not need (the replies of a
/// pipeline sent with their results ignored), or to check that a reply is complete. It
/// allocates only for replies nested deeper than 16 levels.
pub fn reply_len(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ProtocolError> {
    let mut levels = Levels::new();
    let mut pos = 0;
    loop {
        let Some((token, next)) = token(buf, pos, limits)? else { return Ok(None) };
        pos = next;
        if let Token::Aggregate(kind, n) = token {
            if levels.len >= limits.max_depth {
                return Err(ProtocolError::TooDeep);
            }
            if n > 0 {
                levels.push(Level { remaining: n, attribute: kind == Agg::Attribute });
                continue;
            }
            if kind == Agg::Attribute {
                continue;
            }
        }
        // A value is complete: it may complete the aggregates around it.
        loop {
            let Some(top) = levels.top() else { return Ok(Some(pos)) };
            top.remaining -= 1;
            if top.remaining > 0 {
                break;
            }
            let attribute = top.attribute;
            levels.pop();
            if attribute {
                // An attribute is followed by the value it describes.
                break;
            }
        }
    }
}

/// An aggregate being built by [`parse_reply`].
enum Frame<'a> {
    List { kind: Agg, want: usize, items: Vec<Reply<'a>> },
    Map { want: usize, items: Vec<(Reply<'a>, Reply<'a>)>, key: Option<Reply<'a>> },
    Attribute { remaining: usize },
}

/// Parses the reply at the start of `buf`: `Ok(Some((reply, consumed)))` with the number of
/// bytes it used, `Ok(None)` if `buf` ends before the reply does, or a [`ProtocolError`] (the
/// connection can then not be used any more).
///
/// The reply borrows its strings from `buf`. RESP3 attributes (`|`) are read and dropped.
/// Nesting deeper than [`Limits::max_depth`] is an error (the parser is not recursive); a
/// bulk string longer than [`Limits::max_bulk_len`] too. Aggregate sizes are not limited, but
/// nothing is allocated before the whole reply is in `buf` (it is first measured with
/// [`reply_len`]), so a declared size never allocates more than the bytes received.
pub fn parse_reply<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<(Reply<'a>, usize)>, ProtocolError> {
    let Some(total) = reply_len(buf, limits)? else { return Ok(None) };
    let buf = &buf[..total];
    let mut stack: Vec<Frame<'a>> = Vec::new();
    let mut pos = 0;
    loop {
        // The reply is complete, so the buffer cannot end early; be safe all the same.
        let Some((token, next)) = token(buf, pos, limits)? else { return Ok(None) };
        pos = next;
        let mut value = match token {
            Token::Scalar(reply) => reply,
            Token::Aggregate(kind, n) => {
                if stack.len() >= limits.max_depth {
                    return Err(ProtocolError::TooDeep);
                }
                // Each element takes 3 bytes at least: `n` is bounded by the buffer length.
                let frame = match kind {
                    Agg::Attribute if n == 0 => continue,
                    Agg::Attribute => Frame::Attribute { remaining: n },
                    Agg::Map => Frame::Map { want: n / 2, items: Vec::with_capacity(n / 2), key: None },
                    _ => Frame::List { kind, want: n, items: Vec::with_capacity(n) },
                };
                match frame {
                    Frame::List { kind, want: 0, items } => finish(kind, items),
                    Frame::Map { want: 0, items, .. } => Reply::Map(items),
                    frame => {
                        stack.push(frame);
                        continue;
                    }
                }
            }
        };
        // A value is complete: add it to the aggregate around it, which may complete it too.
        loop {
            let Some(top) = stack.last_mut() else { return Ok(Some((value, total))) };
            match top {
                Frame::List { want, items, .. } => {
                    items.push(value);
                    if items.len() < *want {
                        break;
                    }
                }
                Frame::Map { want, items, key } => match key.take() {
                    None => {
                        *key = Some(value);
                        break;
                    }
                    Some(k) => {
                        items.push((k, value));
                        if items.len() < *want {
                            break;
                        }
                    }
                },
                Frame::Attribute { remaining } => {
                    *remaining -= 1;
                    if *remaining == 0 {
                        stack.pop();
                    }
                    // Dropped; an attribute is followed by the value it describes.
                    break;
                }
            }
            value = match stack.pop() {
                Some(Frame::List { kind, items, .. }) => finish(kind, items),
                Some(Frame::Map { items, .. }) => Reply::Map(items),
                // Attributes never reach here, and the stack is not empty.
                _ => return Err(ProtocolError::InvalidMultibulkLength),
            };
        }
    }
}

/// The reply of a complete list aggregate.
fn finish(kind: Agg, items: Vec<Reply<'_>>) -> Reply<'_> {
    match kind {
        Agg::Set => Reply::Set(items),
        Agg::Push => Reply::Push(items),
        _ => Reply::Array(items),
    }
}

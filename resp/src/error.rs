//! The protocol errors, with Redis's texts.

use std::fmt;

/// A violation of the protocol, found while parsing a request or a reply.
///
/// Its [`Display`](fmt::Display) form is the error text, without the `ERR ` code: for request
/// errors it is the text Redis (networking.c) sends before closing the connection, e.g.
/// `Protocol error: invalid bulk length`. A server replies with [`ProtocolError::write_reply`]
/// and closes the connection: after a protocol error the stream cannot be resynchronised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProtocolError {
    /// `*` header: the count is not an integer, or is above [`Limits::max_args`](crate::Limits).
    /// Also a reply aggregate header (`*`, `%`, `~`, `>`, `|`) that is not a valid count.
    InvalidMultibulkLength,
    /// `$` header: the length is not an integer, is negative, or is above
    /// [`Limits::max_bulk_len`](crate::Limits). Also a bad `$`, `=` or `!` reply length.
    InvalidBulkLength,
    /// A multibulk argument does not start with `$`; carries the byte found instead.
    ExpectedDollar(u8),
    /// An inline request line longer than [`Limits::max_inline_len`](crate::Limits).
    TooBigInlineRequest,
    /// A `*` header line longer than [`Limits::max_inline_len`](crate::Limits) without CR.
    TooBigMbulkCount,
    /// A `$` header line longer than [`Limits::max_inline_len`](crate::Limits) without CR.
    TooBigBulkCount,
    /// An inline request with an unterminated quote, or a closing quote followed by something
    /// other than a space.
    UnbalancedQuotes,
    /// The bytes of a bulk string (request argument or reply) are not followed by CRLF.
    BulkNotTerminated,
    /// A reply starting with a byte that is no RESP2/RESP3 type; carries the byte.
    UnexpectedReplyType(u8),
    /// A reply line whose CR is not followed by LF (the line is then not a valid line).
    LineNotTerminated,
    /// A reply line (simple string, error, number, header) longer than
    /// [`Limits::max_inline_len`](crate::Limits) without CR.
    TooBigReplyLine,
    /// A `:` reply that is not a 64-bit signed integer.
    InvalidInteger,
    /// A `,` reply that is not a floating point number, `inf`, `-inf` or `nan`.
    InvalidDouble,
    /// A `#` reply other than `#t` and `#f`.
    InvalidBoolean,
    /// A `_` reply with bytes between `_` and CRLF.
    InvalidNull,
    /// A `(` reply that is not an optional `-` or `+` followed by digits.
    InvalidBigNumber,
    /// A `=` reply whose text does not start with a three-byte format and `:`.
    InvalidVerbatim,
    /// Reply aggregates nested deeper than [`Limits::max_depth`](crate::Limits).
    TooDeep,
    /// A streamed RESP3 string or aggregate (`$?`, `*?`, ...), which Redis never sends.
    Streamed,
}

impl ProtocolError {
    /// The fixed part of the text, and the byte that follows it between quotes for the errors
    /// that carry one.
    fn parts(&self) -> (&'static str, Option<u8>) {
        match *self {
            Self::InvalidMultibulkLength => ("Protocol error: invalid multibulk length", None),
            Self::InvalidBulkLength => ("Protocol error: invalid bulk length", None),
            Self::ExpectedDollar(b) => ("Protocol error: expected '$', got ", Some(b)),
            Self::TooBigInlineRequest => ("Protocol error: too big inline request", None),
            Self::TooBigMbulkCount => ("Protocol error: too big mbulk count string", None),
            Self::TooBigBulkCount => ("Protocol error: too big bulk count string", None),
            Self::UnbalancedQuotes => ("Protocol error: unbalanced quotes in request", None),
            Self::BulkNotTerminated => ("Protocol error: bulk data not followed by CRLF", None),
            Self::UnexpectedReplyType(b) => ("Protocol error: unexpected reply type byte ", Some(b)),
            Self::LineNotTerminated => ("Protocol error: CR not followed by LF", None),
            Self::TooBigReplyLine => ("Protocol error: too big reply line", None),
            Self::InvalidInteger => ("Protocol error: invalid integer", None),
            Self::InvalidDouble => ("Protocol error: invalid double", None),
            Self::InvalidBoolean => ("Protocol error: invalid boolean", None),
            Self::InvalidNull => ("Protocol error: invalid null", None),
            Self::InvalidBigNumber => ("Protocol error: invalid big number", None),
            Self::InvalidVerbatim => ("Protocol error: invalid verbatim string", None),
            Self::TooDeep => ("Protocol error: reply nested too deeply", None),
            Self::Streamed => ("Protocol error: streamed RESP3 types are not supported", None),
        }
    }

    /// Appends the error reply a server sends for this error: `-ERR <text>\r\n`.
    ///
    /// Unlike [`Display`](fmt::Display), which escapes a non-printable byte as `\xHH`, the byte
    /// of [`ExpectedDollar`](Self::ExpectedDollar) is written raw as Redis does (`%c`), except
    /// CR and LF which become spaces (as Redis 7 does) so that the reply stays well formed.
    pub fn write_reply(&self, out: &mut Vec<u8>) {
        let (text, byte) = self.parts();
        out.extend_from_slice(b"-ERR ");
        out.extend_from_slice(text.as_bytes());
        if let Some(b) = byte {
            let b = if b == b'\r' || b == b'\n' { b' ' } else { b };
            out.extend_from_slice(&[b'\'', b, b'\'']);
        }
        out.extend_from_slice(b"\r\n");
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (text, byte) = self.parts();
        f.write_str(text)?;
        match byte {
            Some(b @ 0x20..=0x7e) => write!(f, "'{}'", char::from(b)),
            Some(b) => write!(f, "'\\x{b:02x}'"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for ProtocolError {}

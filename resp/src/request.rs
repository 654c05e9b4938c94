//! Server side: requests parsed in place, as Redis's `processMultibulkBuffer` and
//! `processInlineBuffer` do.

use crate::Limits;
use crate::error::ProtocolError;
use crate::num::{fast_number_line, find_byte, parse_i64};

/// Where one argument lives: a range of the input buffer (multibulk) or of the scratch buffer
/// of the [`Request`] (inline).
#[derive(Clone, Copy, Debug)]
struct Span {
    start: usize,
    end: usize,
}

/// What the previous call left unfinished, so that the next call, given the same bytes
/// extended, resumes instead of starting over (a command of a million arguments arriving in
/// small pieces is then parsed in linear time, as Redis does).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Pending {
    #[default]
    Nothing,
    /// The `*` line is not complete; no CR before `scanned`.
    Count { scanned: usize },
    /// `args.len()` of `want` arguments are parsed; the next header starts at `pos`, and holds
    /// no CR before `scanned`.
    Args { want: usize, pos: usize, scanned: usize },
    /// The inline line is not complete; no LF before `scanned`.
    Inline { scanned: usize },
}

/// The arguments of the last command parsed by [`parse_request`], reusable from one command to
/// the next: it keeps its capacity, so parsing allocates nothing once it has grown to the
/// largest command.
///
/// The arguments of a multibulk command are ranges of the buffer given to [`parse_request`],
/// and are read back with that same buffer ([`arg`](Self::arg), [`iter`](Self::iter)). The
/// arguments of an inline command are unescaped into a buffer inside the `Request`, and the
/// buffer given to the accessors is then ignored.
///
/// Its contents are meaningful only after [`Status::Complete`]. After [`Status::Incomplete`] it
/// remembers how far it got: the next call must be given the same unconsumed bytes, possibly
/// followed by more (which is what a server does naturally), or the `Request` must be
/// [`clear`](Self::clear)ed first (for instance before reusing it for another connection).
#[derive(Clone, Debug, Default)]
pub struct Request {
    args: Vec<Span>,
    scratch: Vec<u8>,
    inline: bool,
    pending: Pending,
}

/// The outcome of [`parse_request`] when the bytes are not a protocol error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// A whole command was parsed: its arguments are in the [`Request`], and it used the first
    /// `consumed` bytes of the buffer (always at least 1). A command without arguments (`*0`,
    /// `*-1`, an empty or blank inline line) leaves the request [empty](Request::is_empty):
    /// like Redis, a server skips it silently.
    Complete {
        /// How many bytes of the buffer the command used.
        consumed: usize,
    },
    /// The buffer ends before the end of the command; nothing is consumed. At least `needed`
    /// more bytes are required before the command can complete (always at least 1; when a
    /// large bulk argument is arriving, the bytes still missing to its end, so that the caller
    /// can reserve them).
    Incomplete {
        /// A lower bound of the number of bytes still missing.
        needed: usize,
    },
}

impl Request {
    /// An empty request, allocating nothing until a command is parsed.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty request with room for `args` arguments without allocating.
    pub fn with_capacity(args: usize) -> Self {
        Self { args: Vec::with_capacity(args), ..Self::default() }
    }

    /// Forgets the last command and any partly parsed one, keeping the allocated capacity.
    pub fn clear(&mut self) {
        self.args.clear();
        self.scratch.clear();
        self.inline = false;
        self.pending = Pending::Nothing;
    }

    /// How many arguments the command has (the command name included).
    pub fn len(&self) -> usize {
        self.args.len()
    }

    /// Whether the command has no argument at all: a server skips such a command.
    pub fn is_empty(&self) -> bool {
        self.args.is_empty()
    }

    /// Whether the command was an inline one (a line of text) rather than a multibulk one.
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// How many arguments the request can hold without allocating.
    pub fn capacity(&self) -> usize {
        self.args.capacity()
    }

    /// Argument `i` (0 is the command name); `buf` must be the buffer given to
    /// [`parse_request`].
    ///
    /// # Panics
    /// If `i >= self.len()`, or if `buf` is not the parsed buffer and is too short.
    #[inline]
    pub fn arg<'a>(&'a self, buf: &'a [u8], i: usize) -> &'a [u8] {
        let span = self.args[i];
        let source = if self.inline { &self.scratch[..] } else { buf };
        &source[span.start..span.end]
    }

    /// Argument `i`, or `None` if there is no such argument (or `buf` is too short to be the
    /// parsed buffer).
    #[inline]
    pub fn get<'a>(&'a self, buf: &'a [u8], i: usize) -> Option<&'a [u8]> {
        let span = self.args.get(i)?;
        let source = if self.inline { &self.scratch[..] } else { buf };
        source.get(span.start..span.end)
    }

    /// The arguments in order; `buf` must be the buffer given to [`parse_request`] (arguments
    /// out of a too short buffer come out empty).
    pub fn iter<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        Args { source: if self.inline { &self.scratch } else { buf }, spans: self.args.iter() }
    }
}

/// The arguments of a [`Request`], from [`Request::iter`].
#[derive(Clone, Debug)]
pub struct Args<'a> {
    source: &'a [u8],
    spans: std::slice::Iter<'a, Span>,
}

impl<'a> Iterator for Args<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        let span = self.spans.next()?;
        Some(self.source.get(span.start..span.end).unwrap_or_default())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl ExactSizeIterator for Args<'_> {}

impl<'a> DoubleEndedIterator for Args<'a> {
    fn next_back(&mut self) -> Option<&'a [u8]> {
        let span = self.spans.next_back()?;
        Some(self.source.get(span.start..span.end).unwrap_or_default())
    }
}

/// Parses the command at the start of `buf` into `req`.
///
/// A buffer starting with `*` holds a multibulk command (`*<n>\r\n` then `n` times
/// `$<len>\r\n<bytes>\r\n`); anything else is an inline command, a line of arguments separated
/// by blanks, with quotes and escapes as Redis's `sdssplitargs` reads them. The arguments of
/// a multibulk command are not copied: `req` records where they are in `buf`.
///
/// Returns [`Status::Complete`] with the number of bytes used (the caller drops them and
/// parses again from there: a buffer can hold many pipelined commands), or
/// [`Status::Incomplete`] if `buf` ends before the command does, or a [`ProtocolError`] with
/// the text Redis replies with before closing the connection.
///
/// Never panics and never allocates once `req` has the capacity for the command (inline
/// commands aside, whose arguments are copied into `req`).
///
/// Differences with Redis, all on malformed input: the CR that ends a header line must be
/// followed by LF, and the bytes of an argument by CRLF (Redis skips two bytes unseen); a line
/// longer than [`Limits::max_inline_len`] is an error even if its end is already in the buffer
/// (Redis only checks a buffer without line end), so that the outcome never depends on how
/// the bytes were split into reads; the byte where an argument's `$` is expected is checked as
/// soon as it arrives, not once its line is complete.
pub fn parse_request(buf: &[u8], limits: &Limits, req: &mut Request) -> Result<Status, ProtocolError> {
    let pending = std::mem::take(&mut req.pending);
    match buf.first() {
        None => {
            req.args.clear();
            Ok(Status::Incomplete { needed: 1 })
        }
        Some(b'*') => parse_multibulk(buf, limits, req, pending),
        Some(_) => parse_inline(buf, limits, req, pending),
    }
}

/// A header line (`*<n>` or `$<n>`) starting at `start`, as far as the buffer goes.
enum Line {
    /// The number, and the position after the CRLF.
    Value(i64, usize),
    /// No complete line yet; no CR before `scanned`.
    Incomplete { scanned: usize },
    /// No CR within the line length limit.
    TooBig,
    /// A line that is not an integer (or a CR without LF).
    Bad,
}

/// Reads the header line whose type byte is at `start`; its CR is not before `scanned`.
#[inline(always)]
fn header_line(buf: &[u8], start: usize, scanned: usize, max_line: usize) -> Line {
    if let Some((v, next)) = fast_number_line(buf, start, max_line) {
        return Line::Value(v, next);
    }
    header_line_slow(buf, start, scanned, max_line)
}

/// The general case of [`header_line`]: Redis's rules, minus its laxness.
#[cold]
#[inline(never)]
fn header_line_slow(buf: &[u8], start: usize, scanned: usize, max_line: usize) -> Line {
    // The CR may be at most `max_line` bytes after the type byte.
    let window_end = buf.len().min(start.saturating_add(max_line).saturating_add(1));
    let from = scanned.max(start + 1);
    let found = buf.get(from..window_end).and_then(|hay| find_byte(hay, b'\r')).map(|i| from + i);
    match found {
        None if buf.len() - start > max_line => Line::TooBig,
        None => Line::Incomplete { scanned: window_end.max(from) },
        Some(cr) => match buf.get(cr + 1) {
            None => Line::Incomplete { scanned: cr },
            Some(b'\n') => match parse_i64(&buf[start + 1..cr]) {
                Some(v) => Line::Value(v, cr + 2),
                None => Line::Bad,
            },
            Some(_) => Line::Bad,
        },
    }
}

fn parse_multibulk(buf: &[u8], limits: &Limits, req: &mut Request, pending: Pending) -> Result<Status, ProtocolError> {
    let (want, mut pos, mut scanned) = match pending {
        Pending::Args { want, pos, scanned }
            if !req.inline && req.args.len() < want && pos <= buf.len() && scanned <= buf.len() =>
        {
            (want, pos, scanned)
        }
        other => {
            req.args.clear();
            req.inline = false;
            let scanned = match other {
                Pending::Count { scanned } if scanned <= buf.len() => scanned,
                _ => 0,
            };
            match header_line(buf, 0, scanned, limits.max_inline_len) {
                Line::Value(n, next) => {
                    if n <= 0 {
                        return Ok(Status::Complete { consumed: next });
                    }
                    let n = usize::try_from(n).map_err(|_| ProtocolError::InvalidMultibulkLength)?;
                    if n > limits.max_args {
                        return Err(ProtocolError::InvalidMultibulkLength);
                    }
                    (n, next, next)
                }
                Line::Incomplete { scanned } => {
                    req.pending = Pending::Count { scanned };
                    return Ok(Status::Incomplete { needed: 1 });
                }
                Line::TooBig => return Err(ProtocolError::TooBigMbulkCount),
                Line::Bad => return Err(ProtocolError::InvalidMultibulkLength),
            }
        }
    };
    while req.args.len() < want {
        match buf.get(pos) {
            Some(b'$') => {}
            Some(&other) => return Err(ProtocolError::ExpectedDollar(other)),
            None => {
                req.pending = Pending::Args { want, pos, scanned: pos };
                return Ok(Status::Incomplete { needed: 1 });
            }
        }
        let (len, body) = match header_line(buf, pos, scanned, limits.max_inline_len) {
            Line::Value(len, body) => match usize::try_from(len) {
                Ok(len) if len <= limits.max_bulk_len => (len, body),
                _ => return Err(ProtocolError::InvalidBulkLength),
            },
            Line::Incomplete { scanned } => {
                req.pending = Pending::Args { want, pos, scanned };
                return Ok(Status::Incomplete { needed: 1 });
            }
            Line::TooBig => return Err(ProtocolError::TooBigBulkCount),
            Line::Bad => return Err(ProtocolError::InvalidBulkLength),
        };
        // A length no buffer can hold is as invalid as one above the limit.
        let end = body.checked_add(len).ok_or(ProtocolError::InvalidBulkLength)?;
        let after = end.checked_add(2).ok_or(ProtocolError::InvalidBulkLength)?;
        match (buf.get(end), buf.get(end + 1)) {
            (Some(b'\r'), Some(b'\n')) => {}
            (Some(b'\r'), None) | (None, _) => {
                req.pending = Pending::Args { want, pos, scanned: pos };
                return Ok(Status::Incomplete { needed: after - buf.len() });
            }
            _ => return Err(ProtocolError::BulkNotTerminated),
        }
        req.args.push(Span { start: body, end });
        pos = after;
        scanned = pos;
    }
    Ok(Status::Complete { consumed: pos })
}

fn parse_inline(buf: &[u8], limits: &Limits, req: &mut Request, pending: Pending) -> Result<Status, ProtocolError> {
    req.args.clear();
    req.scratch.clear();
    req.inline = true;
    let from = match pending {
        Pending::Inline { scanned } if scanned <= buf.len() => scanned,
        _ => 0,
    };
    // The LF may be at most `max_inline_len` bytes after the start of the line.
    let window_end = buf.len().min(limits.max_inline_len.saturating_add(1));
    let found = buf.get(from..window_end).and_then(|hay| find_byte(hay, b'\n')).map(|i| from + i);
    let Some(lf) = found else {
        if buf.len() > limits.max_inline_len {
            return Err(ProtocolError::TooBigInlineRequest);
        }
        req.pending = Pending::Inline { scanned: buf.len() };
        return Ok(Status::Incomplete { needed: 1 });
    };
    let end = if lf > 0 && buf[lf - 1] == b'\r' { lf - 1 } else { lf };
    if split_args(&buf[..end], &mut req.scratch, &mut req.args).is_err() {
        req.args.clear();
        return Err(ProtocolError::UnbalancedQuotes);
    }
    Ok(Status::Complete { consumed: lf + 1 })
}

/// `isspace` of the C locale.
#[inline]
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

#[inline]
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline line into arguments as Redis's `sdssplitargs` does, appending their
/// unescaped bytes to `scratch` and their ranges of it to `args`.
///
/// `sdssplitargs` reads a C string: the line ends at its first NUL byte, here as there.
/// Err means unbalanced quotes.
fn split_args(line: &[u8], scratch: &mut Vec<u8>, args: &mut Vec<Span>) -> Result<(), ()> {
    let line = match find_byte(line, 0) {
        Some(nul) => &line[..nul],
        None => line,
    };
    // The byte at `i`, or 0 (the C string terminator) past the end.
    let at = |i: usize| line.get(i).copied().unwrap_or(0);
    let mut p = 0;
    loop {
        while p < line.len() && is_space(line[p]) {
            p += 1;
        }
        if p >= line.len() {
            return Ok(());
        }
        let start = scratch.len();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            let c = at(p);
            if in_double {
                if c == b'\\' && at(p + 1) == b'x' {
                    if let (Some(hi), Some(lo)) = (hex_value(at(p + 2)), hex_value(at(p + 3))) {
                        scratch.push(hi * 16 + lo);
                        p += 4;
                        continue;
                    }
                }
                if c == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    scratch.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => b'\x08',
                        b'a' => b'\x07',
                        other => other,
                    });
                } else if c == b'"' {
                    // The closing quote must be followed by a blank or the end.
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(());
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(());
                } else {
                    scratch.push(c);
                }
            } else if in_single {
                if c == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    scratch.push(b'\'');
                } else if c == b'\'' {
                    if at(p + 1) != 0 && !is_space(at(p + 1)) {
                        return Err(());
                    }
                    p += 1;
                    break;
                } else if c == 0 {
                    return Err(());
                } else {
                    scratch.push(c);
                }
            } else {
                match c {
                    b' ' | b'\n' | b'\r' | b'\t' => {
                        p += 1;
                        break;
                    }
                    0 => break,
                    b'"' => in_double = true,
                    b'\'' => in_single = true,
                    _ => scratch.push(c),
                }
            }
            p += 1;
        }
        args.push(Span { start, end: scratch.len() });
    }
}

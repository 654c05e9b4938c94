//! The Redis protocol (RESP2 and RESP3), for both ends of a connection: the tvmq server
//! (`tvmq serve`) and the network client inside libtvm.
//!
//! # The model
//!
//! Everything works on byte buffers the caller owns; the crate does no I/O, keeps no
//! connection state and has no dependencies.
//!
//! * **Server side, reading.** [`parse_request`] parses the command at the start of a read
//!   buffer *in place*: a reusable [`Request`] records where the arguments are in the buffer,
//!   so a command costs no allocation once the `Request` has grown. The server calls it in a
//!   loop, dropping the [`consumed`](Status::Complete) bytes each time, until
//!   [`Status::Incomplete`]: then it reads more bytes after the unconsumed ones and calls again
//!   (the `Request` resumes where it stopped). A [`ProtocolError`] carries the text Redis sends
//!   before closing the connection.
//! * **Server side, writing.** The reply functions ([`simple`], [`error`], [`integer`],
//!   [`bulk`], [`bulk_header`], [`array_header`], [`null`], [`map_header`], [`double`], ...)
//!   append to one `Vec<u8>`: the replies of a whole batch of commands are written at once.
//!   Those whose form depends on the protocol version take a [`Proto`].
//! * **Client side.** [`command`] appends a command; [`parse_reply`] parses a reply into a
//!   [`Reply`] borrowing from the buffer, and [`reply_len`] only measures one (to skip replies
//!   of a pipeline cheaply).
//!
//! Nothing here panics or reads out of bounds, whatever the bytes: every length is checked
//! against [`Limits`] and with checked arithmetic, and nesting is bounded without recursion.
//!
//! # Example
//!
//! ```
//! use resp::{Limits, Reply, Request, Status};
//!
//! let limits = Limits::default();
//!
//! // A client pipelines two commands; the second one arrives in two reads.
//! let mut wire = Vec::new();
//! resp::command(&mut wire, &[b"SET", b"key", b"hello world"]);
//! resp::command(&mut wire, &[b"GET", b"key"]);
//! let (first_read, second_read) = wire.split_at(wire.len() - 4);
//!
//! // The server parses every complete command of its read buffer, replying to all of them in
//! // one output buffer.
//! let mut input = first_read.to_vec();
//! let mut req = Request::new();
//! let mut out = Vec::new();
//! let mut seen = Vec::new();
//! for read in [&[][..], second_read] {
//!     input.extend_from_slice(read);
//!     loop {
//!         match resp::parse_request(&input, &limits, &mut req) {
//!             Ok(Status::Complete { consumed }) => {
//!                 if !req.is_empty() {
//!                     seen.push(req.arg(&input, 0).to_vec());
//!                     match req.arg(&input, 0) {
//!                         b"SET" => resp::simple(&mut out, b"OK"),
//!                         _ => resp::bulk(&mut out, req.arg(&input, 1)),
//!                     }
//!                 }
//!                 input.drain(..consumed);
//!             }
//!             Ok(Status::Incomplete { .. }) => break,
//!             Err(e) => {
//!                 e.write_reply(&mut out);
//!                 break; // and close the connection
//!             }
//!         }
//!     }
//! }
//! assert_eq!(seen, [b"SET".to_vec(), b"GET".to_vec()]);
//! assert_eq!(out, b"+OK\r\n$3\r\nkey\r\n");
//!
//! // The client reads the replies.
//! let (reply, used) = resp::parse_reply(&out, &limits).unwrap().unwrap();
//! assert_eq!(reply, Reply::Simple(b"OK"));
//! let (reply, _) = resp::parse_reply(&out[used..], &limits).unwrap().unwrap();
//! assert_eq!(reply.as_bytes(), Some(&b"key"[..]));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod encode;
mod error;
mod num;
mod reply;
mod request;

pub use encode::{
    Proto, array_header, boolean, bulk, bulk_header, command, command_with_last, crlf, double, error, integer,
    map_header, null, null_array, null_bulk, push_header, set_header, simple, verbatim,
};
pub use error::ProtocolError;
pub use reply::{Reply, parse_reply, reply_len};
pub use request::{Args, Request, Status, parse_request};

/// Bounds on what the parsers accept, against hostile or broken peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Limits {
    /// The longest bulk string, request argument or reply (Redis's `proto-max-bulk-len`):
    /// 512 MiB by default.
    pub max_bulk_len: usize,
    /// The most arguments a multibulk request may declare: 1024 * 1024 by default. Reply
    /// aggregates are not bounded by it.
    pub max_args: usize,
    /// The longest line: an inline request, a `*` or `$` header (Redis's
    /// `PROTO_INLINE_MAX_SIZE`), a reply line: 64 KiB by default.
    pub max_inline_len: usize,
    /// The deepest nesting of reply aggregates: 32 by default.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_bulk_len: 512 * 1024 * 1024, max_args: 1024 * 1024, max_inline_len: 64 * 1024, max_depth: 32 }
    }
}

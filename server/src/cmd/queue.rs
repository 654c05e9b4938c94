//! RPUSH, LPUSH, LPOP, RPOP, LLEN: straight between the read buffer, the
//! shared-memory ring and the output buffer, allocating nothing.
//!
//! tvmq queues are FIFO whichever end a command names: both pushes append
//! at the tail and both pops take the oldest record (`docs/protocol.md`).

use super::context::{Ctx, key_error, parse_int};
use super::off_worker;
use crate::durable::OnFailure;
use crate::keys::{KeyError, LastKey, WorkerKeys};
use crate::reply::{self, null_array};
use crate::slice::Slicer;
use crate::state::ServerState;
use resp::{Proto, Request};
use std::sync::Arc;
use tvm::error::{DATA_SPC_FULL, Error, NO_DATA_FOUND};
use tvm::{Queue, Wait};

/// The most bytes of records one LPOP/RPOP with a count (or a TVMQ.LEASE
/// with one) returns (at least one record): the bound of a reply, so of a
/// client's output buffer.
pub(crate) const MAX_POP_REPLY: usize = 1 << 20;

/// The most records of `record_size` bytes one reply returns: those that
/// fit in [`MAX_POP_REPLY`], at least one.
pub(crate) fn records_per_reply(record_size: usize) -> usize {
    (MAX_POP_REPLY / record_size.max(1)).max(1)
}

/// Values beyond which RPUSH / LPUSH runs in slices ([`push_sliced`]).
pub(crate) const SLICED_PUSH: usize = 4096;
/// Values pushed between two looks at the clock in [`push_sliced`].
const PUSH_CHUNK: usize = 1024;

/// RPUSH / LPUSH key value [value ...]: every value is checked (1 to
/// record-size bytes) before any is pushed; the reply is the depth after.
/// (More than [`SLICED_PUSH`] values: [`push_sliced`].)
#[inline]
pub(crate) fn push(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>, name: &str) {
    let key = req.arg(buf, 1);
    let c = &mut *ctx.client;
    let Some(q) = push_queue((ctx.shared, ctx.keys), &mut c.last, &mut c.create, key, out) else { return };
    let mut values = req.iter(buf).skip(2);
    if let Some(bad) = values.clone().find(|v| v.is_empty() || v.len() > q.record_size()) {
        return bad_value(out, q, bad);
    }
    let total = req.len() - 2;
    // On an `always` queue: published now, the reply waits until a sync
    // covers the records (see `crate::durable`).
    c.unsynced.run(q, out, OnFailure::Error, |q, out| {
        let mut pushed = 0;
        if push_values(q, &mut values, usize::MAX, &mut pushed, total, out, name) {
            resp::integer(out, q.depth() as i64);
        }
        pushed as u64
    });
}

/// RPUSH / LPUSH with more than [`SLICED_PUSH`] values: as [`push`], the
/// values checked, then pushed, in slices ([`Slicer`]) between which the
/// worker serves its other connections. The records become visible as
/// they are pushed, as they do to other processes and other workers
/// while any push runs; the reply comes once all are in (on an `always`
/// queue, once a sync covers them all).
pub(crate) async fn push_sliced(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>, name: &str) {
    let key = req.arg(buf, 1);
    let c = &mut *ctx.client;
    let Some(q) = push_queue((ctx.shared, ctx.keys), &mut c.last, &mut c.create, key, out).cloned() else { return };
    let mut slicer = Slicer::new();
    for v in req.iter(buf).skip(2) {
        slicer.tick().await;
        if v.is_empty() || v.len() > q.record_size() {
            return bad_value(out, &q, v);
        }
    }
    let total = req.len() - 2;
    let (at, mut pushed, mut ticket) = (out.len(), 0, None);
    let mut values = req.iter(buf).skip(2);
    loop {
        let (going, t) = q.defer_syncs(|q| push_values(q, &mut values, PUSH_CHUNK, &mut pushed, total, out, name));
        ticket = ticket.max(t);
        if !going || pushed == total {
            if going {
                resp::integer(out, q.depth() as i64);
            }
            break;
        }
        slicer.due().await;
    }
    ctx.client.unsynced.add(&q, ticket, at..out.len(), pushed as u64, OnFailure::Error);
}

/// The queue a push goes to; `None` when the reply is written, or, with
/// `--auto-create`, when the queue is asked for (made off the worker,
/// then the command runs again).
#[inline]
fn push_queue<'c>(
    (shared, keys): (&ServerState, &WorkerKeys),
    last: &'c mut LastKey,
    create: &mut Option<Vec<Vec<u8>>>,
    key: &[u8],
    out: &mut Vec<u8>,
) -> Option<&'c Arc<Queue>> {
    match last.resolve(shared, keys, key) {
        Ok(q) => Some(q),
        Err(KeyError::NoSuchQueue) if shared.args.auto_create.is_some() => {
            *create = Some(vec![key.to_vec()]);
            None
        }
        Err(e) => {
            key_error(out, key, &e);
            None
        }
    }
}

/// The refusal of a value no record of `q` can hold: nothing is pushed.
#[cold]
fn bad_value(out: &mut Vec<u8>, q: &Queue, bad: &[u8]) {
    if bad.is_empty() {
        reply::error_fmt(out, format_args!("CONDIT_IS_NIL empty value: tvmq records hold at least one byte"));
    } else {
        reply::error_fmt(
            out,
            format_args!(
                "RECD_TOO_LONG value of {} bytes, queue {} holds records of at most {}",
                bad.len(),
                q.id(),
                q.record_size()
            ),
        );
    }
}

/// Pushes up to `max` of `values` (checked already) onto `q`, counting
/// them in `pushed` (of `total` in the command); false when a push failed
/// (its error reply written).
#[inline]
fn push_values<'a>(
    q: &Queue,
    values: &mut impl Iterator<Item = &'a [u8]>,
    max: usize,
    pushed: &mut usize,
    total: usize,
    out: &mut Vec<u8>,
    name: &str,
) -> bool {
    for v in values.take(max) {
        if let Err(e) = q.push(v) {
            push_failed(out, q, &e, *pushed, total, name);
            return false;
        }
        *pushed += 1;
    }
    true
}

#[cold]
fn push_failed(out: &mut Vec<u8>, q: &Queue, e: &Error, pushed: usize, total: usize, _name: &str) {
    if pushed == 0 {
        return reply::queue_error(out, q.id(), e);
    }
    if e.code() == DATA_SPC_FULL {
        reply::error_fmt(
            out,
            format_args!("DATA_SPC_FULL queue {} is full: {pushed} of {total} values pushed, the rest not", q.id()),
        );
    } else {
        let start = out.len();
        reply::queue_error(out, q.id(), e);
        // Say how many went in before the error, before its CRLF.
        out.truncate(out.len() - 2);
        let note = format!(" ({pushed} of {total} values pushed, the rest not)");
        out.extend_from_slice(note.as_bytes());
        out.extend_from_slice(b"\r\n");
        debug_assert!(out.len() > start);
    }
}

/// Appends `$<len>\r\n<record>\r\n` popping the oldest record of `q` straight
/// into `out`; `Ok(false)` (and nothing appended) when the queue is empty.
#[inline]
pub(crate) fn pop_bulk(q: &Queue, out: &mut Vec<u8>) -> Result<bool, Error> {
    let size = q.record_size();
    let at = out.len();
    // Room for the longest header, then the record.
    let head = header_len(size);
    out.resize(at + head + size, 0);
    match q.pop(&mut out[at + head..], Wait::NoWait) {
        Ok(n) => {
            let used = header_len(n);
            write_header(&mut out[at..at + used], n);
            if used < head {
                out.copy_within(at + head..at + head + n, at + used);
            }
            out.truncate(at + used + n);
            out.extend_from_slice(b"\r\n");
            Ok(true)
        }
        Err(e) => {
            out.truncate(at);
            if e.code() == NO_DATA_FOUND { Ok(false) } else { Err(e) }
        }
    }
}

/// Bytes of `$<n>\r\n`.
#[inline]
fn header_len(n: usize) -> usize {
    let mut digits = 1;
    let mut v = n;
    while v >= 10 {
        v /= 10;
        digits += 1;
    }
    digits + 3
}

/// Writes `$<n>\r\n` into exactly `header_len(n)` bytes.
#[inline]
fn write_header(dst: &mut [u8], mut n: usize) {
    let end = dst.len();
    dst[0] = b'$';
    dst[end - 2] = b'\r';
    dst[end - 1] = b'\n';
    let mut i = end - 2;
    loop {
        i -= 1;
        dst[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
}

/// LPOP / RPOP key [count]: the oldest record(s).
#[inline]
pub(crate) fn pop(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>, name: &str) {
    if req.len() > 3 {
        return reply::wrong_args(out, name);
    }
    let count = match req.get(buf, 2) {
        None => None,
        Some(c) => match parse_int(c) {
            Some(n) if n >= 0 => Some(n as u64),
            _ => return resp::error(out, b"ERR value is out of range, must be positive"),
        },
    };
    let proto = ctx.client.proto;
    let key = req.arg(buf, 1);
    let auto = ctx.shared.args.auto_create.is_some();
    let q = match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
        Ok(q) => q,
        // With --auto-create a missing queue is an empty one, as a missing key in Redis.
        Err(KeyError::NoSuchQueue) if auto => {
            return if count.is_some() { null_array(out, proto) } else { resp::null(out, proto) };
        }
        Err(e) => return key_error(out, key, &e),
    };
    if count == Some(0) {
        return resp::array_header(out, 0);
    }
    // On an `always` queue: taken now, the reply waits until a sync covers
    // the records' consumption (see `crate::durable`).
    ctx.client.unsynced.run(q, out, OnFailure::Deliver, |q, out| match count {
        None => match pop_bulk(q, out) {
            Ok(true) => 1,
            Ok(false) => {
                resp::null(out, proto);
                0
            }
            Err(e) => {
                reply::queue_error(out, q.id(), &e);
                0
            }
        },
        Some(count) => pop_many(q, out, proto, count),
    });
    // A pop of a queue with leases may have swept it.
    off_worker::move_dead_letters(q);
}

/// Up to `count` records as an array (at most [`MAX_POP_REPLY`] bytes of
/// them, at least one), or a null array when the queue is empty; how many.
#[cold]
fn pop_many(q: &Queue, out: &mut Vec<u8>, proto: Proto, count: u64) -> u64 {
    let want = count.min(records_per_reply(q.record_size()) as u64);
    // Pop first (the count is known after), then put the header in front.
    let at = out.len();
    let mut n = 0;
    let mut failure = None;
    while n < want {
        match pop_bulk(q, out) {
            Ok(true) => n += 1,
            Ok(false) => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    if n == 0 {
        match failure {
            Some(e) => reply::queue_error(out, q.id(), &e),
            None => null_array(out, proto),
        }
        return 0;
    }
    // Records popped before an error are delivered; the error is not.
    let mut header = Vec::with_capacity(24);
    resp::array_header(&mut header, n as usize);
    out.splice(at..at, header);
    n
}

/// LLEN key: the depth (0 for a missing queue with --auto-create).
pub(crate) fn llen(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    let auto = ctx.shared.args.auto_create.is_some();
    match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
        Ok(q) => resp::integer(out, q.depth() as i64),
        Err(KeyError::NoSuchQueue) if auto => resp::integer(out, 0),
        Err(e) => key_error(out, key, &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        for n in [0usize, 1, 9, 10, 99, 100, 304, 65535, 1 << 30] {
            let mut b = vec![0u8; header_len(n)];
            write_header(&mut b, n);
            assert_eq!(b, format!("${n}\r\n").as_bytes());
        }
    }
}

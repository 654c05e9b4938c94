//! Ending and extending a lease: TVMQ.ACK, TVMQ.RELEASE, TVMQ.REJECT and
//! TVMQ.EXTEND. A release or a reject that moves its record to a
//! dead-letter queue runs off the worker ([`DeadLetter`]).

use super::super::context::{Client, Ctx, lease_millis};
use super::args::{EXTEND_RANGE, release_delay};
use super::owned::{Ending, LeaseId, ending, may_dead_letter};
use crate::durable::OnFailure;
use crate::pool::{Kind, Pool};
use crate::reply;
use crate::slice::Slicer;
use resp::Request;
use std::sync::Arc;
use std::time::Duration;
use tvm::error::{LEASE_EXPIRED, LEASE_INVALID};
use tvm::{Lease, Queue, SyncTicket};

/// TVMQ.ACK key id [id ...]: acknowledges leases of this connection. Every
/// id is read first: one that is not a lease id (`<position>-<tag>`)
/// refuses the whole command (`LEASE_INVALID`) before any lease is
/// acknowledged, as XACK refuses a malformed id. Reply: how many were
/// acknowledged (an id that names no lease owned, or one that ran out,
/// counts 0, as in XACK). A queue error on the way (the queue dropped)
/// says how many were acknowledged before it. On an `always` queue the
/// reply waits until a sync covers the acks, and is a `SYNC_FAILED` error
/// if that sync fails (the client must not believe an acknowledgement
/// durable that is not).
///
/// The ids are read, and the leases acknowledged, in slices ([`Slicer`]):
/// an ACK of a million ids lets the worker serve its other connections.
pub(crate) async fn ack(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    let Some(q) = ctx.queue(key, out) else { return };
    let client = &mut *ctx.client;
    let leases = &mut client.leases;
    let mut slicer = Slicer::new();
    let mut ids = Vec::with_capacity(req.len() - 2);
    for text in req.iter(buf).skip(2) {
        slicer.tick().await;
        match leases.find(&q, text) {
            Ok(id) => ids.push(id),
            Err(e) if e.code() == LEASE_INVALID => return reply::plain_error(out, &e),
            // Not held (ran out, ended, another connection's): counts 0.
            Err(_) => {}
        }
    }
    let (at, mut acked, mut ticket) = (out.len(), 0u64, None);
    let mut ids = ids.iter();
    loop {
        let (going, t) = q.defer_syncs(|q| {
            for id in ids.by_ref().take(ACK_CHUNK) {
                let Some(lease) = leases.forget(id) else { continue };
                match q.ack(&lease) {
                    Ok(()) => acked += 1,
                    Err(e) if e.code() == LEASE_EXPIRED => {}
                    Err(e) => {
                        reply::queue_error_noting(out, q.id(), &e, &format!(" ({acked} acknowledged before)"));
                        return false;
                    }
                }
            }
            true
        });
        ticket = ticket.max(t);
        if !going || ids.len() == 0 {
            if going {
                resp::integer(out, acked as i64);
            }
            break;
        }
        slicer.due().await;
    }
    leases.acked(acked);
    client.unsynced.add(&q, ticket, at..out.len(), acked, OnFailure::Error);
}

/// Leases acknowledged between two looks at the clock in [`ack`].
const ACK_CHUNK: usize = 1024;

/// TVMQ.RELEASE key id [DELAY ms]: puts the record back, delivered again
/// after the delay (at most a year; at the delivery limit: to the dead-letter queue, off
/// the worker: `Some`).
pub(crate) fn release(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<DeadLetter> {
    let delay = release_delay(buf, req, out)?;
    let (key, id) = (req.arg(buf, 1), req.arg(buf, 2));
    if let Some(d) = dead_letter_call(ctx, key, id, Some(delay)) {
        return Some(d);
    }
    on_lease(ctx, key, id, out, |q, l| {
        let how = ending(q, l, false, false);
        q.release(l, delay).map(|()| Some(how))
    });
    None
}

/// TVMQ.REJECT key id: to the dead-letter queue (off the worker: `Some`),
/// or dropped without one.
pub(crate) fn reject(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<DeadLetter> {
    let (key, id) = (req.arg(buf, 1), req.arg(buf, 2));
    if let Some(d) = dead_letter_call(ctx, key, id, None) {
        return Some(d);
    }
    on_lease(ctx, key, id, out, |q, l| {
        let how = ending(q, l, true, false);
        q.reject(l).map(|()| Some(how))
    });
    None
}

/// TVMQ.EXTEND key id ms: the lease runs out ms from now (0: the queue's
/// lease time; at most a year). Reply: the lease's new id (the old one is
/// stale).
pub(crate) fn extend(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let Some(time) = lease_millis(req.arg(buf, 3)) else {
        return resp::error(out, EXTEND_RANGE);
    };
    let new = on_lease(ctx, req.arg(buf, 1), req.arg(buf, 2), out, |q, l| q.extend_lease(l, time).map(|()| None));
    if let Some((_, pos, tag)) = new {
        resp::bulk(out, format!("{pos}-{tag}").as_bytes());
    }
}

/// Runs `f` on the owned lease `text` of the queue of `key`: it ends the
/// lease (`Some`: what that did), and the lease is forgotten, or extends
/// it (`None`), and its new id is returned.
fn on_lease(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    text: &[u8],
    out: &mut Vec<u8>,
    f: impl FnOnce(&Queue, &mut Lease) -> tvm::Result<Option<Ending>>,
) -> Option<LeaseId> {
    let q = ctx.queue(key, out)?;
    let leases = &mut ctx.client.leases;
    let id = match leases.find(&q, text) {
        Ok(id) => id,
        Err(e) => {
            reply::plain_error(out, &e);
            return None;
        }
    };
    let mut lease = leases.get(&id)?;
    // A release at the delivery limit and a reject move the record to the
    // dead-letter queue (run off the worker: see `DeadLetter`), and sync
    // (on an `always` queue): the reply waits.
    let at = out.len();
    let (done, ticket) = q.defer_syncs(|q| f(q, &mut lease));
    match done {
        Ok(None) => {
            leases.forget(&id);
            Some(leases.insert(&q, lease))
        }
        Ok(Some(how)) => {
            ended(ctx.client, &q, id, Ok(how), ticket, at, out);
            None
        }
        Err(e) => {
            ended(ctx.client, &q, id, Err(e), ticket, at, out);
            None
        }
    }
}

/// Writes the reply of a lease call that ended lease `id` of `q` (`done`:
/// what that did), whose reply starts at `at` and waits for `ticket`, and
/// forgets the lease unless it is still good; counts what it did.
fn ended(
    client: &mut Client,
    q: &Arc<Queue>,
    id: LeaseId,
    done: tvm::Result<Ending>,
    ticket: Option<SyncTicket>,
    at: usize,
    out: &mut Vec<u8>,
) {
    let leases = &mut client.leases;
    match done {
        Ok(how) => {
            leases.forget(&id);
            leases.ended(how);
            resp::simple(out, b"OK");
            client.unsynced.add(q, ticket, at..out.len(), 1, OnFailure::Error);
        }
        Err(e) => {
            // Ran out (or gone): no call can end it any more.
            if e.code() == LEASE_EXPIRED || leases.get(&id).is_some_and(|l| l.remaining().is_zero()) {
                leases.forget(&id);
            }
            reply::queue_error(out, q.id(), &e);
        }
    }
}

/// A TVMQ.RELEASE or TVMQ.REJECT that moves its record to a dead-letter
/// queue: run off the worker ([`dead_letter_off_worker`]), since the push
/// into that queue may open it (a directory scan and a file open, the first
/// time) and sync it (an `always` one), and a worker serves other
/// connections meanwhile.
pub(crate) struct DeadLetter {
    q: Arc<Queue>,
    id: LeaseId,
    lease: Lease,
    /// `None`: a reject; else a release's delay.
    delay: Option<Duration>,
}

/// The lease `text` of the queue of `key`, if ending it (a reject, or a
/// release after `delay`) moves its record to a dead-letter queue; `None`
/// otherwise, and when there is no such lease (the call then runs on the
/// worker, which writes the error).
fn dead_letter_call(ctx: &mut Ctx<'_>, key: &[u8], text: &[u8], delay: Option<Duration>) -> Option<DeadLetter> {
    let q = ctx.client.last.resolve(ctx.shared, ctx.keys, key).ok()?.clone();
    q.info().leases.as_ref()?.dead_letter?;
    let id = ctx.client.leases.find(&q, text).ok()?;
    let lease = ctx.client.leases.get(&id)?;
    may_dead_letter(&q, &lease, delay.is_none()).then_some(DeadLetter { q, id, lease, delay })
}

/// Runs a [`DeadLetter`] call in the server's pool, then writes its reply
/// as on the worker (waiting for the source queue's syncs it put off: the
/// dead-letter queue's own sync ran there, before the lease entry was
/// freed).
pub(crate) async fn dead_letter_off_worker(pool: &Pool, d: DeadLetter, client: &mut Client, out: &mut Vec<u8>) {
    let DeadLetter { q, id, lease, delay } = d;
    let queue = q.clone();
    let ran = pool
        .run(Kind::Light, move || {
            let how = ending(&queue, &lease, delay.is_none(), false);
            queue.defer_syncs(|q| {
                match delay {
                    Some(delay) => q.release(&lease, delay),
                    None => q.reject(&lease),
                }
                .map(|()| how)
            })
        })
        .await;
    let at = out.len();
    match ran {
        Ok((done, ticket)) => ended(client, &q, id, done, ticket, at, out),
        Err(_) => reply::error_fmt(out, format_args!("ERR the dead-letter move of queue {} did not complete", q.id())),
    }
}

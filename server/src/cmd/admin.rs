//! DEL, LTRIM and TVMQ.REPAIR: the commands behind the C API's lTvmDropTable,
//! lTvmTruncate and lTvmResetLock.
//!
//! `DEL key [key ...]` drops queues (their files go; clients blocked on them
//! get `SHM_ERR_EIDRM`; with `--auto-create` a later push makes a new one):
//! the reply is how many existed. `LTRIM key start stop` keeps the records
//! from `start` to `stop` as Redis does, for the forms a FIFO ring can
//! honour: `stop` = -1 (the first `start` records go: removed by popping,
//! so that consumers running meanwhile lose nothing twice) or an empty range
//! (`start` > `stop` once both are resolved: every record present goes).
//! `TVMQ.REPAIR key` recovers what dead processes left (as `tvmq repair`)
//! and answers how many records it recovered.
//!
//! Each finds its queues on the worker, then gives the dispatcher its work
//! to run off it ([`Job`]; `None` when the reply is written): removing a file, popping a whole ring (with the syncs
//! of a durable queue: one, for all the records an LTRIM removes) or
//! scanning one may take long, and the worker serves other connections
//! meanwhile. The connection waits for the reply, so pipelined commands
//! keep their order.

use super::context::{Ctx, key_error, parse_int};
use super::off_worker::Job;
use crate::keys::KeyError;
use crate::pool::Kind;
use crate::reply;
use crate::slice::Slicer;
use resp::Request;
use std::collections::HashSet;
use tvm::Queue;

/// DEL key [key ...]: drops each queue named; the number that existed.
/// The keys are looked up in slices ([`Slicer`]; a missing numeric key
/// costs a failed open), each distinct key once, before anything is dropped.
pub(crate) async fn del(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<Job> {
    let mut ids = Vec::new();
    let mut seen_ids = HashSet::new();
    // Sized at once: growing it rehashes every key in one go (a million
    // distinct keys: tens of ms).
    let mut seen: HashSet<&[u8]> = HashSet::with_capacity(req.len() - 1);
    let mut slicer = Slicer::new();
    for key in req.iter(buf).skip(1) {
        slicer.tick().await;
        if !seen.insert(key) {
            continue;
        }
        match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
            Ok(q) => {
                if seen_ids.insert(q.id()) {
                    ids.push(q.id());
                }
            }
            Err(KeyError::NoSuchQueue) => continue,
            Err(e) => {
                key_error(out, key, &e);
                return None;
            }
        }
    }
    let dir = ctx.shared.dir().to_path_buf();
    Some(Job::new(Kind::Light, move |out| {
        let mut dropped = 0;
        for id in ids {
            match Queue::drop_queue(&dir, id) {
                Ok(()) => dropped += 1,
                Err(e) if e.code() == tvm::error::TBL_NOT_FOUND => {}
                Err(e) => return reply::queue_error(out, id, &e),
            }
        }
        resp::integer(out, dropped);
    }))
}

/// LTRIM key start stop, in the forms a FIFO queue can honour (see the module).
pub(crate) fn ltrim(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<Job> {
    let key = req.arg(buf, 1);
    let (Some(start), Some(stop)) = (parse_int(req.arg(buf, 2)), parse_int(req.arg(buf, 3))) else {
        reply::not_an_integer(out);
        return None;
    };
    let q = match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
        Ok(q) => q.clone(),
        // As Redis: trimming a missing list is fine.
        Err(KeyError::NoSuchQueue) => {
            resp::simple(out, b"OK");
            return None;
        }
        Err(e) => {
            key_error(out, key, &e);
            return None;
        }
    };
    let len = q.depth() as i64;
    let at = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (first, last) = (at(start), at(stop));
    let remove = if first > last || first >= len {
        None
    } else if stop == -1 {
        Some(first as u64)
    } else {
        reply::error_fmt(
            out,
            format_args!(
                "NOT_SUPPT_OPT tvmq queues are FIFO rings: LTRIM keeps a suffix (LTRIM key N -1) or nothing (LTRIM key 1 0)"
            ),
        );
        return None;
    };
    Some(Job::new(Kind::Heavy, move |out| {
        // A durable queue's pops share one sync, waited for here.
        let (trimmed, ticket) = q.defer_syncs(|q| match remove {
            None => q.truncate(),
            Some(n) => q.discard(n),
        });
        match trimmed.and_then(|_| ticket.map_or(Ok(()), |t| q.sync_ticket(t))) {
            Ok(()) => resp::simple(out, b"OK"),
            Err(e) => reply::queue_error(out, q.id(), &e),
        }
        // Records of a queue with leases that its sweeps found bound for
        // the dead-letter queue: moved here, off the worker already.
        q.move_dead_letters();
    }))
}

/// TVMQ.REPAIR key: `tvmq repair` on the queue; the records recovered.
pub(crate) fn repair(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<Job> {
    let key = req.arg(buf, 1);
    let q = ctx.queue(key, out)?;
    Some(Job::new(Kind::Heavy, move |out| {
        let r = q.repair();
        q.move_dead_letters();
        resp::integer(out, (r.recovered_pushes + r.recovered_pops) as i64);
    }))
}

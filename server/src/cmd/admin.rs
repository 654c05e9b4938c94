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

use super::context::{Ctx, parse_int};
use super::queue::key_error;
use crate::keys::KeyError;
use crate::reply;
use resp::Request;
use tvm::{Queue, Wait};

/// DEL key [key ...]: drops each queue named; the number that existed.
pub(crate) fn del(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let mut dropped = 0;
    for key in req.iter(buf).skip(1) {
        let q = match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
            Ok(q) => q.clone(),
            Err(KeyError::NoSuchQueue) => continue,
            Err(e) => return key_error(out, key, &e),
        };
        match Queue::drop_queue(ctx.shared.dir(), q.id()) {
            Ok(()) => dropped += 1,
            Err(e) if e.code() == tvm::error::TBL_NOT_FOUND => {}
            Err(e) => return reply::queue_error(out, q.id(), &e),
        }
    }
    resp::integer(out, dropped);
}

/// LTRIM key start stop, in the forms a FIFO queue can honour (see the module).
pub(crate) fn ltrim(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    let (Some(start), Some(stop)) = (parse_int(req.arg(buf, 2)), parse_int(req.arg(buf, 3))) else {
        return reply::not_an_integer(out);
    };
    let q = match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
        Ok(q) => q.clone(),
        // As Redis: trimming a missing list is fine.
        Err(KeyError::NoSuchQueue) => return resp::simple(out, b"OK"),
        Err(e) => return key_error(out, key, &e),
    };
    let len = q.depth() as i64;
    let at = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (first, last) = (at(start), at(stop));
    let remove = if first > last || first >= len {
        len
    } else if stop == -1 {
        first
    } else {
        return reply::error_fmt(
            out,
            format_args!(
                "NOT_SUPPT_OPT tvmq queues are FIFO rings: LTRIM keeps a suffix (LTRIM key N -1) or nothing (LTRIM key 1 0)"
            ),
        );
    };
    if remove >= len {
        if let Err(e) = q.truncate() {
            return reply::queue_error(out, q.id(), &e);
        }
    } else {
        let mut rec = vec![0u8; q.record_size()];
        for _ in 0..remove {
            match q.pop(&mut rec, Wait::NoWait) {
                Ok(_) => {}
                Err(e) if e.code() == tvm::error::NO_DATA_FOUND => break,
                Err(e) => return reply::queue_error(out, q.id(), &e),
            }
        }
        super::lease::dead_letters_off_worker(&q);
    }
    resp::simple(out, b"OK");
}

/// TVMQ.REPAIR key: `tvmq repair` on the queue; the records recovered.
pub(crate) fn repair(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
        Ok(q) => {
            let r = q.repair();
            super::lease::dead_letters_off_worker(q);
            resp::integer(out, (r.recovered_pushes + r.recovered_pops) as i64);
        }
        Err(e) => key_error(out, key, &e),
    }
}

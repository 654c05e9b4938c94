//! TVMQ.LEASES key: the queue's lease statistics, and how many leases
//! this connection holds. The statistics come from a scan of the queue's
//! lease table (up to 1,048,576 entries: tens of milliseconds), so the
//! scan runs in the server's pool as a heavy job ([`crate::pool::Kind::Heavy`]:
//! one at a time), shared by the equal ones waiting in line, never on a
//! worker.

use super::super::context::Ctx;
use crate::reply;
use crate::state::ServerState;
use resp::{Proto, Request};
use std::sync::Arc;
use std::time::Duration;
use tvm::Queue;

/// A TVMQ.LEASES whose scan is to run off the worker ([`run`]).
pub(crate) struct LeaseScan {
    q: Arc<Queue>,
    /// Leases this connection holds.
    held: usize,
    proto: Proto,
}

/// TVMQ.LEASES key: checks the key (the error reply is written here), then
/// gives the scan to run off the worker.
pub(crate) fn stats(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<LeaseScan> {
    let key = req.arg(buf, 1);
    let q = ctx.queue(key, out)?;
    if q.info().leases.is_none() {
        no_leases(&q, out);
        return None;
    }
    Some(LeaseScan { q, held: ctx.client.leases.len(), proto: ctx.client.proto })
}

fn no_leases(q: &Queue, out: &mut Vec<u8>) {
    reply::error_fmt(out, format_args!("NOT_SUPPT_OPT queue {} has no leases (tvmq create ... --lease-ms MS)", q.id()));
}

/// Scans the lease table in the pool (the connection waits, the worker
/// serves the others) and writes the reply: a map (RESP2: a flat array of
/// names and values).
pub(crate) async fn run(scan: LeaseScan, shared: &ServerState, out: &mut Vec<u8>) {
    let LeaseScan { q, held, proto } = scan;
    let key = (q.id(), Arc::as_ptr(&q) as usize);
    let queue = q.clone();
    let Ok(stats) = shared.lease_scans.scan(&shared.pool, key, move || queue.lease_stats()).await else {
        return super::super::off_worker::failed(out);
    };
    let Some(s) = stats else { return no_leases(&q, out) };
    let ms = |d: Option<Duration>| d.map_or(0, |d| d.as_millis() as i64);
    let fields: [(&str, i64); 12] = [
        ("in-flight", s.in_flight as i64),
        ("oldest-ms", ms(s.oldest)),
        ("waiting", s.waiting as i64),
        ("dead-letter-pending", s.dead_letter_pending as i64),
        ("redelivered", s.redelivered as i64),
        ("expired", s.expired as i64),
        ("orphaned", s.orphaned as i64),
        ("released", s.released as i64),
        ("dead-lettered", s.dead_lettered as i64),
        ("dropped", s.dropped as i64),
        ("late", s.late as i64),
        ("held-by-this-connection", held as i64),
    ];
    resp::map_header(out, proto, fields.len());
    for (name, v) in fields {
        resp::bulk(out, name.as_bytes());
        resp::integer(out, v);
    }
}

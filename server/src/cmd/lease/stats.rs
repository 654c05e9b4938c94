//! TVMQ.LEASES key: the queue's lease statistics, and how many leases
//! this connection holds.

use super::super::context::Ctx;
use crate::reply;
use resp::Request;
use std::time::Duration;

/// TVMQ.LEASES key: the queue's lease statistics (a map; RESP2: a flat
/// array of names and values), and how many leases this connection holds.
pub(crate) fn stats(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    let Some(q) = ctx.queue(key, out) else { return };
    let Some(s) = q.lease_stats() else {
        return reply::error_fmt(
            out,
            format_args!("NOT_SUPPT_OPT queue {} has no leases (tvmq create ... --lease-ms MS)", q.id()),
        );
    };
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
        ("held-by-this-connection", ctx.client.leases.len() as i64),
    ];
    resp::map_header(out, ctx.client.proto, fields.len());
    for (name, v) in fields {
        resp::bulk(out, name.as_bytes());
        resp::integer(out, v);
    }
}

//! TVMQ.LEASE: taking leases, on the worker, or off it for an `always`
//! queue (the library syncs each record saved in the lease table before it
//! lets go of the record's ring slot, and that sync cannot be put off),
//! and writing them as the reply.

use super::super::context::{Client, Ctx};
use super::super::off_worker;
use super::super::queue::records_per_reply;
use super::args::{LeaseArgs, lease_args};
use super::owned::{LeaseId, give_back};
use crate::durable::OnFailure;
use crate::pool::{Kind, Pool};
use crate::reply;
use resp::{Proto, Request};
use std::sync::Arc;
use std::time::Duration;
use tvm::error::{LEASE_LIMIT, NO_DATA_FOUND};
use tvm::{Durability, Lease, Queue, SyncTicket, Wait};

/// What TVMQ.LEASE leaves to the connection.
pub(crate) enum LeaseFlow {
    /// The reply is written.
    Done,
    /// Nothing to lease yet: block on the queue (`None`: forever).
    Block(Arc<Queue>, Option<Duration>, LeaseArgs),
    /// An `always` queue: lease off the worker ([`take_durable`]).
    OffWorker(DurableLease),
}

/// A TVMQ.LEASE of an `always` queue, for the connection to run (see
/// `blocking::lease_durable`).
pub(crate) struct DurableLease {
    pub(crate) key: Vec<u8>,
    pub(crate) q: Arc<Queue>,
    /// `None`: no BLOCK; `Some(None)`: forever.
    pub(crate) block: Option<Option<Duration>>,
    pub(crate) args: LeaseArgs,
}

/// Is `q` a durable queue with the `always` policy (its lease calls sync)?
pub(crate) fn is_always(q: &Queue) -> bool {
    q.durability() == Some(Durability::Always)
}

/// TVMQ.LEASE key [COUNT n] [BLOCK ms] [FOR ms]: leases the oldest record
/// (COUNT: up to n of them), waiting up to BLOCK ms (0: forever) when there
/// is none, for FOR ms (0 or absent: the queue's lease time). Reply: one
/// entry `[id, deliveries, record]` (with COUNT: an array of them), or a
/// null when there was nothing.
pub(crate) fn lease(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> LeaseFlow {
    let Some((args, block)) = lease_args(buf, req, out) else { return LeaseFlow::Done };
    let key = req.arg(buf, 1);
    let Some(q) = ctx.queue(key, out) else { return LeaseFlow::Done };
    if is_always(&q) {
        return LeaseFlow::OffWorker(DurableLease { key: key.to_vec(), q, block, args });
    }
    if take(&q, args, ctx.client, out) {
        return LeaseFlow::Done;
    }
    match block {
        None => {
            empty(out, ctx.client.proto, args);
            LeaseFlow::Done
        }
        Some(t) => LeaseFlow::Block(q, t, args),
    }
}

/// The reply when nothing was leased.
pub(crate) fn empty(out: &mut Vec<u8>, proto: Proto, args: LeaseArgs) {
    if args.array { reply::null_array(out, proto) } else { resp::null(out, proto) }
}

/// Leases what `q` (not an `always` queue) has now, up to `args.count`,
/// handed to `client` and written as the reply: true if it wrote one
/// (records, or an error), false (nothing written) when the queue is empty.
pub(crate) fn take(q: &Arc<Queue>, args: LeaseArgs, client: &mut Client, out: &mut Vec<u8>) -> bool {
    let taken = Taken::take(q.clone(), args);
    off_worker::move_dead_letters(q);
    taken.write(client, out)
}

/// Leases of an `always` queue, as [`take`] takes them, but in the
/// server's pool (each fresh lease waits there for the sync of its saved
/// record); the reply waits for the syncs put off meanwhile.
pub(crate) async fn take_durable(
    pool: &Pool,
    q: &Arc<Queue>,
    args: LeaseArgs,
    client: &mut Client,
    out: &mut Vec<u8>,
) -> bool {
    let queue = q.clone();
    match pool.run(Kind::Light, move || Taken::take(queue, args)).await {
        Ok(taken) => taken.write(client, out),
        Err(_) => {
            // A panic, or the server stopping: whatever was taken went
            // back to the queue (`Taken`'s drop).
            reply::error_fmt(out, format_args!("ERR the lease of queue {} did not complete", q.id()));
            true
        }
    }
}

/// Leases taken, not yet handed to a connection: released if dropped so
/// (the connection ended meanwhile).
struct Taken {
    q: Arc<Queue>,
    args: LeaseArgs,
    /// The records, back to back.
    data: Vec<u8>,
    /// The leases and their records' lengths.
    leases: Vec<(Lease, usize)>,
    /// Why it stopped before `args.count`, if not for an empty queue.
    failure: Option<tvm::Error>,
    /// The sync the reply waits for (syncs put off).
    ticket: Option<SyncTicket>,
}

impl Taken {
    /// Leases what `q` has now, up to `args.count` and what one reply may
    /// hold, with its syncs put off (each fresh lease of an `always` queue
    /// waits for one all the same).
    fn take(q: Arc<Queue>, args: LeaseArgs) -> Taken {
        let size = q.record_size();
        let limit = args.count.min(records_per_reply(size));
        let mut t = Taken { q: q.clone(), args, data: Vec::new(), leases: Vec::new(), failure: None, ticket: None };
        let ((), ticket) = q.defer_syncs(|q| {
            while t.leases.len() < limit {
                let from = t.data.len();
                t.data.resize(from + size, 0);
                match q.pop_lease(&mut t.data[from..], Wait::NoWait, args.lease_time) {
                    Ok((len, lease)) => {
                        t.data.truncate(from + len);
                        t.leases.push((lease, len));
                    }
                    Err(e) => {
                        t.data.truncate(from);
                        match e.code() {
                            NO_DATA_FOUND => {}
                            // The in-flight bound after some: deliver those.
                            LEASE_LIMIT if !t.leases.is_empty() => {}
                            _ => t.failure = Some(e),
                        }
                        break;
                    }
                }
            }
        });
        t.ticket = ticket;
        t
    }

    /// Hands the leases to `client` and writes the reply: one entry, or an
    /// array of them (COUNT given), or the error that stopped the first;
    /// false (nothing written) when there was nothing. The reply waits for
    /// the syncs put off ([`OnFailure::Deliver`]: the records are the
    /// client's now).
    fn write(mut self, client: &mut Client, out: &mut Vec<u8>) -> bool {
        let leases = std::mem::take(&mut self.leases);
        if leases.is_empty() {
            return match self.failure.take() {
                Some(e) => {
                    reply::queue_error(out, self.q.id(), &e);
                    true
                }
                None => false,
            };
        }
        let at = out.len();
        if self.args.array {
            resp::array_header(out, leases.len());
        }
        let mut from = 0;
        for &(lease, len) in &leases {
            let id = client.leases.insert(&self.q, lease);
            lease_entry(out, id, lease.deliveries(), &self.data[from..from + len]);
            from += len;
        }
        client.leases.granted(leases.len());
        client.unsynced.add(&self.q, self.ticket, at..out.len(), leases.len() as u64, OnFailure::Deliver);
        true
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        for (lease, _) in &self.leases {
            let _ = give_back(&self.q, lease);
        }
    }
}

/// A lease as a reply gives it: `[id, deliveries, record]`.
fn lease_entry(out: &mut Vec<u8>, (_, pos, tag): LeaseId, deliveries: u32, record: &[u8]) {
    resp::array_header(out, 3);
    resp::bulk(out, format!("{pos}-{tag}").as_bytes());
    resp::integer(out, i64::from(deliveries));
    resp::bulk(out, record);
}

#[cfg(test)]
mod tests {
    use super::*;
    use tvm::error::{LEASE_EXPIRED, LEASE_INVALID};

    #[test]
    fn ids_are_parsed_strictly() {
        let dir = std::env::temp_dir().join(format!("tvmq-lease-ids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut spec = tvm::Spec::new(8, 8);
        spec.leases = Some(tvm::LeaseSpec::default());
        Queue::create(&dir, 5, &spec).unwrap();
        let q = Arc::new(Queue::open(&dir, 5).unwrap());
        q.push(b"x").unwrap();
        let mut client = Client::new(1, true, String::new(), Arc::default());
        let mut out = Vec::new();
        assert!(take(&q, LeaseArgs { count: 1, lease_time: Duration::ZERO, array: false }, &mut client, &mut out));
        assert_eq!(client.leases.len(), 1);
        let text = String::from_utf8_lossy(&out).into_owned();
        let id = text.split("\r\n").nth(2).unwrap().to_owned();
        let (pos, tag) = id.split_once('-').unwrap();
        let (pos, tag): (u64, u64) = (pos.parse().unwrap(), tag.parse().unwrap());
        assert!(client.leases.get(&client.leases.find(&q, id.as_bytes()).unwrap()).is_some());
        let other = client.leases.find(&q, format!("{pos}-{}", tag + 1).as_bytes()).unwrap_err();
        assert_eq!(other.code(), LEASE_EXPIRED);
        for bad in [&b"x"[..], b"1", b"1-", b"-1", b"1-2-3", b"\xff"] {
            assert_eq!(client.leases.find(&q, bad).unwrap_err().code(), LEASE_INVALID, "{bad:?}");
        }
        // The error replies' words: the code's name, then its detail.
        let mut reply = Vec::new();
        reply::plain_error(&mut reply, &client.leases.find(&q, b"1-").unwrap_err());
        assert_eq!(reply, b"-LEASE_INVALID '1-' is not a lease id (<position>-<tag>)\r\n");
        // Dropped: released, so the record is there again.
        drop(client);
        assert_eq!(q.lease_stats().unwrap().released, 1);
        let mut client = Client::new(2, true, String::new(), Arc::default());
        out.clear();
        assert!(take(&q, LeaseArgs { count: 5, lease_time: Duration::ZERO, array: true }, &mut client, &mut out));
        assert!(out.starts_with(b"*1\r\n*3\r\n$"), "{}", String::from_utf8_lossy(&out));
        assert!(String::from_utf8_lossy(&out).contains(":2\r\n$1\r\nx\r\n"));
        drop(client);
        drop(q);
        Queue::drop_queue(&dir, 5).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

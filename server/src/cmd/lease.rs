//! Leases over RESP, in owner mode: TVMQ.LEASE (with a count, blocking with
//! a timeout), TVMQ.ACK, TVMQ.RELEASE (with a delay), TVMQ.REJECT,
//! TVMQ.EXTEND and TVMQ.LEASES (the queue's lease statistics). Why these
//! verbs and not Redis Streams' is in docs/protocol.md.
//!
//! A lease belongs to the connection that took it ([`Held`], in its
//! [`Client`]): only that connection can end or extend it, and when the
//! connection ends, however it ends (QUIT, EOF, a killed client, a client
//! that stopped reading and was dropped after `--write-timeout`, the
//! server stopping), every lease it still holds is released at once
//! (delivered again, its delivery count raised). A lease also runs out by
//! time, as locally. If the server process itself dies, the library's own
//! owner rule applies: the leases of a dead process are delivered again.
//!
//! On a durable queue with the `always` policy, each call's sync is run
//! off the worker, as pushes and pops are (see [`crate::durable`]): an
//! ack's reply (and a release's or a reject's that moved a record to the
//! dead-letter queue) is held until a sync covers it, and becomes a
//! `SYNC_FAILED` error if that sync fails (the client must not believe an
//! acknowledgement durable that is not); a lease is taken on a thread of
//! the runtime's blocking pool ([`take_durable`]), because the library
//! syncs the record saved in the lease table before it lets go of the
//! record's ring slot, and that sync cannot be put off; the reply is held
//! for the syncs it could put off (a record delivered again: its raised
//! delivery count) and written even if they fail, as a pop's is (the
//! records are the client's now; a machine crash may deliver them again).
//!
//! A lease id is `<position>-<tag>` (two decimal words, the shape of a
//! stream entry id): the record's position in its queue and the lease
//! entry and generation of the delivery (`Lease::delivery_id`), so an id
//! never names another delivery, even after a reconnection.

use super::context::{Client, Ctx, parse_int};
use super::queue::{key_error, null_array};
use crate::durable::OnFailure;
use crate::reply;
use resp::{Proto, Request};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tvm::error::{LEASE_EXPIRED, LEASE_LIMIT, NO_DATA_FOUND};
use tvm::{Durability, Lease, Queue, SyncTicket, Wait};

/// How often a client blocked in TVMQ.LEASE looks again without a push:
/// records released, or whose lease ran out, move no push count.
pub(crate) const LEASE_RECHECK: Duration = Duration::from_millis(10);

/// Held leases past which the expired ones are forgotten at the next lease.
const PRUNE_AT: usize = 4096;

/// (queue id, position, tag): a lease as its id names it.
type LeaseKey = (u32, u64, u64);

/// The leases one connection holds, released when it ends.
#[derive(Default)]
pub(crate) struct Held {
    map: HashMap<LeaseKey, (Arc<Queue>, Lease)>,
    /// The map's size after the last prune.
    pruned: usize,
}

impl Held {
    fn insert(&mut self, q: &Arc<Queue>, lease: Lease) -> LeaseKey {
        if self.map.len() >= PRUNE_AT.max(2 * self.pruned) {
            // Leases that ran out (no call can end them any more).
            self.map.retain(|_, (_, l)| !l.remaining().is_zero());
            self.pruned = self.map.len();
        }
        let (pos, tag) = lease.delivery_id();
        let key = (q.id(), pos, tag);
        self.map.insert(key, (q.clone(), lease));
        key
    }

    /// Leases held now (expired ones not yet forgotten included).
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Releases every lease held (delay 0): delivered again at once. On an
    /// `always` queue the syncs are put off and not waited for (nobody is
    /// told anything): the next sync of the queue covers them, and a
    /// machine crash before it delivers the records again all the same.
    /// A lease at its delivery limit on a queue with a dead-letter queue
    /// goes there, which may open that queue and sync it: those are
    /// released off the worker ([`Returned`]).
    pub(crate) fn release_all(&mut self) {
        let mut later = Returned(Vec::new());
        for (_, (q, lease)) in self.map.drain() {
            if may_dead_letter(&q, &lease, false) {
                later.0.push((q, lease));
                continue;
            }
            // Refused: it ran out, or the queue was dropped; nothing to give back.
            let _ = q.defer_syncs(|q| q.release(&lease, Duration::ZERO));
        }
        if !later.0.is_empty() {
            later.release_off_worker();
        }
        self.pruned = 0;
    }
}

/// Leases of a connection that ended, to release off the worker (each may
/// move its record to a dead-letter queue); released wherever this is
/// dropped if that never runs.
struct Returned(Vec<(Arc<Queue>, Lease)>);

impl Returned {
    /// On a thread of the runtime's blocking pool (here, outside a runtime).
    fn release_off_worker(self) {
        off_worker(move || drop(self));
    }
}

/// Runs `f` on a thread of the runtime's blocking pool, not waited for
/// (here, outside a runtime).
fn off_worker(f: impl FnOnce() + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(f)),
        Err(_) => f(),
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        for (q, lease) in self.0.drain(..) {
            let _ = q.defer_syncs(|q| q.release(&lease, Duration::ZERO));
        }
    }
}

/// Would ending `lease` of `q` (`reject`, or a release) move its record to
/// a dead-letter queue, which may open that queue and sync it?
fn may_dead_letter(q: &Queue, lease: &Lease, reject: bool) -> bool {
    let Some(spec) = &q.info().leases else { return false };
    spec.dead_letter.is_some() && (reject || (spec.max_deliveries > 0 && lease.deliveries() >= spec.max_deliveries))
}

/// Has moved off the worker the records that a sweep run here found bound
/// for the dead-letter queue of `q` (workers leave them: see
/// `Queue::sweeps_move_dead_letters`). A load when there are none.
#[inline]
pub(crate) fn dead_letters_off_worker(q: &Arc<Queue>) {
    if q.dead_letters_due() {
        move_dead_letters_off_worker(q.clone());
    }
}

#[cold]
fn move_dead_letters_off_worker(q: Arc<Queue>) {
    off_worker(move || q.move_dead_letters());
}

impl Drop for Held {
    /// Owner mode: a connection's leases return to the queue when it ends.
    fn drop(&mut self) {
        self.release_all();
    }
}

/// What a client blocked in TVMQ.LEASE wants.
#[derive(Clone, Copy)]
pub(crate) struct Want {
    count: usize,
    lease_time: Duration,
    /// Reply with an array of entries (COUNT given), else one entry.
    array: bool,
}

/// Milliseconds given as an argument: 0 or more.
fn millis(arg: &[u8]) -> Option<Duration> {
    parse_int(arg).and_then(|v| u64::try_from(v).ok()).map(Duration::from_millis)
}

/// The queue of `key` (never created), writing the error reply if there is none.
fn queue(ctx: &mut Ctx<'_>, key: &[u8], out: &mut Vec<u8>) -> Option<Arc<Queue>> {
    match ctx.client.last.resolve(ctx.shared, ctx.keys, key) {
        Ok(q) => Some(q.clone()),
        Err(e) => {
            key_error(out, key, &e);
            None
        }
    }
}

/// What TVMQ.LEASE leaves to the connection.
pub(crate) enum Next {
    /// The reply is written.
    Done,
    /// Nothing to lease yet: block on the queue (`None`: forever).
    Block(Arc<Queue>, Option<Duration>, Want),
    /// An `always` queue: lease off the worker ([`take_durable`]).
    Durable(DurableLease),
}

/// A TVMQ.LEASE of an `always` queue, for the connection to run (see
/// `blocking::lease_durable`).
pub(crate) struct DurableLease {
    pub(crate) key: Vec<u8>,
    pub(crate) q: Arc<Queue>,
    /// `None`: no BLOCK; `Some(None)`: forever.
    pub(crate) block: Option<Option<Duration>>,
    pub(crate) want: Want,
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
pub(crate) fn lease(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Next {
    let mut want = Want { count: 1, lease_time: Duration::ZERO, array: false };
    let mut block = None;
    let mut i = 2;
    while i < req.len() {
        let opt = req.arg(buf, i);
        let Some(val) = req.get(buf, i + 1) else {
            reply::syntax_error(out);
            return Next::Done;
        };
        if opt.eq_ignore_ascii_case(b"COUNT") {
            match parse_int(val) {
                Some(n) if n > 0 => want.count = n as usize,
                _ => {
                    resp::error(out, b"ERR COUNT must be a positive integer");
                    return Next::Done;
                }
            }
            want.array = true;
        } else if opt.eq_ignore_ascii_case(b"BLOCK") {
            match millis(val) {
                Some(d) => block = Some(d),
                None => {
                    resp::error(out, b"ERR BLOCK must be 0 or more milliseconds");
                    return Next::Done;
                }
            }
        } else if opt.eq_ignore_ascii_case(b"FOR") {
            match millis(val) {
                Some(d) => want.lease_time = d,
                None => {
                    resp::error(out, b"ERR FOR must be 0 or more milliseconds");
                    return Next::Done;
                }
            }
        } else {
            reply::syntax_error(out);
            return Next::Done;
        }
        i += 2;
    }
    let key = req.arg(buf, 1);
    let Some(q) = queue(ctx, key, out) else { return Next::Done };
    // BLOCK 0: forever.
    let block = block.map(|d| (!d.is_zero()).then_some(d));
    if is_always(&q) {
        return Next::Durable(DurableLease { key: key.to_vec(), q, block, want });
    }
    if take(&q, want, &mut ctx.client.leases, ctx.client.proto, out) {
        return Next::Done;
    }
    match block {
        None => {
            empty(out, ctx.client.proto, want);
            Next::Done
        }
        Some(t) => Next::Block(q, t, want),
    }
}

/// The reply when nothing was leased.
pub(crate) fn empty(out: &mut Vec<u8>, proto: Proto, want: Want) {
    if want.array { null_array(out, proto) } else { resp::null(out, proto) }
}

/// Leases what `q` has now, up to `want.count`, writing the reply: true if
/// it wrote one (records, or an error), false (nothing written) when the
/// queue is empty.
pub(crate) fn take(q: &Arc<Queue>, want: Want, held: &mut Held, _proto: Proto, out: &mut Vec<u8>) -> bool {
    let size = q.record_size();
    let cap = (super::queue::MAX_POP_REPLY / size.max(1)).max(1);
    let limit = want.count.min(cap);
    let at = out.len();
    let mut record = vec![0u8; size];
    let mut n = 0;
    let mut failure = None;
    while n < limit {
        match q.pop_lease(&mut record, Wait::NoWait, want.lease_time) {
            Ok((len, lease)) => {
                let key = held.insert(q, lease);
                entry(out, key, lease.deliveries(), &record[..len]);
                n += 1;
            }
            Err(e) if e.code() == NO_DATA_FOUND => break,
            // The in-flight bound after some: deliver those.
            Err(e) if e.code() == LEASE_LIMIT && n > 0 => break,
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    dead_letters_off_worker(q);
    if n == 0 {
        return match failure {
            Some(e) => {
                reply::queue_error(out, q.id(), &e);
                true
            }
            None => false,
        };
    }
    if want.array {
        let mut header = Vec::with_capacity(16);
        resp::array_header(&mut header, n);
        out.splice(at..at, header);
    }
    true
}

/// Leases of an `always` queue, up to `want.count`, taken on a thread of
/// the runtime's blocking pool (each fresh lease waits there for the sync
/// of its saved record), then handed to `client` and written as [`take`]
/// writes them; the reply is held for the syncs put off meanwhile. False
/// (nothing written) when the queue is empty.
pub(crate) async fn take_durable(q: &Arc<Queue>, want: Want, client: &mut Client, out: &mut Vec<u8>) -> bool {
    let queue = q.clone();
    match tokio::task::spawn_blocking(move || Taken::take(queue, want)).await {
        Ok(taken) => taken.write(client, out),
        Err(e) => {
            // A panic, or the runtime stopping: whatever was taken went
            // back to the queue (`Taken`'s drop).
            reply::error_fmt(out, format_args!("ERR the lease of queue {} failed: {e}", q.id()));
            true
        }
    }
}

/// Leases taken off the worker, not yet handed to a connection: released
/// if dropped so (the connection ended meanwhile).
struct Taken {
    q: Arc<Queue>,
    want: Want,
    /// The records, back to back.
    data: Vec<u8>,
    /// The leases and their records' lengths.
    leases: Vec<(Lease, usize)>,
    /// Why it stopped before `want.count`, if not for an empty queue.
    failure: Option<tvm::Error>,
    /// The sync the reply waits for (syncs put off).
    ticket: Option<SyncTicket>,
}

impl Taken {
    /// Runs where it may wait for syncs.
    fn take(q: Arc<Queue>, want: Want) -> Taken {
        let size = q.record_size();
        let limit = want.count.min((super::queue::MAX_POP_REPLY / size.max(1)).max(1));
        let mut t = Taken { q: q.clone(), want, data: Vec::new(), leases: Vec::new(), failure: None, ticket: None };
        let ((), ticket) = q.defer_syncs(|q| {
            let mut record = vec![0u8; size];
            while t.leases.len() < limit {
                match q.pop_lease(&mut record, Wait::NoWait, want.lease_time) {
                    Ok((len, lease)) => {
                        t.data.extend_from_slice(&record[..len]);
                        t.leases.push((lease, len));
                    }
                    Err(e) if e.code() == NO_DATA_FOUND => break,
                    Err(e) if e.code() == LEASE_LIMIT && !t.leases.is_empty() => break,
                    Err(e) => {
                        t.failure = Some(e);
                        break;
                    }
                }
            }
        });
        t.ticket = ticket;
        t
    }

    /// Hands the leases to `client` and writes the reply (see [`take`]).
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
        if self.want.array {
            resp::array_header(out, leases.len());
        }
        let mut from = 0;
        for &(lease, len) in &leases {
            let key = client.leases.insert(&self.q, lease);
            entry(out, key, lease.deliveries(), &self.data[from..from + len]);
            from += len;
        }
        if let Some(t) = self.ticket {
            client.held.add(self.q.clone(), t, at..out.len(), leases.len() as u64, OnFailure::Deliver);
        }
        true
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        for (lease, _) in self.leases.drain(..) {
            let _ = self.q.defer_syncs(|q| q.release(&lease, Duration::ZERO));
        }
    }
}

/// `[id, deliveries, record]`.
fn entry(out: &mut Vec<u8>, (_, pos, tag): LeaseKey, deliveries: u32, record: &[u8]) {
    resp::array_header(out, 3);
    resp::bulk(out, format!("{pos}-{tag}").as_bytes());
    resp::integer(out, i64::from(deliveries));
    resp::bulk(out, record);
}

/// The lease named `id` on queue `q` held by this connection: `Err` with
/// the reply's words when the id is malformed (`LEASE_INVALID`) or names
/// no lease this connection holds (`LEASE_EXPIRED`).
fn find(held: &Held, q: &Queue, id: &[u8]) -> Result<LeaseKey, String> {
    let parsed = std::str::from_utf8(id).ok().and_then(|s| {
        let (a, b) = s.split_once('-')?;
        Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
    });
    let Some((pos, tag)) = parsed else {
        return Err(format!("LEASE_INVALID '{}' is not a lease id (<position>-<tag>)", reply::quoted_key(id)));
    };
    let key = (q.id(), pos, tag);
    if held.map.contains_key(&key) {
        Ok(key)
    } else {
        Err(format!(
            "LEASE_EXPIRED lease {pos}-{tag} of queue {} is not held by this connection: it ran out, was ended, or is another connection's",
            q.id()
        ))
    }
}

/// Runs `f` on the held lease `id` of the queue of `key`; the lease is
/// forgotten unless `f` gives a new one back (extension).
fn on_lease(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    id: &[u8],
    out: &mut Vec<u8>,
    f: impl FnOnce(&Queue, &mut Lease) -> tvm::Result<bool>,
) -> Option<LeaseKey> {
    let q = queue(ctx, key, out)?;
    let held = &mut ctx.client.leases;
    let k = match find(held, &q, id) {
        Ok(k) => k,
        Err(text) => {
            resp::error(out, text.as_bytes());
            return None;
        }
    };
    let (_, mut lease) = held.map.get(&k).cloned()?;
    // A release at the delivery limit and a reject move the record to the
    // dead-letter queue (run off the worker: see `DeadLetter`), and sync
    // (on an `always` queue): the reply is held.
    let at = out.len();
    let (done, ticket) = q.defer_syncs(|q| f(q, &mut lease));
    match done {
        Ok(true) => {
            held.map.remove(&k);
            Some(held.insert(&q, lease))
        }
        Ok(false) => {
            ended(ctx.client, &q, k, Ok(()), ticket, at, out);
            None
        }
        Err(e) => {
            ended(ctx.client, &q, k, Err(e), ticket, at, out);
            None
        }
    }
}

/// Writes the reply of a lease call that ended lease `k` of `q` (`done`),
/// whose reply starts at `at` and waits for `ticket`, and forgets the
/// lease unless it is still good.
fn ended(
    client: &mut Client,
    q: &Arc<Queue>,
    k: LeaseKey,
    done: tvm::Result<()>,
    ticket: Option<SyncTicket>,
    at: usize,
    out: &mut Vec<u8>,
) {
    let held = &mut client.leases;
    match done {
        Ok(()) => {
            held.map.remove(&k);
            resp::simple(out, b"OK");
            if let Some(t) = ticket {
                client.held.add(q.clone(), t, at..out.len(), 1, OnFailure::Error);
            }
        }
        Err(e) => {
            // Ran out (or gone): no call can end it any more.
            if e.code() == LEASE_EXPIRED || held.map.get(&k).is_some_and(|(_, l)| l.remaining().is_zero()) {
                held.map.remove(&k);
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
    key: LeaseKey,
    lease: Lease,
    /// `None`: a reject; else a release's delay.
    delay: Option<Duration>,
}

/// The lease `id` of the queue of `key`, if ending it (a reject, or a
/// release after `delay`) moves its record to a dead-letter queue; `None`
/// otherwise, and when there is no such lease (the call then runs on the
/// worker, which writes the error).
fn dead_letter_call(ctx: &mut Ctx<'_>, key: &[u8], id: &[u8], delay: Option<Duration>) -> Option<DeadLetter> {
    let q = ctx.client.last.resolve(ctx.shared, ctx.keys, key).ok()?.clone();
    q.info().leases.as_ref()?.dead_letter?;
    let k = find(&ctx.client.leases, &q, id).ok()?;
    let (_, lease) = ctx.client.leases.map.get(&k)?;
    let lease = *lease;
    may_dead_letter(&q, &lease, delay.is_none()).then_some(DeadLetter { q, key: k, lease, delay })
}

/// Runs a [`DeadLetter`] call on a thread of the runtime's blocking pool,
/// then writes its reply as on the worker (held for the source queue's
/// syncs it put off: the dead-letter queue's own sync ran there, before the
/// lease entry was freed).
pub(crate) async fn dead_letter_off_worker(d: DeadLetter, client: &mut Client, out: &mut Vec<u8>) {
    let DeadLetter { q, key, lease, delay } = d;
    let queue = q.clone();
    let ran = tokio::task::spawn_blocking(move || {
        queue.defer_syncs(|q| match delay {
            Some(delay) => q.release(&lease, delay),
            None => q.reject(&lease),
        })
    })
    .await;
    let at = out.len();
    match ran {
        Ok((done, ticket)) => ended(client, &q, key, done, ticket, at, out),
        Err(e) => reply::error_fmt(out, format_args!("ERR the dead-letter move of queue {} failed: {e}", q.id())),
    }
}

/// TVMQ.ACK key id [id ...]: acknowledges leases of this connection. Reply:
/// how many were acknowledged (an id that names no lease held, or one that
/// ran out, counts 0, as in XACK); a malformed id is an error. On an
/// `always` queue the reply is held until a sync covers the acks, and is a
/// `SYNC_FAILED` error if that sync fails.
pub(crate) fn ack(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    let Some(q) = queue(ctx, key, out) else { return };
    let held = &mut ctx.client.leases;
    let at = out.len();
    let (acked, ticket) = q.defer_syncs(|q| {
        let mut acked = 0;
        for id in req.iter(buf).skip(2) {
            let k = match find(held, q, id) {
                Ok(k) => k,
                Err(text) if text.starts_with("LEASE_INVALID") => {
                    resp::error(out, text.as_bytes());
                    return acked;
                }
                Err(_) => continue,
            };
            let Some((_, lease)) = held.map.remove(&k) else { continue };
            match q.ack(&lease) {
                Ok(()) => acked += 1,
                Err(e) if e.code() == LEASE_EXPIRED => {}
                Err(e) => {
                    reply::queue_error(out, q.id(), &e);
                    return acked;
                }
            }
        }
        resp::integer(out, acked);
        acked
    });
    if let Some(t) = ticket {
        ctx.client.held.add(q, t, at..out.len(), acked as u64, OnFailure::Error);
    }
}

/// TVMQ.RELEASE key id [DELAY ms]: puts the record back, delivered again
/// after the delay (at the delivery limit: to the dead-letter queue, off
/// the worker: `Some`).
pub(crate) fn release(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<DeadLetter> {
    let delay = match (req.get(buf, 3), req.get(buf, 4), req.len()) {
        (None, _, 3) => Duration::ZERO,
        (Some(opt), Some(v), 5) if opt.eq_ignore_ascii_case(b"DELAY") => match millis(v) {
            Some(d) => d,
            None => {
                resp::error(out, b"ERR DELAY must be 0 or more milliseconds");
                return None;
            }
        },
        _ => {
            reply::syntax_error(out);
            return None;
        }
    };
    let (key, id) = (req.arg(buf, 1), req.arg(buf, 2));
    if let Some(d) = dead_letter_call(ctx, key, id, Some(delay)) {
        return Some(d);
    }
    on_lease(ctx, key, id, out, |q, l| q.release(l, delay).map(|()| false));
    None
}

/// TVMQ.REJECT key id: to the dead-letter queue (off the worker: `Some`),
/// or dropped without one.
pub(crate) fn reject(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<DeadLetter> {
    let (key, id) = (req.arg(buf, 1), req.arg(buf, 2));
    if let Some(d) = dead_letter_call(ctx, key, id, None) {
        return Some(d);
    }
    on_lease(ctx, key, id, out, |q, l| q.reject(l).map(|()| false));
    None
}

/// TVMQ.EXTEND key id ms: the lease runs out ms from now (0: the queue's
/// lease time). Reply: the lease's new id (the old one is stale).
pub(crate) fn extend(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let Some(time) = millis(req.arg(buf, 3)) else {
        return resp::error(out, b"ERR the lease time must be 0 or more milliseconds");
    };
    let new = on_lease(ctx, req.arg(buf, 1), req.arg(buf, 2), out, |q, l| q.extend_lease(l, time).map(|()| true));
    if let Some((_, pos, tag)) = new {
        resp::bulk(out, format!("{pos}-{tag}").as_bytes());
    }
}

/// TVMQ.LEASES key: the queue's lease statistics (a map; RESP2: a flat
/// array of names and values), and how many leases this connection holds.
pub(crate) fn stats(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) {
    let key = req.arg(buf, 1);
    let Some(q) = queue(ctx, key, out) else { return };
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

/// Leases for a client blocked in TVMQ.LEASE (see [`take`]; an `always`
/// queue's go through [`take_durable`] instead).
pub(crate) fn try_blocked(q: &Arc<Queue>, want: Want, client: &mut Client, out: &mut Vec<u8>) -> bool {
    take(q, want, &mut client.leases, client.proto, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_parsed_strictly() {
        let dir = std::env::temp_dir().join(format!("tvmq-lease-ids-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut spec = tvm::Spec::new(8, 8);
        spec.leases = Some(tvm::LeaseSpec::default());
        Queue::create(&dir, 5, &spec).unwrap();
        let q = Arc::new(Queue::open(&dir, 5).unwrap());
        q.push(b"x").unwrap();
        let mut held = Held::default();
        let mut out = Vec::new();
        assert!(take(
            &q,
            Want { count: 1, lease_time: Duration::ZERO, array: false },
            &mut held,
            Proto::Resp2,
            &mut out
        ));
        assert_eq!(held.len(), 1);
        let (&(_, pos, tag), _) = held.map.iter().next().unwrap();
        assert!(find(&held, &q, format!("{pos}-{tag}").as_bytes()).is_ok());
        assert!(find(&held, &q, format!("{pos}-{}", tag + 1).as_bytes()).unwrap_err().starts_with("LEASE_EXPIRED"));
        for bad in [&b"x"[..], b"1", b"1-", b"-1", b"1-2-3", b"\xff"] {
            assert!(find(&held, &q, bad).unwrap_err().starts_with("LEASE_INVALID"), "{bad:?}");
        }
        // Dropped: released, so the record is there again.
        drop(held);
        assert_eq!(q.lease_stats().unwrap().released, 1);
        let mut held = Held::default();
        out.clear();
        assert!(take(
            &q,
            Want { count: 5, lease_time: Duration::ZERO, array: true },
            &mut held,
            Proto::Resp2,
            &mut out
        ));
        assert!(out.starts_with(b"*1\r\n*3\r\n$"), "{}", String::from_utf8_lossy(&out));
        assert!(String::from_utf8_lossy(&out).contains(":2\r\n$1\r\nx\r\n"));
        drop(held);
        drop(q);
        Queue::drop_queue(&dir, 5).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

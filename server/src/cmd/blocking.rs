//! BLPOP and BRPOP key [key ...] timeout: the oldest record of the first
//! non-empty queue, or wait for one (see [`crate::waiters`] for how a
//! waiting client is woken, and in which order).

use super::context::{Client, Ctx, key_error};
use super::lease::{self, DurableLease, LeaseArgs, is_always, take_durable};
use super::off_worker;
use super::queue::pop_bulk;
use crate::durable::OnFailure;
use crate::reply::{self, null_array};
use crate::slice::Slicer;
use crate::state::ServerState;
use crate::waiters::{WaitList, Waiters};
use resp::{Proto, Request};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tvm::Queue;

/// The timeout argument: seconds, decimals allowed, 0 = forever. Redis's
/// errors for a bad one.
fn parse_timeout(arg: &[u8]) -> Result<Option<Duration>, &'static [u8]> {
    let bad: &'static [u8] = b"ERR timeout is not a float or out of range";
    let text = std::str::from_utf8(arg).map_err(|_| bad)?;
    // Rust also reads "inf", "nan" and "+1": Redis's strtold does too, but refuses NaN and
    // infinity, and so do we; no blanks (Rust refuses them).
    let secs: f64 = text.parse().map_err(|_| bad)?;
    if secs.is_nan() || secs.is_infinite() {
        return Err(bad);
    }
    if secs < 0.0 {
        return Err(b"ERR timeout is negative");
    }
    if secs == 0.0 {
        return Ok(None);
    }
    // Milliseconds, as Redis keeps them; out of range beyond what a deadline can hold.
    let ms = (secs * 1000.0).round();
    if ms > 1e15 {
        return Err(b"ERR timeout is out of range");
    }
    Ok(Some(Duration::from_millis(ms as u64)))
}

/// A client blocked in BLPOP/BRPOP.
pub(crate) struct Blocked {
    /// The keys as given (for the reply) and their queues, in order.
    keys: Vec<(Vec<u8>, Arc<Queue>)>,
    /// When to give up (None: never).
    pub(crate) deadline: Option<Instant>,
    /// The client's place in line.
    place: u64,
    /// The lists it is on (one per key, registered lazily).
    lists: Vec<Option<Arc<WaitList>>>,
    /// Where its wake-ups arrive.
    pub(crate) notify: Arc<Notify>,
    /// TVMQ.LEASE: what it leases (its one key), instead of popping.
    lease: Option<LeaseArgs>,
}

/// BLPOP/BRPOP: pops at once if a queue has a record (or writes the error)
/// and gives `None`, else gives the client to block. The keys are looked up
/// in slices ([`Slicer`]): a command naming a million keys lets the worker
/// serve its other clients meanwhile (nothing is popped or registered
/// before the last key is looked up).
pub(crate) async fn start(ctx: &mut Ctx<'_>, buf: &[u8], req: &Request, out: &mut Vec<u8>) -> Option<Blocked> {
    let n = req.len();
    let timeout = match parse_timeout(req.arg(buf, n - 1)) {
        Ok(t) => t,
        Err(text) => {
            resp::error(out, text);
            return None;
        }
    };
    // Existing queues first; the missing ones are then created together,
    // within the bounds (at most a few per command), or none is. A key named
    // twice (or two keys of one queue) counts once: a BLPOP naming one key
    // a million times holds one.
    let mut seen: HashSet<&[u8]> = HashSet::new();
    let mut ids: HashSet<u32> = HashSet::new();
    let mut found = Vec::new();
    let mut missing: Vec<&[u8]> = Vec::new();
    let auto_create = ctx.shared.args.auto_create.is_some();
    let mut last: &[u8] = &[];
    let mut slicer = Slicer::new();
    for i in 1..n - 1 {
        slicer.tick().await;
        let key = req.arg(buf, i);
        // The same key again (a comparison), or one seen before (a hash).
        if key == last || !seen.insert(key) {
            continue;
        }
        last = key;
        match crate::keys::find(ctx.shared, key) {
            Ok(None) if !auto_create => {
                key_error(out, key, &crate::keys::KeyError::NoSuchQueue);
                return None;
            }
            Ok(None) if missing.len() == crate::keys::MAX_CREATES_PER_COMMAND => {
                // One more than may be created: no need to look further.
                key_error(out, missing[0], &crate::keys::too_many_creates(missing.len() + 1, true));
                return None;
            }
            Ok(None) => {
                missing.push(key);
                found.push((key, None));
            }
            Ok(Some(q)) => {
                if ids.insert(q.id()) {
                    found.push((key, Some(q)));
                }
            }
            Err(e) => {
                key_error(out, key, &e);
                return None;
            }
        }
    }
    drop((seen, ids));
    if !missing.is_empty() {
        // Made off the worker; then the command runs again.
        ctx.client.create = Some(missing.iter().map(|k| k.to_vec()).collect());
        return None;
    }
    let mut keys = Vec::with_capacity(found.len());
    for (key, q) in found {
        match q {
            Some(q) => keys.push((key.to_vec(), q)),
            None => {
                key_error(out, key, &crate::keys::KeyError::NoSuchQueue);
                return None;
            }
        }
    }
    let mut blocked = Blocked {
        lists: vec![None; keys.len()],
        keys,
        deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
        place: ctx.shared.waiters.next_place(),
        notify: Arc::new(Notify::new()),
        lease: None,
    };
    if blocked.try_pop(ctx.client, out) {
        return None;
    }
    Some(blocked)
}

/// TVMQ.LEASE of an `always` queue: leases off the worker (this task
/// waits, the worker serves its other connections); when there is nothing,
/// the empty reply, or the client to block.
pub(crate) async fn lease_durable(
    d: DurableLease,
    shared: &ServerState,
    client: &mut Client,
    out: &mut Vec<u8>,
) -> Option<Blocked> {
    if take_durable(&shared.pool, &d.q, d.args, client, out).await {
        return None;
    }
    match d.block {
        None => {
            lease::empty(out, client.proto, d.args);
            None
        }
        Some(timeout) => Some(Blocked::lease(shared, &d.key, d.q, timeout, d.args)),
    }
}

impl Blocked {
    /// A client blocked in TVMQ.LEASE on `q` (its first try found nothing).
    pub(crate) fn lease(
        shared: &ServerState,
        key: &[u8],
        q: Arc<Queue>,
        timeout: Option<Duration>,
        args: LeaseArgs,
    ) -> Blocked {
        Blocked {
            keys: vec![(key.to_vec(), q)],
            deadline: timeout.and_then(|t| Instant::now().checked_add(t)),
            place: shared.waiters.next_place(),
            lists: vec![None],
            notify: Arc::new(Notify::new()),
            lease: Some(args),
        }
    }

    /// TVMQ.LEASE of an `always` queue: its queue and what it wants (the
    /// connection leases with [`take_durable`], off the worker).
    pub(crate) fn durable_lease(&self) -> Option<(Arc<Queue>, LeaseArgs)> {
        let args = self.lease?;
        let q = &self.keys[0].1;
        is_always(q).then(|| (q.clone(), args))
    }

    /// Pops from the first queue that has a record, writing the reply
    /// (`[key, record]`, or the queue's error); false if all are empty. A
    /// pop of an `always` queue waits in `client.unsynced` until a sync
    /// covers it. (TVMQ.LEASE: leases, owned by `client`.)
    pub(crate) fn try_pop(&mut self, client: &mut Client, out: &mut Vec<u8>) -> bool {
        if let Some(args) = self.lease {
            return lease::take(&self.keys[0].1, args, client, out);
        }
        for (key, q) in &self.keys {
            let mut failed = false;
            let popped = client.unsynced.run(q, out, OnFailure::Deliver, |q, out| {
                let mark = out.len();
                resp::array_header(out, 2);
                resp::bulk(out, key);
                match pop_bulk(q, out) {
                    Ok(true) => 1,
                    Ok(false) => {
                        out.truncate(mark);
                        0
                    }
                    Err(e) => {
                        out.truncate(mark);
                        reply::queue_error(out, q.id(), &e);
                        failed = true;
                        0
                    }
                }
            });
            off_worker::move_dead_letters(q);
            if popped > 0 || failed {
                return true;
            }
        }
        false
    }

    /// Puts the client (back) on the list of every queue it waits on,
    /// where a wake-up took it off.
    pub(crate) fn register(&mut self, shared: &ServerState) {
        for (i, (_, q)) in self.keys.iter().enumerate() {
            let on_list = self.lists[i].as_ref().is_some_and(|l| Waiters::contains(l, self.place));
            if !on_list {
                self.lists[i] = Some(shared.waiters.register(q, self.place, &self.notify, &shared.shutdown));
            }
        }
    }

    /// Writes the timeout reply: a null array (RESP2 `*-1`, RESP3 `_`).
    pub(crate) fn timed_out(&self, proto: Proto, out: &mut Vec<u8>) {
        match self.lease {
            Some(args) => lease::empty(out, proto, args),
            None => null_array(out, proto),
        }
    }
}

impl Drop for Blocked {
    /// Leaves every list; a wake-up this client received from a queue and
    /// did not use goes to the next client waiting there.
    fn drop(&mut self) {
        for list in self.lists.iter().flatten() {
            if !Waiters::unregister(list, self.place) {
                list.pass_on();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_as_redis_reads_them() {
        assert_eq!(parse_timeout(b"0"), Ok(None));
        assert_eq!(parse_timeout(b"0.0"), Ok(None));
        assert_eq!(parse_timeout(b"1.5"), Ok(Some(Duration::from_millis(1500))));
        assert_eq!(parse_timeout(b"0.01"), Ok(Some(Duration::from_millis(10))));
        assert_eq!(parse_timeout(b"-1"), Err(&b"ERR timeout is negative"[..]));
        for bad in [&b"x"[..], b"", b"nan", b"inf", b" 1", b"1s", b"\xff"] {
            assert_eq!(parse_timeout(bad), Err(&b"ERR timeout is not a float or out of range"[..]), "{bad:?}");
        }
        assert_eq!(parse_timeout(b"1e300"), Err(&b"ERR timeout is out of range"[..]));
    }
}

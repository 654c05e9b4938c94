//! Leases of tvmq serve for the lTvm* lease calls: TVMQ.LEASE, TVMQ.ACK,
//! TVMQ.RELEASE, TVMQ.REJECT, TVMQ.EXTEND (docs/protocol.md).
//!
//! A lease belongs to the connection that took it (the server's owner
//! mode), so every lease call of a handle goes through one connection: its
//! own, or, for a handle sharing a connection (lTvmShare), its private one
//! (a blocking lease would hold the shared one up, and the acknowledgement
//! must reach the connection holding the lease). When that connection
//! breaks, the server releases its leases (delivered again): a later call
//! with their tokens fails with LEASE_EXPIRED.
//!
//! On a Redis or a Redis Cluster the same calls run the lease script
//! (`redis_lease`): there a lease is not tied to a connection, and ends
//! by time only.

use super::reply::Answer;
use super::router::Flavor;
use super::{Client, Key, PopWait, unexpected};
use crate::client::conn::ReplyWait;
use crate::error::*;
use std::time::Duration;

/// A lease taken over the network: its queue, the server's id of it
/// (`<position>-<tag>`, two words) and the delivery count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NetLease {
    pub(crate) queue: u32,
    /// The shard of a spread queue (from 1; 0: the queue's own key).
    pub(crate) shard: u32,
    pub(crate) pos: u64,
    pub(crate) tag: u64,
    pub(crate) deliveries: u32,
}

impl NetLease {
    pub(crate) fn id(&self) -> String {
        format!("{}-{}", self.pos, self.tag)
    }
}

/// `<position>-<tag>` as the server writes it.
pub(crate) fn parse_id(id: &[u8]) -> Option<(u64, u64)> {
    let (a, b) = std::str::from_utf8(id).ok()?.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Copies a leased `value` into `out` (zero bytes after it); RECD_TOO_LONG
/// when it does not fit (the caller releases the lease).
pub(crate) fn deliver(value: &[u8], out: &mut [u8]) -> Result<()> {
    if value.len() > out.len() {
        return Err(Error::new(
            RECD_TOO_LONG,
            format!("a value of {} bytes does not fit the record of {} bytes: released", value.len(), out.len()),
        ));
    }
    out[..value.len()].copy_from_slice(value);
    out[value.len()..].fill(0);
    Ok(())
}

/// A server that does not know the command: it has no leases.
fn no_leases(e: Error) -> Error {
    if e.code() == SVR_EXCEPTION && e.detail().contains("unknown command") {
        return Error::new(NOT_SUPPT_OPT, "the server has no leases (tvmq serve has: TVMQ.LEASE)");
    }
    e
}

impl Client {
    /// A Redis (plain or cluster): the lease script, not tvmq serve's commands.
    fn on_redis(&self) -> bool {
        matches!(self.flavor, Flavor::Redis | Flavor::Cluster)
    }

    /// One lease command on queue `t`, on the connection holding the leases.
    fn lease_command(&mut self, t: u32, wait: ReplyWait, args: &[&[u8]]) -> Result<Answer> {
        let key = Key::of(t);
        let mut parts: Vec<&[u8]> = Vec::with_capacity(args.len() + 2);
        parts.push(args[0]);
        parts.push(key.as_bytes());
        parts.extend_from_slice(&args[1..]);
        self.exec_blocking(key, wait, |w| resp::command(w, &parts)).map_err(no_leases)
    }

    /// Leases the oldest record of queue `t` into `out` (zero bytes after a
    /// shorter one) for `lease_ms` ms (0: the queue's lease time), waiting
    /// for one as `wait` says. A record longer than `out` is released at
    /// once (delivered again) and RECD_TOO_LONG returned.
    pub(crate) fn pop_lease(&mut self, t: u32, out: &mut [u8], wait: PopWait, lease_ms: u64) -> Result<NetLease> {
        if self.on_redis() {
            return self.redis_pop_lease(t, out, wait, lease_ms);
        }
        let ms = lease_ms.to_string();
        let answer = match wait {
            PopWait::NoWait => self.lease_command(t, ReplyWait::Normal, &[b"TVMQ.LEASE", b"FOR", ms.as_bytes()])?,
            PopWait::Forever => {
                self.lease_command(t, ReplyWait::Forever, &[b"TVMQ.LEASE", b"FOR", ms.as_bytes(), b"BLOCK", b"0"])?
            }
        };
        let (id, deliveries, value) = match answer {
            Answer::Nil => return Err(Error::code_only(NO_DATA_FOUND)),
            Answer::Lease(id, d, v) => (id, d, v),
            a => return Err(unexpected("TVMQ.LEASE", &a)),
        };
        let Some((pos, tag)) = parse_id(&id) else {
            return Err(Error::new(SOCK_COM_EXCP, format!("unreadable lease id {:?}", String::from_utf8_lossy(&id))));
        };
        let lease =
            NetLease { queue: t, shard: 0, pos, tag, deliveries: u32::try_from(deliveries).unwrap_or(u32::MAX) };
        if let Err(e) = deliver(&value, out) {
            let _ = self.release(&lease, 0);
            return Err(e);
        }
        Ok(lease)
    }

    /// Acknowledges `done` and leases the next record of queue `t` (as
    /// [`Client::pop_lease`]): in one round trip on a Redis (a queue of one
    /// key, `done` of it), else the two calls. The outer error: the
    /// acknowledgement failed and nothing was done; the inner: it was
    /// acknowledged, then the lease failed.
    pub(crate) fn ack_pop_lease(
        &mut self,
        done: &NetLease,
        t: u32,
        out: &mut [u8],
        wait: PopWait,
        lease_ms: u64,
    ) -> Result<Result<NetLease>> {
        if self.on_redis() && done.queue == t && done.shard == 0 && !self.is_spread(t) {
            return self.redis_ack_pop_lease(done, t, out, wait, lease_ms);
        }
        self.ack(done)?;
        Ok(self.pop_lease(t, out, wait, lease_ms))
    }

    /// Acknowledges `lease`; LEASE_EXPIRED when the server holds no such
    /// lease for this connection (it ran out, was ended, or the connection
    /// broke since).
    pub(crate) fn ack(&mut self, lease: &NetLease) -> Result<()> {
        if self.on_redis() {
            return self.redis_end(lease, b"ACK", None).map(drop);
        }
        let id = lease.id();
        match self.lease_command(lease.queue, ReplyWait::Normal, &[b"TVMQ.ACK", id.as_bytes()])? {
            Answer::Int(1) => Ok(()),
            Answer::Int(_) => Err(Error::new(
                LEASE_EXPIRED,
                "the server holds no such lease for this connection: it ran out, was ended, or the connection broke",
            )),
            a => Err(unexpected("TVMQ.ACK", &a)),
        }
    }

    /// Puts the record of `lease` back, delivered again after `delay_ms`.
    pub(crate) fn release(&mut self, lease: &NetLease, delay_ms: u64) -> Result<()> {
        if self.on_redis() {
            return self.redis_end(lease, b"RELEASE", Some(delay_ms)).map(drop);
        }
        let (id, delay) = (lease.id(), delay_ms.to_string());
        let args: [&[u8]; 4] = [b"TVMQ.RELEASE", id.as_bytes(), b"DELAY", delay.as_bytes()];
        match self.lease_command(lease.queue, ReplyWait::Normal, &args)? {
            Answer::Ok => Ok(()),
            a => Err(unexpected("TVMQ.RELEASE", &a)),
        }
    }

    /// Moves the record of `lease` to the dead-letter queue (or drops it).
    pub(crate) fn reject(&mut self, lease: &NetLease) -> Result<()> {
        if self.on_redis() {
            return self.redis_end(lease, b"REJECT", None).map(drop);
        }
        let id = lease.id();
        match self.lease_command(lease.queue, ReplyWait::Normal, &[b"TVMQ.REJECT", id.as_bytes()])? {
            Answer::Ok => Ok(()),
            a => Err(unexpected("TVMQ.REJECT", &a)),
        }
    }

    /// The lease now runs out `lease_ms` from now (0: the queue's lease
    /// time); `lease` takes its new id.
    pub(crate) fn extend_lease(&mut self, lease: &mut NetLease, lease_ms: Duration) -> Result<()> {
        if self.on_redis() {
            let ms = u64::try_from(lease_ms.as_millis()).unwrap_or(u64::MAX);
            let (pos, tag) = self
                .redis_end(lease, b"EXTEND", Some(ms))?
                .ok_or_else(|| Error::new(SOCK_COM_EXCP, "the lease script gave no new lease id"))?;
            (lease.pos, lease.tag) = (pos, tag);
            return Ok(());
        }
        let (id, ms) = (lease.id(), lease_ms.as_millis().to_string());
        match self.lease_command(lease.queue, ReplyWait::Normal, &[b"TVMQ.EXTEND", id.as_bytes(), ms.as_bytes()])? {
            Answer::Value(new) => match parse_id(&new) {
                Some((pos, tag)) => {
                    lease.pos = pos;
                    lease.tag = tag;
                    Ok(())
                }
                None => Err(Error::new(SOCK_COM_EXCP, "unreadable lease id")),
            },
            a => Err(unexpected("TVMQ.EXTEND", &a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert_eq!(parse_id(b"17-12884901889"), Some((17, 12884901889)));
        for bad in [&b""[..], b"1", b"a-1", b"1-", b"1-2-3"] {
            assert_eq!(parse_id(bad), None);
        }
        let l = NetLease { queue: 1, shard: 0, pos: 3, tag: 4, deliveries: 1 };
        assert_eq!(l.id(), "3-4");
        let e = no_leases(Error::new(SVR_EXCEPTION, "the server answered: ERR unknown command 'TVMQ.LEASE'"));
        assert_eq!(e.code(), NOT_SUPPT_OPT);
    }
}

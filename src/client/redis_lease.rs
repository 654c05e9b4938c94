//! Leases on a Redis or a Redis Cluster: lTvmPopLease and its companions
//! over the keys of `lease.lua` (docs/client.md, "Leases on Redis"), every
//! one in the hash slot of the queue's own key, each call one script run
//! (EVALSHA) that also takes back what is due: expired leases, delayed
//! releases. No daemon, no connection-bound state: a consumer that dies
//! holding a lease has its record delivered again when the lease runs out.
//!
//! A blocking lease on an empty queue waits with `BLMOVE t {t}:stage`
//! (the record it moves is leased by the next run, taken before the
//! queue's own), for at most the time to the next deadline the script
//! reports, or [`POLL`] (a record released by another consumer wakes no
//! one: it is seen at the next look).

use super::lease::NetLease;
use super::reply::Answer;
use super::router::Flavor;
use super::script::Script;
use super::sentinel::master_lost;
use super::slot::key_slot;
use super::{Client, Key, PopWait, blpop_secs, unexpected};
use crate::client::conn::ReplyWait;
use crate::error::*;
use crate::spec::LeaseSpec;
use std::time::{Duration, Instant};

/// The lease script.
pub(crate) static LEASE_SCRIPT: Script = Script::new(include_str!("lease.lua"));

/// The longest a blocked lease waits before it looks again.
const POLL: Duration = Duration::from_millis(200);

/// What the client believes a queue's dead_letter option is before it has
/// asked (matches no value, so the first run tells it).
const UNKNOWN: &str = "?";

/// Outbox records moved on by one call at most (the rest by later calls).
const FORWARD_MAX: usize = 1000;

/// The names of a queue's lease keys besides its own (`{t}:<suffix>`).
pub(crate) const SUFFIXES: [&str; 9] = ["stage", "retry", "leased", "rec", "delayed", "opts", "stats", "seq", "dead"];

/// `{key}:<suffix>` (in the slot of `key`).
pub(crate) fn tagged(key: Key, suffix: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(key.as_bytes().len() + suffix.len() + 3);
    v.push(b'{');
    v.extend_from_slice(key.as_bytes());
    v.extend_from_slice(b"}:");
    v.extend_from_slice(suffix.as_bytes());
    v
}

fn shown(key: Key) -> String {
    String::from_utf8_lossy(key.as_bytes()).into_owned()
}

/// A run's reply: its status word, its second item (the outbox's length,
/// or the dead-letter option with `DL`) and the rest.
struct Run {
    status: Vec<u8>,
    second: Vec<u8>,
    rest: Vec<Vec<u8>>,
}

fn number(v: &[u8]) -> Option<i64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// What a handle knows of one queue key's lease keys: the dead-letter
/// option at the last run, and the script's keys made for it (kept: a
/// call builds none).
pub(crate) struct LeaseKeys {
    own: Key,
    dl: String,
    /// The dead-letter queue, and whether its records go through `{t}:dead`.
    target: Option<u32>,
    outbox: bool,
    keys: Vec<Vec<u8>>,
}

impl LeaseKeys {
    fn new(own: Key, dl: String, cluster: bool) -> Result<LeaseKeys> {
        // The dead-letter list: the queue named, or {t}:dead when that
        // queue is in another slot of a cluster (moved on by the client).
        let target = match dl.as_str() {
            "" | UNKNOWN => None,
            d => Some(d.parse::<u32>().map_err(|_| {
                Error::new(SVR_EXCEPTION, format!("dead_letter {d:?} of {{{}}}:opts is not a queue id", shown(own)))
            })?),
        };
        let outbox = target.is_some_and(|d| cluster && key_slot(Key::of(d).as_bytes()) != key_slot(own.as_bytes()));
        let mut keys: Vec<Vec<u8>> = vec![own.as_bytes().to_vec()];
        keys.extend(SUFFIXES[..8].iter().map(|s| tagged(own, s)));
        keys.push(match target {
            Some(d) if !outbox => Key::of(d).as_bytes().to_vec(),
            _ => tagged(own, "dead"),
        });
        Ok(LeaseKeys { own, dl, target, outbox, keys })
    }
}

impl Client {
    /// Forgets what it knew of queue key `own` (dropped).
    pub(crate) fn forget_dead_letter(&mut self, own: Key) {
        self.dead_letters.retain(|d| d.own != own);
    }

    /// Runs the lease script for queue key `own` (`op` and its arguments),
    /// learning the queue's dead-letter option first if need be, and moves
    /// the outbox on when the run says it holds records.
    fn run_lease(&mut self, own: Key, op: &[u8], args: &[&[u8]], replicate: bool) -> Result<Run> {
        let cluster = self.flavor == Flavor::Cluster;
        for _ in 0..3 {
            let at = match self.dead_letters.iter().position(|d| d.own == own) {
                Some(at) => at,
                None => {
                    self.dead_letters.push(LeaseKeys::new(own, UNKNOWN.to_owned(), cluster)?);
                    self.dead_letters.len() - 1
                }
            };
            // Taken out for the call (the client is borrowed by it), put back after.
            let lk = self.dead_letters.swap_remove(at);
            let r = self.run_lease_with(&lk, op, args, replicate);
            let (outbox, target) = (lk.outbox, lk.target);
            self.dead_letters.push(lk);
            let Run { status, second, rest } = r?;
            if status == b"DL" {
                let fresh = LeaseKeys::new(own, String::from_utf8_lossy(&second).into_owned(), cluster)?;
                self.forget_dead_letter(own);
                self.dead_letters.push(fresh);
                continue;
            }
            if let (true, Some(d), Some(n)) = (outbox, target, number(&second)) {
                if n > 0 {
                    self.forward_dead(own, d)?;
                }
            }
            return Ok(Run { status, second, rest });
        }
        Err(Error::new(SVR_EXCEPTION, format!("the dead_letter option of queue {} keeps changing", shown(own))))
    }

    /// One run of the lease script with the keys of `lk`: its status, its
    /// second item and the rest.
    fn run_lease_with(&mut self, lk: &LeaseKeys, op: &[u8], args: &[&[u8]], replicate: bool) -> Result<Run> {
        let key_refs: Vec<&[u8]> = lk.keys.iter().map(Vec::as_slice).collect();
        let mut argv: Vec<&[u8]> = vec![op, lk.dl.as_bytes(), if lk.outbox { b"1" } else { b"0" }];
        argv.extend_from_slice(args);
        let answer = self.eval(&LEASE_SCRIPT, lk.own, &key_refs, &argv, replicate)?;
        let Answer::Values(mut v) = answer else { return Err(unexpected("the lease script", &answer)) };
        if v.len() < 2 {
            return Err(unexpected("the lease script", &Answer::Values(v)));
        }
        let rest = v.split_off(2);
        Ok(Run { status: std::mem::take(&mut v[0]), second: std::mem::take(&mut v[1]), rest })
    }

    /// Moves the records of `{t}:dead` to queue `d` (in another slot): each
    /// is pushed, then removed (LREM of one equal value). At least once: a
    /// client that dies between the two, or two clients moving the same
    /// record at once, leave it twice in `d`, never lost.
    fn forward_dead(&mut self, own: Key, d: u32) -> Result<()> {
        let to = Key::of(d);
        let outbox = tagged(own, "dead");
        for _ in 0..FORWARD_MAX {
            let v = match self.exec(own, ReplyWait::Normal, |w| resp::command(w, &[b"LINDEX", &outbox, b"0"]))? {
                Answer::Nil => return Ok(()),
                Answer::Value(v) => v,
                a => return Err(unexpected("LINDEX", &a)),
            };
            self.exec_replicated(to, ReplyWait::Normal, |w| resp::command(w, &[b"RPUSH", to.as_bytes(), &v]))?;
            self.exec(own, ReplyWait::Normal, |w| resp::command(w, &[b"LREM", &outbox, b"1", &v]))?;
        }
        Ok(())
    }

    /// [`Client::pop_lease`] on a Redis (a spread queue: its shards in turn).
    pub(crate) fn redis_pop_lease(&mut self, t: u32, out: &mut [u8], wait: PopWait, lease_ms: u64) -> Result<NetLease> {
        let ms = lease_ms.to_string();
        // Behind sentinels, a lease call cut by a failover is made again on
        // the new master: a lease taken and unanswered runs out there (or
        // was lost with the old master), so nothing is lost.
        let deadline = Instant::now() + self.failover_bound();
        let again = |c: &Client, e: &Error| c.follows_master() && master_lost(e) && Instant::now() < deadline;
        loop {
            let order = self.pop_order(t);
            let mut soonest = -1i64;
            for &(shard, own) in &order {
                let run = match self.run_lease(own, b"LEASE", &[ms.as_bytes()], false) {
                    Err(e) if again(self, &e) => continue,
                    r => r?,
                };
                match (run.status.as_slice(), run.rest.as_slice()) {
                    (b"OK", [_, _, _]) => return self.leased(t, shard, &run.rest, out),
                    (b"EMPTY", [hint]) => {
                        let hint = number(hint).unwrap_or(-1);
                        if hint >= 0 && (soonest < 0 || hint < soonest) {
                            soonest = hint;
                        }
                    }
                    _ => return Err(Error::new(SOCK_COM_EXCP, "unexpected reply from the lease script")),
                }
            }
            if wait == PopWait::NoWait {
                return Err(Error::code_only(NO_DATA_FOUND));
            }
            let pause = match u64::try_from(soonest) {
                Ok(ms) => Duration::from_millis(ms.max(1)).min(POLL),
                Err(_) => POLL,
            };
            let key = order[0].1;
            let (stage, secs) = (tagged(key, "stage"), blpop_secs(pause));
            let cmd = |w: &mut Vec<u8>| {
                resp::command(w, &[b"BLMOVE", key.as_bytes(), &stage, b"LEFT", b"RIGHT", secs.as_bytes()])
            };
            match self.exec_blocking(key, ReplyWait::Extra(pause), cmd) {
                Ok(Answer::Nil | Answer::Value(_)) => {}
                Err(e) if again(self, &e) => {}
                Ok(a) => return Err(unexpected("BLMOVE", &a)),
                Err(e) => return Err(e),
            }
        }
    }

    /// The lease a run's reply `[member, deliveries, value]` gives, the
    /// value copied into `out` (too long: released, RECD_TOO_LONG).
    fn leased(&mut self, t: u32, shard: u32, rest: &[Vec<u8>], out: &mut [u8]) -> Result<NetLease> {
        let [member, n, value] = rest else { return Err(Error::new(SOCK_COM_EXCP, "unexpected lease reply")) };
        let (pos, tag) = super::lease::parse_id(member)
            .ok_or_else(|| Error::new(SOCK_COM_EXCP, "unreadable lease id from the lease script"))?;
        let deliveries = number(n).and_then(|n| u32::try_from(n).ok()).unwrap_or(u32::MAX);
        let lease = NetLease { queue: t, shard, pos, tag, deliveries };
        if let Err(e) = super::lease::deliver(value, out) {
            let _ = self.redis_end(&lease, b"RELEASE", Some(0));
            return Err(e);
        }
        Ok(lease)
    }

    /// lTvmAckPopLease on a Redis, queue `t` of one key: acknowledges
    /// `done` and leases the next record in one run (one round trip). The
    /// outer error: the acknowledgement failed, nothing done; the inner:
    /// acknowledged, then the lease failed.
    pub(crate) fn redis_ack_pop_lease(
        &mut self,
        done: &NetLease,
        t: u32,
        out: &mut [u8],
        wait: PopWait,
        lease_ms: u64,
    ) -> Result<Result<NetLease>> {
        let (member, ms) = (done.id(), lease_ms.to_string());
        let run = match self.run_lease(Key::of(t), b"ACKLEASE", &[member.as_bytes(), ms.as_bytes()], true) {
            Ok(run) => run,
            Err(e) if e.code() == LEASE_LIMIT => return Ok(Err(e)),
            Err(e) => return Err(e),
        };
        Ok(match (run.status.as_slice(), run.rest.as_slice()) {
            (b"OK", [_, _, _]) => self.leased(t, 0, &run.rest, out),
            (b"EMPTY", _) if wait == PopWait::NoWait => Err(Error::code_only(NO_DATA_FOUND)),
            (b"EMPTY", _) => self.redis_pop_lease(t, out, wait, lease_ms),
            _ => Err(Error::new(SOCK_COM_EXCP, "unexpected reply from the lease script")),
        })
    }

    /// Ends or changes `lease` on a Redis: ACK, RELEASE (delay ms), REJECT,
    /// EXTEND (lease ms); EXTEND returns the new id.
    pub(crate) fn redis_end(&mut self, lease: &NetLease, op: &[u8], ms: Option<u64>) -> Result<Option<(u64, u64)>> {
        let (member, ms) = (lease.id(), ms.unwrap_or(0).to_string());
        let own = self.shard(lease.queue, lease.shard)?;
        let run = self.run_lease(own, op, &[member.as_bytes(), ms.as_bytes()], true)?;
        match (run.status.as_slice(), run.rest.as_slice()) {
            (b"OK", []) => Ok(None),
            (b"OK", [new]) => Ok(super::lease::parse_id(new)),
            _ => Err(Error::new(SOCK_COM_EXCP, "unexpected reply from the lease script")),
        }
    }

    /// lTvmCreateQueueEx: on a Redis, the lease options of queue `t` in
    /// `{t}:opts` (TBL_ARD_EXIST when it has some already; nothing without
    /// leases); RMT_NOT_SUPPT on another server (tvmq serve).
    pub(crate) fn create_options(&mut self, t: u32, o: Option<&LeaseSpec>) -> Result<()> {
        if self.flavor == Flavor::Other {
            return Err(Error::new(
                RMT_NOT_SUPPT,
                "tvmq serve creates no queue over the network: create it on its machine (tvmq create)",
            ));
        }
        let Some(o) = o else { return Ok(()) };
        let (ms, max, leases) = (o.lease_ms.to_string(), o.max_deliveries.to_string(), o.max_leases.to_string());
        let dl = o.dead_letter.map(|d| d.to_string()).unwrap_or_default();
        let fields: [&[u8]; 8] = [
            b"lease_ms",
            ms.as_bytes(),
            b"max_deliveries",
            max.as_bytes(),
            b"dead_letter",
            dl.as_bytes(),
            b"max_leases",
            leases.as_bytes(),
        ];
        for key in self.queue_keys(t) {
            let opts = tagged(key, "opts");
            let mut args: Vec<&[u8]> = vec![b"EVAL", CREATE.as_bytes(), b"1", &opts];
            args.extend_from_slice(&fields);
            match self.exec_replicated(key, ReplyWait::Normal, |w| resp::command(w, &args))? {
                Answer::Int(1) => {}
                Answer::Int(_) => {
                    return Err(Error::new(
                        TBL_ARD_EXIST,
                        format!("queue {t} has lease options already ({{{}}}:opts)", shown(key)),
                    ));
                }
                a => return Err(unexpected("the options script", &a)),
            }
        }
        Ok(())
    }
}

/// Writes the options hash unless it exists (1: written, 0: it existed).
const CREATE: &str = "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end \
                      redis.call('HSET', KEYS[1], unpack(ARGV)) return 1";

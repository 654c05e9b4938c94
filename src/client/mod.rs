//! The network client behind `lTvmConnect` and the `lTvm*` calls: RESP over
//! TCP or a unix socket, to `tvmq serve`, a `redis-server` or a Redis
//! Cluster, with blocking std sockets and no runtime.
//!
//! | module | concern |
//! |---|---|
//! | `slot` | CRC16 hash slots, MOVED/ASK parsing |
//! | `tls` | TLS: the rustls configuration of a handle, the socket as rustls uses it |
//! | `conn` | one socket: connect with a timeout (and TLS), write, read and parse replies |
//! | `reply` | what a reply becomes: an answer, a tally of asynchronous pushes, a redirection; error words to codes |
//! | `router` | the commands in flight, per node; cluster routing and redirections |
//! | `pipeline` | one connection shared by many handles (combining, auto-pipelining) |
//! | `script` | Lua scripts of a Redis: EVALSHA, EVAL after NOSCRIPT; SHA-1 |
//! | `replicas` | lTvmRequireReplicas: WAIT after writes |
//! | `spread` | lTvmSpread: one queue over keys on every master of a cluster |
//! | `sentinel` | lTvmConnectSentinel: the master from the sentinels, followed through failovers |
//! | `lease` | the lease calls; tvmq serve's (TVMQ.LEASE, TVMQ.ACK, ...), on the connection that holds them |
//! | `redis_lease` | the lease calls on a Redis or a Redis Cluster (`lease.lua`) |
//! | this file | [`Client`]: a handle's view (push, pop, popup, asynchronous pushes, held values) |
//!
//! Conventions (docs/protocol.md): the key of queue `t` is its decimal id;
//! a record is one bulk string; `RPUSH` pushes, `LPOP`/`BLPOP` pop.

mod admin;
mod conn;
mod lease;
mod pipeline;
mod redis_lease;
mod replicas;
mod reply;
mod router;
mod script;
mod sentinel;
mod slot;
mod spread;
mod tls;

pub(crate) use conn::Addr;
pub(crate) use lease::NetLease;
pub(crate) use sentinel::Sentinels;
pub(crate) use tls::{Tls, TlsOptions};

/// How every connection of a client is made, beyond its address: TLS, and
/// the credentials given (AUTH) as soon as it is open.
#[derive(Clone, Default)]
pub(crate) struct Dial {
    /// TLS for every connection; None: plain TCP or a unix socket.
    pub(crate) tls: Option<Arc<Tls>>,
    /// AUTH sent on every new connection; None: none sent.
    pub(crate) auth: Option<Arc<Auth>>,
}

/// The credentials of `AUTH [user] password`.
pub(crate) struct Auth {
    /// The user (Redis 6 ACLs); None: the one-argument form.
    pub(crate) user: Option<Vec<u8>>,
    /// The password.
    pub(crate) password: Vec<u8>,
}

use crate::error::*;
use conn::ReplyWait;
use pipeline::Pipeline;
use reply::{Answer, Kind, Outcome, Tally};
use router::{Flavor, Router};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Unanswered asynchronous pushes a handle may have; the next one waits
/// for answers.
pub(crate) const WINDOW: usize = 1024;
/// Encoded commands are written once this many bytes are waiting (or
/// sooner: a synchronous call, a full window, lAsyWait).
pub(crate) const FLUSH_BYTES: usize = 64 * 1024;
/// Records asked for by one `LPOP key count` of lTvmPopup.
const POPUP_CHUNK: usize = 4096;

/// The key of a queue: its id in decimal, or a shard of a spread queue
/// (`spread`: `<t>.<i>.<n>`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Key {
    buf: [u8; 32],
    len: u8,
}

impl Key {
    /// A key of at most 32 bytes (longer is cut: the callers make short ones).
    pub(crate) fn named(name: &[u8]) -> Key {
        let mut buf = [0u8; 32];
        let len = name.len().min(32);
        buf[..len].copy_from_slice(&name[..len]);
        Key { buf, len: len as u8 }
    }

    pub(crate) fn of(t: u32) -> Key {
        let mut buf = [0u8; 32];
        let mut digits = [0u8; 10];
        let (mut v, mut n) = (t, 0);
        loop {
            digits[n] = b'0' + (v % 10) as u8;
            n += 1;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        for i in 0..n {
            buf[i] = digits[n - 1 - i];
        }
        Key { buf, len: n as u8 }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

/// How lTvmPop waits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PopWait {
    NoWait,
    Forever,
}

/// How long lTvmPopup waits.
#[derive(Clone, Copy)]
enum Until {
    Now,
    At(Instant),
    Forever,
}

enum Link {
    /// The handle's own connection(s).
    Own(Router),
    /// A connection shared with other handles.
    Shared(Arc<Pipeline>),
    /// Transient, while the link changes.
    Gone,
}

/// The network side of one handle.
pub(crate) struct Client {
    link: Link,
    /// A shared handle's own connection for blocking pops (which would hold
    /// up every other handle of a shared connection), opened when needed.
    private: Option<Router>,
    seed: Addr,
    timeout: Option<Duration>,
    /// TLS and AUTH for every connection the handle opens.
    dial: Dial,
    flavor: Flavor,
    tally: Arc<Tally>,
    /// Values popped and not delivered (longer than the caller's record),
    /// per queue, in order: the next pops of that queue return them first.
    held: Vec<(u32, VecDeque<Vec<u8>>)>,
    next: u64,
    /// The server takes `LPOP key count`; cleared when it refuses it.
    lpop_count: bool,
    /// lTvmRequireReplicas: the writes wait for replicas.
    replicas: Option<replicas::Replicas>,
    /// Keys pushed to asynchronously since the last lAsyWait (with replicas required).
    async_queues: Vec<Key>,
    /// Redis leases: each queue key's dead_letter option at the last run, and its script keys.
    dead_letters: Vec<redis_lease::LeaseKeys>,
    /// lTvmSpread: the queues spread over several keys.
    spread: Vec<(u32, spread::Spread)>,
    /// lTvmConnectSentinel: the sentinels that name the master.
    sentinels: Option<sentinel::Sentinels>,
}

fn unexpected(what: &str, a: &Answer) -> Error {
    Error::new(SOCK_COM_EXCP, format!("unexpected reply to {what}: {a:?}"))
}

/// BLPOP's timeout argument: seconds with millisecond precision, never 0
/// (which would mean "forever").
fn blpop_secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64().max(0.001))
}

impl Client {
    /// Connects to `addr` without TLS; see [`Router::connect`].
    #[cfg(test)]
    pub(crate) fn connect(addr: Addr, timeout: Option<Duration>) -> Result<Client> {
        Client::connect_with(addr, timeout, Dial::default())
    }

    /// Connects to `addr`, with the TLS and AUTH of `dial` (then every
    /// connection of the client is made with them); see [`Router::connect`].
    pub(crate) fn connect_with(addr: Addr, timeout: Option<Duration>, dial: Dial) -> Result<Client> {
        let router = Router::connect(&addr, timeout, dial.clone())?;
        Ok(Client::new(Link::Own(router), addr, timeout, dial))
    }

    /// Connects to the master the sentinels name (`dial` for the master and
    /// its successors, the sentinels' own in `sentinels`), and follows it
    /// through failovers; see [`sentinel`].
    pub(crate) fn connect_sentinel(
        sentinels: sentinel::Sentinels,
        timeout: Option<Duration>,
        dial: Dial,
    ) -> Result<Client> {
        let mut c = Client::new(Link::Gone, Addr::Tcp { host: String::new(), port: 0 }, timeout, dial);
        c.sentinels = Some(sentinels);
        let deadline = Instant::now() + c.failover_bound();
        c.follow_master(deadline)?;
        Ok(c)
    }

    fn new(link: Link, seed: Addr, timeout: Option<Duration>, dial: Dial) -> Client {
        Client {
            flavor: match &link {
                Link::Own(r) => r.flavor(),
                _ => Flavor::Redis,
            },
            link,
            private: None,
            seed,
            timeout,
            dial,
            tally: Arc::default(),
            held: Vec::new(),
            next: 0,
            lpop_count: true,
            replicas: None,
            async_queues: Vec::new(),
            dead_letters: Vec::new(),
            sentinels: None,
            spread: Vec::new(),
        }
    }

    /// A new client sharing this one's connection (which becomes shared).
    pub(crate) fn share(&mut self) -> Client {
        if let Link::Own(_) = self.link {
            if let Link::Own(router) = std::mem::replace(&mut self.link, Link::Gone) {
                self.link = Link::Shared(Arc::new(Pipeline::new(router)));
            }
        }
        let link = match &self.link {
            Link::Shared(s) => Link::Shared(s.clone()),
            _ => Link::Gone,
        };
        Client {
            link,
            private: None,
            seed: self.seed.clone(),
            timeout: self.timeout,
            dial: self.dial.clone(),
            flavor: self.flavor,
            tally: Arc::default(),
            held: Vec::new(),
            next: 0,
            lpop_count: self.lpop_count,
            replicas: self.replicas,
            async_queues: Vec::new(),
            dead_letters: Vec::new(),
            sentinels: None,
            spread: Vec::new(),
        }
    }

    fn ticket(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Runs one command on the handle's connection (following the master
    /// through a failover when the handle has sentinels).
    fn exec(&mut self, key: Key, wait: ReplyWait, encode: impl Fn(&mut Vec<u8>)) -> Outcome {
        self.with_failover(|c| c.exec_link(key, wait, &encode))
    }

    /// Runs one command on the handle's connection, as it is.
    fn exec_link(&mut self, key: Key, wait: ReplyWait, encode: impl FnOnce(&mut Vec<u8>)) -> Outcome {
        let id = self.ticket();
        match &mut self.link {
            Link::Own(r) => r.call(id, key.as_bytes(), wait, encode),
            Link::Shared(s) => s.call(key, wait, encode),
            Link::Gone => Err(Error::code_only(SERV_NOT_CONN)),
        }
    }

    /// Runs a command that may block the connection for long: on the
    /// handle's own connection, or on a shared handle's private one.
    fn exec_blocking(&mut self, key: Key, wait: ReplyWait, encode: impl Fn(&mut Vec<u8>)) -> Outcome {
        if !matches!(self.link, Link::Shared(_)) {
            return self.exec(key, wait, encode);
        }
        let id = self.ticket();
        let router = match &mut self.private {
            Some(r) => r,
            None => self.private.insert(Router::connect(&self.seed, self.timeout, self.dial.clone())?),
        };
        router.call(id, key.as_bytes(), wait, encode)
    }

    /// Pushes one record (RPUSH) and waits for the answer.
    pub(crate) fn push(&mut self, t: u32, rec: &[u8]) -> Result<()> {
        let key = self.push_key(t);
        match self.exec_replicated(key, ReplyWait::Normal, |w| resp::command(w, &[b"RPUSH", key.as_bytes(), rec]))? {
            Answer::Int(_) => Ok(()),
            a => Err(unexpected("RPUSH", &a)),
        }
    }

    /// Pushes one record without waiting for the answer. Fails at once with
    /// the first failure of an earlier asynchronous push not yet collected
    /// by [`Client::wait_async`] (the record is then not sent).
    pub(crate) fn push_async(&mut self, t: u32, rec: &[u8]) -> Result<()> {
        if let Some(e) = self.tally.failure() {
            return Err(e);
        }
        let key = self.push_key(t);
        if self.replicas.is_some() && !self.async_queues.contains(&key) {
            self.async_queues.push(key);
        }
        let encode = |w: &mut Vec<u8>| resp::command(w, &[b"RPUSH", key.as_bytes(), rec]);
        match &mut self.link {
            Link::Own(r) => {
                self.tally.sent();
                r.enqueue(key.as_bytes(), Kind::Async(self.tally.clone()), ReplyWait::Normal, encode)?;
                if r.unwritten() >= FLUSH_BYTES {
                    r.flush();
                    r.pump();
                }
                if self.tally.outstanding() >= WINDOW {
                    let tally = &self.tally;
                    r.settle_until(|| tally.outstanding() <= WINDOW / 2);
                }
                Ok(())
            }
            Link::Shared(s) => {
                s.push_async(key, &self.tally, encode);
                Ok(())
            }
            Link::Gone => Err(Error::code_only(SERV_NOT_CONN)),
        }
    }

    /// Waits for the answer of every asynchronous push. Returns how many
    /// went in since the last call, and the first failure if any.
    pub(crate) fn wait_async(&mut self) -> (usize, Option<Error>) {
        let settled = match &mut self.link {
            Link::Own(r) => {
                let tally = &self.tally;
                r.settle_until(|| tally.outstanding() == 0);
                true
            }
            Link::Shared(s) => s.settle(&self.tally),
            Link::Gone => true,
        };
        let (n, first) = self.tally.collect();
        if !settled && first.is_none() {
            return (n, Some(Error::new(SVR_EXCEPTION, "the shared connection failed")));
        }
        if let Some(e) = &first {
            // The master gone: the next pushes go to its successor.
            if self.sentinels.is_some() && sentinel::master_lost(e) {
                let _ = self.follow_master(Instant::now() + self.failover_bound());
            }
        } else if n > 0 {
            if let Err(e) = self.wait_replicas_async() {
                return (n, Some(e));
            }
        }
        self.async_queues.clear();
        (n, first)
    }

    fn held(&mut self, t: u32) -> Option<&mut VecDeque<Vec<u8>>> {
        self.held.iter_mut().find(|h| h.0 == t).map(|h| &mut h.1).filter(|q| !q.is_empty())
    }

    fn hold(&mut self, t: u32, v: Vec<u8>) {
        match self.held.iter_mut().find(|h| h.0 == t) {
            Some(h) => h.1.push_back(v),
            None => self.held.push((t, VecDeque::from([v]))),
        }
    }

    /// Takes the oldest record of queue `t` into `out` (zero bytes after a
    /// shorter one). A value longer than `out` is kept by the handle
    /// (RECD_TOO_LONG) and returned first by a later pop with room for it.
    pub(crate) fn pop(&mut self, t: u32, out: &mut [u8], wait: PopWait) -> Result<()> {
        let value = match self.held(t) {
            Some(q) => match q.front() {
                Some(v) if v.len() > out.len() => return Err(too_long(v.len(), out.len())),
                _ => q.pop_front(),
            },
            None => None,
        };
        let value = match value {
            Some(v) => v,
            None => self.pop_value(t, wait)?,
        };
        if value.len() > out.len() {
            let e = too_long(value.len(), out.len());
            self.hold(t, value);
            return Err(e);
        }
        out[..value.len()].copy_from_slice(&value);
        out[value.len()..].fill(0);
        Ok(())
    }

    fn pop_value(&mut self, t: u32, wait: PopWait) -> Result<Vec<u8>> {
        if self.is_spread(t) {
            return self.spread_pop(t, wait);
        }
        let key = Key::of(t);
        let lpop = |w: &mut Vec<u8>| resp::command(w, &[b"LPOP", key.as_bytes()]);
        let blpop = |w: &mut Vec<u8>| resp::command(w, &[b"BLPOP", key.as_bytes(), b"0"]);
        let answer = match (wait, &self.link) {
            (PopWait::NoWait, _) => self.exec(key, ReplyWait::Normal, lpop)?,
            // On a shared connection, try without blocking it first.
            (PopWait::Forever, Link::Shared(_)) => match self.exec(key, ReplyWait::Normal, lpop)? {
                Answer::Nil => self.exec_blocking(key, ReplyWait::Forever, blpop)?,
                a => a,
            },
            (PopWait::Forever, _) => self.exec(key, ReplyWait::Forever, blpop)?,
        };
        match answer {
            Answer::Nil => Err(Error::code_only(NO_DATA_FOUND)),
            Answer::Value(v) => Ok(v),
            Answer::Values(mut kv) if kv.len() == 2 => Ok(kv.pop().unwrap_or_default()),
            a => Err(unexpected("LPOP/BLPOP", &a)),
        }
    }

    /// Takes what queue `t` has now, up to `want` records.
    fn take_now(&mut self, key: Key, want: usize) -> Result<Vec<Vec<u8>>> {
        if self.lpop_count && want > 1 {
            let count = want.min(POPUP_CHUNK).to_string();
            let cmd = |w: &mut Vec<u8>| resp::command(w, &[b"LPOP", key.as_bytes(), count.as_bytes()]);
            match self.exec(key, ReplyWait::Normal, cmd) {
                Ok(Answer::Nil) => return Ok(Vec::new()),
                Ok(Answer::Values(v)) => return Ok(v),
                Ok(Answer::Value(v)) => return Ok(vec![v]),
                Ok(a) => return Err(unexpected("LPOP with a count", &a)),
                Err(e)
                    if e.code() == SVR_EXCEPTION
                        && (e.detail().contains("wrong number of arguments") || e.detail().contains("syntax")) =>
                {
                    self.lpop_count = false;
                }
                Err(e) => return Err(e),
            }
        }
        let cmd = |w: &mut Vec<u8>| resp::command(w, &[b"LPOP", key.as_bytes()]);
        match self.exec(key, ReplyWait::Normal, cmd)? {
            Answer::Nil => Ok(Vec::new()),
            Answer::Value(v) => Ok(vec![v]),
            a => Err(unexpected("LPOP", &a)),
        }
    }

    /// Pops up to `expect` records of queue `t` (each at most `each` bytes)
    /// into `sink`, waiting up to `secs` seconds in total (0: not at all).
    /// Returns how many were delivered and why it stopped short: NO_DATA_FOUND
    /// (secs 0, nothing more), MQUE_WAIT_TMO (time is up), RECD_TOO_LONG
    /// (a value longer than `each`, kept with those after it), or any error.
    pub(crate) fn popup(
        &mut self,
        t: u32,
        each: usize,
        expect: usize,
        secs: u64,
        sink: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> (usize, Option<Error>) {
        let mut got = 0;
        while got < expect {
            let Some(q) = self.held(t) else { break };
            match q.front() {
                Some(v) if v.len() > each => return (got, Some(too_long(v.len(), each))),
                Some(v) => {
                    if let Err(e) = sink(v) {
                        return (got, Some(e));
                    }
                    q.pop_front();
                    got += 1;
                }
                None => break,
            }
        }
        if self.is_spread(t) {
            return (got, Some(Error::new(NOT_SUPPT_OPT, "lTvmPopup on a spread queue: pop with lTvmPop")));
        }
        let until = match secs {
            0 => Until::Now,
            s => Instant::now().checked_add(Duration::from_secs(s)).map_or(Until::Forever, Until::At),
        };
        let key = Key::of(t);
        while got < expect {
            let mut values = match self.take_now(key, expect - got) {
                Ok(v) => v,
                Err(e) => return (got, Some(e)),
            };
            if values.is_empty() {
                let left = match until {
                    Until::Now => return (got, Some(Error::code_only(NO_DATA_FOUND))),
                    Until::Forever => None,
                    Until::At(at) => match at.checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => Some(left),
                        _ => return (got, Some(Error::code_only(MQUE_WAIT_TMO))),
                    },
                };
                let arg = left.map_or_else(|| "0".to_owned(), blpop_secs);
                let wait = left.map_or(ReplyWait::Forever, ReplyWait::Extra);
                let cmd = |w: &mut Vec<u8>| resp::command(w, &[b"BLPOP", key.as_bytes(), arg.as_bytes()]);
                match self.exec_blocking(key, wait, cmd) {
                    Ok(Answer::Nil) => return (got, Some(Error::code_only(MQUE_WAIT_TMO))),
                    Ok(Answer::Values(mut kv)) if kv.len() == 2 => values = vec![kv.pop().unwrap_or_default()],
                    Ok(a) => return (got, Some(unexpected("BLPOP", &a))),
                    Err(e) => return (got, Some(e)),
                }
            }
            let mut stop = None;
            for v in values {
                if stop.is_none() && v.len() > each {
                    stop = Some(too_long(v.len(), each));
                }
                if stop.is_none() {
                    match sink(&v) {
                        Ok(()) => {
                            got += 1;
                            continue;
                        }
                        Err(e) => stop = Some(e),
                    }
                }
                self.hold(t, v);
            }
            if let Some(e) = stop {
                return (got, Some(e));
            }
        }
        (got, None)
    }

    /// Puts the held values back into their queues: at the head with
    /// `LPUSH` on Redis (so they come out first, in order), at the tail with
    /// `RPUSH` on other servers (tvmq serve, whose queues are FIFO at both
    /// ends). A value that cannot be put back is reported on stderr.
    fn put_back(&mut self) {
        for (t, values) in std::mem::take(&mut self.held) {
            if values.is_empty() {
                continue;
            }
            let key = Key::of(t);
            let (cmd, order): (&[u8], Vec<&[u8]>) = match self.flavor {
                Flavor::Redis | Flavor::Cluster => (b"LPUSH", values.iter().rev().map(Vec::as_slice).collect()),
                Flavor::Other => (b"RPUSH", values.iter().map(Vec::as_slice).collect()),
            };
            let mut args: Vec<&[u8]> = vec![cmd, key.as_bytes()];
            args.extend(order);
            let r = self.exec(key, ReplyWait::Normal, |w| resp::command(w, &args));
            if let Err(e) = r {
                eprintln!("tvmq: {} record(s) popped from queue {t} and held could not be put back: {e}", values.len());
            }
        }
    }

    /// Ends the client: waits for every asynchronous push, puts held values
    /// back, closes its connections (a shared one when its last handle
    /// goes). Returns what [`Client::wait_async`] returns.
    pub(crate) fn close(mut self) -> (usize, Option<Error>) {
        self.finish()
    }

    fn finish(&mut self) -> (usize, Option<Error>) {
        let r = self.wait_async();
        self.put_back();
        r
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // A handle freed without vTvmDisconnect: nothing is lost either.
        let (_, first) = self.finish();
        if let Some(e) = first {
            eprintln!("tvmq: an asynchronous push of a handle freed without vTvmDisconnect failed: {e}");
        }
    }
}

fn too_long(len: usize, room: usize) -> Error {
    Error::new(
        RECD_TOO_LONG,
        format!("a value of {len} bytes does not fit the record of {room} bytes: the handle keeps it for the next pop"),
    )
}

#[cfg(test)]
mod tests;

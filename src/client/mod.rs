//! The network client behind `lTvmConnect` and the `lTvm*` calls: RESP over
//! TCP or a unix socket, to `tvmq serve`, a `redis-server` or a Redis
//! Cluster, with blocking std sockets and no runtime.
//!
//! | module | concern |
//! |---|---|
//! | `key` | a queue's key: its decimal id, or a shard's name |
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
//! | `pop` | lTvmPop, lTvmPopup, and the values held for the next pops |
//! | `admin` | lTvmCount, lTvmTruncate, lTvmDropTable, lTvmResetLock: STVM's queue administration over the network |
//! | this file | [`Client`]: a handle's view (connect, share, push, asynchronous pushes, close) |
//!
//! Conventions (docs/protocol.md): the key of queue `t` is its decimal id;
//! a record is one bulk string; `RPUSH` pushes, `LPOP`/`BLPOP` pop.

mod admin;
mod conn;
mod key;
mod lease;
mod pipeline;
mod pop;
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
pub(crate) use key::Key;
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

/// How lTvmPop waits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PopWait {
    NoWait,
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

#[cfg(test)]
mod tests;

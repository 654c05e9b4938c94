//! Redis Sentinel: lTvmConnectSentinel's client asks the sentinels which
//! server is the master of a name (`SENTINEL get-master-addr-by-name`),
//! connects there and checks `ROLE` says master; and when a call finds the
//! master gone (the connection lost or refused), demoted (`-READONLY`) or
//! cut off (`-MASTERDOWN`), asks again and reconnects, within the
//! handle's timeout. A call refused that way (or whose connection could
//! not be made) was not executed and is sent again to the new master; a
//! call whose connection broke before its answer is reported (it may or
//! may not have been executed) and the next call goes to the new master.

use super::conn::{Addr, Conn, ReplyWait};
use super::reply::Answer;
use super::router::Router;
use super::{Client, Dial, Link};
use crate::error::*;
use std::time::{Duration, Instant};

/// How long a failover may take when the handle has no timeout.
const NO_TIMEOUT_BOUND: Duration = Duration::from_secs(30);
/// Pause between two rounds of questions to the sentinels.
const ROUND_PAUSE: Duration = Duration::from_millis(50);

/// The sentinels of one master name.
pub(crate) struct Sentinels {
    /// Their addresses; the one that answered last is asked first.
    addrs: Vec<Addr>,
    /// The master's name (`sentinel monitor <name> ...`).
    name: String,
    /// TLS and credentials for the sentinels (their own password).
    dial: Dial,
}

impl Sentinels {
    pub(crate) fn new(addrs: Vec<Addr>, name: String, dial: Dial) -> Sentinels {
        Sentinels { addrs, name, dial }
    }

    /// The master's address, from the first sentinel that knows it.
    fn ask(&mut self, timeout: Option<Duration>) -> Result<Addr> {
        let mut last = Error::new(SOCK_CONN_ERR, "no sentinel given");
        for i in 0..self.addrs.len() {
            match self.ask_one(&self.addrs[i], timeout) {
                Ok(addr) => {
                    self.addrs[..=i].rotate_right(1);
                    return Ok(addr);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn ask_one(&self, at: &Addr, timeout: Option<Duration>) -> Result<Addr> {
        let mut conn = Conn::open(at, timeout, &self.dial)?;
        resp::command(&mut conn.wbuf, &[b"SENTINEL", b"get-master-addr-by-name", self.name.as_bytes()]);
        conn.flush()?;
        conn.reply(ReplyWait::Normal, |r| {
            if let Some(text) = r.error_text() {
                return Err(super::reply::server_error(text));
            }
            let items = r.as_array().ok_or_else(|| {
                Error::new(SVR_EXCEPTION, format!("sentinel {at} knows no master named {:?}", self.name))
            })?;
            let host = items.first().and_then(|h| h.as_bytes()).map(|h| String::from_utf8_lossy(h).into_owned());
            let port = items.get(1).and_then(|p| p.as_bytes()).and_then(|p| std::str::from_utf8(p).ok()?.parse().ok());
            match (host, port) {
                (Some(host), Some(port)) => Ok(Addr::Tcp { host, port }),
                _ => Err(Error::new(SOCK_COM_EXCP, format!("sentinel {at}: unreadable master address"))),
            }
        })?
    }
}

/// Errors after which the master is looked for again.
pub(crate) fn master_lost(e: &Error) -> bool {
    match e.code() {
        SOCK_CONN_ERR | SOCK_CONN_TMO | SOCK_IO_RESET | SOCK_READ_ERR | SOCK_SEND_ERR | SOCK_READ_TMO
        | SOCK_SEND_TMO => true,
        SVR_EXCEPTION => refused(e),
        _ => false,
    }
}

/// A command the server refused without executing it: not the master.
fn refused(e: &Error) -> bool {
    let d = e.detail();
    d.contains("answered: READONLY") || d.contains("answered: MASTERDOWN") || d.contains("answered: LOADING")
}

/// Errors that prove the command was not executed (safe to send again).
pub(crate) fn unsent(e: &Error) -> bool {
    matches!(e.code(), SOCK_CONN_ERR | SOCK_CONN_TMO | SOCK_ERR_CRTE) || (e.code() == SVR_EXCEPTION && refused(e))
}

impl Client {
    /// When the handle follows a master through its sentinels: the time a
    /// failover may take.
    pub(crate) fn failover_bound(&self) -> Duration {
        self.timeout.unwrap_or(NO_TIMEOUT_BOUND)
    }

    /// Asks the sentinels for the master and connects there (ROLE must say
    /// master), retrying until `deadline`. Replaces the handle's
    /// connections (their commands in flight have already failed).
    pub(crate) fn follow_master(&mut self, deadline: Instant) -> Result<()> {
        let Some(mut s) = self.sentinels.take() else { return Ok(()) };
        let r = loop {
            let found = s.ask(self.timeout).and_then(|addr| {
                let mut router = Router::connect(&addr, self.timeout, self.dial.clone())?;
                let id = self.ticket();
                match router.call(id, b"", ReplyWait::Normal, |w| resp::command(w, &[b"ROLE"]))? {
                    Answer::Head(role) if role == b"master" => Ok((addr, router)),
                    a => Err(Error::new(SVR_EXCEPTION, format!("{addr} is not the master yet (ROLE: {a:?})"))),
                }
            });
            match found {
                Ok((addr, router)) => {
                    self.seed = addr;
                    self.private = None;
                    self.flavor = router.flavor();
                    if let Link::Own(_) | Link::Gone = self.link {
                        self.link = Link::Own(router);
                    }
                    break Ok(());
                }
                Err(e) if Instant::now() + ROUND_PAUSE >= deadline => {
                    break Err(Error::new(
                        e.code(),
                        format!("no master named {:?} found through the sentinels in time: {}", s.name, e.detail()),
                    ));
                }
                Err(_) => std::thread::sleep(ROUND_PAUSE),
            }
        };
        self.sentinels = Some(s);
        r
    }

    /// Whether the handle follows a master through sentinels.
    pub(crate) fn follows_master(&self) -> bool {
        self.sentinels.is_some()
    }

    /// Runs `op`; when it fails because the master is gone and the handle
    /// follows sentinels, finds the new master and, if `op` was certainly
    /// not executed, runs it again there (until the handle's timeout).
    pub(crate) fn with_failover<T>(&mut self, mut op: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        let r = op(self);
        if self.sentinels.is_none() {
            return r;
        }
        let mut e = match r {
            Err(e) if master_lost(&e) => e,
            r => return r,
        };
        let deadline = Instant::now() + self.failover_bound();
        loop {
            self.follow_master(deadline)?;
            if !unsent(&e) {
                return Err(e);
            }
            match op(self) {
                Err(again) if master_lost(&again) && Instant::now() < deadline => e = again,
                r => return r,
            }
        }
    }
}

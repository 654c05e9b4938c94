//! The pops of a handle: lTvmPop (LPOP, or BLPOP in slices when it waits),
//! lTvmPopup (LPOP key count, in chunks, until a count or a time), and the
//! values popped but longer than the caller's record, held for the next
//! pops and put back when the handle closes.

use super::conn::ReplyWait;
use super::reply::Answer;
use super::router::Flavor;
use super::{Client, Key, Link, PopWait, blpop_secs, unexpected};
use crate::error::*;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Records asked for by one `LPOP key count` of lTvmPopup.
const POPUP_CHUNK: usize = 4096;

/// How long lTvmPopup waits.
#[derive(Clone, Copy)]
enum Until {
    Now,
    At(Instant),
    Forever,
}

impl Client {
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
    pub(super) fn put_back(&mut self) {
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
}

fn too_long(len: usize, room: usize) -> Error {
    Error::new(
        RECD_TOO_LONG,
        format!("a value of {len} bytes does not fit the record of {room} bytes: the handle keeps it for the next pop"),
    )
}

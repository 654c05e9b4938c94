//! lTvmRequireReplicas: a write (a push, an acknowledgement and the other
//! lease calls that change a record) answers RC_SUCC only once `replicas`
//! replicas of the Redis master have it: `WAIT replicas timeout` after the
//! command, pipelined with it on a handle's own connection to a Redis
//! (one round trip), sent after its answer on a shared connection or a
//! cluster (where the command may be redirected to another node first).
//! Asynchronous pushes are waited for by lAsyWait: one WAIT per queue
//! pushed to since the last lAsyWait, once their answers are in.

use super::reply::{Answer, Kind};
use super::router::Flavor;
use super::{Client, Key, Link, unexpected};
use crate::client::conn::ReplyWait;
use crate::error::*;
use std::time::Duration;

/// What lTvmRequireReplicas asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Replicas {
    pub(crate) count: u32,
    pub(crate) timeout: Duration,
}

impl Replicas {
    fn args(&self) -> (String, String) {
        (self.count.to_string(), self.timeout.as_millis().max(1).to_string())
    }

    /// The answer of WAIT: Ok when enough replicas have the writes.
    fn check(&self, a: &Answer) -> Result<()> {
        match a {
            Answer::Int(n) if *n >= i64::from(self.count) => Ok(()),
            Answer::Int(n) => Err(Error::new(
                REPL_TIMEOUT,
                format!(
                    "{n} of the {} replicas asked for had the write within {} ms: the record may or may not be there \
                     after a failover",
                    self.count,
                    self.timeout.as_millis()
                ),
            )),
            a => Err(unexpected("WAIT", a)),
        }
    }
}

impl Client {
    /// From now on every write waits for `count` replicas (0: none), up to
    /// `timeout`. NOT_SUPPT_OPT for a server that has no replicas (tvmq serve).
    pub(crate) fn require_replicas(&mut self, count: u32, timeout: Duration) -> Result<()> {
        if self.flavor == Flavor::Other {
            return Err(Error::new(
                NOT_SUPPT_OPT,
                "this server has no replicas (tvmq serve): lTvmRequireReplicas needs a Redis master with replicas",
            ));
        }
        self.replicas = (count > 0).then_some(Replicas { count, timeout });
        Ok(())
    }

    /// Runs one write on queue key `key` and, when replicas are required,
    /// waits for them (REPL_TIMEOUT when too few have it in time: the
    /// write itself was done).
    pub(crate) fn exec_replicated(
        &mut self,
        key: Key,
        wait: ReplyWait,
        encode: impl Fn(&mut Vec<u8>),
    ) -> Result<Answer> {
        let Some(rep) = self.replicas else { return self.exec(key, wait, encode) };
        self.with_failover(|c| c.exec_replicated_once(rep, key, wait, &encode))
    }

    fn exec_replicated_once(
        &mut self,
        rep: Replicas,
        key: Key,
        wait: ReplyWait,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Answer> {
        let (n, ms) = rep.args();
        let wait_cmd = |w: &mut Vec<u8>| resp::command(w, &[b"WAIT", n.as_bytes(), ms.as_bytes()]);
        let (first, second) = (self.ticket(), self.ticket());
        let answer = match &mut self.link {
            // One round trip: the command and WAIT written together.
            Link::Own(r) if r.flavor() == Flavor::Redis => {
                let k = key.as_bytes();
                if r.enqueue(k, Kind::Sync(first), wait, encode).is_ok() {
                    let _ = r.enqueue(k, Kind::Sync(second), ReplyWait::Extra(rep.timeout), wait_cmd);
                    r.wait_for(second);
                }
                let lost = || Err(Error::new(SVR_EXCEPTION, "the command's reply was lost"));
                let a = r.take_answer(first).unwrap_or_else(lost)?;
                let w = r.take_answer(second).unwrap_or_else(lost)?;
                rep.check(&w)?;
                return Ok(a);
            }
            _ => self.exec_link(key, wait, encode)?,
        };
        let w = self.exec_link(key, ReplyWait::Extra(rep.timeout), wait_cmd)?;
        rep.check(&w)?;
        Ok(answer)
    }

    /// lAsyWait's part: WAIT once per queue pushed to asynchronously since
    /// the last call (the pushes' answers are all in).
    pub(crate) fn wait_replicas_async(&mut self) -> Result<()> {
        let queues = std::mem::take(&mut self.async_queues);
        let Some(rep) = self.replicas else { return Ok(()) };
        let (n, ms) = rep.args();
        for key in queues {
            let a = self.exec(key, ReplyWait::Extra(rep.timeout), |w| {
                resp::command(w, &[b"WAIT", n.as_bytes(), ms.as_bytes()])
            })?;
            rep.check(&a)?;
        }
        Ok(())
    }
}

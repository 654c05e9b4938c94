//! The network twins of STVM's queue administration: lTvmCount (LLEN),
//! lTvmTruncate (LLEN then LTRIM), lTvmDropTable (DEL), lTvmResetLock
//! (TVMQ.REPAIR, tvmq serve only).

use super::redis_lease::{SUFFIXES, tagged};
use super::reply::Answer;
use super::router::Flavor;
use super::{Client, Key, unexpected};
use crate::client::conn::ReplyWait;
use crate::error::*;

impl Client {
    /// One command on queue `t`'s key whose answer is an integer or OK
    /// (OK: 0).
    fn int_command(&mut self, t: u32, name: &[u8], args: &[&[u8]]) -> Result<i64> {
        self.key_command(Key::of(t), name, args)
    }

    /// [`Client::int_command`] on a key.
    fn key_command(&mut self, key: Key, name: &[u8], args: &[&[u8]]) -> Result<i64> {
        let mut parts: Vec<&[u8]> = vec![name, key.as_bytes()];
        parts.extend_from_slice(args);
        match self.exec(key, ReplyWait::Normal, |w| resp::command(w, &parts))? {
            Answer::Int(n) => Ok(n),
            Answer::Ok => Ok(0),
            a => Err(unexpected(&String::from_utf8_lossy(name), &a)),
        }
    }

    /// Records in queue `t` (LLEN; a spread queue: the sum over its shards,
    /// asked in one round trip).
    pub(crate) fn count(&mut self, t: u32) -> Result<u64> {
        let keys = self.queue_keys(t);
        let mut n = 0;
        for a in self.exec_all(&keys, |j, w| resp::command(w, &[b"LLEN", keys[j].as_bytes()]))? {
            match a {
                Answer::Int(len) => n += len.max(0) as u64,
                a => return Err(unexpected("LLEN", &a)),
            }
        }
        Ok(n)
    }

    /// Removes the records queue `t` holds: LLEN, then LTRIM of that many
    /// from the head (records pushed meanwhile stay; a consumer popping
    /// meanwhile can make it remove some of them, never more than counted).
    /// Returns how many were counted.
    pub(crate) fn truncate(&mut self, t: u32) -> Result<u64> {
        if self.is_spread(t) {
            return Err(Error::new(NOT_SUPPT_OPT, "lTvmTruncate on a spread queue: lTvmDropTable drops it"));
        }
        let n = self.count(t)?;
        if n > 0 {
            let start = n.to_string();
            self.int_command(t, b"LTRIM", &[start.as_bytes(), b"-1"])?;
        }
        Ok(n)
    }

    /// Drops queue `t` (DEL): true when it existed. On a Redis its lease
    /// keys go too (`{t}:opts` and the others: docs/client.md), in the
    /// same DEL (one slot); a spread queue's shards all go.
    pub(crate) fn drop_queue(&mut self, t: u32) -> Result<bool> {
        if self.flavor == Flavor::Other {
            return Ok(self.int_command(t, b"DEL", &[])? > 0);
        }
        let mut existed = false;
        for key in self.queue_keys(t) {
            let keys: Vec<Vec<u8>> = SUFFIXES.iter().map(|s| tagged(key, s)).collect();
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            self.forget_dead_letter(key);
            existed |= self.key_command(key, b"DEL", &refs)? > 0;
        }
        Ok(existed)
    }

    /// tvmq serve's repair of queue `t` (TVMQ.REPAIR): the records
    /// recovered. A Redis has no lock to reset: RMT_NOT_SUPPT, nothing sent.
    pub(crate) fn repair(&mut self, t: u32) -> Result<u64> {
        if self.flavor != Flavor::Other {
            return Err(Error::new(RMT_NOT_SUPPT, "a Redis list has no lock to reset (tvmq serve repairs its queues)"));
        }
        Ok(self.int_command(t, b"TVMQ.REPAIR", &[])?.max(0) as u64)
    }
}

//! lTvmSpread: one logical queue over several keys ("shards") whose hash
//! slots are spread evenly over the slot space, so that a Redis Cluster
//! whose masters hold equal slot ranges (as `redis-cli --cluster create`
//! makes them) has shards on every master once there are at least as many
//! shards as masters. Shard `i` of queue `t` over `s` shards is the key
//! `<t>.<i>.<n>`, `n` the smallest number from 0 up whose key's slot is in
//! the `i`-th of `s` equal parts of the 16,384 slots: a rule any client can
//! follow, independent of the cluster's current map. Pushes go to the
//! shards in turn; a pop or a lease starts at the next shard in turn and
//! takes from the first that has a record (FIFO within a shard, not
//! across shards): when that shard is empty, one round of LLEN over the
//! shards finds one that is not (one round trip, not one per shard);
//! lTvmCount sums the shards (also in one round).

use super::reply::Answer;
use super::router::Flavor;
use super::slot::{SLOTS, key_slot};
use super::{Client, Key, Link, PopWait, blpop_secs, unexpected};
use crate::client::conn::ReplyWait;
use crate::error::*;
use std::time::Duration;

/// Most shards a queue may have.
pub(crate) const MAX_SHARDS: usize = 1024;
/// The longest a blocked pop waits on one shard before it looks at the others.
const POLL: Duration = Duration::from_millis(200);

/// A spread queue as one handle sees it.
pub(crate) struct Spread {
    keys: Vec<Key>,
    next_push: usize,
    next_pop: usize,
}

/// Shard `i` of queue `t` over `shards`.
pub(crate) fn shard_key(t: u32, i: usize, shards: usize) -> Key {
    let (lo, hi) = (i * SLOTS / shards, (i + 1) * SLOTS / shards);
    for n in 0u32.. {
        let k = Key::named(format!("{t}.{i}.{n}").as_bytes());
        if (lo..hi).contains(&usize::from(key_slot(k.as_bytes()))) {
            return k;
        }
    }
    unreachable!("CRC16 reaches every part of the slot space")
}

impl Client {
    /// Spreads queue `t` over `shards` keys on this handle (0 or 1: one key
    /// again). NOT_SUPPT_OPT for a server that is no Redis (tvmq serve).
    pub(crate) fn set_spread(&mut self, t: u32, shards: usize) -> Result<()> {
        if self.flavor == Flavor::Other {
            return Err(Error::new(NOT_SUPPT_OPT, "tvmq serve has no spread queues: a Redis (Cluster) has"));
        }
        if shards > MAX_SHARDS {
            return Err(Error::new(CONDIT_IS_NIL, format!("{shards} shards: at most {MAX_SHARDS}")));
        }
        self.spread.retain(|s| s.0 != t);
        if shards > 1 {
            let keys = (0..shards).map(|i| shard_key(t, i, shards)).collect();
            self.spread.push((t, Spread { keys, next_push: 0, next_pop: 0 }));
        }
        Ok(())
    }

    pub(crate) fn is_spread(&self, t: u32) -> bool {
        self.spread.iter().any(|s| s.0 == t)
    }

    fn spread_of(&mut self, t: u32) -> Option<&mut Spread> {
        self.spread.iter_mut().find(|s| s.0 == t).map(|s| &mut s.1)
    }

    /// The key the next push of queue `t` goes to.
    pub(crate) fn push_key(&mut self, t: u32) -> Key {
        match self.spread_of(t) {
            Some(s) => {
                let k = s.keys[s.next_push % s.keys.len()];
                s.next_push = s.next_push.wrapping_add(1);
                k
            }
            None => Key::of(t),
        }
    }

    /// Every key of queue `t`.
    pub(crate) fn queue_keys(&mut self, t: u32) -> Vec<Key> {
        match self.spread_of(t) {
            Some(s) => s.keys.clone(),
            None => vec![Key::of(t)],
        }
    }

    /// The keys of queue `t` in the order the next pop looks at them (its
    /// shard index, from 1; 0 for a queue of one key).
    pub(crate) fn pop_order(&mut self, t: u32) -> Vec<(u32, Key)> {
        match self.spread_of(t) {
            Some(s) => {
                let n = s.keys.len();
                let start = s.next_pop % n;
                s.next_pop = s.next_pop.wrapping_add(1);
                (0..n).map(|j| ((start + j) % n) as u32).map(|i| (i + 1, s.keys[i as usize])).collect()
            }
            None => vec![(0, Key::of(t))],
        }
    }

    /// The key of shard `shard` (from 1; 0: the queue's own key) of queue `t`.
    pub(crate) fn shard(&mut self, t: u32, shard: u32) -> Result<Key> {
        if shard == 0 {
            return Ok(Key::of(t));
        }
        self.spread_of(t).and_then(|s| s.keys.get(shard as usize - 1).copied()).ok_or_else(|| {
            Error::new(LEASE_INVALID, format!("a lease of a shard queue {t} does not have on this handle"))
        })
    }

    /// lTvmPop of a spread queue: [`Client::pop_first`]; waiting, BLPOP on
    /// one shard at a time for at most [`POLL`].
    pub(crate) fn spread_pop(&mut self, t: u32, wait: PopWait) -> Result<Vec<u8>> {
        loop {
            let order = self.pop_order(t);
            if let Some(v) = self.pop_first(&order)? {
                return Ok(v);
            }
            if wait == PopWait::NoWait {
                return Err(Error::code_only(NO_DATA_FOUND));
            }
            let key = order[0].1;
            let secs = blpop_secs(POLL);
            match self.exec_blocking(key, ReplyWait::Extra(POLL), |w| {
                resp::command(w, &[b"BLPOP", key.as_bytes(), secs.as_bytes()])
            })? {
                Answer::Nil => {}
                Answer::Values(mut kv) if kv.len() == 2 => return Ok(kv.pop().unwrap_or_default()),
                a => return Err(unexpected("BLPOP", &a)),
            }
        }
    }

    /// The head of the first shard of `order` that has a record (None: all
    /// were empty): LPOP of the first; when it is empty, one round of LLEN
    /// over every shard (each node answering for its shards at the same
    /// time: one round trip, not one per shard) and LPOP of the first that
    /// has records in `order`, again while a round finds some (other
    /// consumers may empty a shard between the two), at most once per shard.
    fn pop_first(&mut self, order: &[(u32, Key)]) -> Result<Option<Vec<u8>>> {
        let lpop = |c: &mut Client, key: Key| match c
            .exec(key, ReplyWait::Normal, |w| resp::command(w, &[b"LPOP", key.as_bytes()]))?
        {
            Answer::Nil => Ok(None),
            Answer::Value(v) => Ok(Some(v)),
            a => Err(unexpected("LPOP", &a)),
        };
        if let Some(v) = lpop(self, order[0].1)? {
            return Ok(Some(v));
        }
        let keys: Vec<Key> = order.iter().map(|o| o.1).collect();
        for _ in 1..order.len() {
            let lens = self.exec_all(&keys, |j, w| resp::command(w, &[b"LLEN", keys[j].as_bytes()]))?;
            let mut full = lens.iter().zip(&keys).filter(|(n, _)| matches!(n, Answer::Int(n) if *n > 0));
            let Some((_, &key)) = full.next() else { return Ok(None) };
            if let Some(v) = lpop(self, key)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Runs one command for each of `keys` (the `j`-th written by
    /// `encode(j, ..)`) in one round trip ([`call_all`](super::router::Router::call_all); a shared
    /// connection: one after another, pipelined with the other handles'),
    /// following the master through a failover as [`Client::exec`] does.
    /// Their answers in the order of `keys`; the first failure fails it.
    pub(crate) fn exec_all(&mut self, keys: &[Key], encode: impl Fn(usize, &mut Vec<u8>)) -> Result<Vec<Answer>> {
        let bytes: Vec<&[u8]> = keys.iter().map(Key::as_bytes).collect();
        self.with_failover(|c| {
            let first = c.next + 1;
            c.next += keys.len() as u64;
            let answers = match &mut c.link {
                Link::Own(r) => r.call_all(first, &bytes, ReplyWait::Normal, &encode),
                Link::Shared(s) => {
                    keys.iter().enumerate().map(|(j, &k)| s.call(k, ReplyWait::Normal, |w| encode(j, w))).collect()
                }
                Link::Gone => return Err(Error::code_only(SERV_NOT_CONN)),
            };
            answers.into_iter().collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_the_slot_space_evenly() {
        for shards in [2, 3, 6, 16] {
            for i in 0..shards {
                let k = shard_key(21, i, shards);
                let slot = usize::from(key_slot(k.as_bytes()));
                assert!(slot * shards / SLOTS == i, "shard {i} of {shards}: {:?} in slot {slot}", k.as_bytes());
                assert!(k.as_bytes().starts_with(format!("21.{i}.").as_bytes()));
            }
        }
        // The rule is fixed: other clients compute the same names.
        assert_eq!(shard_key(21, 0, 3).as_bytes(), shard_key(21, 0, 3).as_bytes());
    }
}

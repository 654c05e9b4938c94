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
//! across shards); lTvmCount sums the shards.

use super::reply::Answer;
use super::router::Flavor;
use super::slot::{SLOTS, key_slot};
use super::{Client, Key, PopWait, blpop_secs, unexpected};
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

    /// lTvmPop of a spread queue: LPOP of each shard in turn; waiting, BLPOP
    /// on one shard at a time for at most [`POLL`].
    pub(crate) fn spread_pop(&mut self, t: u32, wait: PopWait) -> Result<Vec<u8>> {
        loop {
            let order = self.pop_order(t);
            for &(_, key) in &order {
                match self.exec(key, ReplyWait::Normal, |w| resp::command(w, &[b"LPOP", key.as_bytes()]))? {
                    Answer::Nil => {}
                    Answer::Value(v) => return Ok(v),
                    a => return Err(unexpected("LPOP", &a)),
                }
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

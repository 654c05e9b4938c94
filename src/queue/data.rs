//! The data path: pushes and pops of one record or of a batch, blocking or
//! not, on plain, durable and lease queues.

use super::blocking::Idle;
use super::participant::{Intent, IntentOnLeaseQueue, KeptIntent, Patience};
use super::{Queue, Wait};
use crate::durable::Durable;
use crate::error::*;
use crate::ring::{Announce, Peeked, RingError};
use std::sync::atomic::Ordering;

impl Queue {
    /// Appends one record of 1..=record_size bytes. Never waits for space:
    /// a full queue gives `DATA_SPC_FULL`.
    ///
    /// Errors: `CONDIT_IS_NIL` (an empty record), `RECD_TOO_LONG` (longer
    /// than the queue's records), `DATA_SPC_FULL`, `SHM_ERR_EIDRM` (the
    /// queue was dropped), `SHM_ERR_ACCES` (a read-only view),
    /// `MQUE_WAIT_ERR` (its slot was taken over by a recovery, which
    /// judged this thread dead: nothing was pushed), `SHM_ERR_INVAL`
    /// (corrupted shared state), `SYNC_FAILED` (an `always` queue: the
    /// record is queued, but its sync failed).
    #[inline(always)]
    pub fn push(&self, record: &[u8]) -> Result<()> {
        self.push_kept(record, None)
    }

    /// [`push`](Self::push), announcing through the intent word `kept`
    /// keeps (looked up when it is `None` or another queue's).
    // Always inlined (into lPush): as a call of its own it cost plain
    // queues a good part of their push rate (docs/measurements.md).
    #[inline(always)]
    pub(crate) fn push_kept(&self, record: &[u8], kept: Option<&KeptIntent>) -> Result<()> {
        self.check_push(record)?;
        let intent = self.intent_kept(kept);
        if let Some(d) = self.always() {
            return self.push_always(d, record, intent);
        }
        // Plain and `interval` queues (the flusher finds the change, and
        // the next sync seals the record: see `crate::durable`).
        self.ring.push(record, &intent, &mut Patience::new(self)).map_err(|e| self.ring_error(e))?;
        self.wake_one();
        Ok(())
    }

    /// [`push`](Self::push) on an `always` queue: the record sealed, then
    /// synced. Out of line, so that plain pushes keep their code.
    #[inline(never)]
    fn push_always(&self, d: &Durable, record: &[u8], intent: Intent<'_>) -> Result<()> {
        self.ring.push_sealed(d.key(), record, &intent, &mut Patience::new(self)).map_err(|e| self.ring_error(e))?;
        self.wake_one();
        d.sync()
    }

    #[inline]
    fn check_push(&self, record: &[u8]) -> Result<()> {
        if record.is_empty() {
            return Err(Error::new(CONDIT_IS_NIL, "an empty record (0 bytes) cannot be pushed"));
        }
        if record.len() > self.record_size() {
            return Err(Error::new(
                RECD_TOO_LONG,
                format!(
                    "a record of {} bytes is longer than queue {}'s records (at most {})",
                    record.len(),
                    self.id(),
                    self.record_size()
                ),
            ));
        }
        self.check_usable()
    }

    /// `RECD_TOO_LONG` for a buffer shorter than the queue's records.
    #[cold]
    pub(crate) fn short_buffer(&self, len: usize) -> Error {
        let size = self.record_size();
        Error::new(
            RECD_TOO_LONG,
            format!("a buffer of {len} bytes is shorter than queue {}'s records ({size} bytes)", self.id()),
        )
    }

    #[inline]
    pub(super) fn check_usable(&self) -> Result<()> {
        if self.is_dropped() {
            return Err(Error::code_only(SHM_ERR_EIDRM));
        }
        if !self.writable {
            return Err(Error::new(SHM_ERR_ACCES, "queue opened read-only for inspection"));
        }
        Ok(())
    }

    /// Pushes the records laid out one after another in `records`, `each`
    /// bytes apiece, claiming their positions together (one CAS for as many
    /// as there is room for). Returns how many went in; stops at the first
    /// failure (`DATA_SPC_FULL` when the queue fills up), returned alongside.
    ///
    /// Errors (alongside the count): `CONDIT_IS_NIL` (`each` 0 or no whole
    /// record), and those of [`push`](Self::push).
    pub fn push_many(&self, records: &[u8], each: usize) -> (usize, Option<Error>) {
        if each == 0 || records.len() < each {
            return (0, Some(Error::new(CONDIT_IS_NIL, "no records to push (record size 0 or an empty buffer)")));
        }
        if let Err(e) = self.check_push(&records[..each]) {
            return (0, Some(e));
        }
        let (done, err) = match self.always() {
            // Plain and `interval` queues (see `push`).
            None => self.ring.push_batch(records, each, &self.intent(), &mut Patience::new(self)),
            Some(d) => self.ring.push_batch_sealed(d.key(), records, each, &self.intent(), &mut Patience::new(self)),
        };
        if done > 0 {
            self.wake(done as u32);
            if let Some(d) = self.always() {
                // One sync for the whole batch.
                if let Err(e) = d.sync() {
                    return (done, Some(e));
                }
            }
        }
        (done, err.map(|e| self.ring_error(e)))
    }

    /// Removes the oldest record into `out`, which must hold at least
    /// `record_size` bytes; bytes after the record, up to `record_size`, are
    /// zeroed. Returns the record's length. On a queue with leases, a record
    /// waiting to be delivered again (its lease ran out, or was released)
    /// comes first, and is taken for good.
    ///
    /// Errors: `RECD_TOO_LONG` (`out` shorter than the queue's records:
    /// nothing is taken), `NO_DATA_FOUND` (empty, with `Wait::NoWait`),
    /// `MQUE_WAIT_TMO` (empty at the deadline of `Wait::Until`),
    /// `SHM_ERR_EIDRM` (the queue was dropped, also while waiting),
    /// `SHM_ERR_ACCES` (a read-only view), `MQUE_WAIT_ERR` (its slot was
    /// taken over by a recovery), `SHM_ERR_INVAL` (corrupted shared state or
    /// lease table). A failed sync of an `always` queue is not an error
    /// here (the record is the caller's; the failure is counted in the file).
    pub fn pop(&self, out: &mut [u8], wait: Wait) -> Result<usize> {
        self.pop_kept(out, wait, None)
    }

    /// [`pop`](Self::pop), announcing through the intent word `kept` keeps
    /// (looked up when it is `None` or another queue's). Always inlined
    /// (into lPop): as a call of its own it cost about 20 instructions a pop.
    #[inline(always)]
    pub(crate) fn pop_kept(&self, out: &mut [u8], wait: Wait, kept: Option<&KeptIntent>) -> Result<usize> {
        if self.leases.is_some() {
            return self.pop_with_leases(out, wait);
        }
        // A plain queue: the ring alone (the lease path is out of line).
        let out = self.record_buffer(out)?;
        let mut idle = Idle::new(wait);
        loop {
            self.check_usable()?;
            if let Some(n) = self.pop_ring(out, &self.intent_kept(kept))? {
                return Ok(n);
            }
            // Nothing queued: wait as the strategy says (shared with the lease path).
            self.idle(&mut idle)?;
        }
    }

    /// [`pop`](Self::pop) on a queue with leases: records waiting to be
    /// delivered again first, and sleeps that end when one comes due.
    #[inline(never)]
    fn pop_with_leases(&self, out: &mut [u8], wait: Wait) -> Result<usize> {
        let out = self.record_buffer(out)?;
        let mut idle = Idle::new(wait);
        loop {
            self.check_usable()?;
            if let Some(n) = self.pop_waiting(out)? {
                out[n..].fill(0);
                return Ok(n);
            }
            // Through its own instance of `Ring::pop` (see `lease::Own`).
            if let Some(n) = self.pop_ring(out, &IntentOnLeaseQueue(self.intent()))? {
                return Ok(n);
            }
            self.idle(&mut idle)?;
        }
    }

    /// The first `record_size` bytes of `out`, a pop's buffer, which must
    /// hold that many.
    #[inline(always)]
    fn record_buffer<'a>(&self, out: &'a mut [u8]) -> Result<&'a mut [u8]> {
        let size = self.record_size();
        if out.len() < size {
            return Err(self.short_buffer(out.len()));
        }
        Ok(&mut out[..size])
    }

    /// One pop of the ring into `out` (`record_size` bytes), announcing
    /// through `ann`: the record's length, the bytes after it zeroed and, on
    /// an `always` queue, its consumption durable; `None`: the ring is empty.
    #[inline(always)]
    fn pop_ring(&self, out: &mut [u8], ann: &impl Announce) -> Result<Option<usize>> {
        match self.ring.pop(out, ann, &mut Patience::new(self)) {
            Ok(n) => {
                // A full-size record (the common case) leaves nothing to
                // zero: skip the call to memset for 0 bytes.
                if n < out.len() {
                    out[n..].fill(0);
                }
                self.popped_durably();
                Ok(Some(n))
            }
            Err(RingError::Empty) => Ok(None),
            Err(e) => Err(self.ring_error(e)),
        }
    }

    /// Copies of up to `max` records at the head of the queue, oldest first,
    /// without removing them, each with its position number (records pushed
    /// before it, counting from the queue's creation). For inspection: works
    /// on a read-only [`inspect`](Self::inspect) view too; records may be
    /// popped meanwhile, and one that changes while it is copied is reported
    /// as [`Peeked::Busy`], never torn.
    pub fn peek(&self, max: usize) -> Vec<(u64, Peeked)> {
        self.ring.peek(max)
    }

    /// Pops up to `lens.len()` records into `out`: record `i` at
    /// `out[i * each..]` (`each >= record_size`; the bytes after it up to
    /// `each` are zeroed), its length in `lens[i]`. What is queued is taken
    /// with one claim; with `Wait::Forever` or `Wait::Until` it then waits for
    /// each further record as [`pop`](Self::pop) does. Returns how many were
    /// taken and the error that stopped it early (`NO_DATA_FOUND` with
    /// `NoWait`, `MQUE_WAIT_TMO` at the deadline).
    ///
    /// Errors (alongside the count): `RECD_TOO_LONG` (`each` below the
    /// record size: nothing is taken), and those of [`pop`](Self::pop).
    /// (At most as many records as `out` holds are taken.)
    pub fn pop_into(&self, out: &mut [u8], each: usize, lens: &mut [usize], wait: Wait) -> (usize, Option<Error>) {
        if each < self.record_size() {
            let msg = format!(
                "slots of {each} bytes are shorter than queue {}'s records ({} bytes)",
                self.id(),
                self.record_size()
            );
            return (0, Some(Error::new(RECD_TOO_LONG, msg)));
        }
        let max = lens.len().min(out.len() / each);
        let mut taken = 0;
        while taken < max {
            if let Err(e) = self.check_usable() {
                return (taken, Some(e));
            }
            if self.leases.is_some() {
                // Records waiting to be delivered again come first.
                let slot = &mut out[taken * each..(taken + 1) * each];
                match self.pop_waiting(&mut slot[..self.record_size()]) {
                    Ok(Some(len)) => {
                        slot[len..].fill(0);
                        lens[taken] = len;
                        taken += 1;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => return (taken, Some(e)),
                }
            }
            let (n, err) = self.ring.pop_batch(
                &mut out[taken * each..max * each],
                each,
                &mut lens[taken..max],
                &self.intent(),
                &mut Patience::new(self),
            );
            for i in taken..taken + n {
                out[i * each + lens[i]..(i + 1) * each].fill(0);
            }
            if n > 0 {
                // One sync for the whole batch.
                self.popped_durably();
            }
            taken += n;
            match err {
                None => {}
                Some(RingError::Empty) if wait == Wait::NoWait => {
                    return (taken, Some(Error::code_only(NO_DATA_FOUND)));
                }
                Some(RingError::Empty) => {
                    // Wait for the next record, then take the rest together again.
                    let slot = &mut out[taken * each..(taken + 1) * each];
                    match self.pop(slot, wait) {
                        Ok(len) => {
                            slot[len..].fill(0);
                            lens[taken] = len;
                            taken += 1;
                        }
                        Err(e) => return (taken, Some(e)),
                    }
                }
                Some(e) => return (taken, Some(self.ring_error(e))),
            }
        }
        (taken, None)
    }

    /// [`pop_into`](Self::pop_into) appending to a vector, `each` bytes per
    /// record, at most `max` records.
    ///
    /// Errors (alongside the count): those of [`pop_into`](Self::pop_into).
    pub fn pop_many(&self, out: &mut Vec<u8>, each: usize, max: usize, wait: Wait) -> (usize, Option<Error>) {
        let at = out.len();
        out.resize(at + max * each, 0);
        let mut lens = vec![0usize; max];
        let (taken, err) = self.pop_into(&mut out[at..], each, &mut lens, wait);
        out.truncate(at + taken * each);
        (taken, err)
    }

    pub(super) fn ring_error(&self, e: RingError) -> Error {
        match e {
            RingError::Full => Error::code_only(DATA_SPC_FULL),
            RingError::Empty => Error::code_only(NO_DATA_FOUND),
            RingError::Robbed => {
                self.control().counters.0.robbed.fetch_add(1, Ordering::Relaxed);
                Error::code_only(MQUE_WAIT_ERR)
            }
            RingError::Corrupt => {
                Error::new(SHM_ERR_INVAL, format!("{}: shared state is corrupted", self.path().display()))
            }
            RingError::Aborted(code) => Error::code_only(code),
        }
    }
}

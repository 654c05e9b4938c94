//! Moving records to the dead-letter queue (or dropping them, counted, on
//! a queue without one): a rejected record at once, records a sweep found
//! past their delivery limit by the sweep's thread or, for a server's
//! event-loop threads, later elsewhere.

use super::{DeadLetterQueue, Leases};
use crate::error::*;
use crate::lease::state::{EntryState, Owner, Word};
use crate::queue::Queue;
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

std::thread_local! {
    /// Whether sweeps run on this thread move the records they doom to the
    /// dead-letter queue themselves (see [`Queue::sweeps_move_dead_letters`]).
    static SWEEPS_MOVE_DEAD_LETTERS: Cell<bool> = const { Cell::new(true) };
}

impl Queue {
    /// Moves the record of entry `i` (`Dead` as `dying`, ours) to the
    /// dead-letter queue (or drops it), then frees the entry.
    ///
    /// # Safety
    /// The caller holds entry `i` as `dying` (its change to `Dead`
    /// returned that word): see [`crate::lease::table::LeaseTable::read`].
    pub(super) unsafe fn move_to_dead_letter_queue(&self, l: &Leases, i: usize, dying: Word) -> Result<()> {
        let mut record = vec![0u8; self.record_size()];
        // SAFETY: entry i is ours, `Dead` as `dying` (the caller's contract).
        let n = unsafe { l.table.read(i, &mut record) }
            .ok_or_else(|| self.lease_corrupt("a record has an impossible length"))?;
        let counters = &l.table.control().counters.0;
        match l.settings.dead_letter {
            None => counters.dropped.fetch_add(1, Ordering::Relaxed),
            Some(id) => {
                // push_many, not push: a call site of `push` here makes the
                // compiler stop inlining it into lPush (10% off plain pushes).
                let q = self.dead_letter_queue(l, id)?;
                if let (0, e) = q.push_many(&record[..n], n) {
                    return Err(e.unwrap_or_else(|| Error::code_only(DATA_SPC_FULL)));
                }
                counters.dead_lettered.fetch_add(1, Ordering::Relaxed)
            }
        };
        l.table.free(i, dying);
        // `always`: a record moved on does not come back after a machine
        // crash (counted in the file if the sync fails: it may then be in
        // both queues).
        let _ = self.lease_durably();
        Ok(())
    }

    /// The dead-letter queue, found on first use (again if it was dropped,
    /// or let go by the table): the attaching table's, else opened for
    /// this queue (see [`DeadLetterQueue`]).
    fn dead_letter_queue(&self, l: &Leases, id: u32) -> Result<Arc<Queue>> {
        let known = match &*l.dead_letter.lock() {
            DeadLetterQueue::NotYet => None,
            DeadLetterQueue::Attached(q) => q.upgrade(),
            DeadLetterQueue::Opened(q) => Some(q.clone()),
        };
        if let Some(q) = known.filter(|q| !q.is_dropped()) {
            return Ok(q);
        }
        let named =
            |e: Error| Error::new(e.code(), format!("dead-letter queue {id} of queue {}: {}", self.id(), e.what()));
        // Not under the lock: the table may open the queue, whose own
        // sweeps may move records to theirs.
        let (q, held) = match l.attacher.as_ref().and_then(Weak::upgrade) {
            Some(table) => {
                let q = table.attach(id).map_err(named)?;
                let held = DeadLetterQueue::Attached(Arc::downgrade(&q));
                (q, held)
            }
            None => {
                let dir = self.path().parent().unwrap_or(std::path::Path::new("."));
                let q = Arc::new(Queue::open(dir, id).map_err(named)?);
                (q.clone(), DeadLetterQueue::Opened(q))
            }
        };
        *l.dead_letter.lock() = held;
        Ok(q)
    }

    /// A sweep found records bound for the dead-letter queue: moved now,
    /// or left for [`move_dead_letters`](Self::move_dead_letters) on a
    /// thread that leaves them to others.
    pub(super) fn doomed_found(&self, l: &Leases, me: Owner) {
        if SWEEPS_MOVE_DEAD_LETTERS.with(Cell::get) {
            self.move_doomed(l, me);
        } else {
            l.dead_letters_due.store(true, Ordering::SeqCst);
        }
    }

    /// (For a server's event-loop threads.) Whether the lease sweeps that
    /// calls on this thread run (inside [`pop_lease`](Self::pop_lease),
    /// [`pop`](Self::pop) and others, on any queue) move the records they
    /// find bound for the dead-letter queue themselves (the default). A
    /// move pushes into the dead-letter queue, which may open its file and
    /// sync it: a thread that serves other clients meanwhile says `false`,
    /// and the records wait (`dead-letter-pending` in the stats) until
    /// [`move_dead_letters`](Self::move_dead_letters) runs elsewhere, as
    /// [`dead_letters_due`](Self::dead_letters_due) asks.
    pub fn sweeps_move_dead_letters(on_this_thread: bool) {
        SWEEPS_MOVE_DEAD_LETTERS.with(|c| c.set(on_this_thread));
    }

    /// Did a sweep on a thread that leaves dead-letter moves to others find
    /// records bound for the dead-letter queue (see
    /// [`sweeps_move_dead_letters`](Self::sweeps_move_dead_letters))? True
    /// once per such finding: the caller then has
    /// [`move_dead_letters`](Self::move_dead_letters) run (elsewhere). A
    /// load when there is nothing; false for a queue without leases.
    #[inline]
    pub fn dead_letters_due(&self) -> bool {
        self.leases.as_ref().is_some_and(|l| {
            l.dead_letters_due.load(Ordering::Relaxed) && l.dead_letters_due.swap(false, Ordering::SeqCst)
        })
    }

    /// Moves every record bound for the dead-letter queue there (or drops
    /// it, counted, on a queue without one), until the dead-letter queue
    /// refuses one (tried again at a later sweep). May open the dead-letter
    /// queue and wait for its sync.
    pub fn move_dead_letters(&self) {
        let Some(l) = &self.leases else { return };
        let Some(me) = l.me else { return };
        self.move_doomed(l, me);
    }

    /// Moves every doomed record to the dead-letter queue (or drops it),
    /// until the dead-letter queue refuses one (tried again at later sweeps).
    fn move_doomed(&self, l: &Leases, me: Owner) {
        for i in 0..l.table.len() {
            let e = l.table.entry(i);
            let w = e.word();
            if w.state() != EntryState::Doomed {
                continue;
            }
            let Ok(dying) = e.change(w, w.dying(me)) else { continue };
            // SAFETY: entry i is ours as `dying` (the change just made).
            if unsafe { self.move_to_dead_letter_queue(l, i, dying) }.is_err() {
                let _ = e.change(dying, dying.doomed());
                return;
            }
        }
    }
}

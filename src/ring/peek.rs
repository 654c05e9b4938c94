//! [`Ring::peek`]: copies of the queued records, for inspection.

use super::{MapStorage, POS_MASK, PUBLISHED, Ring, SKIP, Storage};
use crate::atomics::{Ordering, fence};

/// What [`crate::Queue::peek`] found at a position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peeked {
    /// A published record (a copy of it).
    Record(Vec<u8>),
    /// An empty record left by a producer that died: consumers step over it.
    Skipped,
    /// Claimed by a producer that has not published yet, or changed while
    /// it was copied (consumed, or being written again).
    Busy,
}

impl Ring<MapStorage> {
    /// Copies of up to `max` queued records from the head, oldest first,
    /// without taking them: each with its position number (see
    /// [`count`](Self::count)). Only for inspection: records can be popped
    /// meanwhile; a copy whose slot changed while it was made is reported as
    /// [`Peeked::Busy`], never as a torn record.
    pub(crate) fn peek(&self, max: usize) -> Vec<(u64, Peeked)> {
        let cursors = self.store.cursors();
        let mut pos = cursors.head.0.load(Ordering::Acquire);
        let tail = cursors.tail.0.pos.load(Ordering::Acquire);
        let mut out = Vec::new();
        let mut buf = vec![0u8; self.record_size];
        while out.len() < max && self.count(pos) < self.count(tail) {
            let Ok((lap, index)) = self.split(pos) else { break };
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            let found = if seq & POS_MASK != lap | PUBLISHED {
                Peeked::Busy
            } else if seq & SKIP != 0 {
                Peeked::Skipped
            } else {
                let len = (slot.len.load(Ordering::Acquire) as usize).min(self.record_size);
                self.store.snapshot(index, &mut buf[..len]);
                fence(Ordering::Acquire);
                // Unchanged seq after the copy: nobody took or rewrote the slot meanwhile.
                if slot.seq.load(Ordering::Relaxed) == seq && len > 0 {
                    Peeked::Record(buf[..len].to_vec())
                } else {
                    Peeked::Busy
                }
            };
            out.push((self.count(pos), found));
            pos = self.next(pos, lap, index);
        }
        out
    }
}

/// Why [`Ring::snapshot`] could not give a consistent copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SnapshotError {
    /// Producers wrote a whole lap while the copy was made: a record of the
    /// snapshot was consumed and its slot used again before it was copied.
    Lapped,
    /// A record of the snapshot stayed unpublished longer than the
    /// patience given (its producer stalled or died, and nobody recovered it).
    Stalled,
    /// The shared state holds impossible values (a corrupted file).
    Corrupt,
}

impl Ring<MapStorage> {
    /// Copies every record present in the ring at one instant, oldest
    /// first, handing each to `visit`, without taking any: the records of
    /// positions `head..tail` read together (the head read before and after
    /// the tail, until it did not move meanwhile; after 10,000 tries under
    /// a storm of pops, the last reading). Producers and consumers may go on meanwhile: a
    /// record still being written is waited for (an empty one left by a
    /// dead producer is skipped), and a record consumed after the instant is
    /// still copied, from its slot, as long as no producer of the next lap
    /// has claimed that slot (the tail, read after the copy, says so): a
    /// slot's bytes change only after such a claim. If one has, the copy is
    /// not that of the instant and [`SnapshotError::Lapped`] is returned.
    /// A record unpublished for longer than `patience` gives
    /// [`SnapshotError::Stalled`]. Returns how many records were visited;
    /// `visit` stopping with an error stops the copy (`Ok(Err(e))`).
    pub(crate) fn snapshot<E>(
        &self,
        patience: std::time::Duration,
        mut visit: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<Result<u64, E>, SnapshotError> {
        let cursors = self.store.cursors();
        // One instant: the head did not move while the tail was read.
        let (mut head, mut tail) = (0, 0);
        for _ in 0..10_000 {
            head = cursors.head.0.load(Ordering::SeqCst);
            tail = cursors.tail.0.pos.load(Ordering::SeqCst);
            if cursors.head.0.load(Ordering::SeqCst) == head {
                break;
            }
            std::hint::spin_loop();
        }
        let (first, end) = (self.count(head), self.count(tail));
        if end < first || end - first > self.cap {
            return Err(SnapshotError::Corrupt);
        }
        let mut buf = vec![0u8; self.record_size];
        let mut visited = 0;
        let mut pos = head;
        let mut wait = super::Backoff::new();
        let mut waiting_since = None;
        while self.count(pos) < end {
            let at = self.count(pos);
            let (lap, index) = self.split(pos).map_err(|_| SnapshotError::Corrupt)?;
            let slot = self.store.slot(index);
            let seq = slot.seq.load(Ordering::Acquire);
            let seq_lap = seq & POS_MASK & !PUBLISHED;
            let published = seq & PUBLISHED != 0;
            if seq_lap == lap && !published || self.state_is_behind(seq_lap, lap) {
                // Its producer is still writing (or the slot's earlier lap
                // is not done): wait for the record.
                let since = *waiting_since.get_or_insert_with(std::time::Instant::now);
                if since.elapsed() > patience {
                    return Err(SnapshotError::Stalled);
                }
                wait.snooze();
                continue;
            }
            if waiting_since.take().is_some() {
                wait = super::Backoff::new();
            }
            // Published for our lap, or consumed (free for the next lap, or
            // its record published again one lap later by a recovery).
            let skipped = seq_lap == lap && seq & SKIP != 0;
            let len = (slot.len.load(Ordering::Acquire) as usize).min(self.record_size);
            if !skipped {
                self.store.snapshot(index, &mut buf[..len]);
            }
            fence(Ordering::SeqCst);
            // No producer has claimed the slot's next lap: its bytes are ours.
            if self.count(cursors.tail.0.pos.load(Ordering::SeqCst)) > at + self.cap {
                return Err(SnapshotError::Lapped);
            }
            if !skipped && len > 0 {
                if let Err(e) = visit(&buf[..len]) {
                    return Ok(Err(e));
                }
                visited += 1;
            }
            pos = self.next(pos, lap, index);
        }
        Ok(Ok(visited))
    }

    /// True when `seq_lap` (a slot's lap) is before `lap`.
    fn state_is_behind(&self, seq_lap: u64, lap: u64) -> bool {
        seq_lap != lap && seq_lap.wrapping_sub(lap) & POS_MASK >= 1 << 62
    }
}

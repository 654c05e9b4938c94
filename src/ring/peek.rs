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

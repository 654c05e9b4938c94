//! One sync, run with the sync lock held: numbered, the records published
//! since the last one sealed (queues with an image), the consumed
//! watermark's next copy written, the pages written (see `pages`), and its
//! completion (or failure) recorded in the control block.

use super::Durable;
#[cfg(test)]
use super::hooks::SyncEvent;
use super::hooks::test_sync_delay;
use super::marks::{mark_valid, write_watermark_copy};
use crate::clock::now_ns;
use crate::error::*;
use std::sync::atomic::Ordering;

/// How far one sync of an `always` queue scans for the consumed watermark
/// (it lags behind when more pops than this happen between syncs; it is
/// only a lower bound). An `interval` sync takes it from its release pass.
const WATERMARK_SCAN: u64 = 1 << 16;

/// A sync begun (numbered, its marks moved, the lock held) whose pages are
/// still to be written.
pub(super) struct Begun {
    /// Its number: it covers tickets up to this one.
    pub(super) number: u64,
    /// When it began, nanoseconds since the Unix epoch.
    pub(super) started_ns: u64,
    /// Is the control page (the watermark) to be written too?
    pub(super) control: bool,
    /// The positions whose slots it must write (queues with an image): those
    /// sealed by it, and those released since the last sync.
    pub(super) changed: [(u64, u64); 2],
}

impl Durable {
    /// One sync, with the lock held: numbers it, writes the watermark,
    /// clears the dirty flag, syncs the file and records completion.
    /// (An `always` queue's caller gathers the others first: see
    /// `Durable::gather`.)
    pub(super) fn run_sync(&self) -> Result<()> {
        let w = self.words();
        w.batch_start.store(w.arrivals.load(Ordering::SeqCst), Ordering::Relaxed);
        if let Some(delay) = test_sync_delay() {
            std::thread::sleep(delay);
        }
        #[cfg(test)]
        if let Some(hook) = &self.hook {
            hook(&SyncEvent::Begin);
        }
        let begun = self.begin_sync();
        let r = self.write_pages(begun.control, begun.changed);
        self.end_sync(&begun, r)
    }

    /// The first half of a sync, with the lock held (and `batch_start`
    /// stored): numbers it, clears the dirty flag, seals and marks what it
    /// will write, and writes the watermark's next copy in memory. What it
    /// returns says which pages [`write_pages`](Self::write_pages) (or the
    /// same writes submitted elsewhere, see `uring`) must write; then
    /// [`end_sync`](Self::end_sync) records the outcome.
    pub(super) fn begin_sync(&self) -> Begun {
        let w = self.words();
        // A sync that began and never completed (its process was killed
        // during it, or its writes failed) may have moved the seal and
        // release marks and written the watermark in memory without the
        // disk receiving what they describe: this sync, which finds them
        // moved, would write neither those slots nor the watermark's page.
        // So after one, a sync writes the watermark's page, and (`interval`)
        // every slot into the image.
        let unfinished = w.done.load(Ordering::SeqCst) < w.started.load(Ordering::SeqCst);
        let number = w.started.fetch_add(1, Ordering::SeqCst) + 1;
        let started_ns = now_ns();
        // Changes made before this store are covered by the sync below;
        // a later one sets the flag again.
        w.dirty.store(0, Ordering::SeqCst);
        if self.lease_table.is_some() {
            w.leases_changed.store(0, Ordering::SeqCst);
        }
        let changed = match self.image {
            // After the two stores above: a record published before a
            // caller read `started` (or before the flag was cleared) is
            // sealed now; one published later brings another sync.
            Some(_) => [self.seal_published(), self.released_since()],
            None => [(0, 0); 2],
        };
        let (marked, watermark) = self.advance_watermark(started_ns);
        // Positions below the watermark this sync writes are never brought
        // back by a recovery: their pages need not reach the image. (Should
        // the machine stop before the watermark's page, written last, lands,
        // the older watermark holds, and what lies between them was popped
        // within the window: it may be delivered again, as promised.) A
        // ring that is drained between two syncs then writes almost nothing.
        let mut changed = changed.map(|(from, to)| (from.max(watermark).min(to), to));
        if unfinished {
            changed[0] = (0, self.ring.capacity());
        }
        Begun { number, started_ns, control: marked || unfinished, changed }
    }

    /// The second half of a sync begun by [`begin_sync`](Self::begin_sync),
    /// once its writes returned `r`: records its completion (or failure) in
    /// the control block. The caller still holds the lock, and releases it.
    pub(super) fn end_sync(&self, begun: &Begun, r: Result<()>) -> Result<()> {
        let w = self.words();
        let end = now_ns();
        w.callers.store(w.waiters.load(Ordering::SeqCst).saturating_add(1), Ordering::Relaxed);
        match r {
            Ok(()) => {
                w.last_sync_took_ns.store(end.saturating_sub(begun.started_ns), Ordering::Relaxed);
                w.last_sync_ns.store(end, Ordering::Release);
                w.done.fetch_max(begun.number, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                w.failures.fetch_add(1, Ordering::Relaxed);
                w.dirty.store(1, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    /// Seals the records producers of an `interval` queue published since
    /// the last pass (they do not seal them: see [`seal`](crate::ring::seal)
    /// and the module documentation), from where the last pass stopped
    /// (or one lap back from the tail, if a rebuild moved the cursors
    /// below that mark). Not cut at one lap back from the tail, which
    /// counts claims: a slot may still hold an older record, taken by a
    /// consumer that has not released it, whose next lap a producer
    /// claimed (see `Ring::seal_published`).
    /// Returns the positions it went over (what the image must receive).
    fn seal_published(&self) -> (u64, u64) {
        let w = self.words();
        let tail = self.ring.pushed();
        let mark = w.sealed.load(Ordering::Relaxed);
        let from = if mark > tail { tail.saturating_sub(self.ring.capacity()) } else { mark };
        let open = self.ring.seal_published(self.key, from, tail);
        w.sealed.store(open, Ordering::Relaxed);
        (from, tail)
    }

    /// (`interval`.) The positions whose slots consumers released since the
    /// last sync: the image must receive their pages too, since the
    /// watermark covers only a consumed prefix (a record taken after one a
    /// slower consumer still holds is recorded only by its slot's state).
    /// The next sync starts at the first that was not released yet.
    fn released_since(&self) -> (u64, u64) {
        let w = self.words();
        let head = self.ring.popped();
        let from = self.within_a_lap(w.released.load(Ordering::Relaxed), head);
        w.released.store(self.ring.released_until(from, self.ring.capacity()), Ordering::Relaxed);
        (from, head)
    }

    /// Where a pass up to position `to` starts from the mark the last pass
    /// left: the mark, unless it lies more than a lap behind `to` (nothing
    /// older is in the ring) or beyond it (a rebuild after a machine crash
    /// moved the cursors below it): then one lap back from `to`.
    fn within_a_lap(&self, mark: u64, to: u64) -> u64 {
        let cap = self.ring.capacity();
        if mark > to || to - mark > cap { to.saturating_sub(cap) } else { mark }
    }

    /// Writes the next copy of the consumed watermark (into the older
    /// copy) if consumers moved it since the last copy was written; returns
    /// whether it wrote one, and the watermark (every position below it is
    /// consumed).
    fn advance_watermark(&self, synced_ns: u64) -> (bool, u64) {
        let marks = &self.control.marks;
        let (newest, older) =
            if marks[0].generation.load(Ordering::Relaxed) >= marks[1].generation.load(Ordering::Relaxed) {
                (&marks[0], &marks[1])
            } else {
                (&marks[1], &marks[0])
            };
        let valid = mark_valid(newest, self.created_ns);
        let from = if valid { newest.consumed.load(Ordering::Relaxed) } else { 0 };
        let consumed = match self.image {
            // `released_since`, just before, found where the released
            // prefix ends (without the scan's limit): not scanned again.
            Some(_) => self.words().released.load(Ordering::Relaxed).max(from),
            None => self.ring.released_until(from, WATERMARK_SCAN),
        };
        if valid && consumed == from {
            return (false, consumed);
        }
        let generation = newest.generation.load(Ordering::Relaxed) + 1;
        write_watermark_copy(older, generation, consumed, self.ring.pushed(), synced_ns, self.created_ns);
        (true, consumed)
    }
}

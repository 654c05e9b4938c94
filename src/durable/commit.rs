//! Group commit: a thread that needs its change durable waits for a sync
//! that started after the change, running one itself when nobody is
//! syncing; the syncer of an `always` queue first gathers the callers that
//! are on their way, so that one sync covers them all (see the module
//! documentation of `durable`).

use super::{Durable, defer};
use crate::clock::now_ns;
use crate::error::*;
use crate::spec::Durability;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How long the syncer of an `always` queue waits for no new caller before
/// it syncs (see `Durable::gather`).
const GATHER_QUIET: Duration = Duration::from_micros(50);
/// The longest it gathers.
const GATHER_MAX: Duration = Duration::from_micros(500);

impl Durable {
    /// Returns once every change this thread made before the call is on
    /// stable storage (sharing a sync with other callers when one is due).
    pub(crate) fn sync(&self) -> Result<()> {
        // SeqCst: ordered after the change (a SeqCst CAS of the ring), so a
        // sync numbered above what we read starts after our change.
        let target = self.words().started.load(Ordering::SeqCst) + 1;
        if defer::take(self, target) {
            return Ok(());
        }
        self.wait_for_sync(target)
    }

    /// [`sync`](Self::sync), never put off by
    /// [`defer_syncs`](crate::Queue::defer_syncs): for a change that must be
    /// on stable storage before the caller makes the next one (a leased
    /// record saved in the lease table before its ring slot is released).
    pub(crate) fn sync_undeferred(&self) -> Result<()> {
        let target = self.words().started.load(Ordering::SeqCst) + 1;
        self.wait_for_sync(target)
    }

    /// Has sync number `target` completed?
    pub(crate) fn covered(&self, target: u64) -> bool {
        self.words().done.load(Ordering::Acquire) >= target
    }

    /// Waits until sync number `target` has completed, running it (or a
    /// later one, sharing it with every other caller) when nobody else is:
    /// the wait of [`sync`](Self::sync), also for a ticket taken earlier.
    pub(crate) fn wait_for_sync(&self, target: u64) -> Result<()> {
        let w = self.words();
        let mut counted = false;
        loop {
            if w.done.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            if !counted {
                counted = true;
                w.arrivals.fetch_add(1, Ordering::SeqCst);
            }
            if self.try_lock() {
                let r = if w.done.load(Ordering::Acquire) >= target {
                    Ok(())
                } else {
                    if self.policy == Durability::Always {
                        self.gather();
                    }
                    self.run_sync()
                };
                self.unlock();
                r?;
                continue;
            }
            self.wait_for_syncer(target);
        }
    }

    /// Runs sync number `target` (or a later one) here when nobody else is
    /// syncing, waiting for the disk but never for another syncer: `true`
    /// once it is covered (already, or by the sync run here), `false` when
    /// another thread, process or ring holds the lock (nothing was done).
    /// No gathering: the caller (an event loop) gathered before it asked.
    pub(crate) fn try_sync(&self, target: u64) -> Result<bool> {
        if self.covered(target) {
            return Ok(true);
        }
        if !self.try_lock() {
            return Ok(false);
        }
        let r = if self.covered(target) { Ok(()) } else { self.run_sync() };
        self.unlock();
        r.map(|()| true)
    }

    /// Before a sync of an `always` queue: when callers were concurrent
    /// (others waited as the last sync ended), waits, yielding the
    /// processor, until as many have arrived since the last sync started, so
    /// that this sync covers them all; or until none has arrived for
    /// [`GATHER_QUIET`] (a caller stopped), or the last sync's duration (at
    /// most [`GATHER_MAX`]) has passed.
    ///
    /// Without it, callers split into two groups that take turns: those a
    /// sync releases push again while the next sync, started at once by a
    /// caller that was waiting, runs without them, so each sync covered
    /// about half of the callers (docs/measurements.md). A lone caller
    /// never waits here.
    fn gather(&self) {
        let w = self.words();
        let callers = w.callers.load(Ordering::Relaxed);
        if callers <= 1 {
            return;
        }
        let from = w.batch_start.load(Ordering::Relaxed);
        let quiet = GATHER_QUIET.as_nanos() as u64;
        let limit = w.last_sync_took_ns.load(Ordering::Relaxed).min(GATHER_MAX.as_nanos() as u64);
        // A test's simulated syncs (a hook) gather with limits a loaded
        // machine's scheduling cannot exceed, so that what the test sees is
        // the gathering and not how soon its threads were run.
        #[cfg(test)]
        let (quiet, limit) = if self.hook.is_some() { (20_000_000, 200_000_000) } else { (quiet, limit) };
        let start = now_ns();
        let (mut seen, mut changed) = (w.arrivals.load(Ordering::SeqCst), start);
        while seen.wrapping_sub(from) < callers {
            std::thread::yield_now();
            let t = now_ns();
            let a = w.arrivals.load(Ordering::SeqCst);
            if a != seen {
                (seen, changed) = (a, t);
            } else if t.saturating_sub(changed) >= quiet {
                return;
            }
            if t.saturating_sub(start) >= limit {
                return;
            }
        }
    }
}

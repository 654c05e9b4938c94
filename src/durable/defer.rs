//! Syncs put off by [`Queue::defer_syncs`](crate::Queue::defer_syncs): while
//! it runs on a thread, a sync that thread's calls on that queue would
//! wait for is not waited for; the sync number that covers them is kept
//! instead, for the caller to wait for later (elsewhere).

use super::Durable;
use std::cell::Cell;

thread_local! {
    /// The `Durable` whose syncs are put off (its address; 0: none),
    /// and the highest sync number they needed (0: none yet).
    static DEFERRED: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// Puts off the syncs of `d` on this thread until the returned guard
/// is ended (or dropped).
pub(crate) fn begin(d: &Durable) -> Guard {
    let prev = DEFERRED.with(|c| c.replace((d as *const Durable as usize, 0)));
    Guard { prev: Some(prev) }
}

/// Called by a sync about to wait for sync number `target`: `true`
/// (and the number kept) when the syncs of `d` are put off here.
#[inline]
pub(super) fn take(d: &Durable, target: u64) -> bool {
    DEFERRED.with(|c| {
        let (at, needed) = c.get();
        if at != d as *const Durable as usize {
            return false;
        }
        c.set((at, needed.max(target)));
        true
    })
}

/// Restores what was put off before [`begin`] when ended or dropped.
pub(crate) struct Guard {
    prev: Option<(usize, u64)>,
}

impl Guard {
    /// The highest sync number the calls since [`begin`] needed (0: none).
    pub(crate) fn end(mut self) -> u64 {
        let prev = self.prev.take().unwrap_or((0, 0));
        DEFERRED.with(|c| c.replace(prev)).1
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(prev) = self.prev.take() {
            DEFERRED.with(|c| c.set(prev));
        }
    }
}

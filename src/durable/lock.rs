//! The sync lock of a durable queue: a word of its control block holding
//! the syncer's pid, so that one sync runs at a time across processes;
//! those who find it held sleep on the control block's futex until it is
//! released, and a syncer killed holding it is found dead and the lock
//! taken from it.

use super::Durable;
use crate::clock::now_ns;
use crate::wait;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Longest a sync is waited for before its syncer is checked for death.
const STALE_LOCK: Duration = Duration::from_secs(1);

impl Durable {
    /// Takes the sync lock if nobody holds it (never waits).
    pub(super) fn try_lock(&self) -> bool {
        let w = self.words();
        let me = std::process::id().max(1);
        if w.lock.load(Ordering::Relaxed) != 0 {
            return false;
        }
        if w.lock.compare_exchange(0, me, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            w.locked_ns.store(now_ns(), Ordering::Relaxed);
            return true;
        }
        false
    }

    /// Releases the sync lock, waking those who wait for it.
    pub(super) fn unlock(&self) {
        let w = self.words();
        w.lock.store(0, Ordering::SeqCst);
        w.futex.fetch_add(1, Ordering::SeqCst);
        if w.waiters.load(Ordering::SeqCst) != 0 {
            wait::wake(&w.futex, u32::MAX);
        }
    }

    /// Sleeps until the running sync ends (or a slice passes); takes the
    /// lock from a syncer that died holding it.
    #[cold]
    pub(super) fn wait_for_syncer(&self, target: u64) {
        let w = self.words();
        let seen = w.futex.load(Ordering::SeqCst);
        w.waiters.fetch_add(1, Ordering::SeqCst);
        let holder = w.lock.load(Ordering::SeqCst);
        if holder != 0 && w.done.load(Ordering::SeqCst) < target {
            wait::wait(&w.futex, seen, Some(Duration::from_millis(20)));
        }
        let _ = w.waiters.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| Some(n.saturating_sub(1)));
        self.free_if_dead(holder);
    }

    /// Frees the sync lock if `holder` (0: nobody) has held it longer than
    /// [`STALE_LOCK`] and is dead, waking those who wait for it.
    pub(super) fn free_if_dead(&self, holder: u32) {
        let w = self.words();
        let since = w.locked_ns.load(Ordering::Relaxed);
        if holder != 0
            && now_ns().saturating_sub(since) > STALE_LOCK.as_nanos() as u64
            && !process_alive(holder)
            && w.lock.compare_exchange(holder, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok()
        {
            w.futex.fetch_add(1, Ordering::SeqCst);
            wait::wake(&w.futex, u32::MAX);
        }
    }
}

/// Is process `pid` alive (or of another user: not provably dead)?
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else { return false };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 only checks for the process.
    unsafe { libc::kill(pid, 0) == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH) }
}

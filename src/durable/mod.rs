//! Durable queues: a queue file on a real disk whose records survive a
//! machine crash within a stated window.
//!
//! # Policies
//! * [`Durability::Always`]: a push returns only once its record is on
//!   stable storage, a pop only once its consumption is. Threads and
//!   processes that push or pop at the same time share syncs (group
//!   commit, below); a batch makes one sync.
//! * [`Durability::Interval`]: pushes and pops do what a plain queue's do,
//!   nothing more. A flusher thread in every attached process looks for
//!   changes no sync covers (see [`Durable::changed_since_sync`]) and syncs
//!   when the oldest is nearly the interval old, so that it reaches the
//!   disk within the interval (see [`flusher`]). Producers do not seal their
//!   records (the checksum recovery checks, see
//!   [`seal`](crate::ring::seal)): each sync first seals what was published
//!   since the last one (`Ring::seal_published`). And a sync does not write
//!   the live pages back: it copies the pages of those slots, and the
//!   watermark's, into the queue's image at the end of the file with direct
//!   I/O (see [`image`]), so the live pages are never write-protected
//!   behind the producers' backs. With no process attached nothing changes
//!   in memory; a process that detaches or exits syncs what it left, and
//!   one that attaches syncs what a killed one left. (So if every attached
//!   process is killed, their last changes reach the disk when the next
//!   process attaches.)
//!
//! # Group commit
//! A sync (of an `always` queue) is one `msync(MS_SYNC)` of the file from
//! the control block to its end (for a shared mapping that is `fdatasync`
//! of the range): it covers every change made before it starts. The control block counts syncs
//! started and done. A thread that needs its change durable reads
//! `started` after making it: sync number `started + 1` or any later one
//! covers it. It waits until `done` reaches that number, or, if no sync is
//! running, takes the sync lock (a word holding the syncer's pid) and runs
//! one itself. While one sync runs, every thread that arrives queues for the
//! next, which then covers them all: throughput grows with the number of
//! producers. Waiters sleep on a futex in the file, so this works across
//! processes; a syncer killed holding the lock is found dead (its pid is
//! gone) and the lock taken from it.
//!
//! Left at that, callers split into two groups taking turns (those a sync
//! released push again while the next sync, begun at once by a waiting
//! caller, runs without them), and each sync covers half of them. So the
//! syncer of an `always` queue first gathers: when others were waiting as
//! the last sync ended, it waits (yielding) until as many callers have
//! arrived since the last sync began, or none for 50 us, or for at most
//! the last sync's duration (see `Durable::gather`). Measured on this
//! project's VM (ext4 on a virtio disk, 304-byte records): 4 threads went
//! from 2.1 to 4.0 records per sync and 14 K to 19 K pushes/s, 10 threads
//! from 5.1 to 9.8 records per sync.
//!
//! # What a sync writes
//! When consumers moved it since the last sync, a sync writes the consumed
//! watermark (every position below it was consumed: see
//! `Ring::released_until`) into one of two copies, alternately, each in its
//! own 512-byte sector with a generation and a checksum, as LMDB keeps its
//! meta pages. Recovery (see [`recover`]) takes the valid copy with the
//! higher generation.
//!
//! Only what recovery reads is synced: the slots, and the control page when
//! the watermark moved. A queue with an image (`interval`, and `always`
//! without leases, see [`image`]) writes their copies into it: the pages of
//! the slots published and released since the last sync, with `O_DIRECT |
//! O_DSYNC`. (An `always` queue's producers seal their own records anyway:
//! the sync's seal pass stops at a record still being written, and a later
//! one whose producer waits for this sync must reach the image sealed.)
//! An `always` queue without an image (with leases, or made by an earlier
//! version) syncs in place: the process table and the cursors are not
//! needed after a machine crash (recovery clears the one and rebuilds the
//! others), and on this kind of disk every extra page costs a write of its
//! own, so a sync writes the control page first (`sync_file_range`, which
//! waits for the write but does not flush the device's cache) and then the
//! dirty slots with `msync(MS_SYNC)`, whose cache flush makes both durable.
//! A push alone costs one page or two (its slot), and one flush.

pub(crate) mod flusher;
pub(crate) mod image;
#[cfg(test)]
mod power_loss_tests;
pub(crate) mod recover;

use crate::clock::now_ns;
use crate::error::*;
use crate::file::layout::{CONTROL_OFFSET, Control, DATA_OFFSET, Mark, SyncWords, TABLE_OFFSET, fnv1a};
use crate::file::map::QueueFile;
use crate::ring::{MapStorage, Ring};
use crate::shm::{SharedMap, SharedRef};
use crate::spec::Durability;
use crate::wait;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The durability state of a durable queue, for `tvmq stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableStats {
    /// The queue's policy.
    pub policy: Durability,
    /// When the last sync completed, nanoseconds since the Unix epoch (0: none yet).
    pub last_sync_ns: u64,
    /// How long it took, nanoseconds.
    pub last_sync_took_ns: u64,
    /// Syncs completed since the file was created.
    pub syncs: u64,
    /// Syncs that failed.
    pub failures: u64,
    /// (`interval`.) A flusher found changes that no sync covers yet (it
    /// looks every sixteenth of the interval), or the last sync failed.
    pub dirty: bool,
    /// The consumed watermark of the last sync: positions below it were consumed.
    pub watermark: u64,
    /// The machine restarted since processes last attached: the next
    /// process to attach rebuilds the queue from its slots.
    pub recovery_pending: bool,
    /// What the last recovery after a machine restart found (`None`: none ran).
    pub last_recovery: Option<RecoveryStats>,
}

/// What a recovery after a machine restart found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryStats {
    /// When it ran, nanoseconds since the Unix epoch.
    pub at_ns: u64,
    /// Records kept.
    pub kept: u64,
    /// Slots dropped because their checksum did not match: torn writes, or
    /// records whose write had not reached the disk (none acknowledged).
    pub torn: u64,
    /// Records dropped because they were consumed before the last sync.
    pub stale: u64,
    /// Kept records moved to a later position (they lay more than a lap
    /// behind the newest one).
    pub moved: u64,
    /// Empty positions between kept records (skipped by consumers).
    pub holes: u64,
    /// The consumed watermark recovery started from.
    pub watermark: u64,
    /// Recoveries run on this queue file.
    pub runs: u64,
}

/// What a test's sync hook is told.
#[cfg(test)]
pub(crate) enum SyncEvent<'a> {
    /// A sync begins (before `started` is counted).
    Begin,
    /// In place of the sync's system calls: the mapping's first byte and
    /// length, whether the control page is synced too (the slots always
    /// are), and for a queue with an image the writes into it (mapping
    /// offset, bytes, file offset). The hook may copy what "reaches the disk".
    Synced { base: *const u8, len: usize, control: bool, writes: &'a [(u64, u64, u64)] },
    /// (`interval` queues with leases.) After `Synced`, before the image
    /// writes: the lease table is persisted in place (the mapping's first
    /// byte and length; the hook may copy what reaches the disk).
    LeaseTable { base: *const u8, len: usize },
}

/// A test's replacement for the sync system calls (see [`SyncEvent`]).
#[cfg(test)]
pub(crate) type SyncHook = std::sync::Arc<dyn Fn(&SyncEvent) + Send + Sync>;

/// Hooks by queue file path, installed by tests before the queue is opened.
#[cfg(test)]
pub(crate) fn hooks() -> &'static std::sync::Mutex<Vec<(std::path::PathBuf, SyncHook)>> {
    static HOOKS: std::sync::Mutex<Vec<(std::path::PathBuf, SyncHook)>> = std::sync::Mutex::new(Vec::new());
    &HOOKS
}

/// Are the syncs of the queue file at `path` replaced by a test's hook
/// (then its filesystem does not matter)?
pub(crate) fn hooked(path: &std::path::Path) -> bool {
    #[cfg(test)]
    return hooks().lock().is_ok_and(|h| h.iter().any(|(p, _)| p == path));
    #[cfg(not(test))]
    {
        let _ = path;
        false
    }
}

/// Syncs put off by [`Queue::defer_syncs`](crate::Queue::defer_syncs): while
/// it runs on a thread, a sync that thread's calls on that queue would
/// wait for is not waited for; the sync number that covers them is kept
/// instead, for the caller to wait for later (elsewhere).
pub(crate) mod defer {
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
}

/// A test aid: each sync is made this much slower
/// (`TVMQ_TEST_SYNC_DELAY_MS`, read once), so that the tests of a program
/// built on the library (the server's) see which threads wait for syncs.
fn test_sync_delay() -> Option<Duration> {
    static DELAY: std::sync::OnceLock<Option<Duration>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| {
        let ms = std::env::var("TVMQ_TEST_SYNC_DELAY_MS").ok()?.parse::<u64>().ok()?;
        (ms > 0).then(|| Duration::from_millis(ms))
    })
}

/// Longest a sync is waited for before its syncer is checked for death.
const STALE_LOCK: Duration = Duration::from_secs(1);
/// How long the syncer of an `always` queue waits for no new caller before
/// it syncs (see `Durable::gather`).
const GATHER_QUIET: Duration = Duration::from_micros(50);
/// The longest it gathers.
const GATHER_MAX: Duration = Duration::from_micros(500);
/// How far one sync of an `always` queue scans for the consumed watermark
/// (it lags behind when more pops than this happen between syncs; it is
/// only a lower bound). An `interval` sync takes it from its release pass.
const WATERMARK_SCAN: u64 = 1 << 16;

/// A durable queue's sync machinery in this process.
pub(crate) struct Durable {
    policy: Durability,
    map: SharedMap,
    /// The queue file (for `sync_file_range` of the control page).
    file: std::fs::File,
    control: SharedRef<Control>,
    /// A view of the queue's ring, for the watermark scan.
    ring: Ring<MapStorage>,
    created_ns: u64,
    /// (`interval`.) When this process's flusher last found the queue
    /// unchanged since the last sync, nanoseconds since the Unix epoch.
    clean_seen_ns: std::sync::atomic::AtomicU64,
    /// The queue's key, under which its records are sealed.
    key: u64,
    /// Queues with an image (`interval`, and `always` without leases): their
    /// durable copy, which syncs write (see [`image`]).
    image: Option<image::Image>,
    /// `interval` queues with leases: the lease table's bytes in the
    /// mapping (offset, length), synced in place by each sync before the
    /// slots are written into the image (see `Image::write_before_table`).
    lease_table: Option<(usize, usize)>,
    #[cfg(test)]
    hook: Option<SyncHook>,
}

impl Durable {
    /// The sync machinery of the durable queue in `file`, whose policy is `policy`.
    pub(crate) fn new(file: &QueueFile, policy: Durability) -> Result<Durable> {
        let info = file.info();
        Ok(Durable {
            policy,
            map: file.map().clone(),
            file: file
                .file()
                .try_clone()
                .map_err(|e| Error::new(SHM_ERR_NOMEM, format!("cannot duplicate the queue file's descriptor: {e}")))?,
            control: file.control().clone(),
            ring: Ring::new(file.storage()?, info.capacity, info.record_size as usize),
            created_ns: info.created_ns,
            clean_seen_ns: std::sync::atomic::AtomicU64::new(now_ns()),
            key: crate::ring::seal::queue_key(info.id, info.created_ns),
            image: image::Image::open(file)?,
            lease_table: if file.options().image() { lease_table_range(file)? } else { None },
            #[cfg(test)]
            hook: hooks().lock().ok().and_then(|h| h.iter().find(|(p, _)| p == file.path()).map(|(_, f)| f.clone())),
        })
    }

    /// The key under which the queue's records are sealed.
    #[inline]
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// The queue's policy.
    pub(crate) fn policy(&self) -> Durability {
        self.policy
    }

    fn words(&self) -> &SyncWords {
        &self.control.sync.0
    }

    /// (`interval` queues.) Did pushes or pops happen that no sync covers?
    /// Producers and consumers mark nothing (a shared flag written by every
    /// push and read by every pop cost them 10-20 % here); the flushers
    /// compare instead: records pushed beyond those the last sync sealed
    /// (`sealed` trails the tail also while a producer is still writing,
    /// so its record brings another sync), records taken beyond those whose
    /// release the last sync copied (likewise), or the position after the
    /// consumed watermark released by its consumer.
    pub(crate) fn changed_since_sync(&self) -> bool {
        let w = self.words();
        if self.ring.pushed() != w.sealed.load(Ordering::Relaxed)
            || self.ring.popped() != w.released.load(Ordering::Relaxed)
            || w.leases_changed.load(Ordering::Relaxed) != 0
        {
            return true;
        }
        let mark = best_mark(&self.control, self.created_ns).map_or(0, |m| m.1);
        self.ring.released_until(mark, 1) > mark
    }

    /// (`interval` queues with leases.) The caller changed the lease table
    /// in a way the next sync must carry: the flushers see it. A load of a
    /// word that changes once per sync; a store only when it is clear.
    /// SeqCst, after the change (itself a SeqCst CAS): a flag seen set was
    /// set before the next sync clears it, and that sync, which persists
    /// the table after the clear, covers the change.
    #[inline]
    pub(crate) fn leases_changed(&self) {
        let flag = &self.words().leases_changed;
        if flag.load(Ordering::SeqCst) == 0 {
            flag.store(1, Ordering::SeqCst);
        }
    }

    /// Returns once every change this thread made before the call is on
    /// stable storage (sharing a sync with other callers when one is due).
    pub(crate) fn sync(&self) -> Result<()> {
        // SeqCst: ordered after the change (a SeqCst CAS of the ring), so a
        // sync numbered above what we read starts after our change.
        let target = self.words().started.load(Ordering::SeqCst) + 1;
        if defer::take(self, target) {
            return Ok(());
        }
        self.sync_until(target)
    }

    /// [`sync`](Self::sync), never put off by
    /// [`defer_syncs`](crate::Queue::defer_syncs): for a change that must be
    /// on stable storage before the caller makes the next one (a leased
    /// record saved in the lease table before its ring slot is released).
    pub(crate) fn sync_now(&self) -> Result<()> {
        let target = self.words().started.load(Ordering::SeqCst) + 1;
        self.sync_until(target)
    }

    /// Has sync number `target` completed?
    pub(crate) fn covered(&self, target: u64) -> bool {
        self.words().done.load(Ordering::Acquire) >= target
    }

    /// Waits until sync number `target` has completed, running it (or a
    /// later one, sharing it with every other caller) when nobody else is:
    /// the wait of [`sync`](Self::sync), for a ticket taken earlier.
    pub(crate) fn sync_to(&self, target: u64) -> Result<()> {
        self.sync_until(target)
    }

    /// Waits until sync number `target` has completed, running it (or a
    /// later one) when nobody else is.
    fn sync_until(&self, target: u64) -> Result<()> {
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
                let r = if w.done.load(Ordering::Acquire) >= target { Ok(()) } else { self.sync_locked() };
                self.unlock();
                r?;
                continue;
            }
            self.wait_for_syncer(target);
        }
    }

    /// (The flusher, every `slack`.) Marks the queue dirty when it changed
    /// since the last sync, as of the last look that found it unchanged (in
    /// this process: the change is later than that) or the start of the
    /// last sync, whichever is later (that sync covered every change made
    /// before it started); then syncs if it is
    /// dirty, its oldest unsynced change is at least `window` less two
    /// `slack` and twice the last sync's duration old (but at least a
    /// quarter of `window`), and nobody is syncing. Returns whether it synced.
    pub(crate) fn flush_if_due(&self, window: Duration, slack: Duration) -> Result<bool> {
        let w = self.words();
        if w.dirty.load(Ordering::SeqCst) == 0 {
            let now = now_ns();
            if !self.changed_since_sync() {
                self.clean_seen_ns.store(now, Ordering::Relaxed);
                return Ok(false);
            }
            // Without the second term, a queue that never stays unchanged
            // for a tick was synced again as soon as each sync ended (10
            // syncs a second instead of 1 with a 1 s interval, measured).
            let synced_from =
                w.last_sync_ns.load(Ordering::Acquire).saturating_sub(w.last_sync_took_ns.load(Ordering::Relaxed));
            let since = self.clean_seen_ns.load(Ordering::Relaxed).max(synced_from);
            if w.dirty.compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                w.dirty_ns.store(since, Ordering::SeqCst);
            }
        }
        let window = window.as_nanos() as u64;
        let took = w.last_sync_took_ns.load(Ordering::Relaxed);
        let due = window.saturating_sub(2 * slack.as_nanos() as u64 + 2 * took).max(window / 4);
        let since = w.dirty_ns.load(Ordering::Relaxed);
        if now_ns().saturating_sub(since) < due {
            return Ok(false);
        }
        if !self.try_lock() {
            // A syncer killed holding the lock would otherwise stop every
            // flusher for good: the next tick takes the lock.
            self.free_if_dead(w.lock.load(Ordering::SeqCst));
            return Ok(false);
        }
        let r = self.sync_locked();
        self.unlock();
        r.map(|()| true)
    }

    /// Is a change waiting for a sync (`interval` queues: a flusher saw
    /// one, or one happened since the last sync)?
    pub(crate) fn is_dirty(&self) -> bool {
        self.words().dirty.load(Ordering::Relaxed) != 0
            || (matches!(self.policy, Durability::Interval(_)) && self.changed_since_sync())
    }

    fn try_lock(&self) -> bool {
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

    fn unlock(&self) {
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
    fn wait_for_syncer(&self, target: u64) {
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
    fn free_if_dead(&self, holder: u32) {
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

    /// One sync, with the lock held: numbers it, writes the watermark,
    /// clears the dirty flag, syncs the file and records completion.
    fn sync_locked(&self) -> Result<()> {
        let w = self.words();
        if self.policy == Durability::Always {
            self.gather();
        }
        w.batch_start.store(w.arrivals.load(Ordering::SeqCst), Ordering::Relaxed);
        if let Some(delay) = test_sync_delay() {
            std::thread::sleep(delay);
        }
        #[cfg(test)]
        if let Some(hook) = &self.hook {
            hook(&SyncEvent::Begin);
        }
        // A sync that began and never completed (its process was killed
        // during it, or its writes failed) may have moved the seal and
        // release marks and written the watermark in memory without the
        // disk receiving what they describe: this sync, which finds them
        // moved, would write neither those slots nor the watermark's page.
        // So after one, a sync writes the watermark's page, and (`interval`)
        // every slot into the image.
        let unfinished = w.done.load(Ordering::SeqCst) < w.started.load(Ordering::SeqCst);
        let n = w.started.fetch_add(1, Ordering::SeqCst) + 1;
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
        let (marked, watermark) = self.write_mark(started_ns);
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
        let r = self.sync_pages(marked || unfinished, changed);
        let end = now_ns();
        w.callers.store(w.waiters.load(Ordering::SeqCst).saturating_add(1), Ordering::Relaxed);
        match r {
            Ok(()) => {
                w.last_sync_took_ns.store(end.saturating_sub(started_ns), Ordering::Relaxed);
                w.last_sync_ns.store(end, Ordering::Release);
                w.done.fetch_max(n, Ordering::SeqCst);
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
    /// about half of the callers (measured: 2.1 records per sync with 4
    /// threads, 5.1 with 10). A lone caller never waits here.
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

    /// Writes the next copy of the consumed watermark (into the older
    /// copy) if consumers moved it since the last copy was written; returns
    /// whether it wrote one, and the watermark (every position below it is
    /// consumed).
    fn write_mark(&self, synced_ns: u64) -> (bool, u64) {
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
        write_mark(older, generation, consumed, self.ring.pushed(), synced_ns, self.created_ns);
        (true, consumed)
    }

    /// The system calls: the control page written (when `control`), then
    /// `msync(MS_SYNC)` of the slots, whose device cache flush covers both.
    /// (`changed`: the positions whose records the sync sealed, and those
    /// released since the last sync, for the image.)
    fn sync_pages(&self, control: bool, changed: [(u64, u64); 2]) -> Result<()> {
        #[cfg(test)]
        let (base, len) = (self.map.base(), self.map.len());
        #[cfg(test)]
        if gather_tests::FAIL_NEXT_SYNC.with(|f| f.replace(false)) {
            return Err(Error::new(SYNC_FAILED, "a sync failed on purpose (test)"));
        }
        #[cfg(test)]
        if let Some(hook) = &self.hook {
            let writes = self.image.as_ref().map(|i| i.plan(&changed, control)).unwrap_or_default();
            // The copy the hook takes here is what the image receives (with
            // leases: the snapshot); then the lease table is persisted.
            hook(&SyncEvent::Synced { base, len, control, writes: &writes });
            if self.image.is_some() && self.lease_table.is_some() {
                hook(&SyncEvent::LeaseTable { base, len });
            }
            return Ok(());
        }
        if let Some(image) = &self.image {
            return match self.lease_table {
                None => image.write(&self.map, &changed, control),
                Some((from, n)) => {
                    image.write_before_table(&self.map, &changed, control, || msync_range(&self.map, from, n))
                }
            };
        }
        if control {
            let flags =
                libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
            let (from, n) = (CONTROL_OFFSET as libc::off64_t, (TABLE_OFFSET - CONTROL_OFFSET) as libc::off64_t);
            // SAFETY: a plain system call on a descriptor we own.
            if unsafe { libc::sync_file_range(self.file.as_raw_fd(), from, n, flags) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(Error::new(SYNC_FAILED, format!("sync_file_range failed: {e}")));
            }
        }
        msync_range(&self.map, DATA_OFFSET as usize, usize::MAX)
    }
}

/// `msync(MS_SYNC)` of a queue file's mapping from [`CONTROL_OFFSET`] on.
pub(crate) fn msync(map: &SharedMap) -> Result<()> {
    msync_range(map, CONTROL_OFFSET as usize, usize::MAX)
}

/// (`interval` queues with leases.) The lease table's bytes in the
/// mapping: (offset, length).
fn lease_table_range(file: &QueueFile) -> Result<Option<(usize, usize)>> {
    let info = file.info();
    let entries = file.options().lease_entries();
    if entries == 0 {
        return Ok(None);
    }
    let at = crate::file::layout::lease_table_offset(info.capacity, info.record_size, true);
    let n = crate::lease::table::table_bytes(entries, info.record_size);
    match at.zip(n).and_then(|(a, n)| Some((usize::try_from(a).ok()?, usize::try_from(n).ok()?))) {
        Some((a, n)) if a.checked_add(n).is_some_and(|end| end <= file.map().len()) => Ok(Some((a, n))),
        _ => {
            Err(Error::new(SHM_ERR_INVAL, format!("{}: the lease table does not fit the file", file.path().display())))
        }
    }
}

/// `msync(MS_SYNC)` of `n` bytes of a queue file's mapping from byte
/// `from` (cut at its end).
pub(crate) fn msync_range(map: &SharedMap, from: usize, n: usize) -> Result<()> {
    map.sync_range(from, n).map_err(|e| Error::new(SYNC_FAILED, format!("msync failed: {e}")))
}

/// Writes one copy of the watermark: its words, then its checksum.
pub(crate) fn write_mark(m: &Mark, generation: u64, consumed: u64, pushed: u64, synced_ns: u64, created_ns: u64) {
    m.check.store(0, Ordering::Relaxed);
    m.generation.store(generation, Ordering::Relaxed);
    m.consumed.store(consumed, Ordering::Relaxed);
    m.pushed.store(pushed, Ordering::Relaxed);
    m.synced_ns.store(synced_ns, Ordering::Relaxed);
    m.check.store(mark_check(generation, consumed, pushed, synced_ns, created_ns), Ordering::Release);
}

fn mark_check(generation: u64, consumed: u64, pushed: u64, synced_ns: u64, created_ns: u64) -> u64 {
    let mut b = [0u8; 40];
    for (i, v) in [generation, consumed, pushed, synced_ns, created_ns].iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    fnv1a(&b)
}

fn mark_valid(m: &Mark, created_ns: u64) -> bool {
    let g = m.generation.load(Ordering::Acquire);
    g != 0
        && m.check.load(Ordering::Acquire)
            == mark_check(
                g,
                m.consumed.load(Ordering::Relaxed),
                m.pushed.load(Ordering::Relaxed),
                m.synced_ns.load(Ordering::Relaxed),
                created_ns,
            )
}

/// The valid watermark copy with the higher generation: `(generation,
/// consumed, synced_ns)`.
pub(crate) fn best_mark(control: &Control, created_ns: u64) -> Option<(u64, u64, u64)> {
    control
        .marks
        .iter()
        .filter(|m| mark_valid(m, created_ns))
        .map(|m| {
            (
                m.generation.load(Ordering::Relaxed),
                m.consumed.load(Ordering::Relaxed),
                m.synced_ns.load(Ordering::Relaxed),
            )
        })
        .max()
}

/// The durability state of a durable queue from its control block (also
/// for read-only views).
pub(crate) fn stats(control: &Control, policy: Durability, created_ns: u64) -> DurableStats {
    let w = &control.sync.0;
    let r = &control.recovery.0;
    let at = r.at_ns.load(Ordering::Relaxed);
    DurableStats {
        policy,
        last_sync_ns: w.last_sync_ns.load(Ordering::Relaxed),
        last_sync_took_ns: w.last_sync_took_ns.load(Ordering::Relaxed),
        syncs: w.done.load(Ordering::Relaxed),
        failures: w.failures.load(Ordering::Relaxed),
        dirty: w.dirty.load(Ordering::Relaxed) != 0,
        watermark: best_mark(control, created_ns).map_or(0, |m| m.1),
        recovery_pending: crate::clock::boot_id().is_some_and(|b| b != recover::stored_boot_id(control)),
        last_recovery: (at != 0).then(|| RecoveryStats {
            at_ns: at,
            kept: r.kept.load(Ordering::Relaxed),
            torn: r.torn.load(Ordering::Relaxed),
            stale: r.stale.load(Ordering::Relaxed),
            moved: r.moved.load(Ordering::Relaxed),
            holes: r.holes.load(Ordering::Relaxed),
            watermark: r.watermark.load(Ordering::Relaxed),
            runs: r.runs.load(Ordering::Relaxed),
        }),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_watermark_copy_leaves_the_other() {
        let c = Control::default();
        write_mark(&c.marks[0], 1, 10, 20, 5, 99);
        write_mark(&c.marks[1], 2, 15, 25, 6, 99);
        assert_eq!(best_mark(&c, 99), Some((2, 15, 6)));
        c.marks[1].consumed.store(16, Ordering::Relaxed);
        assert_eq!(best_mark(&c, 99), Some((1, 10, 5)), "torn copy ignored");
        assert_eq!(best_mark(&c, 98), None, "another queue's marks");
    }
}

#[cfg(test)]
mod gather_tests {
    use super::*;
    use crate::file::queue_path;
    use crate::queue::Queue;
    use crate::spec::Spec;
    use crate::test_support::DiskDir;

    thread_local! {
        /// The next sync this thread runs fails before it writes anything,
        /// as one whose process is killed before its writes leaves the
        /// queue (its marks moved, nothing written).
        pub(super) static FAIL_NEXT_SYNC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// A sync after one that failed (or whose process was killed) before
    /// its writes covers what that one was to write: the slots it sealed
    /// and released, and the watermark it moved, reach the image, so that
    /// a restart neither loses the records pushed before it nor brings back
    /// those popped before it. (It found the seal and release marks and the
    /// watermark moved in memory, and wrote nothing of them.)
    #[test]
    fn a_sync_after_an_unfinished_one_writes_what_that_one_did_not() {
        {
            let dir = DiskDir::new("unfinished");
            let mut spec = Spec::new(64, 16);
            // An hour: only the test's syncs run.
            spec.durability = Some(Durability::Interval(3_600_000));
            Queue::create(&dir.0, 1, &spec).unwrap();
            let q = Queue::open(&dir.0, 1).unwrap();
            let mut out = [0u8; 16];
            for i in 0..40u32 {
                q.push(&i.to_le_bytes()).unwrap();
            }
            q.sync().unwrap();
            for _ in 0..30 {
                q.pop(&mut out, crate::Wait::NoWait).unwrap();
            }
            for i in 40..70u32 {
                q.push(&i.to_le_bytes()).unwrap();
            }
            FAIL_NEXT_SYNC.with(|f| f.set(true));
            assert!(q.sync().is_err());
            q.sync().unwrap();
            // The machine-restart view: the file copied, the boot id cleared.
            let restarted = dir.0.join("restarted");
            std::fs::create_dir_all(&restarted).unwrap();
            let copy = queue_path(&restarted, 1);
            std::fs::copy(queue_path(&dir.0, 1), &copy).unwrap();
            let boot = CONTROL_OFFSET
                + (std::mem::offset_of!(Control, sync) + std::mem::offset_of!(SyncWords, boot_id)) as u64;
            use std::os::unix::fs::FileExt;
            let f = std::fs::OpenOptions::new().write(true).open(&copy).unwrap();
            f.write_all_at(&[0u8; 16], boot).unwrap();
            drop(f);
            let r = Queue::open(&restarted, 1).unwrap();
            let mut got = Vec::new();
            while r.pop(&mut out, crate::Wait::NoWait).is_ok() {
                got.push(u32::from_le_bytes(out[..4].try_into().unwrap()));
            }
            assert!(r.durable_stats().unwrap().last_recovery.is_some(), "a recovery ran");
            assert_eq!(got, (30..70).collect::<Vec<u32>>());
            drop(q);
        }
    }

    /// An `interval` queue's sync writes into its image no page below the
    /// watermark it writes: after the ring drained, only the watermark's.
    #[test]
    fn a_sync_after_the_ring_drained_writes_only_the_watermark() {
        let dir = DiskDir::new("drained");
        let mut spec = Spec::new(4096, 304);
        // An hour: only the test's syncs run.
        spec.durability = Some(Durability::Interval(3_600_000));
        Queue::create(&dir.0, 1, &spec).unwrap();
        let path = queue_path(&dir.0, 1);
        let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = written.clone();
        let hook: SyncHook = std::sync::Arc::new(move |event| {
            if let SyncEvent::Synced { writes, .. } = event {
                seen.lock().unwrap().push(writes.iter().map(|w| w.1).sum::<u64>());
            }
        });
        hooks().lock().unwrap().push((path.clone(), hook));
        let q = Queue::open(&dir.0, 1).unwrap();
        let mut out = [0u8; 304];
        for round in 0..3 {
            for _ in 0..3000 {
                q.push(&[round; 304]).unwrap();
            }
            q.sync().unwrap();
            for _ in 0..3000 {
                q.pop(&mut out, crate::Wait::NoWait).unwrap();
            }
            q.sync().unwrap();
        }
        hooks().lock().unwrap().retain(|(p, _)| p != &path);
        let bytes = written.lock().unwrap().clone();
        // After the pushes: the pages of 3,000 slots of 304 bytes (about
        // 980 kB) and the watermark's page. After the pops: the watermark's
        // page and at most the page where the consumed prefix ends (not
        // every page the consumers released, which would be 980 kB again).
        for (k, b) in bytes.iter().enumerate() {
            if k % 2 == 0 {
                assert!(*b >= 3000 * 304, "sync {k} after pushes wrote {b} bytes");
            } else {
                assert!(*b <= 2 * 4096, "sync {k} after the ring drained wrote {b} bytes");
            }
        }
        assert_eq!(bytes.len(), 6);
    }

    /// With syncs made slow (2 ms, so that wake-ups are quick beside them),
    /// 4 threads pushing one record at a time share nearly every sync: the
    /// syncer gathers them. Without the gathering they take turns in two
    /// groups, about 2 records per sync. (A queue with a hook gathers with
    /// long limits, 20 ms quiet and 200 ms at most: on a loaded machine the
    /// real 50 us let this test see 2.67 records per sync in CI.)
    #[test]
    fn concurrent_callers_share_each_sync() {
        let dir = DiskDir::new("gather");
        let mut spec = Spec::new(1000, 64);
        spec.durability = Some(Durability::Always);
        Queue::create(&dir.0, 1, &spec).unwrap();
        let path = queue_path(&dir.0, 1);
        let hook: SyncHook = std::sync::Arc::new(|event| {
            if let SyncEvent::Synced { .. } = event {
                std::thread::sleep(Duration::from_millis(2))
            }
        });
        hooks().lock().unwrap().push((path.clone(), hook));
        let q = Queue::open(&dir.0, 1).unwrap();
        const THREADS: usize = 4;
        const EACH: usize = 60;
        let before = q.durable_stats().unwrap().syncs;
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let q = &q;
                s.spawn(move || {
                    for i in 0..EACH {
                        q.push(&[t as u8, i as u8]).unwrap();
                    }
                });
            }
        });
        let syncs = q.durable_stats().unwrap().syncs - before;
        hooks().lock().unwrap().retain(|(p, _)| p != &path);
        let per_sync = (THREADS * EACH) as f64 / syncs as f64;
        eprintln!("{per_sync:.2} records per sync ({syncs} syncs)");
        assert!(per_sync >= 2.8, "{per_sync:.2} records per sync ({syncs} syncs)");
    }
}

#[cfg(test)]
mod defer_tests {
    use super::*;
    use crate::file::queue_path;
    use crate::queue::Queue;
    use crate::spec::Spec;
    use crate::test_support::DiskDir;
    use std::sync::atomic::AtomicU64;

    /// Pushes and pops with their syncs put off return at once, published;
    /// one sync, run when the ticket is waited for, covers them all.
    #[test]
    fn deferred_changes_share_the_sync_their_ticket_names() {
        let dir = DiskDir::new("defer");
        let mut spec = Spec::new(100, 64);
        spec.durability = Some(Durability::Always);
        Queue::create(&dir.0, 1, &spec).unwrap();
        let path = queue_path(&dir.0, 1);
        let synced = std::sync::Arc::new(AtomicU64::new(0));
        let seen = synced.clone();
        let hook: SyncHook = std::sync::Arc::new(move |event| {
            if let SyncEvent::Synced { .. } = event {
                seen.fetch_add(1, Ordering::SeqCst);
            }
        });
        hooks().lock().unwrap().push((path.clone(), hook));
        let q = Queue::open(&dir.0, 1).unwrap();
        let before = synced.load(Ordering::SeqCst);
        let (r, ticket) = q.defer_syncs(|q| {
            for i in 0..10u8 {
                q.push(&[i; 8])?;
            }
            let mut out = [0u8; 64];
            q.pop(&mut out, crate::Wait::NoWait)
        });
        assert_eq!(r.unwrap(), 8);
        assert_eq!(q.depth(), 9, "published at once");
        assert_eq!(synced.load(Ordering::SeqCst), before, "no sync ran inside");
        let ticket = ticket.expect("an always queue's changes need a sync");
        assert!(!q.is_synced(ticket));
        q.sync_ticket(ticket).unwrap();
        assert!(q.is_synced(ticket));
        assert_eq!(synced.load(Ordering::SeqCst), before + 1, "one sync for all of them");
        // Nothing changed: no ticket; and syncs are no longer put off.
        assert_eq!(q.defer_syncs(|q| q.depth()).1, None);
        q.push(&[1]).unwrap();
        assert_eq!(synced.load(Ordering::SeqCst), before + 2);
        hooks().lock().unwrap().retain(|(p, _)| p != &path);
    }
}

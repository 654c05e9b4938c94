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
//! the last sync's duration (see `Durable::gather`): a sync then covers
//! about twice as many callers (docs/measurements.md).
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

//!
//! # Files
//! This file holds [`Durable`], the machinery's state in a process; the
//! rest, from the bottom up: `hooks` (test aids), `marks` (the
//! watermark's two copies), `image` (the slots' durable copy), `pages` (a
//! sync's system calls), `lock` (the sync lock), `sync` (one sync, with
//! the lock held), `defer` (syncs put off by a thread), `commit` (group
//! commit: waiting for a sync or running one), `dirty` (`interval`: what
//! no sync covers, and the flusher's due sync), `flusher` (the thread),
//! `recover` (after a machine restart), `stats` (for `tvmq stat`), `uring`
//! (syncs submitted to an io_uring by a thread that does not wait for
//! them: [`SyncRing`]).

mod commit;
pub(crate) mod defer;
mod dirty;
pub(crate) mod flusher;
mod hooks;
pub(crate) mod image;
mod lock;
mod marks;
mod pages;
#[cfg(test)]
mod power_loss_tests;
pub(crate) mod recover;
mod stats;
mod sync;
#[cfg(test)]
mod tests;
mod uring;

pub(crate) use hooks::hooked;
#[cfg(test)]
pub(crate) use hooks::{SyncEvent, SyncHook, hooks};
pub(crate) use pages::msync;
pub(crate) use stats::stats;
pub use stats::{DurableStats, RecoveryStats};
pub use uring::{SyncRing, SyncStart};

use crate::clock::now_ns;
use crate::error::*;
use crate::file::layout::{Control, SyncWords};
use crate::file::map::QueueFile;
use crate::registry::Registry;
use crate::ring::{MapStorage, Ring};
use crate::shm::{SharedMap, SharedRef};
use crate::spec::Durability;
use lock::Syncer;
use std::time::Duration;

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
    /// This process in the sync lock word, and a view of the queue's
    /// process table, by which the lock's holder is judged (see [`lock`]).
    syncer: Syncer,
    registry: Registry,
    /// How long a syncer that cannot be told dead or alive keeps the lock
    /// (the queue's unblock timeout).
    unknown_after: Duration,
    #[cfg(test)]
    hook: Option<hooks::SyncHook>,
}

impl Durable {
    /// The sync machinery of the durable queue in `file`, whose policy is
    /// `policy`, in this process registered as `me` in the queue's process
    /// table (`None`: not registered); a syncer that cannot be told dead
    /// or alive keeps the sync lock for `unknown_after` at most.
    pub(crate) fn new(
        file: &QueueFile,
        policy: Durability,
        me: Option<(usize, u32)>,
        unknown_after: Duration,
    ) -> Result<Durable> {
        let info = file.header();
        Ok(Durable {
            syncer: Syncer::new(me),
            registry: file.registry()?,
            unknown_after,
            policy,
            map: file.map().clone(),
            file: file
                .file()?
                .try_clone()
                .map_err(|e| Error::new(SHM_ERR_NOMEM, format!("cannot duplicate the queue file's descriptor: {e}")))?,
            control: file.control().clone(),
            ring: Ring::new(file.storage()?, info.capacity, info.record_size as usize),
            created_ns: info.created_ns,
            clean_seen_ns: std::sync::atomic::AtomicU64::new(now_ns()),
            key: crate::ring::seal::queue_key(info.id, info.created_ns),
            image: image::Image::open(file)?,
            lease_table: if file.options().image() { image::lease_table_range(file)? } else { None },
            #[cfg(test)]
            hook: hooks::hooks()
                .lock()
                .ok()
                .and_then(|h| h.iter().find(|(p, _)| p == file.path()).map(|(_, f)| f.clone())),
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

    /// Is the policy `always` (every push and pop waits for its sync)?
    #[inline(always)]
    pub(crate) fn is_always(&self) -> bool {
        matches!(self.policy, Durability::Always)
    }

    fn words(&self) -> &SyncWords {
        &self.control.sync.0
    }
}

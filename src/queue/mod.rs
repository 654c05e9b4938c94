//! The safe Rust API of a queue: create, open, push, pop (blocking or not),
//! batches, drop. Built from the ring, the queue file, the process registry
//! and futex waits; the C layer, the CLI and the server use nothing else.
//!
//! By concern: this file opens, attaches and repairs a queue; `types` holds
//! the values the API takes and gives ([`Wait`], [`Strategy`], [`QueueInfo`],
//! [`Repair`]), `data` the data path (push, pop, batches), `blocking` the
//! waits of pops on an empty queue and the wake-ups of pushes, `durability`
//! the glue to durable queues, `stats` the counters (`snapshot` all of
//! them in one cheap read, for watchers), `participant` how the queue takes
//! part in the ring (its announcements and its
//! [`Stall`](crate::ring::Stall) policy), [`lease`] acknowledged consumption.

use crate::clock::now_ns;
use crate::durable::Durable;
use crate::error::*;
use crate::file;
use crate::file::layout::Control;
use crate::file::map::{Access, QueueFile};
use crate::registry::{HolderIs, IntentSlots, Registry};
use crate::ring::{Holder, MapStorage, Ring};
use crate::spec::{Durability, Spec};
use crate::wait;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

mod blocking;
mod data;
mod durability;
mod lease;
mod participant;
mod snapshot;
mod stats;
#[cfg(test)]
mod tests;
mod transfer;
mod types;

pub use durability::SyncTicket;
pub(crate) use lease::Attacher;
pub use lease::{Lease, LeaseState, LeaseStats, LeasedRecord};
pub(crate) use participant::{IdHasher, KeptIntent};
pub use snapshot::Snapshot;
pub use stats::{Process, Stats};
pub use transfer::ExportFormat;
pub use types::{QueueInfo, Repair, Strategy, Wait};

/// An open queue: a queue file mapped into this process and registered in
/// its process table. Share it between threads (`&Queue` or `Arc<Queue>`);
/// other processes open the same file. Every record pushed is popped exactly
/// once, by any mix of threads and processes, in each producer's order, and
/// a process killed at any instant loses nothing that was acknowledged (see
/// [`Queue::repair`]).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("tvmq-doc-queue-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// use std::sync::Arc;
/// use tvm::{Queue, Spec, Wait};
///
/// Queue::create(&dir, 7, &Spec::new(1000, 64))?;
/// let q = Arc::new(Queue::open(&dir, 7)?);
/// let producer = {
///     let q = q.clone();
///     std::thread::spawn(move || (0..100u32).for_each(|i| q.push(&i.to_le_bytes()).unwrap()))
/// };
/// let mut out = [0u8; 64];
/// for i in 0..100u32 {
///     let n = q.pop(&mut out, Wait::Forever)?;    // sleeps (no busy loop) while empty
///     assert_eq!(&out[..n], &i.to_le_bytes());   // one producer: its order
/// }
/// producer.join().unwrap();
/// assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap_err().code(), tvm::error::NO_DATA_FOUND);
/// # drop(q);
/// # Queue::drop_queue(&dir, 7)?;
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), tvm::Error>(())
/// ```
pub struct Queue {
    ring: Ring<MapStorage>,
    registry: Registry,
    /// This process's intent words, handed out to its threads (see `Intent`).
    slots: Arc<IntentSlots>,
    /// Registered in the process table (false: the table was full, or inspect-only).
    registered: bool,
    unblock_timeout: Duration,
    /// How a blocking pop waits on an empty queue.
    strategy: Strategy,
    /// When this process last reconciled waiter counts (ns since epoch).
    last_reconcile_ns: AtomicU64,
    /// How much longer this process's pops spin before they sleep (see
    /// `blocking::SPIN_CREDIT_MAX`).
    spin_credit: AtomicU32,
    /// False for a read-only [`Queue::inspect`] view: push and pop refuse.
    writable: bool,
    /// The process that opened it (a fork child holds a copy it must not act on).
    opener: u32,
    /// The lease table and settings, for a queue with leases (boxed: one
    /// word here, so that the fields plain pushes and pops use keep their
    /// places).
    leases: Option<Box<lease::Leases>>,
    info: QueueInfo,
    /// Durable queues: the sync machinery (shared with the flusher thread;
    /// see [`always`](Self::always)).
    durable: Option<Arc<Durable>>,
    file: QueueFile,
    /// What opening it recovered (see [`Queue::repaired_at_open`]).
    repaired_at_open: Repair,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("id", &self.info.id)
            .field("name", &self.info.name)
            .field("path", &self.path())
            .finish()
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        if self.writable && !self.registered && self.opener == std::process::id() {
            self.control().state.0.unregistered.fetch_sub(1, Ordering::SeqCst);
        }
        if let Some(d) = &self.durable {
            // What this process changed reaches the disk now, not at the
            // next flush of a process that may never come.
            if d.is_dirty() && self.opener == std::process::id() {
                let _ = d.sync();
            }
        }
    }
}

impl Queue {
    /// Creates queue `id` in `dir`, atomically: the file appears complete or
    /// not at all, mode `spec.mode`, in a directory that is created (0700)
    /// if it is the default one.
    ///
    /// Errors: `CONDIT_IS_NIL` (0 rows or record size, a mode beyond 0777),
    /// `TBL_ARD_EXIST`, `MQUE_CRTE_BIG` (too big for the index, the record
    /// size limit or the free space), `FLD_DEF_SPILL` / `FTYPE_NOT_DEF` (a bad
    /// field), `SHM_ERR_ACCES`.
    pub fn create(dir: &Path, id: u32, spec: &Spec) -> Result<()> {
        file::create::create(dir, id, spec)
    }

    /// Removes queue `id` from `dir`: marks it dropped in the shared control
    /// block, so that attached processes stop using it and its sleepers wake
    /// with `SHM_ERR_EIDRM`, then unlinks the file (the mappings stay valid
    /// until their processes let go of them). A corrupted file or one of
    /// another layout version is removed without being mapped. Needs write
    /// permission on the file.
    ///
    /// Errors: `TBL_NOT_FOUND`, `SHM_ERR_ACCES`, `TBL_NOT_FOUND` when the
    /// queue was re-created while being dropped (the new one is kept).
    pub fn drop_queue(dir: &Path, id: u32) -> Result<()> {
        match QueueFile::open(dir, id, Access::Drop) {
            Ok(f) => {
                let wake = &f.control().wake.0;
                f.control().state.0.dropped.store(1, Ordering::SeqCst);
                // A sleeper re-checks `dropped` after waking: bump the word it
                // sleeps on, then wake every sleeper of every process.
                wake.futex.fetch_add(1, Ordering::SeqCst);
                wait::wake(&wake.futex, u32::MAX);
                file::create::remove(dir, id, f.file()?)?;
                // An `interval` queue's live part in tmpfs goes with it.
                f.remove_live();
                Ok(())
            }
            Err(e) if matches!(e.code(), SHM_ERR_INVAL | VER_NOT_MATCH) => file::create::remove_unmapped(dir, id),
            Err(e) => Err(e),
        }
    }

    /// Removes this user's orphaned live parts: the files in
    /// `/dev/shm/tvmq-<euid>` that hold the live part of a durable queue
    /// (`interval`, or `always` without leases) whose queue file is gone or
    /// is another file now (removed otherwise than by
    /// [`drop_queue`](Self::drop_queue): `rm`, or its directory removed)
    /// and that no process uses; and the temporary files of live parts
    /// whose makers died. Every create and attach of such a queue does
    /// this too. Never fails: what cannot be read or removed is left (a
    /// live part made by an earlier version, which does not record its
    /// queue file, is kept).
    pub fn remove_orphaned_live_parts() -> crate::file::OrphansRemoved {
        file::orphans::remove_orphans()
    }

    /// Orphaned live parts this process removed since it started (at its
    /// creates and attaches, and in
    /// [`remove_orphaned_live_parts`](Self::remove_orphaned_live_parts)),
    /// and the bytes of memory they held. Never fails.
    pub fn orphaned_live_parts_removed() -> (u64, u64) {
        file::orphans::removed_so_far()
    }

    /// Removes the temporary files that creations of queue `id` in `dir`
    /// left behind when their process died; returns how many.
    pub fn remove_stale_temporaries(dir: &Path, id: u32) -> usize {
        file::create::remove_stale_temporaries(dir, id)
    }

    /// Opens queue `id` of `dir` for pushing and popping: validates the file,
    /// maps it (populating its pages unless `TVMQ_POPULATE=0`), and registers
    /// this process in its process table.
    ///
    /// Errors: `TBL_NOT_FOUND` (no such queue), `SHM_ERR_ACCES` (no
    /// permission, a symbolic link, a file of another owner),
    /// `SHM_ERR_INVAL` / `VER_NOT_MATCH` (not a valid queue file, or of a
    /// layout this library does not read), `SHM_ERR_NOMEM` / `MQUE_CRTE_BIG`
    /// (it cannot be mapped), `NOT_DURABLE` (a durable queue's file moved
    /// onto tmpfs); a durable queue attached after a machine restart
    /// recovers first: `LOCK_DOWR_ERR` (its recovery lock cannot be taken),
    /// `SYNC_FAILED` (the recovery's sync failed).
    pub fn open(dir: &Path, id: u32) -> Result<Queue> {
        let populate = std::env::var("TVMQ_POPULATE").map_or(true, |v| v != "0");
        Self::open_with(dir, id, populate)
    }

    /// [`open`](Self::open), saying whether to map every page now
    /// (`populate`) or let the first touch of each page fault it in.
    ///
    /// Errors: those of [`open`](Self::open).
    pub fn open_with(dir: &Path, id: u32, populate: bool) -> Result<Queue> {
        Self::from_file(QueueFile::open(dir, id, Access::ReadWrite { populate })?, true)
    }

    /// Opens queue `id` of `dir` read-only, for inspection: no registration;
    /// push and pop fail.
    ///
    /// Errors: those of [`open`](Self::open) (the file is only read: no
    /// recovery runs, so neither `LOCK_DOWR_ERR` nor `SYNC_FAILED`; a
    /// durable queue's file on tmpfs can be inspected).
    pub fn inspect(dir: &Path, id: u32) -> Result<Queue> {
        Self::from_file(QueueFile::open(dir, id, Access::ReadOnly)?, false)
    }

    /// [`inspect`](Self::inspect), holding no descriptor: the file (and an
    /// `interval` queue's live part) is mapped, then closed. For a reader
    /// of many queues (`tvmq top`, the metrics), whose open-file limit would
    /// otherwise bound the queues it reads: a view costs a mapping, not a
    /// descriptor. What needs the file again opens it for the call and
    /// closes it: the processes attached ([`snapshot`](Self::snapshot),
    /// [`processes`](Self::processes): one `open` and `fstat` when an entry
    /// of the process table names a process, none otherwise); a file that
    /// is no longer there (dropped) or no longer the one mapped counts none.
    /// [`sync`](Self::sync) refuses it as it refuses any view.
    ///
    /// Errors: those of [`inspect`](Self::inspect).
    pub fn inspect_detached(dir: &Path, id: u32) -> Result<Queue> {
        Self::from_file(QueueFile::open(dir, id, Access::Detached)?, false)
    }

    fn from_file(file: QueueFile, register: bool) -> Result<Queue> {
        let info = QueueInfo::from_header(file.header(), file.options());
        // The consumers of a queue with an image erase the checksums of the records
        // they take (see `Ring::erasing_seals`).
        let erase_seals = file.options().image();
        let mut ring = Ring::new(file.storage()?, info.capacity, info.record_size as usize).erasing_seals(erase_seals);
        let mut registry = file.registry()?;
        let durability = info.durability.filter(|_| register);
        if durability.is_some() {
            if file.is_volatile() && !crate::durable::hooked(file.path()) {
                // Created on a disk (create refuses tmpfs), then moved or copied
                // here. (An `interval` queue's live part made by this open goes.)
                if file.live_made() {
                    file.remove_live();
                }
                return Err(Error::new(
                    NOT_DURABLE,
                    format!(
                        "{} is a durable queue's file on tmpfs or ramfs, which a restart empties: move it back \
                         to a directory on a disk (`tvmq stat` and `tvmq peek` can still read it here)",
                        file.path().display()
                    ),
                ));
            }
            let key = crate::ring::seal::queue_key(info.id, info.created_ns);
            // After a machine restart, the first to attach rebuilds the ring
            // from its slots (before anyone registers or uses it).
            if crate::durable::recover::attach(&file, &ring, key, || registry.reset_all())?.is_some() {
                ring = Ring::new(file.storage()?, info.capacity, info.record_size as usize).erasing_seals(erase_seals);
            }
        }
        let control = file.control();
        let (registered, reconciled) = if register { registry.register(&control.wake.0.waiters) } else { (false, 0) };
        if register && !registered {
            // Attached without an entry: nobody can prove a stall of ours dead.
            control.state.0.unregistered.fetch_add(1, Ordering::SeqCst);
        }
        if reconciled > 0 {
            control.counters.0.reconciled_waiters.fetch_add(u64::from(reconciled), Ordering::Relaxed);
        }
        let unblock_timeout = std::env::var("TVMQ_UNBLOCK_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_millis(info.unblock_timeout_ms), Duration::from_millis);
        // The sync machinery, once registered: the sync lock names its
        // holder by this process's entry (see `crate::durable::lock`).
        let durable = match durability.map(|policy| Self::durable_part(&file, policy, registry.me(), unblock_timeout)) {
            Some(Err(e)) => {
                if register && !registered {
                    control.state.0.unregistered.fetch_sub(1, Ordering::SeqCst);
                }
                return Err(e);
            }
            Some(Ok(d)) => Some(d),
            None => None,
        };
        let deaths = if register { registry.unclean_deaths() } else { Vec::new() };
        let leases = match (file.lease_table()?, &info.leases) {
            (Some(table), Some(settings)) => Some(Box::new(lease::Leases::new(table, settings.clone(), registry.me()))),
            _ => None,
        };
        let mut queue = Queue {
            ring,
            registry,
            slots: Arc::new(IntentSlots::default()),
            registered,
            unblock_timeout,
            strategy: Strategy::choose(std::env::var("TVMQ_SPIN_US").ok().as_deref(), info.spin_us),
            last_reconcile_ns: AtomicU64::new(0),
            spin_credit: AtomicU32::new(blocking::SPIN_CREDIT_MAX),
            writable: register,
            opener: std::process::id(),
            leases,
            info,
            durable,
            file,
            repaired_at_open: Repair {
                recovered_pushes: 0,
                recovered_pops: 0,
                reconciled_waiters: reconciled,
                alone: false,
            },
        };
        if !deaths.is_empty() {
            // A process died attached: what it held and nobody waits on is
            // recovered now rather than left for a later lap.
            let r = queue.repair();
            queue.registry.forget(&deaths);
            queue.repaired_at_open = Repair { reconciled_waiters: r.reconciled_waiters + reconciled, ..r };
        }
        Ok(queue)
    }

    /// The sync machinery of a durable queue opened for writing by this
    /// process, registered as `me`: made, synced if a process died before
    /// its flusher ran, and handed to the flusher (`interval`).
    fn durable_part(
        file: &QueueFile,
        policy: Durability,
        me: Option<(usize, u32)>,
        unknown_after: Duration,
    ) -> Result<Arc<Durable>> {
        let d = Arc::new(Durable::new(file, policy, me, unknown_after)?);
        if d.is_dirty() {
            // Left by a process that died before its flusher ran.
            d.sync()?;
        }
        if let Durability::Interval(_) = policy {
            crate::durable::flusher::register(&d);
        }
        Ok(d)
    }

    /// Recovers what dead processes left that nobody waits on: their
    /// sleepers in the waiter count, the records they had taken but not
    /// released (delivered again), their unpublished claims (skipped). A
    /// holder is robbed only when proven dead, or when its owner is unknown
    /// and no other process is attached. Done at attach when a process died
    /// attached, and by `tvmq repair`. Safe while others work.
    pub fn repair(&self) -> Repair {
        let wake = &self.control().wake.0;
        let mut reconciled = self.registry.reconcile(&wake.waiters);
        let alone = self.registry.others_alive() == 0;
        if alone && self.registry.own_waiters() == 0 {
            // Nobody else is attached and none of our threads sleeps: any
            // remaining count was left by a kill between the two steps of
            // announcing a sleep. (A thread of ours entering its sleep right
            // now may lose its wake-up; it re-checks after one sleep slice.)
            reconciled += wake.waiters.swap(0, Ordering::SeqCst);
            // Likewise processes counted as attached without an entry.
            let own = u32::from(self.writable && !self.registered);
            self.control().state.0.unregistered.store(own, Ordering::SeqCst);
        }
        self.count_reconciled(reconciled);
        let unregistered = self.unregistered();
        let dead = |holder, at| {
            let dead = match self.registry.holder(holder, at, unregistered) {
                HolderIs::Dead => true,
                HolderIs::Unknown => alone,
                HolderIs::Alive => false,
            };
            // A lease consumer's slot: waited for, or released (its record
            // is in the lease table), never published again.
            dead && !(holder == Holder::Consumer && self.lease_slot_verdict(at).is_some())
        };
        let (pushes, pops) = self.ring.repair(dead, alone);
        self.lease_repair();
        let s = &self.control().counters.0;
        s.recovered_pushes.fetch_add(pushes, Ordering::Relaxed);
        s.recovered_pops.fetch_add(pops, Ordering::Relaxed);
        if pushes + pops > 0 {
            s.last_recovery_ns.store(now_ns(), Ordering::Relaxed);
        }
        Repair { recovered_pushes: pushes, recovered_pops: pops, reconciled_waiters: reconciled, alone }
    }

    /// What opening this queue recovered: when a process had died
    /// attached, the repair made then (see [`Queue::repair`]), and the
    /// sleepers of dead processes uncounted when this process registered.
    /// `tvmq repair` adds it to its own repair's, so that it reports what
    /// it recovered in all. `alone` is that of the repair at opening
    /// (false when there was none).
    pub fn repaired_at_open(&self) -> Repair {
        self.repaired_at_open
    }

    /// What the queue is (its validated header).
    pub fn info(&self) -> &QueueInfo {
        &self.info
    }

    /// The queue id.
    pub fn id(&self) -> u32 {
        self.info.id
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// Largest record, in bytes.
    #[inline]
    pub fn record_size(&self) -> usize {
        self.ring.record_size()
    }

    /// Exact capacity, in records.
    pub fn capacity(&self) -> u64 {
        self.ring.capacity()
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The live part in tmpfs of an `interval` queue (see `file::live`).
    #[cfg(test)]
    pub(crate) fn live_path(&self) -> Option<&Path> {
        self.file.live_path()
    }

    /// The mapping the queue works on.
    #[cfg(test)]
    pub(crate) fn shared_map(&self) -> crate::shm::SharedMap {
        self.file.map().clone()
    }

    /// Processes attached without an entry in the process table.
    fn unregistered(&self) -> bool {
        self.control().state.0.unregistered.load(Ordering::Acquire) != 0
    }

    /// How this process's blocking pops wait on this queue (the queue's
    /// setting, or `$TVMQ_SPIN_US` read when the queue was opened).
    pub fn wait_strategy(&self) -> Strategy {
        self.strategy
    }

    /// How long a stalled slot of unknown holder is waited for.
    pub fn unblock_timeout(&self) -> Duration {
        self.unblock_timeout
    }

    /// The sync machinery of an `always` queue: `None` for plain and
    /// `interval` queues, whose pushes and pops test this and find nothing
    /// to do.
    #[inline(always)]
    /// (Tests.) The sync machinery of a durable queue.
    #[cfg(test)]
    pub(crate) fn durable_in_test(&self) -> Option<&Durable> {
        self.durable.as_deref()
    }

    fn always(&self) -> Option<&Durable> {
        self.durable.as_deref().filter(|d| d.is_always())
    }

    #[inline]
    fn control(&self) -> &Control {
        self.file.control()
    }

    /// True once the queue has been dropped.
    #[inline]
    pub fn is_dropped(&self) -> bool {
        self.control().state.0.dropped.load(Ordering::Acquire) != 0
    }
}

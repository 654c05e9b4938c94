//! The safe Rust API of a queue: create, open, push, pop (blocking or not),
//! batches, drop. Built from the ring, the queue file, the process registry
//! and futex waits; the C layer, the CLI and the server use nothing else.
//!
//! # Blocking without lost wake-ups
//! A consumer that finds the queue empty announces itself (`waiters += 1`,
//! SeqCst), reads the futex word, checks again that no producer has claimed
//! a position (`tail == head`, SeqCst loads), and sleeps only if the word is
//! unchanged. A producer claims its position (a SeqCst CAS of `tail`),
//! publishes, then reads `waiters` (SeqCst): if it is 0, the consumer's
//! re-check must have seen the claim (and waits for the record instead of
//! sleeping), so the wake-up system call is skipped; otherwise it bumps the
//! word and wakes.
//! Sleeps are cut into slices of [`SLEEP_SLICE`] so that a producer killed
//! between publishing and waking delays a sleeper, never strands it.

use crate::clock::{mono_ns, now_ns};
use crate::durable::{Durability, Durable, DurableStats};
use crate::error::*;
use crate::file::layout::Control;
use crate::file::map::{Access, QueueFile};
use crate::file::{self, LeaseSpec, Spec};
use crate::registry::{IntentSlots, Liveness, Registry};
use crate::ring::{Announce, Backoff, Holder, IDLE, Ring, RingError, Stall, Verdict, intent_word};
use crate::ring::{MapStorage, Peeked};
use crate::schema::Field;
use crate::wait;
use std::cell::{Cell, RefCell};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod lease;
pub use lease::{Lease, LeaseState, LeaseStats, LeasedRecord};

/// Where the spinning of a pop on an empty queue starts (8 pauses), before it
/// yields and then sleeps.
const EMPTY_POLL_FIRST_STEP: u32 = 3;

/// Longest single futex sleep; a sleeper re-checks the queue at least this often.
pub const SLEEP_SLICE: Duration = Duration::from_millis(200);

/// How a blocking pop ([`Wait::Forever`], [`Wait::Until`]) waits while the
/// queue is empty. Whatever it is, a push makes the wake-up system call only
/// when a consumer is asleep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Spin and yield for a few microseconds, then sleep on the futex (no CPU
    /// while asleep; a record that arrives then costs a kernel wake-up,
    /// tens of microseconds).
    Default,
    /// Spin (a busy loop of `pause`s, one CPU at 100 %) for up to this long
    /// since the queue was found empty, then yield briefly, then sleep.
    Spin(Duration),
    /// Spin for as long as the wait lasts: the lowest latency, and one CPU
    /// at 100 % for as long as the consumer waits.
    NeverSleep,
}

impl Strategy {
    /// `$TVMQ_SPIN_US` when it is set and valid (`-1`: never sleep), else the
    /// queue's setting, else the default.
    fn choose(env: Option<&str>, queue: Option<i64>) -> Strategy {
        let from = |us: i64| match us {
            -1 => Some(Strategy::NeverSleep),
            us if us >= 0 => Some(Strategy::Spin(Duration::from_micros(us as u64))),
            _ => None,
        };
        env.and_then(|v| v.trim().parse::<i64>().ok())
            .and_then(from)
            .or_else(|| queue.and_then(from))
            .unwrap_or(Strategy::Default)
    }
}

/// How long a pop may wait for a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Return `NO_DATA_FOUND` at once when the queue is empty.
    NoWait,
    /// Sleep until a record arrives (or the queue is dropped).
    Forever,
    /// Sleep until a record arrives or this instant passes (`MQUE_WAIT_TMO`).
    Until(Instant),
}

/// A pop's state while it finds nothing to take (see [`Queue::idle`]).
struct Idle {
    wait: Wait,
    /// Polling an empty queue reads `tail`, which producers are moving:
    /// start with pauses long enough not to slow them down.
    spins: Backoff,
    spin_until: Option<Instant>,
}

impl Idle {
    fn new(wait: Wait) -> Idle {
        Idle { wait, spins: Backoff::starting_at(EMPTY_POLL_FIRST_STEP), spin_until: None }
    }
}

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
    /// False for a read-only [`Queue::inspect`] view: push and pop refuse.
    writable: bool,
    /// The process that opened it (a fork child holds a copy it must not act on).
    opener: u32,
    /// The lease table and settings, for a queue with leases (boxed: one
    /// word here, so that the fields plain pushes and pops use keep their
    /// places).
    leases: Option<Box<lease::Leases>>,
    info: QueueInfo,
    /// Durable queues: the sync machinery (shared with the flusher thread).
    durable: Option<Arc<Durable>>,
    /// The same, for `always` queues only: the pushes and pops of plain and
    /// `interval` queues test this and find nothing to do.
    always: Option<Arc<Durable>>,
    file: QueueFile,
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

/// What a [`Queue::repair`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repair {
    /// Unpublished claims of dead producers turned into skipped records.
    pub recovered_pushes: u64,
    /// Records held by dead consumers published again.
    pub recovered_pops: u64,
    /// Sleepers of dead processes taken off the waiter count.
    pub reconciled_waiters: u32,
    /// No other process was attached (holders of unknown identity were recovered too).
    pub alone: bool,
}

/// What a queue is: its header, as validated when it was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    /// The queue id (the `TABLE` number of the C API).
    pub id: u32,
    /// The name given at creation (the C API's `lCreateQueue` uses the id as written).
    pub name: String,
    /// The partition text given at creation.
    pub part: String,
    /// Layout version of the file.
    pub version: u32,
    /// Permission bits the file was created with.
    pub mode: u32,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_ns: u64,
    /// Largest record, in bytes.
    pub record_size: u64,
    /// Bytes per slot in the file (header and record, rounded up to 8).
    pub slot_stride: u64,
    /// Exact capacity, in records.
    pub capacity: u64,
    /// Size of the file, in bytes.
    pub file_size: u64,
    /// How long a stalled slot whose holder cannot be told dead or alive is
    /// waited for before it is recovered (as created; see [`Queue::unblock_timeout`]).
    pub unblock_timeout_ms: u64,
    /// How long blocking pops spin before they sleep, as created (`None`:
    /// the default; -1: never sleep). See [`Queue::wait_strategy`] for what
    /// this process uses.
    pub spin_us: Option<i64>,
    /// The record layout, if the queue was created with one.
    pub fields: Vec<Field>,
    /// How the queue's changes reach stable storage (`None`: not durable;
    /// it survives process crashes, not a machine crash).
    pub durability: Option<Durability>,
    /// The lease settings of a queue with acknowledged consumption (`None`:
    /// a plain queue).
    pub leases: Option<LeaseSpec>,
}

impl QueueInfo {
    fn from_header(i: &file::layout::Info, options: &file::layout::Options) -> QueueInfo {
        QueueInfo {
            id: i.id,
            name: i.name().to_string(),
            part: i.part().to_string(),
            version: i.version,
            mode: i.mode,
            created_ns: i.created_ns,
            record_size: i.record_size,
            slot_stride: i.slot_stride,
            capacity: i.capacity,
            file_size: i.file_size,
            unblock_timeout_ms: i.unblock_timeout_ms,
            spin_us: options.spin_us(),
            fields: i.fields(),
            durability: options.durability(),
            leases: options.leases().map(|l| LeaseSpec {
                lease_ms: l.lease_ms,
                max_deliveries: l.max_deliveries as u32,
                dead_letter: (l.has_dead_letter != 0).then_some(l.dead_letter),
                max_leases: l.max_leases,
            }),
        }
    }
}

/// A live process attached to a queue, as its process table shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// Its entry in the table.
    pub entry: usize,
    /// Its process id.
    pub pid: u32,
    /// When it attached, nanoseconds since the Unix epoch.
    pub since_ns: u64,
    /// Its threads asleep in a blocking pop.
    pub sleepers: u32,
}

/// Counters and gauges of a queue, for `tvmq stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// Records pushed (positions claimed by producers, less recoveries).
    pub pushed: u64,
    /// Records popped (positions taken by consumers, less recoveries).
    pub popped: u64,
    /// Records queued now.
    pub depth: u64,
    /// Threads (of every process) announced as asleep in a blocking pop.
    pub waiters: u32,
    /// The queue has been dropped.
    pub dropped: bool,
    /// Claims of dead producers turned into skipped records.
    pub recovered_pushes: u64,
    /// Records held by dead consumers delivered again.
    pub recovered_pops: u64,
    /// Calls that failed because their slot was recovered while they stalled.
    pub robbed: u64,
    /// Sleepers of dead processes taken off the waiter count.
    pub reconciled_waiters: u64,
    /// Time of the last recovery, nanoseconds since the Unix epoch (0: never).
    pub last_recovery_ns: u64,
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
        match QueueFile::open(dir, id, Access::ReadWrite { populate: false }) {
            Ok(f) => {
                let wake = &f.control().wake.0;
                f.control().state.0.dropped.store(1, Ordering::SeqCst);
                // A sleeper re-checks `dropped` after waking: bump the word it
                // sleeps on, then wake every sleeper of every process.
                wake.futex.fetch_add(1, Ordering::SeqCst);
                wait::wake(&wake.futex, u32::MAX);
                file::create::remove(dir, id, f.file())
            }
            Err(e) if matches!(e.code(), SHM_ERR_INVAL | VER_NOT_MATCH) => file::create::remove_unmapped(dir, id),
            Err(e) => Err(e),
        }
    }

    /// Removes the temporary files that creations of queue `id` in `dir`
    /// left behind when their process died; returns how many.
    pub fn remove_stale_temporaries(dir: &Path, id: u32) -> usize {
        file::create::remove_stale_temporaries(dir, id)
    }

    /// Opens queue `id` of `dir` for pushing and popping: validates the file,
    /// maps it (populating its pages unless `TVMQ_POPULATE=0`), and registers
    /// this process in its process table.
    pub fn open(dir: &Path, id: u32) -> Result<Queue> {
        let populate = std::env::var("TVMQ_POPULATE").map_or(true, |v| v != "0");
        Self::open_with(dir, id, populate)
    }

    /// [`open`](Self::open), saying whether to map every page now
    /// (`populate`) or let the first touch of each page fault it in.
    pub fn open_with(dir: &Path, id: u32, populate: bool) -> Result<Queue> {
        Self::from_file(QueueFile::open(dir, id, Access::ReadWrite { populate })?, true)
    }

    /// Opens queue `id` of `dir` read-only, for inspection: no registration;
    /// push and pop fail.
    pub fn inspect(dir: &Path, id: u32) -> Result<Queue> {
        Self::from_file(QueueFile::open(dir, id, Access::ReadOnly)?, false)
    }

    fn from_file(file: QueueFile, register: bool) -> Result<Queue> {
        let info = QueueInfo::from_header(file.info(), file.options());
        let mut ring = Ring::new(file.storage()?, info.capacity, info.record_size as usize);
        let mut registry = file.registry()?;
        let mut durable = None;
        if let (Some(policy), true) = (info.durability, register) {
            if crate::file::is_volatile_fs(file.file()) && !crate::durable::hooked(file.path()) {
                // Created on a disk (create refuses tmpfs), then moved or copied here.
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
                ring = Ring::new(file.storage()?, info.capacity, info.record_size as usize);
            }
            let d = Arc::new(Durable::new(&file, policy)?);
            if d.is_dirty() {
                // Left by a process that died before its flusher ran.
                d.sync()?;
            }
            if let Durability::Interval(_) = policy {
                crate::durable::flusher::register(&d);
            }
            durable = Some(d);
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
        let deaths = if register { registry.unclean_deaths() } else { Vec::new() };
        let unblock_timeout = std::env::var("TVMQ_UNBLOCK_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_millis(info.unblock_timeout_ms), Duration::from_millis);
        let leases = match (file.lease_table()?, &info.leases) {
            (Some(table), Some(settings)) => Some(Box::new(lease::Leases::new(table, settings.clone(), registry.me()))),
            _ => None,
        };
        let queue = Queue {
            ring,
            registry,
            slots: Arc::new(IntentSlots::default()),
            registered,
            unblock_timeout,
            strategy: Strategy::choose(std::env::var("TVMQ_SPIN_US").ok().as_deref(), info.spin_us),
            last_reconcile_ns: AtomicU64::new(0),
            writable: register,
            opener: std::process::id(),
            leases,
            info,
            always: durable.clone().filter(|d| d.policy() == Durability::Always),
            durable,
            file,
        };
        if !deaths.is_empty() {
            // A process died attached: what it held and nobody waits on is
            // recovered now rather than left for a later lap.
            queue.repair();
            queue.registry.forget(&deaths);
        }
        Ok(queue)
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
                Liveness::Dead => true,
                Liveness::Unknown => alone,
                Liveness::Alive => false,
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

    /// Processes attached without an entry in the process table.
    fn unregistered(&self) -> bool {
        self.control().state.0.unregistered.load(Ordering::Acquire) != 0
    }

    /// This thread's intent word (see [`Intent`]), given out on first use.
    #[inline]
    fn intent(&self) -> Intent<'_> {
        if !self.registered {
            return Intent(None);
        }
        let key = Arc::as_ptr(&self.slots);
        let slot = THREAD_INTENTS.with(|t| {
            let (last, slot) = t.last.get();
            if last == key { slot } else { t.find_or_take(self) }
        });
        Intent(if slot == NO_WORD { None } else { self.registry.intent_word(slot) })
    }

    /// This thread's intent word and its number in the process's entry
    /// ([`NO_WORD`] without one): [`intent`](Self::intent) and the number
    /// (for lease pops; kept apart so that plain pushes and pops compile
    /// as before).
    #[inline]
    fn intent_slot(&self) -> (Intent<'_>, usize) {
        if !self.registered {
            return (Intent(None), NO_WORD);
        }
        let key = Arc::as_ptr(&self.slots);
        let slot = THREAD_INTENTS.with(|t| {
            let (last, slot) = t.last.get();
            if last == key { slot } else { t.find_or_take(self) }
        });
        (Intent(if slot == NO_WORD { None } else { self.registry.intent_word(slot) }), slot)
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

    #[inline]
    fn control(&self) -> &Control {
        self.file.control()
    }

    /// True once the queue has been dropped.
    #[inline]
    pub fn is_dropped(&self) -> bool {
        self.control().state.0.dropped.load(Ordering::Acquire) != 0
    }

    /// Appends one record of 1..=record_size bytes. Never waits for space:
    /// a full queue gives `DATA_SPC_FULL`.
    // Always inlined (into lPush): as a call of its own it costs plain
    // queues about 15% of their push rate (measured 2026-11-30).
    #[inline(always)]
    pub fn push(&self, record: &[u8]) -> Result<()> {
        self.check_push(record)?;
        if let Some(d) = &self.always {
            return self.push_always(d, record);
        }
        // Plain and `interval` queues (the flusher finds the change, and
        // the next sync seals the record: see `crate::durable`).
        self.ring.push(record, &self.intent(), &mut Patience::new(self)).map_err(|e| self.ring_error(e))?;
        self.wake_one();
        Ok(())
    }

    /// [`push`](Self::push) on an `always` queue: the record sealed, then
    /// synced. Out of line, so that plain pushes keep their code.
    #[inline(never)]
    fn push_always(&self, d: &Durable, record: &[u8]) -> Result<()> {
        self.ring
            .push_sealed(d.key(), record, &self.intent(), &mut Patience::new(self))
            .map_err(|e| self.ring_error(e))?;
        self.wake_one();
        d.sync()
    }

    #[inline]
    fn check_push(&self, record: &[u8]) -> Result<()> {
        if record.is_empty() {
            return Err(Error::new(CONDIT_IS_NIL, "an empty record (0 bytes) cannot be pushed"));
        }
        if record.len() > self.record_size() {
            return Err(Error::new(
                RECD_TOO_LONG,
                format!(
                    "a record of {} bytes is longer than queue {}'s records (at most {})",
                    record.len(),
                    self.id(),
                    self.record_size()
                ),
            ));
        }
        self.check_usable()
    }

    /// `RECD_TOO_LONG` for a buffer shorter than the queue's records.
    #[cold]
    pub(crate) fn short_buffer(&self, len: usize) -> Error {
        let size = self.record_size();
        Error::new(
            RECD_TOO_LONG,
            format!("a buffer of {len} bytes is shorter than queue {}'s records ({size} bytes)", self.id()),
        )
    }

    #[inline]
    fn check_usable(&self) -> Result<()> {
        if self.is_dropped() {
            return Err(Error::code_only(SHM_ERR_EIDRM));
        }
        if !self.writable {
            return Err(Error::new(SHM_ERR_ACCES, "queue opened read-only for inspection"));
        }
        Ok(())
    }

    /// Pushes the records laid out one after another in `records`, `each`
    /// bytes apiece, claiming their positions together (one CAS for as many
    /// as there is room for). Returns how many went in; stops at the first
    /// failure (`DATA_SPC_FULL` when the queue fills up), returned alongside.
    pub fn push_many(&self, records: &[u8], each: usize) -> (usize, Option<Error>) {
        if each == 0 || records.len() < each {
            return (0, Some(Error::new(CONDIT_IS_NIL, "no records to push (record size 0 or an empty buffer)")));
        }
        if let Err(e) = self.check_push(&records[..each]) {
            return (0, Some(e));
        }
        let (done, err) = match &self.always {
            // Plain and `interval` queues (see `push`).
            None => self.ring.push_batch(records, each, &self.intent(), &mut Patience::new(self)),
            Some(d) => self.ring.push_batch_sealed(d.key(), records, each, &self.intent(), &mut Patience::new(self)),
        };
        if done > 0 {
            self.wake(done as u32);
            if let Some(d) = &self.always {
                // One sync for the whole batch.
                if let Err(e) = d.sync() {
                    return (done, Some(e));
                }
            }
        }
        (done, err.map(|e| self.ring_error(e)))
    }

    /// Removes the oldest record into `out`, which must hold at least
    /// `record_size` bytes; bytes after the record, up to `record_size`, are
    /// zeroed. Returns the record's length. On a queue with leases, a record
    /// waiting to be delivered again (its lease ran out, or was released)
    /// comes first, and is taken for good.
    pub fn pop(&self, out: &mut [u8], wait: Wait) -> Result<usize> {
        if self.leases.is_some() {
            return self.pop_with_leases(out, wait);
        }
        // A plain queue: this loop is the one plain queues always had.
        let size = self.record_size();
        if out.len() < size {
            return Err(self.short_buffer(out.len()));
        }
        let out = &mut out[..size];
        let mut idle = Idle::new(wait);
        loop {
            self.check_usable()?;
            match self.ring.pop(out, &self.intent(), &mut Patience::new(self)) {
                Ok(n) => {
                    out[n..].fill(0);
                    self.popped_durably();
                    return Ok(n);
                }
                Err(RingError::Empty) => {}
                Err(e) => return Err(self.ring_error(e)),
            }
            // Nothing queued: wait as the strategy says (shared with the lease path).
            self.idle(&mut idle)?;
        }
    }

    /// [`pop`](Self::pop) on a queue with leases: records waiting to be
    /// delivered again first, and sleeps that end when one comes due.
    #[inline(never)]
    fn pop_with_leases(&self, out: &mut [u8], wait: Wait) -> Result<usize> {
        let size = self.record_size();
        if out.len() < size {
            return Err(self.short_buffer(out.len()));
        }
        let out = &mut out[..size];
        let mut idle = Idle::new(wait);
        loop {
            self.check_usable()?;
            if let Some(n) = self.pop_waiting(out)? {
                out[n..].fill(0);
                return Ok(n);
            }
            // Through its own instance of `Ring::pop` (see `lease::Own`).
            match self.ring.pop(out, &lease::Own(self.intent()), &mut Patience::new(self)) {
                Ok(n) => {
                    out[n..].fill(0);
                    self.popped_durably();
                    return Ok(n);
                }
                Err(RingError::Empty) => {}
                Err(e) => return Err(self.ring_error(e)),
            }
            self.idle(&mut idle)?;
        }
    }

    /// After records were taken: with `always`, returns once their
    /// consumption is durable. A failed sync is not an error here: the
    /// records are the caller's now (failing would lose them); the failure
    /// is counted in the file, and a crash may deliver them again.
    #[inline]
    fn popped_durably(&self) {
        if let Some(d) = &self.always {
            let _ = sync_popped(d);
        }
    }

    /// Makes everything pushed and popped on this queue so far durable, by
    /// every thread of this process (and what other processes did before
    /// the call): a group-committed sync for a durable queue, a plain
    /// `msync` for another queue on a disk.
    ///
    /// Errors: `NOT_DURABLE` (the file is on tmpfs or ramfs: nothing can
    /// make it durable), `SYNC_FAILED` (the system call failed),
    /// `SHM_ERR_ACCES` (a read-only view).
    pub fn sync(&self) -> Result<()> {
        if let Some(d) = &self.durable {
            return d.sync();
        }
        if self.file.is_volatile() {
            return Err(Error::new(
                NOT_DURABLE,
                format!(
                    "queue {} cannot be synced to stable storage: its file {} is in memory (tmpfs or ramfs)",
                    self.id(),
                    self.path().display()
                ),
            ));
        }
        if !self.writable {
            return Err(Error::new(SHM_ERR_ACCES, "queue opened read-only for inspection"));
        }
        let map = self.file.map();
        crate::durable::msync(map.base(), map.len())
    }

    /// How the queue's changes reach stable storage (`None`: not durable).
    pub fn durability(&self) -> Option<Durability> {
        self.info.durability
    }

    /// A durable queue's sync state and what its last recovery found
    /// (`None` for other queues). Works on read-only views too.
    pub fn durable_stats(&self) -> Option<DurableStats> {
        let policy = self.info.durability?;
        Some(crate::durable::stats(self.control(), policy, self.info.created_ns))
    }

    /// Nothing to take: spins, yields or sleeps as `idle`'s wait and this
    /// process's strategy say, then returns for another look; or returns
    /// the error that ends the pop (`NO_DATA_FOUND`, `MQUE_WAIT_TMO`).
    #[inline]
    fn idle(&self, idle: &mut Idle) -> Result<()> {
        let deadline = match idle.wait {
            Wait::NoWait => return Err(Error::code_only(NO_DATA_FOUND)),
            Wait::Forever => None,
            Wait::Until(t) => Some(t),
        };
        if deadline.is_some_and(|t| Instant::now() >= t) {
            return Err(Error::code_only(MQUE_WAIT_TMO));
        }
        match self.strategy {
            Strategy::Default => {}
            Strategy::Spin(d) => {
                if Instant::now() < *idle.spin_until.get_or_insert_with(|| Instant::now() + d) {
                    std::hint::spin_loop();
                    return Ok(());
                }
            }
            Strategy::NeverSleep => {
                std::hint::spin_loop();
                return Ok(());
            }
        }
        // A record is often only microseconds away: spin and yield a
        // little before paying for a sleep and the producer's wake-up.
        if !idle.spins.is_completed() {
            idle.spins.snooze();
            return Ok(());
        }
        self.sleep(deadline, || self.nothing_to_take());
        Ok(())
    }

    /// True when a pop would find nothing: no record queued (and, with
    /// leases, none due for another delivery), read with the sequential
    /// consistency a sleeper needs after announcing itself.
    fn nothing_to_take(&self) -> bool {
        self.ring.is_empty_seqcst() && self.leases.as_ref().is_none_or(|l| !l.table.ready_due(mono_ns()))
    }

    /// Sleeps until a push may have happened, the deadline, or one slice
    /// (shorter when a lease runs out or a waiting record comes due before).
    /// `still` is the condition to sleep on, made of SeqCst loads of the
    /// cursors (a push moves `tail` by a SeqCst CAS before it reads the waiter
    /// count).
    fn sleep(&self, deadline: Option<Instant>, still: impl Fn() -> bool) {
        let wake = &self.control().wake.0;
        self.registry.enter_wait(&wake.waiters);
        let seen = wake.futex.load(Ordering::SeqCst);
        // Re-check after announcing ourselves: a push that the check misses
        // comes after our announcement, so it will see `waiters > 0`.
        if still() && !self.is_dropped() {
            let mut slice =
                deadline.map_or(SLEEP_SLICE, |t| t.saturating_duration_since(Instant::now()).min(SLEEP_SLICE));
            if let Some(l) = &self.leases {
                let alarm = l.table.next_event_ns().saturating_sub(mono_ns());
                slice = slice.min(Duration::from_nanos(alarm.max(100_000)));
            }
            if !slice.is_zero() {
                wait::wait(&wake.futex, seen, Some(slice));
            }
        }
        self.registry.leave_wait(&wake.waiters);
    }

    /// Pushes so far on this queue, by every process: a count that only grows
    /// (the positions producers have claimed, recoveries included). A cursor
    /// for [`wait_for_push`](Self::wait_for_push).
    pub fn push_count(&self) -> u64 {
        self.ring.pushed()
    }

    /// Sleeps until the queue's push count differs from `seen` (a value of
    /// [`push_count`](Self::push_count)), the queue is dropped, or `timeout`
    /// passes, whichever comes first, and returns the push count then. It
    /// takes nothing: it is for a watcher that tells others (a server's
    /// blocked clients, say) that records may have arrived. It sleeps as a
    /// blocking pop does, on the futex that producers of every process wake,
    /// with no busy loop; a producer's wake-up can go to another sleeper of
    /// the queue (which then takes the record), so a watcher may also wake
    /// only at the end of a sleep slice (200 ms).
    pub fn wait_for_push(&self, seen: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let now = self.ring.pushed();
            if now != seen || self.is_dropped() || deadline.is_some_and(|t| Instant::now() >= t) {
                return now;
            }
            self.sleep(deadline, || self.ring.pushed_seqcst() == seen);
        }
    }

    /// Copies of up to `max` records at the head of the queue, oldest first,
    /// without removing them, each with its position number (records pushed
    /// before it, counting from the queue's creation). For inspection: works
    /// on a read-only [`inspect`](Self::inspect) view too; records may be
    /// popped meanwhile, and one that changes while it is copied is reported
    /// as [`Peeked::Busy`], never torn.
    pub fn peek(&self, max: usize) -> Vec<(u64, Peeked)> {
        self.ring.peek(max)
    }

    /// [`pop`](Self::pop) appending the record, and only its bytes, to `out`;
    /// returns its length. On an error `out` is left as it was.
    pub fn pop_append(&self, out: &mut Vec<u8>, wait: Wait) -> Result<usize> {
        let at = out.len();
        out.resize(at + self.record_size(), 0);
        match self.pop(&mut out[at..], wait) {
            Ok(n) => {
                out.truncate(at + n);
                Ok(n)
            }
            Err(e) => {
                out.truncate(at);
                Err(e)
            }
        }
    }

    /// Wakes one sleeper, if any announced itself (see the module doc for
    /// why a SeqCst load after the claim suffices).
    #[inline]
    fn wake_one(&self) {
        self.wake(1)
    }

    /// Wakes up to `n` sleepers, if any announced themselves.
    #[inline]
    fn wake(&self, n: u32) {
        // SeqCst: ordered after our claiming CAS of `tail` (module doc).
        if self.control().wake.0.waiters.load(Ordering::SeqCst) != 0 {
            self.wake_slow(n);
        }
    }

    #[cold]
    fn wake_slow(&self, n: u32) {
        let wake = &self.control().wake.0;
        wake.futex.fetch_add(1, Ordering::SeqCst);
        if wait::wake(&wake.futex, n) == 0 {
            // Nobody was asleep although `waiters > 0`: a sleeper may have
            // been killed. Look for dead ones, at most every 100 ms.
            let now = now_ns();
            let last = self.last_reconcile_ns.load(Ordering::Relaxed);
            if now.saturating_sub(last) > 100_000_000
                && self.last_reconcile_ns.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                self.count_reconciled(self.registry.reconcile(&wake.waiters));
            }
        }
    }

    fn count_reconciled(&self, n: u32) {
        if n > 0 {
            self.control().counters.0.reconciled_waiters.fetch_add(u64::from(n), Ordering::Relaxed);
        }
    }

    /// Pops up to `lens.len()` records into `out`: record `i` at
    /// `out[i * each..]` (`each >= record_size`; the bytes after it up to
    /// `each` are zeroed), its length in `lens[i]`. What is queued is taken
    /// with one claim; with `Wait::Forever` or `Wait::Until` it then waits for
    /// each further record as [`pop`](Self::pop) does. Returns how many were
    /// taken and the error that stopped it early (`NO_DATA_FOUND` with
    /// `NoWait`, `MQUE_WAIT_TMO` at the deadline).
    pub fn pop_into(&self, out: &mut [u8], each: usize, lens: &mut [usize], wait: Wait) -> (usize, Option<Error>) {
        if each < self.record_size() {
            let msg = format!(
                "slots of {each} bytes are shorter than queue {}'s records ({} bytes)",
                self.id(),
                self.record_size()
            );
            return (0, Some(Error::new(RECD_TOO_LONG, msg)));
        }
        let max = lens.len().min(out.len() / each);
        let mut taken = 0;
        while taken < max {
            if let Err(e) = self.check_usable() {
                return (taken, Some(e));
            }
            if self.leases.is_some() {
                // Records waiting to be delivered again come first.
                let slot = &mut out[taken * each..(taken + 1) * each];
                match self.pop_waiting(&mut slot[..self.record_size()]) {
                    Ok(Some(len)) => {
                        slot[len..].fill(0);
                        lens[taken] = len;
                        taken += 1;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => return (taken, Some(e)),
                }
            }
            let (n, err) = self.ring.pop_batch(
                &mut out[taken * each..max * each],
                each,
                &mut lens[taken..max],
                &self.intent(),
                &mut Patience::new(self),
            );
            for i in taken..taken + n {
                out[i * each + lens[i]..(i + 1) * each].fill(0);
            }
            if n > 0 {
                // One sync for the whole batch.
                self.popped_durably();
            }
            taken += n;
            match err {
                None => {}
                Some(RingError::Empty) if wait == Wait::NoWait => {
                    return (taken, Some(Error::code_only(NO_DATA_FOUND)));
                }
                Some(RingError::Empty) => {
                    // Wait for the next record, then take the rest together again.
                    let slot = &mut out[taken * each..(taken + 1) * each];
                    match self.pop(slot, wait) {
                        Ok(len) => {
                            slot[len..].fill(0);
                            lens[taken] = len;
                            taken += 1;
                        }
                        Err(e) => return (taken, Some(e)),
                    }
                }
                Some(e) => return (taken, Some(self.ring_error(e))),
            }
        }
        (taken, None)
    }

    /// [`pop_into`](Self::pop_into) appending to a vector, `each` bytes per
    /// record, at most `max` records.
    pub fn pop_many(&self, out: &mut Vec<u8>, each: usize, max: usize, wait: Wait) -> (usize, Option<Error>) {
        let at = out.len();
        out.resize(at + max * each, 0);
        let mut lens = vec![0usize; max];
        let (taken, err) = self.pop_into(&mut out[at..], each, &mut lens, wait);
        out.truncate(at + taken * each);
        (taken, err)
    }

    /// Counters and gauges.
    pub fn stats(&self) -> Stats {
        let c = self.control();
        let s = &c.counters.0;
        // Positions used by recoveries (a republished record, an empty record
        // in place of an abandoned push) are not records pushed or popped.
        let recovered = s.recovered_pushes.load(Ordering::Relaxed) + s.recovered_pops.load(Ordering::Relaxed);
        Stats {
            pushed: self.ring.pushed().saturating_sub(recovered),
            popped: self.ring.popped().saturating_sub(recovered),
            depth: self.ring.depth(),
            waiters: c.wake.0.waiters.load(Ordering::Relaxed),
            dropped: self.is_dropped(),
            recovered_pushes: s.recovered_pushes.load(Ordering::Relaxed),
            recovered_pops: s.recovered_pops.load(Ordering::Relaxed),
            robbed: s.robbed.load(Ordering::Relaxed),
            reconciled_waiters: s.reconciled_waiters.load(Ordering::Relaxed),
            last_recovery_ns: s.last_recovery_ns.load(Ordering::Relaxed),
        }
    }

    /// Records currently queued.
    pub fn depth(&self) -> u64 {
        self.ring.depth()
    }

    /// The live processes attached to the queue (those with an entry in its
    /// process table).
    pub fn processes(&self) -> Vec<Process> {
        self.registry
            .live()
            .into_iter()
            .map(|(entry, pid, since_ns, sleepers)| Process { entry, pid, since_ns, sleepers })
            .collect()
    }

    fn ring_error(&self, e: RingError) -> Error {
        match e {
            RingError::Full => Error::code_only(DATA_SPC_FULL),
            RingError::Empty => Error::code_only(NO_DATA_FOUND),
            RingError::Robbed => {
                self.control().counters.0.robbed.fetch_add(1, Ordering::Relaxed);
                Error::code_only(MQUE_WAIT_ERR)
            }
            RingError::Corrupt => {
                Error::new(SHM_ERR_INVAL, format!("{}: shared state is corrupted", self.path().display()))
            }
            RingError::Aborted(code) => Error::code_only(code),
        }
    }
}

/// A thread's intent word in its process's entry, where the ring announces
/// the positions it claims (see [`crate::ring::Announce`]). `None`: the
/// thread announces nothing (no entry, or more threads than words).
struct Intent<'a>(Option<&'a AtomicU64>);

impl Announce for Intent<'_> {
    #[inline]
    fn claiming(&self, role: Holder, first: u64) {
        if let Some(word) = self.0 {
            // Release: visible to whoever sees the claim that follows.
            word.store(intent_word(role, first), Ordering::Release);
        }
    }

    #[inline]
    fn idle(&self) {
        if let Some(word) = self.0 {
            word.store(IDLE, Ordering::Release);
        }
    }

    /// A thread with an intent word is proven alive by it while it holds a
    /// slot (`Registry::holder` answers `Alive` whenever an entry announces
    /// the position, even one whose lock cannot be read), so `Patience`
    /// and `repair` never recover its slots.
    #[inline]
    fn robbable(&self) -> bool {
        self.0.is_none()
    }
}

/// Which intent word this thread holds in a queue (by its process-local
/// slot allocator); given back when the thread ends.
struct ThreadIntent {
    slots: Arc<IntentSlots>,
    slot: usize,
}

impl Drop for ThreadIntent {
    fn drop(&mut self) {
        if self.slot != NO_WORD {
            self.slots.release(self.slot);
        }
    }
}

/// A thread that uses the queue without an intent word (more than
/// `registry::INTENTS` threads of this process use it).
const NO_WORD: usize = usize::MAX;

/// This thread's intent words, in every queue it used.
struct ThreadIntents {
    /// The queue used last (its allocator's address) and this thread's word
    /// there: the common case costs a comparison. It always names a queue
    /// that `all` keeps alive, so its address cannot be reused meanwhile.
    last: Cell<(*const IntentSlots, usize)>,
    all: RefCell<Vec<ThreadIntent>>,
}

impl ThreadIntents {
    #[cold]
    fn find_or_take(&self, q: &Queue) -> usize {
        let Ok(mut all) = self.all.try_borrow_mut() else { return NO_WORD };
        let slot = match all.iter().find(|t| Arc::ptr_eq(&t.slots, &q.slots)) {
            Some(t) => t.slot,
            None => {
                // First use by this thread: forget the words of queues since
                // dropped, then take one (or note that we announce nothing).
                all.retain(|t| Arc::strong_count(&t.slots) > 1);
                let slot = q.slots.acquire().unwrap_or(NO_WORD);
                if slot == NO_WORD {
                    q.registry.add_anonymous();
                }
                all.push(ThreadIntent { slots: q.slots.clone(), slot });
                slot
            }
        };
        self.last.set((Arc::as_ptr(&q.slots), slot));
        slot
    }
}

thread_local! {
    static THREAD_INTENTS: ThreadIntents =
        const { ThreadIntents { last: Cell::new((std::ptr::null(), NO_WORD)), all: RefCell::new(Vec::new()) } };
}

/// The [`Stall`] policy of a queue: a position whose holder is proven dead
/// (no live process announces it) is recovered at once; one whose holder
/// cannot be told is recovered after the unblock timeout; a live holder is
/// never robbed.
struct Patience<'a> {
    queue: &'a Queue,
    /// What we wait for (a slot's seq) and since when.
    stalled: Option<(u64, Instant)>,
}

impl<'a> Patience<'a> {
    #[inline]
    fn new(queue: &'a Queue) -> Self {
        Patience { queue, stalled: None }
    }
}

impl Stall for Patience<'_> {
    fn decide(&mut self, stalled: u64, holder: Holder, at: u64) -> Verdict {
        if self.queue.is_dropped() {
            return Verdict::Abort(SHM_ERR_EIDRM);
        }
        let now = Instant::now();
        let since = match self.stalled {
            Some((s, t)) if s == stalled => t,
            _ => {
                self.stalled = Some((stalled, now));
                now
            }
        };
        let waited = now - since;
        let recover = match self.queue.registry.holder(holder, at, self.queue.unregistered()) {
            Liveness::Dead => true,
            Liveness::Unknown => waited >= self.queue.unblock_timeout,
            Liveness::Alive => false,
        };
        if recover {
            // A lease consumer's slot is judged by its lease entry: waited
            // for while it fills it, released once the record is saved there.
            let lease = if holder == Holder::Consumer { self.queue.lease_slot_verdict(at) } else { None };
            match lease {
                None => return Verdict::Recover,
                Some(lease::LeaseSlot::Released) => return Verdict::Wait, // free now: the next look takes it
                Some(lease::LeaseSlot::Wait) => {}
            }
        }
        // The holder is alive (or cannot be told): let it run.
        if waited < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
        Verdict::Wait
    }

    fn recovered(&mut self, holder: Holder) {
        let s = &self.queue.control().counters.0;
        match holder {
            Holder::Producer => s.recovered_pushes.fetch_add(1, Ordering::Relaxed),
            Holder::Consumer => s.recovered_pops.fetch_add(1, Ordering::Relaxed),
        };
        s.last_recovery_ns.store(now_ns(), Ordering::Relaxed);
    }
}

/// An `always` queue's pop is done: sync. Out of line, so that the pop
/// path of other queues stays as small as before durable queues (one test
/// of an `Option`).
#[inline(never)]
fn sync_popped(d: &Durable) -> Result<()> {
    d.sync()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    fn queue(dir: &TempDir) -> Arc<Queue> {
        Queue::create(dir.path(), 1, &Spec::new(16, 8)).unwrap();
        Arc::new(Queue::open(dir.path(), 1).unwrap())
    }

    /// The lease crash test's loss (CI, 2026-12-01, record 10322 of 100,000
    /// never delivered), made deterministic: a lease consumer dies between
    /// taking a record's slot and saving the record in its lease entry, and
    /// no producer pushes again. Another process's repair publishes the
    /// record again one lap later, beyond the tail; a consumer must still
    /// get it, once.
    #[test]
    fn a_record_taken_by_a_dying_lease_consumer_comes_back_without_further_pushes() {
        use crate::file::LeaseSpec;
        use crate::lease::state::Owner;
        use crate::ring::{NeverRecover, Silent};
        let dir = TempDir::new("queue", "stranded");
        let mut spec = Spec::new(8, 8);
        spec.leases = Some(LeaseSpec { lease_ms: 60_000, max_leases: 4, ..LeaseSpec::default() });
        Queue::create(dir.path(), 1, &spec).unwrap();
        let q = Queue::open(dir.path(), 1).unwrap();
        // Another attached process (a second open file description: its own lock).
        let other = Queue::open(dir.path(), 1).unwrap();
        for v in 0..8u64 {
            q.push(&v.to_le_bytes()).unwrap();
        }
        let mut out = [0u8; 8];
        let mut take = |q: &Queue| {
            let (n, lease) = q.pop_lease(&mut out, Wait::NoWait, Duration::ZERO)?;
            q.ack(&lease)?;
            assert_eq!(lease.deliveries(), 1);
            Ok::<u64, Error>(u64::from_le_bytes(out[..n].try_into().unwrap()))
        };
        for v in 0..3 {
            assert_eq!(take(&q).unwrap(), v);
        }
        // The dying consumer, of a process-table entry nobody holds: its
        // lease entry names position 3, whose slot it claimed (announced
        // nowhere, as a dead process's announcements count for nothing).
        let l = q.leases.as_ref().unwrap();
        let ghost = Owner::new(200, 1);
        let (i, _filling) = l.table.claim(0, ghost).unwrap();
        l.table.entry(i).pos.store(3, Ordering::SeqCst);
        q.ring.claim_pop(&Silent, &mut NeverRecover).unwrap();
        for v in 4..8 {
            assert_eq!(take(&q).unwrap(), v);
        }
        // A process attaching after the death repairs: record 3 is
        // published again at position 11, beyond the tail (8).
        let r = other.repair();
        assert_eq!((r.recovered_pops, r.alone), (1, false));
        assert_eq!(q.depth(), 0);
        // The consumer that finds the queue empty moves the tail to it
        // (positions 8-10 become empty records) and gets it.
        assert_eq!(take(&q).unwrap(), 3);
        assert_eq!(take(&other).map_err(|e| e.code()), Err(NO_DATA_FOUND));
        assert_eq!(take(&q).map_err(|e| e.code()), Err(NO_DATA_FOUND));
        assert_eq!(q.depth(), 0);
        // The queue goes on at its full capacity.
        for v in 0..8u64 {
            q.push(&v.to_le_bytes()).unwrap();
        }
        assert_eq!(q.push(b"x").map_err(|e| e.code()), Err(DATA_SPC_FULL));
        for v in 0..8 {
            assert_eq!(take(&other).unwrap(), v);
        }
    }

    #[test]
    fn a_push_wakes_a_watcher_and_takes_nothing_from_it() {
        let dir = TempDir::new("queue", "watch");
        let q = queue(&dir);
        let seen = q.push_count();
        let watcher = {
            let q = q.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                (q.wait_for_push(seen, Duration::from_secs(20)), t.elapsed())
            })
        };
        // Push once the watcher sleeps (it is counted as a waiter then).
        let deadline = Instant::now() + Duration::from_secs(10);
        while q.stats().waiters == 0 {
            assert!(Instant::now() < deadline, "the watcher never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        q.push(b"abc").unwrap();
        let (count, slept) = watcher.join().unwrap();
        assert_eq!(count, seen + 1);
        assert!(slept < Duration::from_secs(10), "woken by the push, not the timeout ({slept:?})");
        assert_eq!(q.depth(), 1, "watching takes nothing");
        assert_eq!(q.stats().waiters, 0);
    }

    #[test]
    fn a_watcher_returns_at_once_after_a_push_it_missed_and_at_its_timeout() {
        let dir = TempDir::new("queue", "watch2");
        let q = queue(&dir);
        let seen = q.push_count();
        q.push(b"x").unwrap();
        assert_eq!(q.wait_for_push(seen, Duration::from_secs(20)), seen + 1);
        let t = Instant::now();
        assert_eq!(q.wait_for_push(seen + 1, Duration::from_millis(50)), seen + 1);
        assert!(t.elapsed() >= Duration::from_millis(45));
    }

    #[test]
    fn dropping_the_queue_wakes_a_watcher() {
        let dir = TempDir::new("queue", "watchdrop");
        let q = queue(&dir);
        let seen = q.push_count();
        let watcher = {
            let q = q.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                q.wait_for_push(seen, Duration::from_secs(20));
                (q.is_dropped(), t.elapsed())
            })
        };
        while q.stats().waiters == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Queue::drop_queue(dir.path(), 1).unwrap();
        let (dropped, slept) = watcher.join().unwrap();
        assert!(dropped && slept < Duration::from_secs(10));
    }

    #[test]
    fn peek_shows_the_head_without_taking_it() {
        let dir = TempDir::new("queue", "peek");
        let q = queue(&dir);
        assert!(q.peek(5).is_empty());
        for r in [&b"one"[..], b"two", b"three"] {
            q.push(r).unwrap();
        }
        let mut out = [0u8; 8];
        q.pop(&mut out, Wait::NoWait).unwrap();
        let seen = Queue::inspect(dir.path(), 1).unwrap().peek(5);
        assert_eq!(seen, vec![(1, Peeked::Record(b"two".to_vec())), (2, Peeked::Record(b"three".to_vec()))]);
        assert_eq!(q.peek(1).len(), 1);
        assert_eq!(q.depth(), 2, "peeking takes nothing");
        // Wrapped around the ring: positions keep counting.
        for i in 0..20u8 {
            q.push(&[i]).unwrap();
            q.pop(&mut out, Wait::NoWait).unwrap();
        }
        let seen = q.peek(16);
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[1], (22, Peeked::Record(vec![19])));
    }

    #[test]
    fn the_wait_strategy_comes_from_the_environment_then_the_queue() {
        use Strategy::*;
        let us = Duration::from_micros;
        assert_eq!(Strategy::choose(None, None), Default);
        assert_eq!(Strategy::choose(None, Some(1000)), Spin(us(1000)));
        assert_eq!(Strategy::choose(None, Some(-1)), NeverSleep);
        assert_eq!(Strategy::choose(Some("50"), Some(1000)), Spin(us(50)));
        assert_eq!(Strategy::choose(Some(" -1 "), None), NeverSleep);
        assert_eq!(Strategy::choose(Some("0"), Some(-1)), Spin(us(0)));
        for bad in ["", "x", "-2", "1.5"] {
            assert_eq!(Strategy::choose(Some(bad), Some(7)), Spin(us(7)), "{bad:?} is ignored");
        }
    }

    #[test]
    fn a_queue_keeps_its_spin_time_and_spinning_pops_keep_their_deadline() {
        let dir = TempDir::new("queue", "spin");
        let mut spec = Spec::new(4, 8);
        spec.spin_us = Some(-1);
        Queue::create(dir.path(), 1, &spec).unwrap();
        let q = Arc::new(Queue::open(dir.path(), 1).unwrap());
        assert_eq!(q.info().spin_us, Some(-1));
        if std::env::var_os("TVMQ_SPIN_US").is_none() {
            assert_eq!(q.wait_strategy(), Strategy::NeverSleep);
        }
        let mut out = [0u8; 8];
        let t = Instant::now();
        let r = q.pop(&mut out, Wait::Until(Instant::now() + Duration::from_millis(30)));
        assert_eq!(r.unwrap_err().code(), MQUE_WAIT_TMO);
        assert!(t.elapsed() >= Duration::from_millis(30));
        // A spinning consumer gets a record pushed by another thread, and sees a drop.
        let consumer = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut out = [0u8; 8];
                let n = q.pop(&mut out, Wait::Forever).map(|n| out[..n].to_vec());
                (n, q.pop(&mut out, Wait::Forever).map_err(|e| e.code()))
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        q.push(b"spun").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        Queue::drop_queue(dir.path(), 1).unwrap();
        let (first, second) = consumer.join().unwrap();
        assert_eq!(first.unwrap(), b"spun");
        assert_eq!(second.unwrap_err(), SHM_ERR_EIDRM);
        assert!(
            Queue::create(dir.path(), 2, &{
                let mut s = Spec::new(1, 1);
                s.spin_us = Some(-2);
                s
            })
            .is_err()
        );
    }

    #[test]
    fn pop_append_appends_exactly_the_record() {
        let dir = TempDir::new("queue", "append");
        let q = queue(&dir);
        q.push(b"abc").unwrap();
        let mut out = b"$3\r\n".to_vec();
        assert_eq!(q.pop_append(&mut out, Wait::NoWait).unwrap(), 3);
        assert_eq!(out, b"$3\r\nabc");
        assert_eq!(q.pop_append(&mut out, Wait::NoWait).unwrap_err().code(), NO_DATA_FOUND);
        assert_eq!(out, b"$3\r\nabc", "untouched on an error");
    }
}

//! The queues of a directory, read from shared memory: a [`Collector`]
//! keeps a detached read-only view ([`tvm::Queue::inspect_detached`]: not
//! registered, so not counted among a queue's processes and never in a
//! producer's or consumer's way; a mapping, no descriptor) of every queue it
//! has seen, and takes a [`Sample`] of all of them at once. Opening a queue
//! costs tens of microseconds (a validated header, a mapping), a snapshot of
//! an open one well under one: views are kept between samples, opened when
//! a queue appears and let go when it is dropped.
//!
//! What a collector holds, whatever the number of queues:
//! - descriptors: at most [`DESCRIPTORS`] at once, while it reads (the
//!   directory listed, a queue file and its live part being mapped, a file
//!   opened again for a look at its process table's locks), none between
//!   samples; so that a reader of ten thousand queues runs within any
//!   open-file limit and takes none of a server's;
//! - mappings: at most its `max_views` views kept ([`default_max_views`]: a
//!   quarter of the kernel's bound on a process's mappings); the queues
//!   beyond are read through a view opened for that sample alone (slower:
//!   counted in [`Sample::transient`]);
//! - time in lease tables: the leases in flight and records waiting of a
//!   leased queue are read entry by entry (up to 1,048,576 entries a table,
//!   [`tvm::Queue::lease_scan_len`]); a sample reads at most
//!   [`LEASE_SCAN_BUDGET`] entries in all (and at least one table), taking
//!   the tables in turn by id from where the last sample stopped, and gives
//!   the others' gauges as last read ([`QueueSample::leases_read`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tvm::{Error, Queue, Snapshot};

/// How long a queue file that could not be opened (another user's, a file
/// being created) is left alone before it is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// The most descriptors a collector holds at once (while it samples; none
/// between samples).
pub const DESCRIPTORS: usize = 4;

/// Lease-table entries a sample reads at most, in all its queues: four of
/// the largest tables, or 4,096 of the default size (about 10 ns an entry
/// here: 40 ms; docs/measurements.md).
pub const LEASE_SCAN_BUDGET: usize = 1 << 22;

/// The kernel's bound on a process's mappings when /proc does not say
/// (`vm.max_map_count`'s default).
const MAX_MAP_COUNT: usize = 65_530;

/// The views a collector keeps by default: a quarter of the kernel's bound
/// on a process's mappings (`vm.max_map_count`, 65,530 by default), so that
/// the process's own queues, libraries and threads keep the rest.
pub fn default_max_views() -> usize {
    let max = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(MAX_MAP_COUNT);
    (max / 4).max(1)
}

/// One queue in a [`Sample`].
#[derive(Debug, Clone)]
pub struct QueueSample {
    /// The queue id.
    pub id: u32,
    /// Its name, made safe to print ([`tvm::escape_name`]).
    pub name: Arc<str>,
    /// Its counters.
    pub snap: Snapshot,
    /// When `snap.leases_in_flight` and `snap.leases_waiting` were read
    /// from its lease table: in this sample, or an earlier one when the
    /// sample's [`LEASE_SCAN_BUDGET`] went to other tables. None when they
    /// were never read (then 0) or the queue has no leases.
    pub leases_read: Option<Instant>,
}

/// Every queue of the directory at one instant (each read in turn: the
/// whole takes [`took`](Self::took)).
#[derive(Debug, Clone)]
pub struct Sample {
    /// When the sample was taken (monotonic).
    pub at: Instant,
    /// When, in nanoseconds since the Unix epoch.
    pub wall_ns: u64,
    /// The queues, by ascending id.
    pub queues: Vec<QueueSample>,
    /// Queue files that could not be read (not ours, not valid, being made,
    /// or no descriptor or mapping left to read them with).
    pub unreadable: usize,
    /// Why the last queue that could not be opened could not (tried again
    /// after 5 s): what a reader shows beside [`unreadable`](Self::unreadable).
    pub unreadable_why: Option<String>,
    /// Queues read through a view opened for this sample alone (beyond the
    /// views a collector keeps).
    pub transient: usize,
    /// Leased queues whose lease gauges are from an earlier sample.
    pub leases_stale: usize,
    /// Leased queues whose lease gauges were never read yet.
    pub leases_unread: usize,
    /// How long the sample took.
    pub took: Duration,
}

impl Sample {
    /// A sample of no queue, taken at `at`, that took no time.
    pub(crate) fn empty(at: Instant) -> Sample {
        Sample {
            at,
            wall_ns: 0,
            queues: Vec::new(),
            unreadable: 0,
            unreadable_why: None,
            transient: 0,
            leases_stale: 0,
            leases_unread: 0,
            took: Duration::ZERO,
        }
    }

    /// The queue `id`, if the sample has it.
    pub fn get(&self, id: u32) -> Option<&QueueSample> {
        self.queues.binary_search_by_key(&id, |q| q.id).ok().map(|i| &self.queues[i])
    }
}

/// A queue kept open for sampling.
struct View {
    queue: Queue,
    name: Arc<str>,
}

impl View {
    fn open(dir: &Path, id: u32) -> Result<Option<View>, Error> {
        let queue = Queue::inspect_detached(dir, id)?;
        if queue.is_dropped() {
            // Dropped, its file not yet unlinked: gone, or made again, by the next sample.
            return Ok(None);
        }
        let name: Arc<str> = Arc::from(&*tvm::escape_name(queue.name().as_bytes()));
        Ok(Some(View { queue, name }))
    }
}

/// A view for one sample: kept, or opened for it alone.
enum Got<'a> {
    Kept(&'a View),
    Transient(Box<View>),
}

impl Got<'_> {
    fn view(&self) -> &View {
        match self {
            Got::Kept(v) => v,
            Got::Transient(v) => v,
        }
    }
}

/// The views, kept between samples.
struct Views {
    dir: PathBuf,
    kept: HashMap<u32, View>,
    max: usize,
    /// Queue files that could not be opened, and when to try again.
    failed: HashMap<u32, Instant>,
    /// The last reason one could not be opened.
    why: Option<String>,
}

impl Views {
    /// The view of queue `id`: the one kept, unless that queue was dropped
    /// (then the file there now, a queue made again, is opened); kept if
    /// there is room, else for this sample alone; None when it cannot be
    /// opened (tried again after [`RETRY`]).
    fn get(&mut self, id: u32, now: Instant) -> Option<Got<'_>> {
        if self.kept.get(&id).is_some_and(|v| v.queue.is_dropped()) {
            self.kept.remove(&id);
        }
        if !self.kept.contains_key(&id) {
            if self.failed.get(&id).is_some_and(|&again| now < again) {
                return None;
            }
            match View::open(&self.dir, id) {
                Ok(Some(view)) if self.kept.len() < self.max => {
                    self.failed.remove(&id);
                    self.kept.insert(id, view);
                }
                Ok(Some(view)) => {
                    self.failed.remove(&id);
                    return Some(Got::Transient(Box::new(view)));
                }
                Ok(None) => return None,
                Err(e) => {
                    self.failed.insert(id, now + RETRY);
                    self.why = Some(e.to_string());
                    return None;
                }
            }
        }
        self.kept.get(&id).map(Got::Kept)
    }
}

/// A leased queue's gauges as last read from its table.
#[derive(Clone, Copy)]
struct LeaseGauges {
    /// The queue they are of (one made again under the same id is another).
    created_ns: u64,
    at: Instant,
    in_flight: u64,
    waiting: u64,
}

/// The views of a directory's queues, kept between samples.
pub struct Collector {
    views: Views,
    /// Leased queues' gauges, as last read.
    gauges: HashMap<u32, LeaseGauges>,
    /// Where the next sample begins reading lease tables: the first leased
    /// queue the last one had no budget left for (0: from the lowest id).
    lease_cursor: u32,
    /// Lease-table entries a sample reads at most.
    lease_budget: usize,
}

impl Collector {
    /// A collector of the queues of `dir` that keeps at most
    /// [`default_max_views`] views (nothing is opened yet).
    pub fn new(dir: &Path) -> Collector {
        Collector::with_max_views(dir, default_max_views())
    }

    /// A collector that keeps at most `max_views` views (at least 1).
    pub fn with_max_views(dir: &Path, max_views: usize) -> Collector {
        Collector {
            views: Views {
                dir: dir.to_path_buf(),
                kept: HashMap::new(),
                max: max_views.max(1),
                failed: HashMap::new(),
                why: None,
            },
            gauges: HashMap::new(),
            lease_cursor: 0,
            lease_budget: LEASE_SCAN_BUDGET,
        }
    }

    /// Reads at most `entries` lease-table entries a sample (and at least
    /// one table) instead of [`LEASE_SCAN_BUDGET`].
    pub fn lease_scan_budget(mut self, entries: usize) -> Collector {
        self.lease_budget = entries;
        self
    }

    /// The directory it reads.
    pub fn dir(&self) -> &Path {
        &self.views.dir
    }

    /// Views kept between samples.
    pub fn open_views(&self) -> usize {
        self.views.kept.len()
    }

    /// Reads every queue of the directory: lists it, opens the queues not
    /// seen before (and those dropped and made again), lets go of those
    /// gone, and snapshots each, reading lease tables within its budget
    /// ([`LEASE_SCAN_BUDGET`] unless [`lease_scan_budget`](Self::lease_scan_budget) says). Errors: those of [`tvm::queue_ids`] (the
    /// directory is not one, or cannot be read); a queue that cannot be
    /// opened is counted in [`Sample::unreadable`], not an error.
    pub fn sample(&mut self) -> Result<Sample, Error> {
        let start = Instant::now();
        let ids = tvm::queue_ids(&self.views.dir)?;
        let v = &mut self.views;
        if v.kept.len() + v.failed.len() > ids.len() || self.gauges.len() > ids.len() {
            let present: HashSet<u32> = ids.iter().copied().collect();
            v.kept.retain(|id, _| present.contains(id));
            v.failed.retain(|id, _| present.contains(id));
            self.gauges.retain(|id, _| present.contains(id));
        }
        // Lease tables are read from the cursor on, in turn: the ids from
        // there first, then those before it.
        let from = ids.partition_point(|&id| id < self.lease_cursor);
        let mut read = Reading { budget: self.lease_budget, any: false, stopped_at: None, start };
        let mut s = Sample { queues: Vec::with_capacity(ids.len()), ..Sample::empty(start) };
        for &id in &ids[from..] {
            self.read_one(id, &mut read, &mut s);
        }
        let first = s.queues.len();
        for &id in &ids[..from] {
            self.read_one(id, &mut read, &mut s);
        }
        s.queues.rotate_left(first);
        self.lease_cursor = read.stopped_at.unwrap_or(0);
        if self.views.failed.is_empty() {
            self.views.why = None;
        }
        s.unreadable_why = self.views.why.clone().filter(|_| s.unreadable > 0);
        s.wall_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        s.at = Instant::now();
        s.took = start.elapsed();
        Ok(s)
    }

    /// Reads queue `id` into `s`.
    fn read_one(&mut self, id: u32, read: &mut Reading, s: &mut Sample) {
        let Some(got) = self.views.get(id, read.start) else {
            s.unreadable += 1;
            return;
        };
        let view = got.view();
        let mut snap = view.queue.snapshot_without_lease_scan();
        let mut leases_read = None;
        if snap.leases {
            let created_ns = view.queue.info().created_ns;
            let len = view.queue.lease_scan_len();
            if !read.any || len <= read.budget {
                if let Some(l) = view.queue.lease_stats() {
                    let at = Instant::now();
                    self.gauges.insert(id, LeaseGauges { created_ns, at, in_flight: l.in_flight, waiting: l.waiting });
                }
                read.budget = read.budget.saturating_sub(len);
                read.any = true;
            } else if read.stopped_at.is_none() {
                read.stopped_at = Some(id);
            }
            match self.gauges.get(&id).filter(|g| g.created_ns == created_ns) {
                Some(g) => {
                    (snap.leases_in_flight, snap.leases_waiting) = (g.in_flight, g.waiting);
                    leases_read = Some(g.at);
                    s.leases_stale += usize::from(g.at < read.start);
                }
                None => s.leases_unread += 1,
            }
        }
        s.transient += usize::from(matches!(got, Got::Transient(_)));
        s.queues.push(QueueSample { id, name: view.name.clone(), snap, leases_read });
    }
}

/// Where a sample is in its reading of lease tables.
struct Reading {
    /// Entries it may still read.
    budget: usize,
    /// It read a table (the first is read whatever its size).
    any: bool,
    /// The first leased queue it had no budget left for.
    stopped_at: Option<u32>,
    start: Instant,
}

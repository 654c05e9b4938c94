//! The queues of a directory, read from shared memory: a [`Collector`]
//! keeps a read-only view ([`tvm::Queue::inspect`]: not registered, so not
//! counted among a queue's processes, and never in a producer's or
//! consumer's way) of every queue it has seen, and takes a [`Sample`] of
//! all of them at once. Opening a queue costs tens of microseconds (a
//! validated header, a mapping), a snapshot of an open one well under one:
//! views are kept between samples, opened when a queue appears and let go
//! when it is dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tvm::{Error, Queue, Snapshot};

/// How long a queue file that could not be opened (another user's, a file
/// being created) is left alone before it is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// One queue in a [`Sample`].
#[derive(Debug, Clone)]
pub struct QueueSample {
    /// The queue id.
    pub id: u32,
    /// Its name, made safe to print ([`tvm::escape_name`]).
    pub name: Arc<str>,
    /// Its counters.
    pub snap: Snapshot,
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
    /// Queue files that could not be read (not ours, not valid, being made).
    pub unreadable: usize,
    /// How long the sample took.
    pub took: Duration,
}

impl Sample {
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

/// The views of a directory's queues, kept between samples.
pub struct Collector {
    dir: PathBuf,
    views: HashMap<u32, View>,
    /// Queue files that could not be opened, and when to try again.
    failed: HashMap<u32, Instant>,
}

impl Collector {
    /// A collector of the queues of `dir` (nothing is opened yet).
    pub fn new(dir: &Path) -> Collector {
        Collector { dir: dir.to_path_buf(), views: HashMap::new(), failed: HashMap::new() }
    }

    /// The directory it reads.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues kept open.
    pub fn open_views(&self) -> usize {
        self.views.len()
    }

    /// Reads every queue of the directory: lists it, opens the queues not
    /// seen before (and those dropped and made again), lets go of those
    /// gone, and snapshots each. Errors: those of [`tvm::queue_ids`] (the
    /// directory is not one, or cannot be read); a queue that cannot be
    /// opened is counted in [`Sample::unreadable`], not an error.
    pub fn sample(&mut self) -> Result<Sample, Error> {
        let start = Instant::now();
        let ids = tvm::queue_ids(&self.dir)?;
        if self.views.len() + self.failed.len() > ids.len() {
            let present: std::collections::HashSet<u32> = ids.iter().copied().collect();
            self.views.retain(|id, _| present.contains(id));
            self.failed.retain(|id, _| present.contains(id));
        }
        let mut queues = Vec::with_capacity(ids.len());
        let mut unreadable = 0;
        for id in ids {
            let Some(view) = self.view(id, start) else {
                unreadable += 1;
                continue;
            };
            let snap = view.queue.snapshot();
            queues.push(QueueSample { id, name: view.name.clone(), snap });
        }
        let wall_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Ok(Sample { at: Instant::now(), wall_ns, queues, unreadable, took: start.elapsed() })
    }

    /// The view of queue `id`: the one kept, unless that queue was dropped
    /// (then the file there now, a queue made again, is opened); None when
    /// it cannot be opened (tried again after [`RETRY`]).
    fn view(&mut self, id: u32, now: Instant) -> Option<&View> {
        if self.views.get(&id).is_some_and(|v| v.queue.is_dropped()) {
            self.views.remove(&id);
        }
        if !self.views.contains_key(&id) {
            if self.failed.get(&id).is_some_and(|&again| now < again) {
                return None;
            }
            match Queue::inspect(&self.dir, id) {
                Ok(queue) if !queue.is_dropped() => {
                    self.failed.remove(&id);
                    let name: Arc<str> = Arc::from(&*tvm::escape_name(queue.name().as_bytes()));
                    self.views.insert(id, View { queue, name });
                }
                // Dropped, its file not yet unlinked: gone, or made again, by the next sample.
                Ok(_) => return None,
                Err(_) => {
                    self.failed.insert(id, now + RETRY);
                    return None;
                }
            }
        }
        self.views.get(&id)
    }
}

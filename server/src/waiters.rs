//! Blocked clients (BLPOP, BRPOP) and the watchers that wake them.
//!
//! A blocked client costs no thread: it is a task waiting on its own
//! [`Notify`]. The queues that have blocked clients are watched by a pool
//! of at most max(worker threads, [`MIN_WATCHERS`]) watcher threads,
//! started as needed; each watches up to [`PER_CALL`] queues at once,
//! asleep in [`Queue::wait_for_any_push`] (one `futex_waitv` call on the
//! queues' futexes, which producers of every process wake: another
//! connection of this server, or a C program pushing through shared
//! memory), plus a [`Bell`] that tells it its set changed. A queue that
//! starts being watched goes to the first watcher with room, else to a new
//! watcher while the pool may grow, else to the watcher with the fewest
//! queues: a watcher with more than [`PER_CALL`] queues sleeps on them
//! [`PER_CALL`] at a time, [`ROTATE_SLICE`] each, and looks at the push
//! count of all of them whenever it wakes, so a push on any of its queues
//! is seen within [`ROTATE_SLICE`] (within microseconds otherwise).
//!
//! When the push count of a queue moves by `n`, its watcher hands one
//! wake-up each to the `n` clients that have waited longest on it (oldest
//! first, Redis's rule), taking them off the queue's list; each pops for
//! itself. A woken client that finds the queue empty (another consumer was
//! faster) goes back on the list in its old place, and one woken by a queue
//! it did not pop from passes the wake-up on to the next client waiting on
//! that queue. No record is ever held by the server for a client, so none
//! can be lost when a client goes away. A queue leaves its watcher's set
//! when nobody waits on it any more.
//!
//! When the queue is dropped, or the server stops, every client on the list
//! is woken, and its pop (or the stop) gives it an error reply.
//!
//! On a kernel without `futex_waitv` (before Linux 5.16) a watcher polls
//! the push counts of its queues every [`POLL_SLICE`] instead.

use crate::shutdown::Shutdown;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tvm::{Bell, Queue};

/// How long a watcher sleeps at most while no push comes (it then looks at
/// the stop flag and its queues).
const WATCH_SLICE: Duration = Duration::from_millis(50);
/// How long a watcher with no queue sleeps at most (its bell wakes it for
/// a new queue or the stop).
const IDLE_SLICE: Duration = Duration::from_secs(1);
/// How long a watcher with more queues than one call takes sleeps on each
/// group of them in turn.
const ROTATE_SLICE: Duration = Duration::from_millis(2);
/// How often a watcher looks at its queues without `futex_waitv`.
const POLL_SLICE: Duration = Duration::from_millis(1);
/// Queues one watcher sleeps on at once: `futex_waitv`'s 128 words, its
/// bell's included.
pub(crate) const PER_CALL: usize = tvm::WAIT_ANY_MAX - 1;
/// The pool may grow to max(worker threads, this) watcher threads.
pub(crate) const MIN_WATCHERS: usize = 8;

/// The clients waiting on one queue, by their place in line (the earliest
/// first).
pub(crate) struct WaitList {
    queue: Arc<Queue>,
    inner: Mutex<ListInner>,
}

#[derive(Default)]
struct ListInner {
    waiting: BTreeMap<u64, Arc<Notify>>,
    /// The list is in a watcher's set.
    watched: bool,
    /// The push count its watcher has handled.
    seen: u64,
}

impl WaitList {
    /// Wakes the oldest waiting client, taking it off the list.
    fn wake_oldest(inner: &mut ListInner) -> bool {
        match inner.waiting.pop_first() {
            Some((_, n)) => {
                n.notify_one();
                true
            }
            None => false,
        }
    }

    /// Hands a wake-up that a client did not use (it popped from another
    /// queue, timed out or went away) to the next client, if records wait.
    pub(crate) fn pass_on(&self) {
        if self.queue.depth() > 0 || self.queue.is_dropped() {
            Self::wake_oldest(&mut self.inner.lock());
        }
    }
}

/// Every queue's list of blocked clients, server-wide, and the watchers.
pub(crate) struct Waiters {
    lists: Mutex<HashMap<u32, Arc<WaitList>>>,
    places: AtomicU64,
    pool: Mutex<Vec<Arc<Watcher>>>,
    max_watchers: usize,
    /// Watcher threads started (for INFO and tests).
    pub(crate) watchers_started: AtomicU64,
}

/// One watcher thread's set of lists, and its bell.
#[derive(Default)]
struct Watcher {
    set: Mutex<Vec<Arc<WaitList>>>,
    bell: Bell,
}

impl Waiters {
    /// For a server of `workers` worker threads.
    pub(crate) fn new(workers: usize) -> Waiters {
        Waiters {
            lists: Mutex::default(),
            places: AtomicU64::new(0),
            pool: Mutex::default(),
            max_watchers: workers.max(MIN_WATCHERS),
            watchers_started: AtomicU64::new(0),
        }
    }

    /// A new place in line for a client, kept while it stays blocked
    /// (the lowest is served first).
    pub(crate) fn next_place(&self) -> u64 {
        self.places.fetch_add(1, Ordering::Relaxed)
    }

    /// Puts the client at `place` and `notify` on the list of `queue`,
    /// giving the list to a watcher if it has none.
    pub(crate) fn register(
        &self,
        queue: &Arc<Queue>,
        place: u64,
        notify: &Arc<Notify>,
        shutdown: &Arc<Shutdown>,
    ) -> Arc<WaitList> {
        let list = {
            let mut lists = self.lists.lock();
            let list = lists
                .entry(queue.id())
                .and_modify(|l| {
                    if !Arc::ptr_eq(&l.queue, queue) {
                        // The queue was dropped and re-created: a new list.
                        *l = Arc::new(WaitList { queue: queue.clone(), inner: Mutex::default() });
                    }
                })
                .or_insert_with(|| Arc::new(WaitList { queue: queue.clone(), inner: Mutex::default() }));
            list.clone()
        };
        let mut inner = list.inner.lock();
        inner.waiting.insert(place, notify.clone());
        if !inner.watched {
            inner.watched = true;
            // Read before the client's next look at the queue: a push after
            // it is seen by the watcher, one before it by that look.
            inner.seen = list.queue.push_count();
            if let Err(e) = self.assign(&list, shutdown) {
                // No watcher: wake the client now and again at each of its
                // retries rather than leave it asleep.
                eprintln!("tvmq serve: cannot start a watcher thread: {e}");
                inner.watched = false;
                Self::wake_all(&mut inner);
            }
        }
        drop(inner);
        list
    }

    /// Gives `list` to a watcher (see the module documentation), starting
    /// one if the pool may grow and every watcher is full.
    fn assign(&self, list: &Arc<WaitList>, shutdown: &Arc<Shutdown>) -> std::io::Result<()> {
        let mut pool = self.pool.lock();
        let roomy = pool.iter().find(|w| w.set.lock().len() < PER_CALL).cloned();
        let watcher = match roomy {
            Some(w) => w,
            None if pool.len() < self.max_watchers => {
                let w = Arc::new(Watcher::default());
                let (w2, stop) = (w.clone(), shutdown.clone());
                std::thread::Builder::new().name(format!("tvmq-watch-{}", pool.len())).spawn(move || w2.run(&stop))?;
                self.watchers_started.fetch_add(1, Ordering::Relaxed);
                pool.push(w.clone());
                w
            }
            None => match pool.iter().min_by_key(|w| w.set.lock().len()) {
                Some(w) => w.clone(),
                None => return Err(std::io::Error::other("no watcher thread may be started")),
            },
        };
        drop(pool);
        watcher.set.lock().push(list.clone());
        watcher.bell.ring();
        Ok(())
    }

    /// Takes the client at `place` off `list`; false if it was not on it
    /// (a wake-up took it off).
    pub(crate) fn unregister(list: &WaitList, place: u64) -> bool {
        list.inner.lock().waiting.remove(&place).is_some()
    }

    /// Is the client at `place` on `list`?
    pub(crate) fn contains(list: &WaitList, place: u64) -> bool {
        list.inner.lock().waiting.contains_key(&place)
    }

    fn wake_all(inner: &mut ListInner) {
        while WaitList::wake_oldest(inner) {}
    }

    /// Forgets the lists of dropped queues that nobody waits on.
    pub(crate) fn purge_dropped(&self) {
        self.lists.lock().retain(|_, l| {
            let inner = l.inner.lock();
            !(l.queue.is_dropped() && inner.waiting.is_empty() && !inner.watched)
        });
    }

    /// Wakes every blocked client and every watcher (the server stops).
    pub(crate) fn wake_everyone(&self) {
        let lists: Vec<_> = self.lists.lock().values().cloned().collect();
        for l in lists {
            Self::wake_all(&mut l.inner.lock());
        }
        for w in self.pool.lock().iter() {
            w.bell.ring();
        }
    }
}

impl Watcher {
    /// The watcher thread: see the module documentation.
    fn run(&self, stop: &Shutdown) {
        let mut rotation = 0;
        let mut futex_waitv = true;
        loop {
            let bell = self.bell.value();
            let lists: Vec<Arc<WaitList>> = self.set.lock().clone();
            let stopping = stop.is_set();
            let mut watch: Vec<(&Queue, u64)> = Vec::with_capacity(lists.len());
            for l in &lists {
                let mut inner = l.inner.lock();
                let q = &l.queue;
                let now = q.push_count();
                if q.is_dropped() || stopping {
                    Waiters::wake_all(&mut inner);
                } else if now != inner.seen {
                    for _ in 0..now.wrapping_sub(inner.seen).min(inner.waiting.len() as u64) {
                        WaitList::wake_oldest(&mut inner);
                    }
                    inner.seen = now;
                }
                if inner.waiting.is_empty() || q.is_dropped() || stopping {
                    inner.watched = false;
                    self.set.lock().retain(|x| !Arc::ptr_eq(x, l));
                    continue;
                }
                watch.push((q, inner.seen));
            }
            if stopping {
                return;
            }
            let (group, slice) = if watch.is_empty() {
                (&watch[..], IDLE_SLICE)
            } else if watch.len() <= PER_CALL {
                (&watch[..], WATCH_SLICE)
            } else {
                let groups = watch.len().div_ceil(PER_CALL);
                rotation = (rotation + 1) % groups;
                let from = rotation * PER_CALL;
                (&watch[from..(from + PER_CALL).min(watch.len())], ROTATE_SLICE)
            };
            if futex_waitv {
                if let Err(e) = Queue::wait_for_any_push(group, Some((&self.bell, bell)), slice) {
                    eprintln!("tvmq serve: {}: watchers poll every {POLL_SLICE:?} instead", e.what());
                    futex_waitv = false;
                }
            } else {
                std::thread::sleep(if watch.is_empty() { WATCH_SLICE } else { POLL_SLICE });
            }
        }
    }
}

//! Blocked clients (BLPOP, BRPOP, TVMQ.LEASE ... BLOCK) and the watchers
//! that wake them.
//!
//! A blocked client costs no thread and no CPU while nothing happens: it is
//! a task waiting on its own [`Notify`], woken by the watcher of its
//! queues. The queues that have blocked clients are watched by a pool of
//! watcher threads, started as needed, one for every [`PER_CALL`] queues
//! watched (at most [`MAX_WATCHERS`]); each sleeps in
//! [`Queue::wait_for_any_push`] on all of its queues at once (one
//! `futex_waitv` call on the queues' futexes, which producers of every
//! process wake: another connection of this server, or a C program pushing
//! through shared memory), plus a [`Bell`] that tells it its set changed.
//! It sleeps until one of them is woken, at most [`WATCH_SLICE`] (it then
//! looks at its queues again: a producer's wake-up may have gone to another
//! sleeper of the queue, in another process), [`LEASE_SLICE`] when one of
//! its queues has leases (as the library's own lease sleepers do), and
//! no later than the next lease event its queues announce
//! ([`Queue::lease_due_in`]: a lease running out, a released record coming
//! due); the periodic sweep for holders that died
//! ([`Queue::lease_sweep_due_in`]) is looked at every [`LEASE_SLICE`]. A
//! watcher that has watched nothing for
//! [`IDLE_EXIT`] ends. Only past [`MAX_WATCHERS`] x [`PER_CALL`] queues
//! watched at once does a watcher hold more queues than one call takes: it
//! then sleeps on them [`PER_CALL`] at a time, [`ROTATE_SLICE`] each, and
//! looks at the push count of all of them whenever it wakes.
//!
//! When the push count of a queue moves by `n`, its watcher hands one
//! wake-up each to the `n` clients that have waited longest on it (oldest
//! first, Redis's rule), taking them off the queue's list; each pops (or
//! leases) for itself. When a lease event is due on a queue with leases (a
//! lease ran out, a released record came due: records that no push
//! brought), the client that has waited longest on it is woken; its lease
//! call (or pop: plain pops take such records too) settles the event. A woken client that finds nothing (another
//! consumer was faster) goes back on the list in its old place, and one
//! that took something, or was woken by a queue it did not take from,
//! passes the wake-up on to the next client waiting on that queue while
//! records remain. No record is ever held by the server for a client, so
//! none can be lost when a client goes away. A queue leaves its watcher's
//! set when nobody waits on it any more.
//!
//! When the queue is dropped, or the server stops, every client on the list
//! is woken, and its pop (or the stop) gives it an error reply.
//!
//! On a kernel without `futex_waitv` (before Linux 5.16) a watcher polls
//! the push counts of its queues every [`POLL_SLICE`] instead.
//!
//! [`Wakeups`] counts the wake-ups handed out for pushes, and those of them
//! a watcher saw only when its sleep ran to its end rather than by being
//! woken (INFO's `blocked_wakeups`, `blocked_wakeups_late`): a producer's
//! wake-up that went to another sleeper, the rotation past
//! [`PER_CALL`] x [`MAX_WATCHERS`] queues, or polling.

use crate::shutdown::Shutdown;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tvm::{Bell, Queue};

/// How long a watcher sleeps at most while no push comes (it then looks at
/// its queues again).
pub(crate) const WATCH_SLICE: Duration = Duration::from_secs(1);
/// As [`WATCH_SLICE`], for a watcher of a queue with leases: a lease taken
/// after it fell asleep may run out sooner than its next lease event said.
pub(crate) const LEASE_SLICE: Duration = Duration::from_millis(200);
/// A lease event still due after its client was woken (another process is
/// sweeping, or the hint was early) wakes the next one no sooner than this.
const LEASE_REFIRE: Duration = Duration::from_millis(10);
/// How long a watcher with no queue sleeps at most (its bell wakes it for
/// a new queue or the stop).
const IDLE_SLICE: Duration = Duration::from_secs(1);
/// A watcher with no queue for this long ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(10);
/// How long a watcher with more queues than one call takes sleeps on each
/// group of them in turn.
const ROTATE_SLICE: Duration = Duration::from_millis(2);
/// How often a watcher looks at its queues without `futex_waitv`.
const POLL_SLICE: Duration = Duration::from_millis(1);
/// Queues one watcher sleeps on at once: `futex_waitv`'s 128 words, its
/// bell's included.
pub(crate) const PER_CALL: usize = tvm::WAIT_ANY_MAX - 1;
/// Watcher threads at most: 8,128 queues watched without rotation.
pub(crate) const MAX_WATCHERS: usize = 64;

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
    /// When a due lease event last woke a client.
    fired: Option<Instant>,
    /// When a due periodic sweep last woke a client.
    swept: Option<Instant>,
}

impl ListInner {
    /// Wakes the oldest waiting client, taking it off the list.
    fn wake_oldest(&mut self) -> bool {
        match self.waiting.pop_first() {
            Some((_, n)) => {
                n.notify_one();
                true
            }
            None => false,
        }
    }

    fn wake_all(&mut self) {
        while self.wake_oldest() {}
    }
}

impl WaitList {
    /// Hands a wake-up that a client did not use (it popped from another
    /// queue, timed out or went away), or used (it took records: more may
    /// wait), to the next client, if records wait.
    pub(crate) fn pass_on(&self) {
        let q = &self.queue;
        if q.depth() > 0 || q.is_dropped() || q.lease_due_in().is_some_and(|d| d.is_zero()) {
            self.inner.lock().wake_oldest();
        }
    }
}

/// Every queue's list of blocked clients, server-wide, and the watchers.
pub(crate) struct Waiters {
    lists: Mutex<HashMap<u32, Arc<WaitList>>>,
    places: AtomicU64,
    pool: Arc<Mutex<Vec<Arc<Watcher>>>>,
    /// Watcher threads started (for INFO and tests).
    pub(crate) watchers_started: AtomicU64,
    /// The wake-ups watchers handed out for pushes.
    pub(crate) wakeups: Arc<Wakeups>,
}

/// Wake-ups handed to blocked clients for pushes (for INFO and tests).
#[derive(Default)]
pub(crate) struct Wakeups {
    /// All of them.
    pub(crate) all: AtomicU64,
    /// Those for pushes a watcher saw at the end of a sleep that ran its
    /// whole time (not woken by them).
    pub(crate) late: AtomicU64,
}

/// One watcher thread's set of lists, and its bell.
#[derive(Default)]
struct Watcher {
    set: Mutex<Vec<Arc<WaitList>>>,
    bell: Bell,
}

impl Waiters {
    pub(crate) fn new() -> Waiters {
        Waiters {
            lists: Mutex::default(),
            places: AtomicU64::new(0),
            pool: Arc::default(),
            watchers_started: AtomicU64::new(0),
            wakeups: Arc::default(),
        }
    }

    /// A new place in line for a client, kept while it stays blocked
    /// (the lowest is served first).
    pub(crate) fn next_place(&self) -> u64 {
        self.places.fetch_add(1, Ordering::Relaxed)
    }

    /// Watcher threads running.
    pub(crate) fn watchers(&self) -> usize {
        self.pool.lock().len()
    }

    /// Queues watched now.
    pub(crate) fn watched(&self) -> usize {
        self.pool.lock().iter().map(|w| w.set.lock().len()).sum()
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
                inner.wake_all();
            }
        }
        drop(inner);
        list
    }

    /// Gives `list` to a watcher (see the module documentation), starting
    /// one if every watcher is full and the pool may grow.
    fn assign(&self, list: &Arc<WaitList>, shutdown: &Arc<Shutdown>) -> std::io::Result<()> {
        // The pool stays locked until the list is in a set: a watcher ends
        // only with the pool locked and its set empty.
        let mut pool = self.pool.lock();
        let roomy = pool.iter().find(|w| w.set.lock().len() < PER_CALL).cloned();
        let watcher = match roomy {
            Some(w) => w,
            None if pool.len() < MAX_WATCHERS => {
                let w = Arc::new(Watcher::default());
                let n = self.watchers_started.fetch_add(1, Ordering::Relaxed);
                let (w2, stop, all, counts) = (w.clone(), shutdown.clone(), self.pool.clone(), self.wakeups.clone());
                std::thread::Builder::new()
                    .name(format!("tvmq-watch-{n}"))
                    .spawn(move || w2.run(&stop, &all, &counts))?;
                pool.push(w.clone());
                w
            }
            None => match pool.iter().min_by_key(|w| w.set.lock().len()) {
                Some(w) => w.clone(),
                None => return Err(std::io::Error::other("no watcher thread may be started")),
            },
        };
        watcher.set.lock().push(list.clone());
        drop(pool);
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
            l.inner.lock().wake_all();
        }
        for w in self.pool.lock().iter() {
            w.bell.ring();
        }
    }
}

impl Watcher {
    /// The watcher thread: see the module documentation. `all` is the pool
    /// it leaves when it ends; `counts`, the server's count of wake-ups.
    fn run(self: &Arc<Self>, stop: &Shutdown, all: &Mutex<Vec<Arc<Watcher>>>, counts: &Wakeups) {
        let mut rotation = 0;
        let mut futex_waitv = true;
        let mut idle_since: Option<Instant> = None;
        // The last sleep ran its whole time (nothing woke it).
        let mut slept_out = false;
        loop {
            let bell = self.bell.value();
            let lists: Vec<Arc<WaitList>> = self.set.lock().clone();
            let stopping = stop.is_set();
            let now = Instant::now();
            let mut watch: Vec<(&Queue, u64)> = Vec::with_capacity(lists.len());
            let mut slice = WATCH_SLICE;
            for l in &lists {
                let mut inner = l.inner.lock();
                let q = &l.queue;
                let pushes = q.push_count();
                if q.is_dropped() || stopping {
                    inner.wake_all();
                } else if pushes != inner.seen {
                    let n = pushes.wrapping_sub(inner.seen).min(inner.waiting.len() as u64);
                    for _ in 0..n {
                        inner.wake_oldest();
                    }
                    inner.seen = pushes;
                    counts.all.fetch_add(n, Ordering::Relaxed);
                    if slept_out {
                        counts.late.fetch_add(n, Ordering::Relaxed);
                    }
                }
                if q.info().leases.is_some() && !inner.waiting.is_empty() && !q.is_dropped() {
                    slice = slice.min(LEASE_SLICE);
                    if let Some(due) = q.lease_due_in() {
                        slice = slice.min(lease_event(&mut inner, due, now));
                    }
                    // Holders that died: looked for at most every LEASE_SLICE.
                    let sweep_due = q.lease_sweep_due_in().is_some_and(|d| d.is_zero());
                    if sweep_due && inner.swept.is_none_or(|t| now.duration_since(t) >= LEASE_SLICE) {
                        inner.wake_oldest();
                        inner.swept = Some(now);
                    }
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
            if watch.is_empty() {
                let since = *idle_since.get_or_insert(now);
                if now.duration_since(since) >= IDLE_EXIT && self.leave(all) {
                    return;
                }
            } else {
                idle_since = None;
            }
            let (group, slice) = if watch.is_empty() {
                (&watch[..], IDLE_SLICE)
            } else if watch.len() <= PER_CALL {
                (&watch[..], slice)
            } else {
                let groups = watch.len().div_ceil(PER_CALL);
                rotation = (rotation + 1) % groups;
                let from = rotation * PER_CALL;
                (&watch[from..(from + PER_CALL).min(watch.len())], ROTATE_SLICE.min(slice))
            };
            let asleep = Instant::now();
            if futex_waitv {
                if let Err(e) = Queue::wait_for_any_push(group, Some((&self.bell, bell)), slice) {
                    eprintln!("tvmq serve: {}: watchers poll every {POLL_SLICE:?} instead", e.what());
                    futex_waitv = false;
                }
                slept_out = asleep.elapsed() >= slice;
            } else {
                std::thread::sleep(if watch.is_empty() { IDLE_SLICE.min(slice) } else { POLL_SLICE });
                slept_out = true;
            }
        }
    }

    /// Leaves the pool if its set is still empty (a list given to it
    /// meanwhile keeps it running): true if it did.
    fn leave(self: &Arc<Self>, all: &Mutex<Vec<Arc<Watcher>>>) -> bool {
        let mut pool = all.lock();
        if !self.set.lock().is_empty() {
            return false;
        }
        pool.retain(|w| !Arc::ptr_eq(w, self));
        true
    }
}

/// A list of a queue with leases, whose next lease event is `due` from
/// `now`: wakes its oldest client when it is due (at most once per
/// [`LEASE_REFIRE`] while it stays due); how long the watcher may sleep.
fn lease_event(inner: &mut ListInner, due: Duration, now: Instant) -> Duration {
    if !due.is_zero() {
        return due;
    }
    match inner.fired.map(|t| now.duration_since(t)) {
        Some(ago) if ago < LEASE_REFIRE => LEASE_REFIRE - ago,
        _ => {
            inner.wake_oldest();
            inner.fired = Some(now);
            LEASE_REFIRE
        }
    }
}

//! Blocked clients (BLPOP, BRPOP) and the watchers that wake them.
//!
//! A blocked client costs no thread: it is a task waiting on its own
//! [`Notify`]. Each queue that has blocked clients has one watcher thread
//! (not one per client), asleep in [`Queue::wait_for_push`], which producers
//! of every process wake through the queue's futex (another connection of
//! this server, or a C program pushing through shared memory). When the push
//! count moves by `n`, the watcher hands one wake-up each to the `n` clients
//! that have waited longest (oldest first, Redis's rule), taking them off the
//! queue's list; each pops for itself. A woken client that finds the queue
//! empty (another consumer was faster) goes back on the list in its old place,
//! and one woken by a queue it did not pop from passes the wake-up on to the
//! next client waiting on that queue. No record is ever held by the server
//! for a client, so none can be lost when a client goes away.
//!
//! When the queue is dropped, or the server stops, every client on the list
//! is woken, and its pop (or the stop) gives it an error reply.

use crate::shutdown::Shutdown;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;
use tvm::Queue;

/// How often a watcher looks at the stop flag and its list while no push comes.
const WATCH_SLICE: Duration = Duration::from_millis(50);

/// The clients waiting on one queue, oldest ticket first.
pub(crate) struct WaitList {
    queue: Arc<Queue>,
    inner: Mutex<ListInner>,
}

#[derive(Default)]
struct ListInner {
    waiting: BTreeMap<u64, Arc<Notify>>,
    /// A watcher thread runs for this list.
    watched: bool,
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

/// Every queue's list of blocked clients, server-wide.
#[derive(Default)]
pub(crate) struct Waiters {
    lists: Mutex<HashMap<u32, Arc<WaitList>>>,
    tickets: AtomicU64,
    /// Watcher threads started (for INFO and tests).
    pub(crate) watchers_started: AtomicU64,
}

impl Waiters {
    /// A new ticket: a client's place in line, kept while it stays blocked.
    pub(crate) fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::Relaxed)
    }

    /// Puts the client with `ticket` and `notify` on the list of `queue`,
    /// starting the queue's watcher if it has none.
    pub(crate) fn register(
        &self,
        queue: &Arc<Queue>,
        ticket: u64,
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
        inner.waiting.insert(ticket, notify.clone());
        if !inner.watched {
            inner.watched = true;
            // Read before the client's next look at the queue: a push after
            // it is seen by the watcher, one before it by that look.
            let seen = list.queue.push_count();
            let (l, stop) = (list.clone(), shutdown.clone());
            self.watchers_started.fetch_add(1, Ordering::Relaxed);
            let spawned = std::thread::Builder::new()
                .name(format!("tvmq-watch-{}", queue.id()))
                .spawn(move || watch(&l, seen, &stop));
            if let Err(e) = spawned {
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

    /// Takes the client with `ticket` off `list`; false if it was not on it
    /// (a wake-up took it off).
    pub(crate) fn unregister(list: &WaitList, ticket: u64) -> bool {
        list.inner.lock().waiting.remove(&ticket).is_some()
    }

    /// Is the client with `ticket` on `list`?
    pub(crate) fn contains(list: &WaitList, ticket: u64) -> bool {
        list.inner.lock().waiting.contains_key(&ticket)
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

    /// Wakes every blocked client (the server stops).
    pub(crate) fn wake_everyone(&self) {
        let lists: Vec<_> = self.lists.lock().values().cloned().collect();
        for l in lists {
            Self::wake_all(&mut l.inner.lock());
        }
    }
}

/// The watcher of one queue: see the module documentation.
fn watch(list: &WaitList, mut seen: u64, stop: &Shutdown) {
    let q = &list.queue;
    loop {
        let now = q.wait_for_push(seen, WATCH_SLICE);
        let mut inner = list.inner.lock();
        if q.is_dropped() || stop.is_set() {
            Waiters::wake_all(&mut inner);
            inner.watched = false;
            return;
        }
        if now != seen {
            for _ in 0..now.wrapping_sub(seen).min(inner.waiting.len() as u64) {
                WaitList::wake_oldest(&mut inner);
            }
            seen = now;
        }
        if inner.waiting.is_empty() {
            inner.watched = false;
            return;
        }
    }
}

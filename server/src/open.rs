//! The queues the server holds open, at most as many as its descriptors
//! allow ([`crate::descriptors`], `--max-open-queues`).
//!
//! Each queue is opened once and shared as `Arc<Queue>`. Past the bound,
//! opening another closes the least recently used queues that nobody holds
//! (the table's `Arc` is the only one: no command runs on the queue, no
//! client is blocked on it, no lease was taken through it), which gives
//! back their descriptors, their mappings and this process's entry in their
//! process tables. When every open queue is held, the open is refused
//! (`SHM_ERR_NOMEM`) rather than taking a descriptor that accepting or
//! the sync threads need. Caches keep a [`Handle`], which does not hold
//! the queue open: a closed queue is opened again at its next use.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use tvm::Queue;
use tvm::error::{Error, SHM_ERR_NOMEM};

/// The open queues, by id.
pub(crate) struct OpenQueues {
    dir: PathBuf,
    max: usize,
    table: Mutex<HashMap<u32, Entry>>,
    /// Moves at every open or look-up in the table: the time of a use.
    clock: AtomicU64,
    /// Queues closed to make room for others.
    closed: AtomicU64,
}

struct Entry {
    queue: Arc<Queue>,
    /// When it was last used (a value of `clock`), shared with its handles.
    used: Arc<AtomicU64>,
}

/// A queue as a cache keeps it, without holding it open.
#[derive(Clone)]
pub(crate) struct Handle {
    queue: Weak<Queue>,
    used: Arc<AtomicU64>,
}

impl Handle {
    /// The queue, if it is still open and was not dropped; counted as a use.
    #[inline]
    pub(crate) fn get(&self, open: &OpenQueues) -> Option<Arc<Queue>> {
        let q = self.queue.upgrade().filter(|q| !q.is_dropped())?;
        // Once per batch of a connection's commands (a connection keeps its
        // last queue within the batch).
        self.used.store(open.clock.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Relaxed);
        Some(q)
    }

    /// Is its queue gone (closed or dropped)?
    pub(crate) fn is_gone(&self) -> bool {
        self.queue.upgrade().is_none_or(|q| q.is_dropped())
    }
}

impl OpenQueues {
    /// A table of the queues of `dir`, holding at most `max` (at least 1) open.
    pub(crate) fn new(dir: PathBuf, max: usize) -> OpenQueues {
        OpenQueues {
            dir,
            max: max.max(1),
            table: Mutex::new(HashMap::new()),
            clock: AtomicU64::new(0),
            closed: AtomicU64::new(0),
        }
    }

    /// Queue `id`, opened if it is not (or the open one was dropped).
    /// Errors: those of [`Queue::open`] (`TBL_NOT_FOUND`, ...),
    /// `SHM_ERR_NOMEM` when every open queue is in use.
    pub(crate) fn get(&self, id: u32) -> tvm::Result<Arc<Queue>> {
        self.handle(id).map(|(q, _)| q)
    }

    /// [`get`](Self::get), with a [`Handle`] for a cache.
    pub(crate) fn handle(&self, id: u32) -> tvm::Result<(Arc<Queue>, Handle)> {
        let mut gone = Vec::new();
        let found = self.lookup(id, &mut gone);
        close_later(gone);
        if let Some(found) = found {
            return Ok(found);
        }
        // Opened without the lock (it maps the file), then put in, unless
        // another thread did so meanwhile.
        let fresh = Queue::open(&self.dir, id)?;
        let mut closing = Vec::new();
        let got = self.insert(id, fresh, &mut closing);
        close_later(closing);
        got
    }

    /// The open queue `id`, counted as a use; a dropped one is taken out
    /// (into `gone`, to be closed without the lock).
    fn lookup(&self, id: u32, gone: &mut Vec<Arc<Queue>>) -> Option<(Arc<Queue>, Handle)> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let mut table = self.table.lock();
        let e = table.get(&id)?;
        if e.queue.is_dropped() {
            gone.extend(table.remove(&id).map(|e| e.queue));
            return None;
        }
        e.used.store(now, Ordering::Relaxed);
        Some((e.queue.clone(), Handle { queue: Arc::downgrade(&e.queue), used: e.used.clone() }))
    }

    fn insert(&self, id: u32, fresh: Queue, closing: &mut Vec<Queue>) -> tvm::Result<(Arc<Queue>, Handle)> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let mut table = self.table.lock();
        if let Some(e) = table.get(&id).filter(|e| !e.queue.is_dropped()) {
            e.used.store(now, Ordering::Relaxed);
            let got = (e.queue.clone(), Handle { queue: Arc::downgrade(&e.queue), used: e.used.clone() });
            closing.push(fresh);
            return Ok(got);
        }
        if table.len() >= self.max && !table.contains_key(&id) {
            self.make_room(&mut table, closing);
            if table.len() >= self.max {
                closing.push(fresh);
                return Err(Error::new(
                    SHM_ERR_NOMEM,
                    format!(
                        "cannot open queue {id}: the server holds {} queues open, its bound (--max-open-queues, \
                         or what the open-file limit allows), and each is in use by a command, a blocked client \
                         or a lease: try again later",
                        self.max
                    ),
                ));
            }
        }
        let queue = Arc::new(fresh);
        let used = Arc::new(AtomicU64::new(now));
        let handle = Handle { queue: Arc::downgrade(&queue), used: used.clone() };
        if let Some(old) = table.insert(id, Entry { queue: queue.clone(), used }) {
            // A dropped queue of the same id: closed like the others.
            if let Ok(q) = Arc::try_unwrap(old.queue) {
                closing.push(q);
            }
        }
        Ok((queue, handle))
    }

    /// Closes the least recently used queues nobody holds: an eighth of the
    /// bound at a time (at least one), so that the scan of the table is
    /// paid once per that many opens.
    fn make_room(&self, table: &mut HashMap<u32, Entry>, closing: &mut Vec<Queue>) {
        let mut idle: Vec<(u64, u32)> = table
            .iter()
            .filter(|(_, e)| Arc::strong_count(&e.queue) == 1)
            .map(|(&id, e)| (e.used.load(Ordering::Relaxed), id))
            .collect();
        let n = (self.max / 8).clamp(1, idle.len().max(1)).min(idle.len());
        if n == 0 {
            return;
        }
        idle.select_nth_unstable(n - 1);
        for &(_, id) in &idle[..n] {
            let Some(e) = table.remove(&id) else { continue };
            // A handle may have taken the queue since the count was read:
            // then it stays.
            match Arc::try_unwrap(e.queue) {
                Ok(q) => {
                    closing.push(q);
                    self.closed.fetch_add(1, Ordering::Relaxed);
                }
                Err(queue) => {
                    table.insert(id, Entry { queue, used: e.used });
                }
            }
        }
    }

    /// Lets go of the queues dropped since they were opened.
    pub(crate) fn purge_dropped(&self) {
        let mut gone = Vec::new();
        self.table.lock().retain(|_, e| {
            if e.queue.is_dropped() {
                gone.push(e.queue.clone());
                return false;
            }
            true
        });
        close_later(gone);
    }

    /// Queues open now, the bound, and the queues closed to make room so far.
    pub(crate) fn counts(&self) -> (usize, usize, u64) {
        (self.table.lock().len(), self.max, self.closed.load(Ordering::Relaxed))
    }
}

/// Closes `queues` (each unmaps its file and closes its descriptors): a
/// plain one here (no disk, nothing to wait for), so that its descriptor
/// is back before the next open counts on it; a durable one (it may sync)
/// on the runtime's blocking pool when called from a worker, so that the
/// worker waits for no disk; else here. (Plain ones went to the blocking
/// pool too: when it lagged, as on a busy machine, the queues waiting there
/// held descriptors the bound no longer counted, and at a low open-file
/// limit a client opening queue after queue ran the server out of them.)
fn close_later<Q: std::borrow::Borrow<Queue> + Send + 'static>(queues: Vec<Q>) {
    // The plain ones are dropped by the filter.
    let queues: Vec<Q> = queues.into_iter().filter(|q| q.borrow().durability().is_some()).collect();
    if queues.is_empty() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => drop(rt.spawn_blocking(move || drop(queues))),
        Err(_) => drop(queues),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str, n: u32) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tvmq-open-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for id in 1..=n {
            Queue::create(&d, id, &tvm::Spec::new(4, 8)).unwrap();
        }
        d
    }

    #[test]
    fn the_least_recently_used_idle_queue_is_closed_and_held_ones_stay() {
        let d = dir("lru", 5);
        let open = OpenQueues::new(d.clone(), 3);
        let (one, h1) = open.handle(1).unwrap();
        let (_, h2) = open.handle(2).unwrap();
        let (_, h3) = open.handle(3).unwrap();
        // 1 is held (a command runs on it); 2 was used after 3.
        assert!(h2.get(&open).is_some());
        open.get(4).unwrap();
        assert_eq!(open.counts(), (3, 3, 1));
        assert!(h3.is_gone(), "3: the least recently used idle queue, closed");
        assert!(!h1.is_gone() && !h2.is_gone());
        // Closed means its descriptors and its process-table entry are given back.
        assert_eq!(Arc::strong_count(&one), 2);
        drop(one);
        // Everything held: refused, nothing opened.
        let held: Vec<_> = [1, 2, 4].iter().map(|&id| open.get(id).unwrap()).collect();
        let e = open.get(5).unwrap_err();
        assert_eq!(e.code(), SHM_ERR_NOMEM);
        assert!(e.what().contains("each is in use"), "{e}");
        drop(held);
        // Let go of: opened again, the oldest closed.
        open.get(5).unwrap();
        assert!(open.get(3).is_ok());
        assert!(h1.is_gone(), "1 was the oldest");
        // Dropped queues are let go of.
        Queue::drop_queue(&d, 5).unwrap();
        open.purge_dropped();
        assert_eq!(open.get(5).unwrap_err().code(), tvm::error::TBL_NOT_FOUND);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// On a worker whose runtime's blocking pool is busy (as on a loaded
    /// machine), the plain queues closed to make room are closed at once:
    /// opening queue after queue, this process stays attached to (holds the
    /// descriptors of) no more queues than the bound.
    #[test]
    fn plain_queues_closed_to_make_room_are_closed_at_once_on_a_worker() {
        let (n, max) = (24, 4);
        let d = dir("closed-at-once", n);
        let open = OpenQueues::new(d.clone(), max);
        let rt = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
        // The one blocking thread busy until the end.
        let (release, busy) = std::sync::mpsc::channel::<()>();
        let occupied = rt.spawn_blocking(move || busy.recv());
        let attached = || (1..=n).filter(|&id| Queue::inspect(&d, id).unwrap().snapshot().processes > 0).count();
        rt.block_on(async {
            for id in 1..=n {
                open.get(id).unwrap();
            }
        });
        assert_eq!(open.counts(), (max, max, (n as usize - max) as u64));
        assert_eq!(attached(), max, "the queues closed to make room are closed");
        drop(release);
        rt.block_on(occupied).unwrap().unwrap_err();
        drop(open);
        assert_eq!(attached(), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

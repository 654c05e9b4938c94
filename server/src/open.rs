//! The queues the server holds open, at most as many as its descriptors
//! allow ([`crate::descriptors`], `--max-open-queues`).
//!
//! Each queue is opened once and shared as `Arc<Queue>`. Past the bound,
//! opening another closes the least recently used queues that nobody holds
//! (the table's `Arc` is the only one: no command runs on the queue, no
//! client is blocked on it, no lease was taken through it), which gives
//! back their descriptors, their mappings and this process's entry in their
//! process tables. A durable queue's close may sync (a disk wait), so it
//! runs on the runtime's blocking pool, and until it has run the queue still
//! holds its descriptors: the bound counts it ([`OpenQueues::closing`]).
//! When every open queue is held, or the closes that would make room have
//! not run yet, the open is refused (`SHM_ERR_NOMEM`) rather than taking a
//! descriptor that accepting or the sync threads need. Caches keep a
//! [`Handle`], which does not hold the queue open: a closed queue is opened
//! again at its next use.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    /// Durable queues out of the table whose close waits for the runtime's
    /// blocking pool ([`Leaving`]): they hold their descriptors until it has
    /// run, so the bound counts them beside the table's.
    closing: Arc<AtomicUsize>,
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
            closing: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Queue `id`, opened if it is not (or the open one was dropped).
    /// Errors: those of [`Queue::open`] (`TBL_NOT_FOUND`, ...),
    /// `SHM_ERR_NOMEM` when the bound is reached and no open queue can be
    /// closed (each is in use, or closes already under way have not run).
    pub(crate) fn get(&self, id: u32) -> tvm::Result<Arc<Queue>> {
        self.handle(id).map(|(q, _)| q)
    }

    /// [`get`](Self::get), with a [`Handle`] for a cache.
    pub(crate) fn handle(&self, id: u32) -> tvm::Result<(Arc<Queue>, Handle)> {
        let mut leaving = Leaving::new(&self.closing);
        let found = self.lookup(id, &mut leaving);
        drop(leaving);
        let near_the_bound = match found {
            Ok(found) => return Ok(found),
            Err(near) => near,
        };
        // Room is made (or the open refused) before the file is opened, so
        // that a refused open takes no descriptor, not even for a moment;
        // but none for a queue that does not exist (its open fails at
        // once), so that looking up missing ids closes nothing.
        if near_the_bound && tvm::queue_path(&self.dir, id).exists() {
            let mut leaving = Leaving::new(&self.closing);
            let mut table = self.table.lock();
            if !table.contains_key(&id) {
                self.room_for_one(id, &mut table, &mut leaving, self.max / 8)?;
            }
        }
        // Opened without the lock (it maps the file), then put in, unless
        // another thread did so meanwhile.
        let fresh = Queue::open(&self.dir, id)?;
        let mut leaving = Leaving::new(&self.closing);
        self.insert(id, fresh, &mut leaving)
    }

    /// The open queue `id`, counted as a use; else whether opening one
    /// more needs room made first ([`room_for_one`](Self::room_for_one)).
    /// A dropped one is taken out (into `leaving`, to be closed without the
    /// lock).
    fn lookup(&self, id: u32, leaving: &mut Leaving) -> Result<(Arc<Queue>, Handle), bool> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let mut table = self.table.lock();
        if let Some(e) = table.get(&id) {
            if !e.queue.is_dropped() {
                e.used.store(now, Ordering::Relaxed);
                return Ok((e.queue.clone(), Handle { queue: Arc::downgrade(&e.queue), used: e.used.clone() }));
            }
            leaving.extend(table.remove(&id).map(|e| e.queue));
        }
        Err(self.held(&table) + self.max / 8 >= self.max)
    }

    /// Queues open and being closed (see [`OpenQueues::closing`]).
    fn held(&self, table: &HashMap<u32, Entry>) -> usize {
        table.len() + self.closing.load(Ordering::Acquire)
    }

    fn insert(&self, id: u32, fresh: Queue, leaving: &mut Leaving) -> tvm::Result<(Arc<Queue>, Handle)> {
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        let mut table = self.table.lock();
        if let Some(e) = table.get(&id).filter(|e| !e.queue.is_dropped()) {
            e.used.store(now, Ordering::Relaxed);
            let got = (e.queue.clone(), Handle { queue: Arc::downgrade(&e.queue), used: e.used.clone() });
            leaving.push(Arc::new(fresh));
            return Ok(got);
        }
        // A dropped queue of the same id goes, like the others.
        leaving.extend(table.remove(&id).map(|e| e.queue));
        // Checked again, at the bound itself: other threads may have opened
        // queues since (room was made ahead already).
        if let Err(e) = self.room_for_one(id, &mut table, leaving, 0) {
            leaving.push(Arc::new(fresh));
            return Err(e);
        }
        let queue = Arc::new(fresh);
        let used = Arc::new(AtomicU64::new(now));
        let handle = Handle { queue: Arc::downgrade(&queue), used: used.clone() };
        table.insert(id, Entry { queue: queue.clone(), used });
        Ok((queue, handle))
    }

    /// Room for queue `id` (not in `table`): within `headroom` of the
    /// bound, the least recently used queues nobody holds are closed
    /// ([`make_room`](Self::make_room)); `SHM_ERR_NOMEM` when the queues
    /// open and those still being closed reach the bound all the same.
    ///
    /// The headroom before an open (an eighth of the bound, none below 8)
    /// is there for durable queues: their close runs later, on the blocking
    /// pool, and until then they count, so that closing them only when the
    /// bound is reached would refuse the very open that closed them.
    fn room_for_one(
        &self,
        id: u32,
        table: &mut HashMap<u32, Entry>,
        leaving: &mut Leaving,
        headroom: usize,
    ) -> tvm::Result<()> {
        if self.held(table) + headroom >= self.max {
            self.make_room(table, leaving);
        }
        let now = self.held(table);
        if now < self.max {
            return Ok(());
        }
        let closing = now - table.len();
        Err(Error::new(
            SHM_ERR_NOMEM,
            if closing == 0 {
                format!(
                    "cannot open queue {id}: the server holds {} queues open, its bound (--max-open-queues, or \
                     what the open-file limit allows), and each is in use by a command, a blocked client or a \
                     lease: try again later",
                    self.max
                )
            } else {
                format!(
                    "cannot open queue {id}: the server holds {} queues open and {closing} more being closed \
                     (durable ones, whose close may wait for the disk), its bound (--max-open-queues, or what \
                     the open-file limit allows): try again later",
                    table.len()
                )
            },
        ))
    }

    /// Closes the least recently used queues nobody holds: an eighth of the
    /// bound at a time (at least one), so that the scan of the table is
    /// paid once per that many opens.
    fn make_room(&self, table: &mut HashMap<u32, Entry>, leaving: &mut Leaving) {
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
            // then it stays. (Unwrapped, so that no handle can take it
            // from here on.)
            match Arc::try_unwrap(e.queue) {
                Ok(q) => {
                    leaving.push(Arc::new(q));
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
        let mut leaving = Leaving::new(&self.closing);
        self.table.lock().retain(|_, e| {
            if e.queue.is_dropped() {
                leaving.push(e.queue.clone());
                return false;
            }
            true
        });
    }

    /// Queues open now, the bound, the queues closed to make room so far,
    /// and the durable ones out of the table whose close has not run yet
    /// (counted against the bound).
    pub(crate) fn counts(&self) -> (usize, usize, u64, usize) {
        let open = self.table.lock().len();
        (open, self.max, self.closed.load(Ordering::Relaxed), self.closing.load(Ordering::Acquire))
    }
}

/// Queues on their way out (closed to make room, dropped, or opened and not
/// kept), closed when this is dropped, after the table's lock is let go
/// of: a plain one there (no disk, nothing to wait for), so that its
/// descriptor is back before the next open counts on it; a durable one (it
/// may sync) on the runtime's blocking pool when dropped on a worker, so
/// that the worker waits for no disk, else there. A durable one counts in
/// [`OpenQueues::closing`] from its push until its close has run.
struct Leaving<'a> {
    closing: &'a Arc<AtomicUsize>,
    plain: Vec<Arc<Queue>>,
    durable: Vec<Arc<Queue>>,
}

impl<'a> Leaving<'a> {
    fn new(closing: &'a Arc<AtomicUsize>) -> Leaving<'a> {
        Leaving { closing, plain: Vec::new(), durable: Vec::new() }
    }

    fn push(&mut self, queue: Arc<Queue>) {
        if queue.durability().is_some() {
            self.closing.fetch_add(1, Ordering::AcqRel);
            self.durable.push(queue);
        } else {
            self.plain.push(queue);
        }
    }
}

impl Extend<Arc<Queue>> for Leaving<'_> {
    fn extend<I: IntoIterator<Item = Arc<Queue>>>(&mut self, queues: I) {
        queues.into_iter().for_each(|q| self.push(q));
    }
}

impl Drop for Leaving<'_> {
    fn drop(&mut self) {
        self.plain.clear();
        if self.durable.is_empty() {
            return;
        }
        let closing = Closing { queues: std::mem::take(&mut self.durable), count: self.closing.clone() };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || drop(closing))),
            Err(_) => drop(closing),
        }
    }
}

/// Durable queues being closed: each leaves the count once it is closed
/// (also if the pool drops the task unrun, as when the runtime stops).
struct Closing {
    queues: Vec<Arc<Queue>>,
    count: Arc<AtomicUsize>,
}

impl Drop for Closing {
    fn drop(&mut self) {
        while let Some(q) = self.queues.pop() {
            drop(q);
            self.count.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str, n: u32) -> PathBuf {
        dir_of(tag, n, None)
    }

    /// A directory of `n` queues of that durability.
    fn dir_of(tag: &str, n: u32, durability: Option<tvm::Durability>) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tvmq-open-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let mut spec = tvm::Spec::new(4, 8);
        spec.durability = durability;
        for id in 1..=n {
            Queue::create(&d, id, &spec).unwrap();
        }
        d
    }

    /// The queues of `d` (1 to `n`) this process is attached to: each holds
    /// descriptors (its file, a durable one its image too).
    fn attached(d: &std::path::Path, n: u32) -> usize {
        (1..=n).filter(|&id| Queue::inspect(d, id).unwrap().snapshot().processes > 0).count()
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
        assert_eq!(open.counts(), (3, 3, 1, 0));
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

    /// Looking up a queue that does not exist, the table full, closes none
    /// of the open ones (its open fails before any room is made for it).
    #[test]
    fn a_missing_queue_closes_none_to_make_room() {
        let d = dir("missing", 3);
        let open = OpenQueues::new(d.clone(), 3);
        for id in 1..=3 {
            open.get(id).unwrap();
        }
        assert_eq!(open.get(99).unwrap_err().code(), tvm::error::TBL_NOT_FOUND);
        assert_eq!(open.counts(), (3, 3, 0, 0), "nothing closed for it");
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
        rt.block_on(async {
            for id in 1..=n {
                open.get(id).unwrap();
            }
        });
        assert_eq!(open.counts(), (max, max, (n as usize - max) as u64, 0));
        assert_eq!(attached(&d, n), max, "the queues closed to make room are closed");
        drop(release);
        rt.block_on(occupied).unwrap().unwrap_err();
        drop(open);
        assert_eq!(attached(&d, n), 0);
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The durable queues closed to make room are closed on the blocking
    /// pool (their close may sync). While that pool is busy (as on a loaded
    /// machine) they still hold their descriptors, and the bound counts
    /// them: opening queue after queue, this process stays attached to no
    /// more queues than the bound, the opens past it are refused, and once
    /// the closes have run every queue opens again.
    #[test]
    fn durable_queues_waiting_to_be_closed_count_against_the_bound() {
        let (n, max) = (24, 8);
        let d = dir_of("closing-durable", n, Some(tvm::Durability::Always));
        let open = OpenQueues::new(d.clone(), max);
        let rt = tokio::runtime::Builder::new_current_thread().max_blocking_threads(1).build().unwrap();
        let (release, busy) = std::sync::mpsc::channel::<()>();
        let occupied = rt.spawn_blocking(move || busy.recv());
        let mut refused = 0;
        rt.block_on(async {
            for id in 1..=n {
                if let Err(e) = open.get(id) {
                    assert_eq!(e.code(), SHM_ERR_NOMEM, "{e}");
                    assert!(e.what().contains("being closed"), "{e}");
                    refused += 1;
                }
                let now = attached(&d, n);
                assert!(now <= max, "after opening queue {id}: attached to {now} queues, the bound is {max}");
            }
        });
        let (table, _, closed, closing) = open.counts();
        eprintln!("pool busy: {table} open, {closing} being closed, {closed} closed to make room, {refused} refused");
        assert!(table + closing <= max && closing > 0 && refused > 0, "{:?}, {refused} refused", open.counts());

        // The pool free: the closes run, and every queue opens in turn
        // (one refused while closes are still under way is asked again).
        drop(release);
        rt.block_on(occupied).unwrap().unwrap_err();
        let patience = std::time::Instant::now() + std::time::Duration::from_secs(60);
        rt.block_on(async {
            for id in 1..=n {
                while let Err(e) = open.get(id) {
                    assert_eq!(e.code(), SHM_ERR_NOMEM, "{e}");
                    // A guard against a hang, not a bound on speed.
                    assert!(std::time::Instant::now() < patience, "queue {id} still refused after a minute: {e}");
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                assert!(attached(&d, n) <= max);
            }
        });
        // The last closes may still wait for the pool: the runtime's end
        // runs (or drops, which closes too) every one.
        drop(open);
        drop(rt);
        assert_eq!(attached(&d, n), 0);
        for id in 1..=n {
            Queue::drop_queue(&d, id).unwrap();
        }
        std::fs::remove_dir_all(&d).unwrap();
    }
}

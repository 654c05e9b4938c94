//! Attachment tables: queue id (or name) -> the open [`Queue`], shared by
//! every thread of the process.
//!
//! The C layer uses the process-wide table ([`Attachments::process`]), whose
//! directory is `$TVMDBD` (read when a queue is attached); a server may make
//! its own for another directory ([`Attachments::new`]). A queue is opened
//! once per table and shared as `Arc<Queue>`; one found dropped is opened
//! again (it may have been re-created).
//!
//! The hot path, [`Attachments::with`], looks in the calling thread's cache
//! (the queue the thread used last, else a hash map by table and id: the
//! same however many queues are attached) and reads one rarely written word
//! (an epoch that moves only when a queue is detached or the process
//! forks): no lock, no system call. The cache also keeps the thread's intent
//! word in each queue, which the C layer's pushes and pops announce through.
//! It is the library's one cache of queues by id, with one rule: an entry
//! serves while the epoch has not moved since the cache was filled (a move
//! empties it at the thread's next call) and its queue is not found dropped
//! (then it is resolved again). A detached queue stays mapped until the
//! last thread that holds it lets go of it.
//!
//! After `fork`, the child forgets every attachment (the parent's stay): it
//! must not act under its parent's registration in the queues' process
//! tables, so it attaches again, as itself, on first use.

mod cache;

use crate::error::*;
use crate::file::{dir, map};
use crate::queue::{Attacher, KeptIntent, Queue};
use cache::with_kept_in;
pub(crate) use cache::{outcome, set_outcome};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Once, Weak};

/// Moves whenever a table removes an attachment, or the process forks:
/// thread caches older than it are dropped.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Forks this process went through as a child (moved in the child).
static FORKS: AtomicU64 = AtomicU64::new(0);
/// Numbers the tables, so that thread caches tell them apart (0 is the
/// process-wide table's). A table numbered past `u32::MAX` (so many made
/// in one process) is not cached by threads: a key is its number and a
/// queue id in one word.
static INSTANCES: AtomicU64 = AtomicU64::new(1);
/// The process-wide table's number.
const PROCESS_INSTANCE: u64 = 0;
static ATFORK: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::SeqCst);
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// A table of attached queues. See the module documentation.
pub struct Attachments {
    /// Shared with the queues it attached, which find their dead-letter
    /// queues here ([`Attacher`]).
    shared: Arc<Shared>,
    /// Tells this table apart in thread caches.
    instance: u64,
}

struct Shared {
    /// `None`: the process-wide table, whose directory is [`crate::queue_dir`]
    /// at the time a queue is attached.
    dir: Option<PathBuf>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// `FORKS` when this table was last used: a different value means this
    /// process is a fork child holding its parent's attachments.
    forks: u64,
    by_id: HashMap<u32, Arc<Queue>>,
    /// Names already looked up, and the queue they named then.
    names: HashMap<String, u32>,
}

impl Shared {
    fn dir(&self) -> PathBuf {
        self.dir.clone().unwrap_or_else(dir::queue_dir)
    }

    /// Locks the table, forgetting a fork parent's attachments.
    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        let mut inner = self.inner.lock();
        let forks = FORKS.load(Ordering::SeqCst);
        if inner.forks != forks {
            inner.by_id.clear();
            inner.names.clear();
            inner.forks = forks;
        }
        inner
    }

    /// See [`Attachments::resolve`]. A queue opened here finds its
    /// dead-letter queue in this table.
    fn resolve(self: &Arc<Self>, id: u32) -> Result<(Arc<Queue>, bool)> {
        let mut inner = self.lock();
        if let Some(q) = inner.by_id.get(&id) {
            if !q.is_dropped() {
                return Ok((q.clone(), false));
            }
            inner.by_id.remove(&id);
            EPOCH.fetch_add(1, Ordering::Release);
        }
        let mut q = Queue::open(&self.dir(), id)?;
        let me: Weak<Shared> = Arc::downgrade(self);
        q.attached_by(me);
        let q = Arc::new(q);
        inner.by_id.insert(id, q.clone());
        Ok((q, true))
    }
}

impl Attacher for Shared {
    fn attach(self: Arc<Self>, id: u32) -> Result<Arc<Queue>> {
        self.resolve(id).map(|(q, _)| q)
    }
}

static PROCESS: LazyLock<Attachments> = LazyLock::new(|| Attachments::with_dir(PROCESS_INSTANCE, None));

impl Attachments {
    /// The process-wide table: queues of `$TVMDBD` (default
    /// `/dev/shm/tvmq-<uid>`), the table of the C API.
    pub fn process() -> &'static Attachments {
        &PROCESS
    }

    /// A table of its own for the queues of `dir`.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("tvmq-doc-attach-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir).unwrap();
    /// use tvm::{Attachments, Queue, Spec, Wait};
    ///
    /// let mut spec = Spec::new(100, 64);
    /// spec.name = "ORDERS".into();
    /// Queue::create(&dir, 21, &spec)?;
    ///
    /// let table = Attachments::new(dir.clone());
    /// table.get(21)?.push(b"first")?;                  // by id
    /// let q = table.get_by_key("ORDERS")?;              // by name: the same queue
    /// let mut out = [0u8; 64];
    /// assert_eq!(q.pop(&mut out, Wait::NoWait)?, 5);
    /// assert!(std::sync::Arc::ptr_eq(&q, &table.get(21)?));
    /// # drop(q); drop(table);
    /// # Queue::drop_queue(&dir, 21)?;
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), tvm::Error>(())
    /// ```
    pub fn new(dir: PathBuf) -> Attachments {
        Self::with_dir(INSTANCES.fetch_add(1, Ordering::Relaxed), Some(dir))
    }

    fn with_dir(instance: u64, dir: Option<PathBuf>) -> Attachments {
        ATFORK.call_once(|| {
            // SAFETY: registers a handler that only touches atomics (which is
            // all a child of a multi-threaded process may do before exec).
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
        let inner = Mutex::new(Inner { forks: FORKS.load(Ordering::SeqCst), ..Inner::default() });
        Attachments { shared: Arc::new(Shared { dir, inner }), instance }
    }

    /// The directory whose queues this table attaches.
    pub fn dir(&self) -> PathBuf {
        self.shared.dir()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.shared.lock()
    }

    /// Queue `id`, attaching it if it is not (or the attached one was
    /// dropped). Errors: those of [`Queue::open`] (`TBL_NOT_FOUND`, ...).
    pub fn get(&self, id: u32) -> Result<Arc<Queue>> {
        self.resolve(id).map(|(q, _)| q)
    }

    /// [`get`](Self::get), saying whether this call attached the queue.
    ///
    /// Errors: those of [`get`](Self::get).
    pub fn resolve(&self, id: u32) -> Result<(Arc<Queue>, bool)> {
        self.shared.resolve(id)
    }

    /// The id of the queue a key names: a queue id written in decimal
    /// (`"21"`), else a queue name (`"QUEUE_USER_INFO"`), looked up in the
    /// headers of the directory's queues. A name is never used as a path.
    ///
    /// Errors: `TBL_NOT_FOUND` (no queue has that name), `IDX_DATA_MISM`
    /// (several queues have it: address them by id).
    pub fn lookup(&self, key: &str) -> Result<u32> {
        if let Some(id) = key.parse::<u32>().ok().filter(|id| id.to_string() == key) {
            return Ok(id);
        }
        if key.is_empty() {
            return Err(Error::new(TBL_NOT_FOUND, "an empty queue name names no queue"));
        }
        let dir = self.dir();
        let cached = self.lock().names.get(key).copied();
        if let Some(id) = cached {
            if self.still_named(&dir, id, key) {
                return Ok(id);
            }
        }
        let found: Vec<u32> = dir::queue_ids(&dir)?
            .into_iter()
            .filter(|&id| map::read_header(&dir, id).is_ok_and(|h| h.name() == key))
            .collect();
        match found[..] {
            [id] => {
                self.lock().names.insert(key.to_string(), id);
                Ok(id)
            }
            [] => Err(Error::new(TBL_NOT_FOUND, format!("no queue named {key:?} in {}", dir.display()))),
            _ => Err(Error::new(
                IDX_DATA_MISM,
                format!("{} queues are named {key:?} ({found:?}): use the queue id", found.len()),
            )),
        }
    }

    /// Is queue `id` still the one named `name`?
    fn still_named(&self, dir: &Path, id: u32, name: &str) -> bool {
        let attached = self.lock().by_id.get(&id).filter(|q| !q.is_dropped()).cloned();
        match attached {
            Some(q) => q.name() == name,
            None => map::read_header(dir, id).is_ok_and(|h| h.name() == name),
        }
    }

    /// The queue a key names (see [`lookup`](Self::lookup)), attached.
    ///
    /// Errors: those of [`lookup`](Self::lookup) and of [`get`](Self::get).
    pub fn get_by_key(&self, key: &str) -> Result<Arc<Queue>> {
        self.get(self.lookup(key)?)
    }

    /// Detaches queue `id` (a no-op if it is not attached); returns whether
    /// it was. Calls already running on it finish; later ones attach again.
    pub fn detach(&self, id: u32) -> bool {
        let removed = self.lock().by_id.remove(&id).is_some();
        if removed {
            EPOCH.fetch_add(1, Ordering::Release);
        }
        removed
    }

    /// The ids of the queues attached now, sorted.
    pub fn attached(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.lock().by_id.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Runs `f` on queue `id`, attaching it first if needed (then `newly`
    /// is called). The calling thread keeps the queues it used in a cache,
    /// so that this costs no lock once a queue is attached.
    ///
    /// Errors: those of [`get`](Self::get), and `f`'s.
    #[inline]
    pub fn with<R>(&self, id: u32, newly: impl FnOnce(), f: impl FnOnce(&Queue) -> Result<R>) -> Result<R> {
        if self.instance > u64::from(u32::MAX) {
            let (q, attached) = self.resolve(id)?;
            if attached {
                newly();
            }
            return f(&q);
        }
        with_kept_in(self.instance, || self, id, newly, |q, _| f(q))
    }

    /// [`with`](Self::with) on the process-wide table, giving `f` this
    /// thread's intent word in the queue as well (`None`: a call that a
    /// signal handler made while another call of this thread ran: the
    /// queue's calls look the word up). The C layer's calls.
    #[inline(always)]
    pub(crate) fn with_process_kept<R>(
        id: u32,
        newly: impl FnOnce(),
        f: impl FnOnce(&Queue, Option<&KeptIntent>) -> Result<R>,
    ) -> Result<R> {
        with_kept_in(PROCESS_INSTANCE, Self::process, id, newly, f)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// Run once at the first instant of a call at which a signal may
        /// interrupt it after it began (see `signal_point`).
        static SIGNAL: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    /// A signal arrives here: the handler [`on_signal`] set runs (once).
    pub(super) fn signal_point() {
        if let Some(handler) = SIGNAL.with(|s| s.borrow_mut().take()) {
            handler();
        }
    }

    /// Has this thread's next call run `handler` as if a signal handler
    /// interrupted it just after it began.
    pub(crate) fn on_signal(handler: Box<dyn FnOnce()>) {
        SIGNAL.with(|s| *s.borrow_mut() = Some(handler));
    }

    /// Did the handler [`on_signal`] set run?
    pub(crate) fn signal_handled() -> bool {
        SIGNAL.with(|s| s.borrow().is_none())
    }
    use crate::Spec;
    use crate::queue::Wait;
    use crate::test_support::TempDir;

    fn named(dir: &Path, id: u32, name: &str) {
        let mut spec = Spec::new(8, 16);
        spec.name = name.into();
        Queue::create(dir, id, &spec).unwrap();
    }

    #[test]
    fn a_queue_is_attached_once_and_shared() {
        let d = TempDir::new("attach", "once");
        named(d.path(), 1, "one");
        let t = Attachments::new(d.path().to_path_buf());
        let (a, newly) = t.resolve(1).unwrap();
        assert!(newly);
        let (b, again) = t.resolve(1).unwrap();
        assert!(!again);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(t.attached(), vec![1]);
        assert!(t.detach(1));
        assert!(!t.detach(1));
        assert_eq!(t.attached(), Vec::<u32>::new());
        let (c, newly) = t.resolve(1).unwrap();
        assert!(newly && !Arc::ptr_eq(&a, &c), "detached: opened anew");
    }

    #[test]
    fn a_dropped_queue_is_replaced_by_its_re_creation() {
        let d = TempDir::new("attach", "recreate");
        named(d.path(), 1, "old");
        let t = Attachments::new(d.path().to_path_buf());
        t.get(1).unwrap().push(b"old record").unwrap();
        Queue::drop_queue(d.path(), 1).unwrap();
        assert_eq!(t.get(1).unwrap_err().code(), TBL_NOT_FOUND);
        named(d.path(), 1, "new");
        let q = t.get(1).unwrap();
        assert_eq!(q.name(), "new");
        assert_eq!(q.depth(), 0);
        // The thread cache notices too.
        let name = t.with(1, || {}, |q| Ok(q.name().to_string())).unwrap();
        assert_eq!(name, "new");
    }

    #[test]
    fn keys_are_ids_or_names() {
        let d = TempDir::new("attach", "keys");
        named(d.path(), 21, "QUEUE_USER_INFO");
        named(d.path(), 22, "twin");
        named(d.path(), 23, "twin");
        named(d.path(), 24, "24x");
        let t = Attachments::new(d.path().to_path_buf());
        assert_eq!(t.lookup("21").unwrap(), 21);
        assert_eq!(t.lookup("QUEUE_USER_INFO").unwrap(), 21);
        assert_eq!(t.lookup("24x").unwrap(), 24);
        assert_eq!(t.lookup("99").unwrap(), 99, "an id is an id, whether or not it exists");
        assert_eq!(t.get_by_key("99").unwrap_err().code(), TBL_NOT_FOUND);
        assert_eq!(t.lookup("nothing").unwrap_err().code(), TBL_NOT_FOUND);
        assert_eq!(t.lookup("twin").unwrap_err().code(), IDX_DATA_MISM);
        for odd in ["", "../queue-21", "021", "+21", "queue-21.tvmq"] {
            assert_eq!(t.lookup(odd).unwrap_err().code(), TBL_NOT_FOUND, "{odd:?}");
        }
        // A name that moved to another queue is found there.
        Queue::drop_queue(d.path(), 21).unwrap();
        named(d.path(), 30, "QUEUE_USER_INFO");
        assert_eq!(t.lookup("QUEUE_USER_INFO").unwrap(), 30);
    }

    #[test]
    fn tables_of_different_directories_do_not_mix_in_the_thread_cache() {
        let (d1, d2) = (TempDir::new("attach", "mix1"), TempDir::new("attach", "mix2"));
        named(d1.path(), 5, "in one");
        named(d2.path(), 5, "in two");
        let (t1, t2) = (Attachments::new(d1.path().to_path_buf()), Attachments::new(d2.path().to_path_buf()));
        for _ in 0..2 {
            assert_eq!(t1.with(5, || {}, |q| Ok(q.name().to_string())).unwrap(), "in one");
            assert_eq!(t2.with(5, || {}, |q| Ok(q.name().to_string())).unwrap(), "in two");
        }
        let mut newly = 0;
        t1.with(5, || newly += 1, |q| q.push(b"x")).unwrap();
        assert_eq!(newly, 0, "already attached");
        let mut out = [0u8; 16];
        assert_eq!(t1.get(5).unwrap().pop(&mut out, Wait::NoWait).unwrap(), 1);
    }

    #[test]
    fn every_call_reaches_its_own_queue_among_many_dropped_and_re_created() {
        let (d1, d2) = (TempDir::new("attach", "many1"), TempDir::new("attach", "many2"));
        let n = 300u32;
        // Ids in patterns a weak hash would pile up: multiples of 1024 too.
        let ids: Vec<u32> = (0..n).map(|i| if i % 2 == 0 { i * 1024 } else { i }).collect();
        for &id in &ids {
            named(d1.path(), id, &format!("one-{id}"));
            named(d2.path(), id, &format!("two-{id}"));
        }
        let (t1, t2) = (Attachments::new(d1.path().to_path_buf()), Attachments::new(d2.path().to_path_buf()));
        let name = |t: &Attachments, id: u32| t.with(id, || {}, |q| Ok(q.name().to_string())).unwrap();
        for _ in 0..2 {
            for &id in &ids {
                assert_eq!(name(&t1, id), format!("one-{id}"));
                assert_eq!(name(&t2, id), format!("two-{id}"));
            }
        }
        assert_eq!(t1.attached().len(), n as usize);
        // Every third queue of the first directory is dropped and re-created
        // under another name; the rest are untouched, and a hot queue is used
        // between every two calls.
        let hot = ids[1];
        for &id in ids.iter().step_by(3) {
            Queue::drop_queue(d1.path(), id).unwrap();
            named(d1.path(), id, &format!("new-{id}"));
        }
        for (k, &id) in ids.iter().enumerate() {
            let want = if k % 3 == 0 { format!("new-{id}") } else { format!("one-{id}") };
            assert_eq!(name(&t1, id), want);
            assert_eq!(name(&t1, hot), "one-1", "ids[1] is not re-created");
            assert_eq!(name(&t2, id), format!("two-{id}"));
        }
        // Pushes land in the queue asked for.
        for &id in &ids {
            t1.with(id, || {}, |q| q.push(&id.to_le_bytes())).unwrap();
        }
        let mut out = [0u8; 16];
        for &id in &ids {
            let q = t1.get(id).unwrap();
            assert_eq!(q.pop(&mut out, Wait::NoWait).unwrap(), 4);
            assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), id);
            assert_eq!(q.depth(), 0);
        }
        // A detached queue is attached again on its next use.
        assert!(t1.detach(ids[5]));
        let mut newly = 0;
        t1.with(ids[5], || newly += 1, |_| Ok(())).unwrap();
        t1.with(ids[5], || newly += 1, |_| Ok(())).unwrap();
        assert_eq!(newly, 1);
    }

    /// Entries of this process in the process table of queue `id`.
    fn my_entries(dir: &Path, id: u32) -> usize {
        let me = std::process::id();
        Queue::inspect(dir, id).unwrap().processes().iter().filter(|p| p.pid == me).count()
    }

    /// Queues 1 and 2 are each other's dead-letter queue. Rejected records
    /// go both ways through a table: each queue is attached once (one
    /// entry of this process in each process table, the dead-letter queue
    /// being the table's), and once the table and its users let go of
    /// them, both are unmapped and their entries freed (a queue held its
    /// dead-letter queue strongly: with the table's queues, a cycle).
    #[test]
    fn dead_letter_queues_of_each_other_are_attached_once_and_let_go() {
        let d = TempDir::new("attach", "dlq-cycle");
        for (id, other) in [(1, 2), (2, 1)] {
            let mut spec = Spec::new(8, 16);
            spec.leases = Some(crate::LeaseSpec { dead_letter: Some(other), ..crate::LeaseSpec::default() });
            Queue::create(d.path(), id, &spec).unwrap();
        }
        let t = Attachments::new(d.path().to_path_buf());
        let mut out = [0u8; 16];
        for (from, to) in [(1, 2), (2, 1), (1, 2)] {
            let q = t.get(from).unwrap();
            q.push(format!("to {to}").as_bytes()).unwrap();
            let (_, lease) = q.pop_lease(&mut out, Wait::NoWait, std::time::Duration::ZERO).unwrap();
            q.reject(&lease).unwrap();
        }
        for id in [1, 2] {
            assert_eq!(my_entries(d.path(), id), 1, "queue {id}: attached once");
        }
        let (q1, q2) = (t.get(1).unwrap(), t.get(2).unwrap());
        assert_eq!((q1.depth(), q2.depth()), (1, 2), "each got what the other rejected");
        drop((q1, q2));
        assert!(t.detach(1) && t.detach(2));
        drop(t);
        for id in [1, 2] {
            assert_eq!(my_entries(d.path(), id), 0, "queue {id}: let go");
        }
        Queue::drop_queue(d.path(), 1).unwrap();
        Queue::drop_queue(d.path(), 2).unwrap();
    }

    #[test]
    fn a_fork_child_forgets_its_parents_attachments() {
        let d = TempDir::new("attach", "fork");
        named(d.path(), 1, "forked");
        let t = Attachments::new(d.path().to_path_buf());
        let parent = t.get(1).unwrap();
        // SAFETY: the child only calls async-signal-safe-enough code of ours
        // and leaves with _exit; the parent waits for it.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let child = t.get(1);
            let ok = matches!(&child, Ok(q) if !Arc::ptr_eq(q, &parent) && q.processes().len() == 2);
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status}");
        assert!(Arc::ptr_eq(&parent, &t.get(1).unwrap()), "the parent keeps its attachment");
    }
}

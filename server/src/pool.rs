//! The one bounded pool of threads that runs every piece of work taken off
//! the workers (creating a queue, TVMQ.REPAIR, LTRIM and DEL, the leases
//! of `always` queues and their dead-letter moves, the scans of TVMQ.LEASES
//! and INFO), with one line in front of it: a worker hands a job over and
//! goes on serving its other connections; the connection that waits for
//! the job's result is woken when it is done.
//!
//! # Bounds
//! - At most `--pool-threads` threads, started as work comes and ended
//!   after [`IDLE_EXIT`] without any, so that no client can make the
//!   server start more (before, each creation or repair took a thread of
//!   tokio's blocking pool: 600 at once made 600 threads).
//! - Jobs wait in line in the order they were handed over and are taken
//!   in that order ([`Kind::Heavy`] jobs among them as well, see below):
//!   what waits for the pool is answered in order. The line holds at most
//!   one job per connection waiting for its reply (a connection waits for
//!   its job before it reads on), plus the work a closing connection leaves
//!   (giving back its leases).
//! - At most [`HEAVY_AT_ONCE`] heavy jobs run at once: scans (of a lease
//!   table, of the queues' headers), repairs and truncations (a whole
//!   ring), creations (a whole file written): whatever costs in proportion
//!   to a queue or to the number of queues, so that they never take every
//!   core from the workers; a heavy job waits in line meanwhile, the light
//!   ones behind it (a lease of an `always` queue waiting for its sync, a
//!   dead-letter move, a DEL) go ahead.
//! - Scans of the same thing asked for while one waits in line share it
//!   ([`Coalesce`]): a thousand clients asking for the same queue's lease
//!   statistics cost one scan, and each answer comes from a scan that
//!   began after its question.

use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

/// Heavy jobs ([`Kind::Heavy`]) that may run at once.
pub(crate) const HEAVY_AT_ONCE: usize = 1;
/// A pool thread with nothing to do for this long ends.
const IDLE_EXIT: Duration = Duration::from_secs(10);

/// What a job is, for the pool's bounds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// Work whose cost does not grow with a queue: waiting for a sync,
    /// moving a record, removing a file.
    Light,
    /// A scan, a repair, a truncation, a creation: at most
    /// [`HEAVY_AT_ONCE`] at a time.
    Heavy,
}

type Task = Box<dyn FnOnce() + Send>;

/// The pool (cheap to clone: a handle).
#[derive(Clone)]
pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    line: Mutex<Line>,
    ready: Condvar,
    /// Every thread has ended (after [`Pool::stop`]).
    ended: Condvar,
    max_threads: usize,
}

#[derive(Default)]
struct Line {
    /// Light jobs, and heavy ones, each with its place in line.
    light: VecDeque<(u64, Task)>,
    heavy: VecDeque<(u64, Task)>,
    next_place: u64,
    heavy_running: usize,
    threads: usize,
    idle: usize,
    stopping: bool,
    /// Threads started since the start (for INFO and tests).
    started: u64,
    /// The most jobs that waited in line at once.
    longest: usize,
}

/// What the pool reports (INFO).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PoolStats {
    pub(crate) threads: usize,
    pub(crate) max_threads: usize,
    pub(crate) waiting: usize,
    pub(crate) longest: usize,
    pub(crate) started: u64,
}

/// The job could not run: the server stops (its result is lost), or the
/// job panicked.
#[derive(Debug)]
pub(crate) struct NotRun;

impl Pool {
    /// A pool of at most `max_threads` threads (at least one), none started yet.
    pub(crate) fn new(max_threads: usize) -> Pool {
        Pool {
            inner: Arc::new(Inner {
                line: Mutex::default(),
                ready: Condvar::new(),
                ended: Condvar::new(),
                max_threads: max_threads.max(1),
            }),
        }
    }

    /// Puts `f` in line, not waited for. After [`stop`](Self::stop) it
    /// runs on the calling thread.
    pub(crate) fn detach(&self, kind: Kind, f: impl FnOnce() + Send + 'static) {
        if let Err(f) = self.submit(kind, Box::new(f)) {
            f();
        }
    }

    /// Runs `f` in the pool while the calling task waits (its worker serves
    /// the others); its result, or [`NotRun`].
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        kind: Kind,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, NotRun> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task: Task = Box::new(move || {
            // A panic drops `tx`: the waiting task gets `NotRun`.
            let _ = tx.send(f());
        });
        if let Err(task) = self.submit(kind, task) {
            drop(task);
            return Err(NotRun);
        }
        rx.await.map_err(|_| NotRun)
    }

    /// Puts `task` in line, starting a thread if none is idle and the pool
    /// may grow. `Err` gives it back after the stop.
    fn submit(&self, kind: Kind, task: Task) -> Result<(), Task> {
        let mut line = self.inner.line.lock();
        if line.stopping {
            return Err(task);
        }
        let place = line.next_place;
        line.next_place += 1;
        match kind {
            Kind::Light => line.light.push_back((place, task)),
            Kind::Heavy => line.heavy.push_back((place, task)),
        }
        let waiting = line.light.len() + line.heavy.len();
        line.longest = line.longest.max(waiting);
        if line.idle == 0 && line.threads < self.inner.max_threads {
            line.threads += 1;
            line.started += 1;
            let inner = self.inner.clone();
            let n = line.started;
            let spawned = std::thread::Builder::new().name(format!("tvmq-pool-{n}")).spawn(move || inner.thread_main());
            if let Err(e) = spawned {
                line.threads -= 1;
                eprintln!("tvmq serve: cannot start a pool thread ({e}): the work waits for the running ones");
                if line.threads == 0 {
                    // Nobody would ever take it: run it here instead.
                    let (_, task) = match kind {
                        Kind::Light => line.light.pop_back(),
                        Kind::Heavy => line.heavy.pop_back(),
                    }
                    .expect("just put in line");
                    drop(line);
                    task();
                    return Ok(());
                }
            }
        } else {
            self.inner.ready.notify_one();
        }
        Ok(())
    }

    /// The pool's figures now.
    pub(crate) fn stats(&self) -> PoolStats {
        let line = self.inner.line.lock();
        PoolStats {
            threads: line.threads,
            max_threads: self.inner.max_threads,
            waiting: line.light.len() + line.heavy.len(),
            longest: line.longest,
            started: line.started,
        }
    }

    /// Lets the threads run what is in line, then end; returns once they
    /// have (work handed over afterwards runs on the caller's thread).
    pub(crate) fn stop(&self) {
        let mut line = self.inner.line.lock();
        line.stopping = true;
        self.inner.ready.notify_all();
        while line.threads > 0 {
            self.inner.ended.wait(&mut line);
        }
    }
}

impl Inner {
    fn thread_main(&self) {
        let mut line = self.line.lock();
        loop {
            if let Some(task) = self.next(&mut line) {
                drop(line);
                let heavy = task.1;
                // A panicking job loses its result (its waiter hears
                // `NotRun`), not the thread.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task.0));
                line = self.line.lock();
                if heavy {
                    line.heavy_running -= 1;
                    if !line.heavy.is_empty() {
                        self.ready.notify_one();
                    }
                }
                continue;
            }
            if line.stopping {
                break;
            }
            line.idle += 1;
            let timed_out = self.ready.wait_for(&mut line, IDLE_EXIT).timed_out();
            line.idle -= 1;
            if timed_out && line.light.is_empty() && line.heavy.is_empty() {
                break;
            }
        }
        line.threads -= 1;
        self.ended.notify_all();
    }

    /// The first job in line that may run now (a scan only while fewer
    /// than [`HEAVY_AT_ONCE`] run), and whether it is a scan.
    fn next(&self, line: &mut Line) -> Option<(Task, bool)> {
        let scan_ok = line.heavy_running < HEAVY_AT_ONCE;
        let scan_first = match (line.light.front(), line.heavy.front()) {
            (_, None) => false,
            (None, Some(_)) => scan_ok,
            (Some((w, _)), Some((s, _))) => scan_ok && s < w,
        };
        if scan_first {
            line.heavy_running += 1;
            return line.heavy.pop_front().map(|(_, t)| (t, true));
        }
        line.light.pop_front().map(|(_, t)| (t, false))
    }
}

thread_local! {
    /// The pool [`detach_here`] hands work to from this thread.
    static HERE: std::cell::RefCell<Option<Pool>> = const { std::cell::RefCell::new(None) };
}

impl Pool {
    /// Makes this pool the one [`detach_here`] hands work to from the
    /// calling thread (a worker's).
    pub(crate) fn enter(&self) {
        HERE.with(|h| *h.borrow_mut() = Some(self.clone()));
    }
}

/// Hands `f` to the pool the calling thread [entered](Pool::enter), not
/// waited for; on another thread (a pool thread: off the workers already)
/// it runs at once, here.
pub(crate) fn detach_here(kind: Kind, f: impl FnOnce() + Send + 'static) {
    match HERE.with(|h| h.borrow().clone()) {
        Some(pool) => pool.detach(kind, f),
        None => f(),
    }
}

/// Scans asked for while an equal one waits in line share it: see the
/// module documentation. `K` names what is scanned, `V` is the result.
pub(crate) struct Coalesce<K, V> {
    waiting: Mutex<HashMap<K, Vec<tokio::sync::oneshot::Sender<V>>>>,
}

impl<K: Hash + Eq + Clone + Send + 'static, V: Clone + Send + 'static> Coalesce<K, V> {
    pub(crate) fn new() -> Arc<Coalesce<K, V>> {
        Arc::new(Coalesce { waiting: Mutex::default() })
    }

    /// The result of `scan` for `key`, run in `pool` as a [`Kind::Heavy`] job
    /// that begins after this call, or shared with one that waits in line.
    pub(crate) async fn scan(
        self: &Arc<Self>,
        pool: &Pool,
        key: K,
        scan: impl FnOnce() -> V + Send + 'static,
    ) -> Result<V, NotRun> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let first = {
            let mut waiting = self.waiting.lock();
            let list = waiting.entry(key.clone()).or_default();
            list.push(tx);
            list.len() == 1
        };
        if first {
            let me = self.clone();
            pool.detach(Kind::Heavy, move || {
                // Whoever asks from now on asks for a scan of its own.
                let answer_to = me.waiting.lock().remove(&key).unwrap_or_default();
                let v = scan();
                for tx in answer_to {
                    let _ = tx.send(v.clone());
                }
            });
        }
        rx.await.map_err(|_| NotRun)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn never_more_threads_than_allowed_and_every_job_runs_in_order() {
        let pool = Pool::new(3);
        let done = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        for i in 0..40usize {
            let (done, running, most) = (done.clone(), running.clone(), most.clone());
            pool.detach(Kind::Light, move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                done.lock().push(i);
                std::thread::sleep(Duration::from_millis(2));
                running.fetch_sub(1, Ordering::SeqCst);
            });
        }
        assert!(pool.stats().threads <= 3);
        pool.stop();
        assert!(most.load(Ordering::SeqCst) <= 3);
        let done = done.lock().clone();
        assert_eq!(done.len(), 40);
        // Taken in order: a job starts no later than those after it (three
        // run at once, so they may finish, and log, out of order by two).
        for (at, &i) in done.iter().enumerate() {
            assert!(i.abs_diff(at) <= 2, "{done:?}");
        }
    }

    #[test]
    fn one_heavy_job_at_a_time_and_light_ones_go_ahead() {
        let pool = Pool::new(4);
        let scans = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let work = Arc::new(AtomicUsize::new(0));
        for _ in 0..8 {
            let (scans, most) = (scans.clone(), most.clone());
            pool.detach(Kind::Heavy, move || {
                let now = scans.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(5));
                scans.fetch_sub(1, Ordering::SeqCst);
            });
        }
        for _ in 0..8 {
            let work = work.clone();
            pool.detach(Kind::Light, move || {
                work.fetch_add(1, Ordering::SeqCst);
            });
        }
        // The work behind the scans is done before the scans are.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while work.load(Ordering::SeqCst) < 8 {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(pool.stats().waiting > 0, "scans still wait in line");
        pool.stop();
        assert_eq!(most.load(Ordering::SeqCst), HEAVY_AT_ONCE);
    }

    #[test]
    fn equal_scans_waiting_in_line_share_one() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let pool = Pool::new(2);
        let ran = Arc::new(AtomicUsize::new(0));
        let c: Arc<Coalesce<u32, usize>> = Coalesce::new();
        // A scan of something else holds the only scan slot meanwhile.
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        pool.detach(Kind::Heavy, move || {
            let _ = hold_rx.recv_timeout(Duration::from_secs(10));
        });
        let answers = rt.block_on(async {
            let asks = (0..50).map(|_| {
                let (c, pool, ran) = (c.clone(), pool.clone(), ran.clone());
                tokio::spawn(async move {
                    c.scan(&pool, 7, move || ran.fetch_add(1, Ordering::SeqCst) + 100).await.unwrap()
                })
            });
            let handles: Vec<_> = asks.collect();
            tokio::time::sleep(Duration::from_millis(50)).await;
            hold_tx.send(()).unwrap();
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap());
            }
            out
        });
        assert_eq!(ran.load(Ordering::SeqCst), 1, "one scan for all fifty");
        assert!(answers.iter().all(|&a| a == 100));
        pool.stop();
    }
}

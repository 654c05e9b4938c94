//! The server's sync threads ([`Syncers`]), where io_uring is not
//! available (or `TVMQ_SERVE_SYNC=threads`): each takes a queue whose
//! connections wait for a sync, runs the library's group commit for the
//! highest ticket asked for, and tells the waiting tasks.

use super::stats::SyncStats;
use parking_lot::{Condvar, Mutex};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tvm::{Queue, SyncTicket};

/// Threads that run syncs (each serves one queue at a time; a queue is
/// synced by one of them at a time).
const SYNC_THREADS: usize = 4;
/// How long a sync thread waits for no new wait before it syncs (see
/// `Inner::gather`), at least; an eighth of the last sync's duration if
/// longer.
const GATHER_QUIET: Duration = Duration::from_micros(50);
/// The longest it gathers: half the last sync's duration, at most this.
/// (Longer than the library's own gathering: a network client's next
/// request takes a round trip through the worker, the kernel and the
/// client; measured with 50 clients on a loaded 2-core machine, 500 us
/// gathered half of them.)
const GATHER_MAX: Duration = Duration::from_millis(2);
/// How long a sync thread keeps a queue after a sync that left nothing to
/// do, looking (yielding) for the next ticket before it gives the queue
/// back and sleeps (`TVMQ_SERVE_SYNC_LINGER_US` overrides it; 0: never).
/// A lone client's next push comes one round trip after its reply: caught
/// here, it needs no hand-over (a futex wake of a sleeping thread, on a
/// VM often longer than the round trip itself).
const LINGER: Duration = Duration::from_micros(400);

/// Records a wait carries on average (a connection's pipelined batch), from
/// which a queue's syncs stop gathering: such batches arrive one after
/// another as the worker reads them, each big enough to be worth a sync of
/// its own, and a sync that waited for all of them would leave the disk
/// idle meanwhile (the measurements: docs/server.md, durable queues;
/// clients that do not pipeline still gather).
const PIPELINED: u64 = 4;

/// What the sync threads have done for a queue: the highest ticket a sync
/// covered, and the highest one whose sync failed (with why).
#[derive(Clone, Default)]
struct Progress {
    done: Option<SyncTicket>,
    failed: Option<(SyncTicket, Arc<str>)>,
}

/// A queue with replies waiting for its syncs.
struct QueueSync {
    queue: Weak<Queue>,
    /// The highest ticket asked for, and whether a thread has the queue in
    /// hand (queued or syncing).
    want: Mutex<(Option<SyncTicket>, bool)>,
    progress: watch::Sender<Progress>,
    /// Waits asked for (one a connection's batch), counted before the
    /// ticket is handed over.
    asks: AtomicU64,
    /// The records of those waits (pushed or popped), counted before `asks`.
    ask_records: AtomicU64,
    /// `ask_records` when the last sync began.
    sync_records: AtomicU64,
    /// Did the waits the last sync covered carry [`PIPELINED`] records or
    /// more each (pipelined batches)? Such a queue's syncs do not gather.
    pipelined: std::sync::atomic::AtomicBool,
    /// `asks` when the last sync began.
    sync_asks: AtomicU64,
    /// The waits the last sync covered, plus those that arrived while it
    /// ran (see `Inner::gather`).
    gather_for: AtomicU64,
    /// How long the last sync took, microseconds.
    last_took_us: AtomicU64,
    /// When the first wait no sync has started for yet asked (`Inner::now_us`
    /// + 1; 0: none).
    first_ask: AtomicU64,
    /// When the last wait asked (`Inner::now_us`).
    last_ask: AtomicU64,
    /// When the last sync ended (`Inner::now_us`).
    ended: AtomicU64,
    /// No wait released by the last sync has run yet.
    first_woken: std::sync::atomic::AtomicBool,
}

/// The server's sync threads (started at the first unsynced reply; they end
/// when the server's state is dropped).
pub(crate) struct Syncers {
    inner: Arc<Inner>,
}

struct Inner {
    queues: Mutex<HashMap<usize, Arc<QueueSync>>>,
    /// Queues handed over, and whether the threads must end.
    jobs: Mutex<(VecDeque<Arc<QueueSync>>, bool)>,
    ready: Condvar,
    /// Threads running.
    threads: std::sync::OnceLock<usize>,
    stats: Arc<SyncStats>,
    /// A test aid: each sync is made this much slower
    /// (`TVMQ_SERVE_TEST_SYNC_DELAY_MS`), so that tests can see what runs
    /// while one is in progress.
    delay: Duration,
    /// [`LINGER`], or what the environment says.
    linger: Duration,
    /// The origin of the stage timestamps.
    epoch: Instant,
}

impl Syncers {
    /// The threads (not started yet), counting into `stats`, each sync made
    /// `delay` slower (a test aid).
    pub(crate) fn new(stats: Arc<SyncStats>, delay: Duration) -> Syncers {
        let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        let linger = env("TVMQ_SERVE_SYNC_LINGER_US").map_or(LINGER, Duration::from_micros);
        Syncers {
            inner: Arc::new(Inner {
                queues: Mutex::default(),
                jobs: Mutex::default(),
                ready: Condvar::new(),
                threads: std::sync::OnceLock::new(),
                stats,
                delay,
                linger,
                epoch: Instant::now(),
            }),
        }
    }
}

impl Drop for Syncers {
    fn drop(&mut self) {
        self.inner.jobs.lock().1 = true;
        self.inner.ready.notify_all();
    }
}

impl Syncers {
    /// Sync threads running (0 before the first unsynced reply).
    pub(crate) fn threads(&self) -> usize {
        self.inner.threads.get().copied().unwrap_or(0)
    }

    /// Starts the threads once; how many run.
    fn start(&self) -> usize {
        *self.inner.threads.get_or_init(|| {
            (0..SYNC_THREADS)
                .filter(|i| {
                    let inner = self.inner.clone();
                    std::thread::Builder::new().name(format!("tvmq-sync-{i}")).spawn(move || inner.run_thread()).is_ok()
                })
                .count()
        })
    }

    /// Waits until a sync covering `ticket` of `q` has completed: `Err`
    /// with why when the sync failed.
    pub(crate) async fn wait(&self, q: &Arc<Queue>, ticket: SyncTicket, records: u64) -> Result<(), Arc<str>> {
        if q.is_synced(ticket) {
            return Ok(());
        }
        if self.start() == 0 {
            // No sync thread could be started: sync here, on the worker
            // (it stalls its other connections, but nothing is lost).
            return q.sync_ticket(ticket).map_err(|e| Arc::from(e.to_string()));
        }
        let inner = &self.inner;
        let queue_sync = inner.sync_state(q);
        let mut rx = queue_sync.progress.subscribe();
        let now = inner.now_us();
        let _ = queue_sync.first_ask.compare_exchange(0, now + 1, Ordering::Relaxed, Ordering::Relaxed);
        queue_sync.last_ask.fetch_max(now, Ordering::Relaxed);
        queue_sync.ask_records.fetch_add(records, Ordering::Relaxed);
        queue_sync.asks.fetch_add(1, Ordering::SeqCst);
        let hand_over = {
            let mut want = queue_sync.want.lock();
            want.0 = want.0.max(Some(ticket));
            !std::mem::replace(&mut want.1, true)
        };
        if hand_over {
            inner.jobs.lock().0.push_back(queue_sync.clone());
            inner.ready.notify_one();
        }
        let seen = rx
            .wait_for(|p| p.done >= Some(ticket) || p.failed.as_ref().is_some_and(|f| f.0 >= ticket))
            .await
            .map(|p| p.clone());
        match seen {
            Ok(p) if p.done >= Some(ticket) => {
                let ended = queue_sync.ended.load(Ordering::Relaxed);
                inner.stats.woken(inner.now_us().saturating_sub(ended), &queue_sync.first_woken);
                Ok(())
            }
            Ok(p) => Err(p.failed.map_or_else(|| Arc::from("unknown"), |f| f.1)),
            Err(_) => Err(Arc::from("the server's sync threads stopped")),
        }
    }
}

impl Inner {
    /// Microseconds since the syncers were made (stage timestamps).
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// The sync state of `q`, made when it has none yet (forgetting those
    /// of queues no longer open).
    fn sync_state(&self, q: &Arc<Queue>) -> Arc<QueueSync> {
        let key = Arc::as_ptr(q) as usize;
        let mut map = self.queues.lock();
        if let Some(queue_sync) = map.get(&key) {
            if queue_sync.queue.upgrade().is_some_and(|h| Arc::ptr_eq(&h, q)) {
                return queue_sync.clone();
            }
        }
        if map.len() >= 64 {
            map.retain(|_, queue_sync| queue_sync.queue.strong_count() > 0);
        }
        let queue_sync = Arc::new(QueueSync {
            queue: Arc::downgrade(q),
            want: Mutex::new((None, false)),
            progress: watch::Sender::new(Progress::default()),
            asks: AtomicU64::new(0),
            ask_records: AtomicU64::new(0),
            sync_records: AtomicU64::new(0),
            pipelined: std::sync::atomic::AtomicBool::new(false),
            sync_asks: AtomicU64::new(0),
            gather_for: AtomicU64::new(0),
            last_took_us: AtomicU64::new(0),
            first_ask: AtomicU64::new(0),
            last_ask: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            first_woken: std::sync::atomic::AtomicBool::new(false),
        });
        map.insert(key, queue_sync.clone());
        queue_sync
    }

    /// A sync thread: takes queues with tickets waiting, one at a time,
    /// until the server's state is dropped.
    fn run_thread(&self) {
        loop {
            let queue_sync = {
                let mut jobs = self.jobs.lock();
                loop {
                    if jobs.1 {
                        return;
                    }
                    if let Some(queue_sync) = jobs.0.pop_front() {
                        break queue_sync;
                    }
                    self.ready.wait(&mut jobs);
                }
            };
            self.serve(&queue_sync);
        }
    }

    /// Before a sync of a queue whose last sync covered several waits
    /// (connections' batches): waits, yielding, until as many have asked
    /// since that sync began as it covered and saw arrive while it ran (the
    /// clients it released ask again), or none for [`GATHER_QUIET`] (or an eighth
    /// of the last sync's duration), or for half the last sync's duration
    /// (at most [`GATHER_MAX`]). Without it, clients
    /// that wait for their replies split into two groups taking turns:
    /// those a sync released send again while the next sync, begun at once
    /// for one that asked meanwhile, runs without them (the library's
    /// syncer gathers its callers the same way).
    fn gather(&self, queue_sync: &QueueSync) {
        let want = queue_sync.gather_for.load(Ordering::Relaxed);
        let from = queue_sync.sync_asks.load(Ordering::Relaxed);
        let took = Duration::from_micros(queue_sync.last_took_us.load(Ordering::Relaxed));
        let limit = (took / 2).min(GATHER_MAX);
        let quiet = (took / 8).max(GATHER_QUIET);
        let start = Instant::now();
        let (mut seen, mut changed) = (queue_sync.asks.load(Ordering::SeqCst), start);
        while seen.wrapping_sub(from) < want {
            std::thread::yield_now();
            let now = Instant::now();
            let a = queue_sync.asks.load(Ordering::SeqCst);
            if a != seen {
                (seen, changed) = (a, now);
            } else if now - changed >= quiet {
                return;
            }
            if now - start >= limit {
                return;
            }
        }
    }

    /// Syncs `queue_sync` for the highest ticket asked for, again while more are.
    fn serve(&self, queue_sync: &QueueSync) {
        loop {
            if queue_sync.gather_for.load(Ordering::Relaxed) > 1 && !queue_sync.pipelined.load(Ordering::Relaxed) {
                self.gather(queue_sync);
            }
            let Some(want) = queue_sync.want.lock().0 else {
                queue_sync.want.lock().1 = false;
                return;
            };
            let Some(q) = queue_sync.queue.upgrade() else {
                queue_sync.want.lock().1 = false;
                return;
            };
            let result = if q.is_synced(want) {
                Ok(())
            } else {
                let t0 = Instant::now();
                let asked = queue_sync.first_ask.swap(0, Ordering::Relaxed);
                if asked != 0 {
                    self.stats.asked.fetch_add(1, Ordering::Relaxed);
                    let now = self.now_us();
                    self.stats.ask_us.fetch_add(now.saturating_sub(asked - 1), Ordering::Relaxed);
                    let last = queue_sync.last_ask.load(Ordering::Relaxed).max(asked - 1);
                    self.stats.handover_us.fetch_add(now.saturating_sub(last), Ordering::Relaxed);
                }
                let asks = queue_sync.asks.load(Ordering::SeqCst);
                let records = queue_sync.ask_records.load(Ordering::Relaxed);
                if !self.delay.is_zero() {
                    std::thread::sleep(self.delay);
                }
                let r = q.sync_ticket(want);
                queue_sync.ended.store(self.now_us(), Ordering::Relaxed);
                queue_sync.first_woken.store(true, Ordering::Relaxed);
                let took = t0.elapsed();
                self.stats.seconds.observe(took);
                let us = took.as_micros() as u64;
                // The waits this sync covered and those that arrived while
                // it ran: as many are waited for (counted from its start)
                // before the next one (see `gather`).
                let from = queue_sync.sync_asks.swap(asks, Ordering::Relaxed);
                let during = queue_sync.asks.load(Ordering::SeqCst).wrapping_sub(asks);
                queue_sync.gather_for.store(asks.wrapping_sub(from).wrapping_add(during), Ordering::Relaxed);
                let covered = records.wrapping_sub(queue_sync.sync_records.swap(records, Ordering::Relaxed));
                let waits = asks.wrapping_sub(from).max(1);
                queue_sync.pipelined.store(covered >= PIPELINED * waits, Ordering::Relaxed);
                queue_sync.last_took_us.store(us, Ordering::Relaxed);
                let s = &self.stats;
                s.syncs.fetch_add(1, Ordering::Relaxed);
                s.last_us.store(us, Ordering::Relaxed);
                s.total_us.fetch_add(us, Ordering::Relaxed);
                if r.is_err() {
                    s.failures.fetch_add(1, Ordering::Relaxed);
                }
                r
            };
            drop(q);
            queue_sync.progress.send_modify(|p| match &result {
                Ok(()) => p.done = p.done.max(Some(want)),
                Err(e) => p.failed = Some((want, Arc::from(e.to_string()))),
            });
            if queue_sync.want.lock().0 == Some(want) && !self.linger(queue_sync, want) {
                let mut w = queue_sync.want.lock();
                if w.0 == Some(want) {
                    w.1 = false;
                    return;
                }
            }
        }
    }

    /// After a sync that left nothing asked: keeps the queue for up to
    /// [`LINGER`], looking (yielding) for a ticket above `done`, while no
    /// other queue waits for a thread. True when one came.
    fn linger(&self, queue_sync: &QueueSync, done: SyncTicket) -> bool {
        if self.linger.is_zero() {
            return false;
        }
        let start = Instant::now();
        loop {
            std::thread::yield_now();
            if queue_sync.want.lock().0 != Some(done) {
                return true;
            }
            let jobs = self.jobs.lock();
            if start.elapsed() >= self.linger || !jobs.0.is_empty() || jobs.1 {
                return false;
            }
        }
    }
}

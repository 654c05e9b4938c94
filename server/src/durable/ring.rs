//! A worker's own syncs ([`WorkerSyncs`]): the worker that holds the
//! replies also starts the sync that releases them and learns of its
//! completion, with no other thread on the way.
//!
//! Each worker has an io_uring ([`tvm::SyncRing`]) whose eventfd its tokio
//! runtime watches (an `AsyncFd`), and a task that drives it. A connection
//! whose replies wait for a ticket records it here and sleeps (as a task);
//! the task, woken, first yields once, so that every other task that was
//! ready runs before it (the connections whose requests arrived in the same
//! turn of the loop take their tickets too), then begins one sync per queue
//! for the highest ticket asked for: the library takes the group commit's
//! lock, numbers the sync (it covers everything published before it, by
//! any connection, worker or local program) and submits its writes, and
//! the worker goes back to its connections. When the eventfd says the
//! writes completed, the task reaps the sync (the library records it done
//! and releases the lock), wakes the connections it covered, and begins the
//! next sync at once if tickets arrived meanwhile: one sync in flight per
//! queue, the next one gathering everything that arrived during it, as
//! Redis's event loop gathers every client of one turn into one `fsync`,
//! but without the loop waiting for the disk.
//!
//! With `TVMQ_SERVE_SYNC=hybrid` (the default), the task runs the sync on
//! the worker instead, waiting for the disk, when the worker is idle (the
//! task yielded until a turn of the loop passed with no new wait), nothing
//! is in flight on its ring and the disk's recent syncs were fast (see
//! `adaptive`): Redis's way, with no thread at all between the reply and
//! its sync.
//!
//! When another syncer holds the queue's lock: another worker's ring (the
//! task waits for any ring of the server to finish a sync, then asks
//! again), or a thread or process syncing with the library's blocking
//! call (the wait for it runs on the runtime's blocking pool, never on the
//! worker).

use super::adaptive::{Adaptive, Mode};
use super::stats::SyncStats;
use parking_lot::Mutex;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;
use tokio::io::unix::AsyncFd;
use tokio::sync::{Notify, mpsc, watch};
use tvm::{Queue, SyncRing, SyncStart, SyncTicket};

/// What the workers' rings share: which queues one of them is syncing,
/// and a count of the syncs they finished (a worker that found a queue's
/// lock held by another's ring waits for it to change).
pub(crate) struct Rings {
    in_flight: Mutex<HashSet<usize>>,
    ended: watch::Sender<u64>,
    pub(crate) stats: Arc<SyncStats>,
    /// The origin of the stage timestamps.
    epoch: Instant,
}

impl Rings {
    pub(crate) fn new(stats: Arc<SyncStats>) -> Rings {
        Rings { in_flight: Mutex::default(), ended: watch::Sender::new(0), stats, epoch: Instant::now() }
    }

    /// Microseconds since the rings were made (stage timestamps).
    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

/// A queue whose replies wait on this worker.
struct Waited {
    queue: Weak<Queue>,
    key: usize,
    /// The highest ticket asked for (`None`: none since it was covered).
    want: Option<SyncTicket>,
    /// A sync is running for this ticket: on the ring, or a wait for
    /// another syncer on the blocking pool.
    running: Option<SyncTicket>,
    /// The lock is held by another worker's ring: asked again once any
    /// ring finished a sync.
    behind_other: bool,
    /// The highest ticket whose sync failed, and why.
    failed: Option<(SyncTicket, Arc<str>)>,
    /// When the first wait no sync has started for yet asked (+ 1; 0: none).
    first_ask: u64,
    /// When the running sync started, and when the last one ended.
    started: u64,
    ended: u64,
    /// No wait released by the last sync has run yet.
    first_woken: AtomicBool,
    /// Waits asked (one a connection's batch), and the records they carry.
    asks: u64,
    records: u64,
    /// `asks` and `records` when the running (or last) sync started, and
    /// `asks` when the one before it started and when the last one ended.
    asks_at_start: u64,
    records_at_start: u64,
    asks_at_prev_start: u64,
    records_at_prev_start: u64,
    asks_at_end: u64,
    /// When the last wait asked.
    last_ask: u64,
}

/// A worker's syncs on its own ring (see the module's documentation).
pub(crate) struct WorkerSyncs {
    queues: RefCell<Vec<Waited>>,
    /// Tells the driving task that a ticket was asked for.
    kick: Notify,
    /// Tells the waiting connections that a sync ended.
    progress: Notify,
    rings: Arc<Rings>,
    /// Where the syncs run: on the ring, on the worker itself (once per
    /// turn of its loop, waiting for the disk as Redis's event loop does),
    /// or either, sync by sync (see `adaptive`).
    mode: Mode,
    /// (`hybrid`.) Whether the next sync may run inline.
    adaptive: Adaptive,
    /// A test aid: each inline sync made this much slower (the ring's
    /// are, by the ring's own delay).
    delay: std::time::Duration,
}

/// A blocking wait's outcome: the queue's key, the ticket, the result.
type Waited2 = (usize, SyncTicket, Result<(), Arc<str>>);

impl WorkerSyncs {
    /// The syncs of a worker on `ring`, their task started on the current
    /// `LocalSet`. `None` when the runtime cannot watch the ring's
    /// eventfd (then the worker uses the sync threads).
    pub(crate) fn start_on(
        ring: SyncRing,
        rings: Arc<Rings>,
        mode: Mode,
        delay: std::time::Duration,
    ) -> Option<Rc<WorkerSyncs>> {
        #[allow(unsafe_code)]
        // SAFETY: the descriptor `SyncRing::as_raw_fd` returns is its
        // eventfd, which it owns (opened when it was made, closed when it
        // is dropped), so it stays open and the same while the `AsyncFd`
        // owns the ring.
        let ring = unsafe { AsyncFd::register(ring) }.ok()?;
        let me = Rc::new(WorkerSyncs {
            queues: RefCell::default(),
            kick: Notify::new(),
            progress: Notify::new(),
            rings,
            mode,
            adaptive: Adaptive::default(),
            delay,
        });
        tokio::task::spawn_local(me.clone().drive(ring));
        Some(me)
    }

    /// Waits until a sync covering `ticket` of `q` has completed: `Err`
    /// with why when the sync failed.
    pub(crate) async fn wait(&self, q: &Arc<Queue>, ticket: SyncTicket, records: u64) -> Result<(), Arc<str>> {
        if q.is_synced(ticket) {
            return Ok(());
        }
        let key = Arc::as_ptr(q) as usize;
        {
            let mut queues = self.queues.borrow_mut();
            let w =
                match queues.iter().position(|w| w.key == key && w.queue.upgrade().is_some_and(|h| Arc::ptr_eq(&h, q)))
                {
                    Some(i) => &mut queues[i],
                    None => {
                        queues.retain(|w| w.queue.strong_count() > 0 && w.key != key);
                        queues.push(Waited {
                            queue: Arc::downgrade(q),
                            key,
                            want: None,
                            running: None,
                            behind_other: false,
                            failed: None,
                            first_ask: 0,
                            started: 0,
                            ended: 0,
                            first_woken: AtomicBool::new(false),
                            asks: 0,
                            records: 0,
                            asks_at_start: 0,
                            records_at_start: 0,
                            asks_at_prev_start: 0,
                            records_at_prev_start: 0,
                            asks_at_end: 0,
                            last_ask: 0,
                        });
                        queues.last_mut().expect("just pushed")
                    }
                };
            w.want = w.want.max(Some(ticket));
            let now = self.rings.now_us();
            if w.first_ask == 0 {
                w.first_ask = now + 1;
            }
            w.asks += 1;
            w.records += records;
            w.last_ask = now;
        }
        self.kick.notify_one();
        let mut slept = false;
        loop {
            let notified = self.progress.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if q.is_synced(ticket) {
                if slept {
                    let queues = self.queues.borrow();
                    if let Some(w) = queues.iter().find(|w| w.key == key) {
                        self.rings.stats.woken(self.rings.now_us().saturating_sub(w.ended), &w.first_woken);
                    }
                }
                return Ok(());
            }
            let failed = self.queues.borrow().iter().find(|w| w.key == key).and_then(|w| w.failed.clone());
            if let Some((at, why)) = failed {
                if at >= ticket {
                    return Err(why);
                }
            }
            notified.await;
            slept = true;
        }
    }

    /// The task: starts the syncs asked for, reaps those that completed.
    async fn drive(self: Rc<Self>, mut ring: AsyncFd<SyncRing>) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Waited2>();
        let mut others = self.rings.ended.subscribe();
        let mut gathering = false;
        loop {
            if gathering {
                // Waiting for the clients the last sync released (see
                // `gathers`), asleep: until a wait asks (then `gathers` is
                // asked again), or the next tick of the runtime's timer (a
                // millisecond: past the quiet time), or a completion.
                tokio::select! {
                    biased;
                    _ = self.kick.notified() => {}
                    _ = tokio::time::sleep(std::time::Duration::from_micros(GATHER_QUIET_US)) => {}
                    ready = ring.readable_mut() => {
                        if let Ok(mut g) = ready {
                            while let Ok(Ok(_)) = g.try_io(|r| r.get_ref().take_signal()) {}
                        }
                    }
                }
                tokio::task::yield_now().await;
                self.reap(ring.get_mut());
                gathering = self.start(ring.get_mut(), &done_tx);
                continue;
            }
            let behind = self.queues.borrow().iter().any(|w| w.behind_other);
            tokio::select! {
                biased;
                ready = ring.readable_mut() => match ready {
                    Ok(mut g) => while let Ok(Ok(_)) = g.try_io(|r| r.get_ref().take_signal()) {},
                    Err(e) => {
                        // Not expected of an eventfd; syncs in flight are
                        // finished when the ring is dropped.
                        eprintln!("tvmq serve: a worker's sync ring failed: {e}");
                        return;
                    }
                },
                Some(r) = done_rx.recv() => self.ended(r.0, r.1, r.2, false),
                _ = self.kick.notified() => {}
                _ = others.changed(), if behind => {
                    others.borrow_and_update();
                    self.queues.borrow_mut().iter_mut().for_each(|w| w.behind_other = false);
                }
            }
            // Let every other task that is ready run first: the connections
            // served in this turn of the loop ask before the sync begins.
            let asked = self.asks();
            tokio::task::yield_now().await;
            self.reap(ring.get_mut());
            if self.goes_inline(ring.get_ref()) && self.asks() != asked {
                // Before the worker waits for the disk: until a turn of the
                // loop passes with no new wait (every connection with a
                // request ready was served), at most a few turns. The turn
                // just yielded counts: when it brought no new wait (a lone
                // client), the sync starts now. (Each turn polls the
                // sockets, a system call: measured on 2026-12-06, quiet,
                // redis-benchmark LPUSH `-c 1`, 8 rounds alternated, 1.36x
                // redis `always` on average without that turn, 1.30x with
                // it.)
                for _ in 0..SETTLE_TURNS {
                    let asks = self.asks();
                    tokio::task::yield_now().await;
                    if self.asks() == asks {
                        break;
                    }
                }
                self.reap(ring.get_mut());
            }
            gathering = self.start(ring.get_mut(), &done_tx);
        }
    }

    /// Will [`start`](Self::start) run the syncs inline (on this thread)?
    fn goes_inline(&self, ring: &SyncRing) -> bool {
        match self.mode {
            Mode::Inline => true,
            Mode::Ring => false,
            Mode::Hybrid => {
                self.adaptive.inline_ok()
                    && ring.in_flight() == 0
                    && self.queues.borrow().iter().all(|w| w.running.is_none() && !w.behind_other)
                    && self.queues.borrow().iter().any(|w| w.want.is_some())
            }
        }
    }

    /// Waits asked so far, all queues together.
    fn asks(&self) -> u64 {
        self.queues.borrow().iter().map(|w| w.asks).sum()
    }

    /// Finishes the syncs whose writes completed, and wakes their waits.
    fn reap(&self, ring: &mut SyncRing) {
        let mut keys = Vec::new();
        ring.reap(|key, r| {
            keys.push(key as usize);
            let ticket = self.queues.borrow().iter().find(|w| w.key == key as usize).and_then(|w| w.running);
            if let Some(ticket) = ticket {
                let s = &self.rings.stats;
                s.syncs.fetch_add(1, Ordering::Relaxed);
                self.ended(key as usize, ticket, r.map_err(|e| Arc::from(e.to_string())), false);
            }
        });
        if !keys.is_empty() {
            let mut in_flight = self.rings.in_flight.lock();
            for k in &keys {
                in_flight.remove(k);
            }
            drop(in_flight);
            self.rings.ended.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// The sync for `ticket` of queue `key` ended with `r` (run `inline`
    /// on the worker, or elsewhere): wakes the waits.
    fn ended(&self, key: usize, ticket: SyncTicket, r: Result<(), Arc<str>>, inline: bool) {
        let now = self.rings.now_us();
        let s = &self.rings.stats;
        if let Some(w) = self.queues.borrow_mut().iter_mut().find(|w| w.key == key) {
            w.running = None;
            w.ended = now;
            w.asks_at_end = w.asks;
            w.first_woken.store(true, Ordering::Relaxed);
            let us = now.saturating_sub(w.started);
            self.adaptive.took(us, inline);
            s.seconds.observe(std::time::Duration::from_micros(us));
            s.last_us.store(us, Ordering::Relaxed);
            s.total_us.fetch_add(us, Ordering::Relaxed);
            if let Err(why) = r {
                s.failures.fetch_add(1, Ordering::Relaxed);
                w.failed = Some((ticket, why));
                if w.want <= Some(ticket) {
                    w.want = None;
                }
            }
        }
        self.progress.notify_waiters();
    }

    /// Begins a sync for each queue with a ticket asked for and none
    /// running.
    fn start(&self, ring: &mut SyncRing, done: &mpsc::UnboundedSender<Waited2>) -> bool {
        if self.goes_inline(ring) {
            self.sync_inline();
            if self.mode == Mode::Inline {
                return false;
            }
            // (`hybrid`.) A queue another syncer held is left to the ring.
        }
        let mut gathering = false;
        let mut covered = false;
        let now = self.rings.now_us();
        let mut queues = self.queues.borrow_mut();
        for w in queues.iter_mut() {
            let Some(want) = w.want else { continue };
            if w.running.is_some() || w.behind_other {
                continue;
            }
            let Some(q) = w.queue.upgrade() else {
                w.want = None;
                continue;
            };
            if q.is_synced(want) {
                w.want = None;
                covered = true;
                continue;
            }
            if gathers(w, now) {
                gathering = true;
                continue;
            }
            match q.start_sync(want, ring, w.key as u64) {
                Ok(SyncStart::Covered) => {
                    w.want = None;
                    covered = true;
                }
                Ok(SyncStart::Started) => {
                    self.rings.in_flight.lock().insert(w.key);
                    self.began(w, want, now);
                }
                Ok(SyncStart::Busy) if self.rings.in_flight.lock().contains(&w.key) => w.behind_other = true,
                Ok(SyncStart::Busy) => {
                    // A thread or process syncing with the library's
                    // blocking call: wait for it (and sync after it if it
                    // did not cover the ticket) off the worker.
                    self.began(w, want, now);
                    let (done, key) = (done.clone(), w.key);
                    tokio::task::spawn_blocking(move || {
                        let r = q.sync_ticket(want).map_err(|e| Arc::from(e.to_string()));
                        let _ = done.send((key, want, r));
                    });
                }
                // Asked again once the ring reaped a sync.
                Ok(SyncStart::Full) => {}
                Err(e) => {
                    self.rings.stats.failures.fetch_add(1, Ordering::Relaxed);
                    w.failed = Some((want, Arc::from(e.to_string())));
                    w.want = None;
                    covered = true;
                }
            }
        }
        drop(queues);
        if covered {
            self.progress.notify_waiters();
        }
        gathering
    }

    /// Runs here, waiting for the disk, one sync for each queue with a
    /// ticket asked for. `inline`: waits for another syncer too;
    /// `hybrid`: leaves a queue another syncer holds to the ring.
    fn sync_inline(&self) {
        let mut todo = Vec::new();
        for w in self.queues.borrow_mut().iter_mut() {
            let (Some(want), Some(q)) = (w.want, w.queue.upgrade()) else { continue };
            if q.is_synced(want) {
                w.want = None;
                continue;
            }
            todo.push((q, w.key, want));
        }
        for (q, key, want) in todo {
            let now = self.rings.now_us();
            if !self.delay.is_zero() {
                std::thread::sleep(self.delay);
            }
            let r = match self.mode {
                Mode::Inline => q.sync_ticket(want).map(|()| true),
                _ => q.try_sync_ticket(want),
            };
            if let Ok(false) = r {
                // Held by another syncer: left to the ring.
                continue;
            }
            if let Some(w) = self.queues.borrow_mut().iter_mut().find(|w| w.key == key) {
                self.began(w, want, now);
            }
            self.ended(key, want, r.map(|_| ()).map_err(|e| Arc::from(e.to_string())), true);
            let s = &self.rings.stats;
            s.syncs.fetch_add(1, Ordering::Relaxed);
            s.inline.fetch_add(1, Ordering::Relaxed);
        }
        self.progress.notify_waiters();
    }

    /// A sync for `want` began at `now` for `w`: counts how long its first
    /// wait took to reach it, apart from the time that wait spent behind
    /// the sync before (the disk's).
    fn began(&self, w: &mut Waited, want: SyncTicket, now: u64) {
        w.running = Some(want);
        w.started = now;
        w.asks_at_prev_start = std::mem::replace(&mut w.asks_at_start, w.asks);
        w.records_at_prev_start = std::mem::replace(&mut w.records_at_start, w.records);
        let asked = std::mem::take(&mut w.first_ask);
        if asked != 0 {
            let asked = asked - 1;
            let s = &self.rings.stats;
            s.asked.fetch_add(1, Ordering::Relaxed);
            s.ask_us.fetch_add(now.saturating_sub(asked.max(w.ended)), Ordering::Relaxed);
            s.handover_us.fetch_add(now.saturating_sub(w.last_ask.max(asked).max(w.ended)), Ordering::Relaxed);
            s.behind_us.fetch_add(w.ended.saturating_sub(asked), Ordering::Relaxed);
        }
    }
}

/// Turns of the loop a worker lets pass, at most, waiting for no new wait
/// before it syncs inline.
const SETTLE_TURNS: usize = 8;

/// Records a wait carries on average (a connection's pipelined batch) from
/// which a queue's syncs do not gather (as the sync threads': such batches
/// are worth a sync each).
const PIPELINED: u64 = 4;
/// How long a gathering waits for no new wait, at least, and at most.
const GATHER_QUIET_US: u64 = 50;
const GATHER_MAX_US: u64 = 2000;

/// Should the next sync of `w` wait (at `now`) for more waits? Yes while
/// fewer have asked since the last sync began than that sync covered plus
/// those that arrived during it (the clients it released ask again),
/// unless its waits were pipelined batches, none asked for a while (an
/// eighth of the last sync, at least [`GATHER_QUIET_US`]), or half the
/// last sync (at most [`GATHER_MAX_US`]) passed since it ended. Without
/// it, clients that wait for their replies split into two groups taking
/// turns, each sync carrying half of them (as the library's syncer and the
/// sync threads gather).
fn gathers(w: &Waited, now: u64) -> bool {
    let covered = w.asks_at_start - w.asks_at_prev_start;
    let target = w.asks_at_end - w.asks_at_prev_start;
    let pipelined = w.records_at_start - w.records_at_prev_start >= PIPELINED * covered;
    if covered <= 1 || pipelined || w.asks - w.asks_at_start >= target {
        return false;
    }
    let took = w.ended.saturating_sub(w.started);
    let quiet = (took / 8).max(GATHER_QUIET_US);
    let limit = (took / 2).min(GATHER_MAX_US);
    now.saturating_sub(w.last_ask.max(w.ended)) < quiet && now.saturating_sub(w.ended) < limit
}

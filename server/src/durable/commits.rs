//! The server's durable machinery as a whole ([`Commits`]): each worker's
//! own syncs on an io_uring where the kernel allows it, the sync threads
//! otherwise, and their counters.

use super::adaptive::Mode;
use super::ring::{Rings, WorkerSyncs};
use super::stats::SyncStats;
use super::syncers::Syncers;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How the server syncs for the replies that wait: what every worker shares.
pub(crate) struct Commits {
    /// The sync threads (started only if a worker has no ring).
    pub(crate) syncers: Syncers,
    rings: Arc<Rings>,
    stats: Arc<SyncStats>,
    /// A test aid: each sync made this much slower
    /// (`TVMQ_SERVE_TEST_SYNC_DELAY_MS`).
    delay: Duration,
    /// `TVMQ_SERVE_SYNC=threads`: no ring, the sync threads for every worker.
    threads_only: bool,
    /// `TVMQ_SERVE_SYNC=ring|inline|hybrid`: where a worker with a ring
    /// runs its syncs (see `adaptive`).
    mode: Mode,
    /// Workers that sync on their own ring.
    ring_workers: AtomicUsize,
    /// Why a worker has no ring (said once).
    no_ring: std::sync::Once,
}

impl Default for Commits {
    fn default() -> Commits {
        let ms = std::env::var("TVMQ_SERVE_TEST_SYNC_DELAY_MS").ok().and_then(|v| v.parse::<u64>().ok());
        let delay = Duration::from_millis(ms.unwrap_or(0));
        let stats = Arc::new(SyncStats::default());
        Commits {
            syncers: Syncers::new(stats.clone(), delay),
            rings: Arc::new(Rings::new(stats.clone())),
            stats,
            delay,
            threads_only: std::env::var("TVMQ_SERVE_SYNC").is_ok_and(|v| v == "threads"),
            mode: Mode::named(std::env::var("TVMQ_SERVE_SYNC").ok().as_deref()),
            ring_workers: AtomicUsize::new(0),
            no_ring: std::sync::Once::new(),
        }
    }
}

impl Commits {
    /// The calling worker's own syncs, on a ring of its own, their task
    /// started on its `LocalSet`; `None` when io_uring is not available
    /// here (said once on stderr) or `TVMQ_SERVE_SYNC=threads`: then the
    /// sync threads serve that worker.
    pub(crate) fn for_worker(&self) -> Option<Rc<WorkerSyncs>> {
        if self.threads_only {
            return None;
        }
        let mut ring = match tvm::SyncRing::new() {
            Ok(ring) => ring,
            Err(e) => {
                self.no_ring.call_once(|| {
                    eprintln!("tvmq serve: {}; durable queues are synced by threads instead", e.detail());
                });
                return None;
            }
        };
        ring.set_test_delay(self.delay);
        let syncs = WorkerSyncs::start_on(ring, self.rings.clone(), self.mode, self.delay)?;
        self.ring_workers.fetch_add(1, Ordering::Relaxed);
        Some(syncs)
    }

    /// The counters, for INFO.
    pub(crate) fn stats(&self) -> &SyncStats {
        &self.stats
    }

    /// Workers that sync on their own ring.
    pub(crate) fn ring_workers(&self) -> usize {
        self.ring_workers.load(Ordering::Relaxed)
    }
}

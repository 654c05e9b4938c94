//! What every worker shares: the options, the queue table, the counters,
//! the blocked clients and the shutdown signal.

use crate::config::ServeArgs;
use crate::shutdown::Shutdown;
use crate::waiters::Waiters;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Server-wide counters, for INFO.
#[derive(Default)]
pub(crate) struct Stats {
    /// Connections open now.
    pub connected: AtomicUsize,
    /// Connections accepted since the start.
    pub total_connections: AtomicU64,
    /// Connections refused by `--maxclients`.
    pub rejected: AtomicU64,
    /// Clients blocked in BLPOP/BRPOP now.
    pub blocked: AtomicUsize,
    /// Client ids given out (CLIENT ID, HELLO).
    pub next_client_id: AtomicU64,
}

/// A worker's own counters: written by its thread only (a load and a store,
/// no locked instruction), on a cache line of their own, summed by INFO.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct WorkerStats {
    commands: AtomicU64,
    input: AtomicU64,
    output: AtomicU64,
}

impl WorkerStats {
    #[inline]
    fn add(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// Counts commands run.
    #[inline]
    pub fn add_commands(&self, n: u64) {
        Self::add(&self.commands, n)
    }

    /// Counts bytes read.
    #[inline]
    pub fn add_input(&self, n: usize) {
        Self::add(&self.input, n as u64)
    }

    /// Counts bytes written.
    #[inline]
    pub fn add_output(&self, n: usize) {
        Self::add(&self.output, n as u64)
    }
}

/// State shared by the listener, the workers and the watchers.
pub(crate) struct ServerState {
    pub args: ServeArgs,
    pub dir: PathBuf,
    /// The queues this server has attached, by id (names are looked up in
    /// the queue headers).
    pub attachments: tvm::Attachments,
    pub limits: resp::Limits,
    /// The most bytes of one command a connection buffers (twice
    /// `--max-bulk-len`, at least 1 MiB): beyond, it is closed.
    pub query_limit: usize,
    pub password: Option<Vec<u8>>,
    pub stats: Stats,
    pub shutdown: std::sync::Arc<Shutdown>,
    pub waiters: Waiters,
    pub started: Instant,
    pub tcp_addr: Option<SocketAddr>,
    pub unix_path: Option<PathBuf>,
    pub threads: usize,
    /// One per worker.
    pub worker_stats: Vec<WorkerStats>,
    /// Connections each worker serves (for the listener's choice).
    pub worker_conns: Vec<AtomicUsize>,
    /// Serialises auto-creation inside this process (other processes are
    /// handled by creation failing with TBL_ARD_EXIST).
    pub create_lock: parking_lot::Mutex<()>,
}

impl ServerState {
    /// Commands run, bytes read and written, by every worker.
    pub fn totals(&self) -> (u64, u64, u64) {
        self.worker_stats.iter().fold((0, 0, 0), |(c, i, o), w| {
            (
                c + w.commands.load(Ordering::Relaxed),
                i + w.input.load(Ordering::Relaxed),
                o + w.output.load(Ordering::Relaxed),
            )
        })
    }

    /// The queue directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

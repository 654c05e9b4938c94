//! What every worker shares: the options, the queue table, the counters,
//! the blocked clients and the shutdown signal.

use crate::config::ServeArgs;
use crate::index::{Budget, Index};
use crate::pool::{Coalesce, Pool};
use crate::shutdown::Shutdown;
use crate::waiters::Waiters;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Server-wide counters, for INFO.
#[derive(Default)]
pub(crate) struct Stats {
    /// Connections open now.
    pub(crate) connected: AtomicUsize,
    /// Connections accepted since the start.
    pub(crate) total_connections: AtomicU64,
    /// Connections refused by `--maxclients`.
    pub(crate) rejected: AtomicU64,
    /// Clients blocked in BLPOP/BRPOP now.
    pub(crate) blocked: AtomicUsize,
    /// Client ids given out (CLIENT ID, HELLO).
    pub(crate) next_client_id: AtomicU64,
    /// Wrong passwords given (AUTH, HELLO ... AUTH).
    pub(crate) auth_failures: AtomicU64,
    /// Connections closed for sending more than an unauthenticated client may.
    pub(crate) unauthenticated_closed: AtomicU64,
    /// TLS handshakes that failed or timed out.
    pub(crate) tls_handshake_failures: AtomicU64,
    /// When (seconds since the start) a failed handshake was last logged.
    pub(crate) tls_failure_logged: AtomicU64,
}

/// The rate-limited report of failed AUTHs on stderr: when it last
/// printed, and the count it printed then.
#[derive(Default)]
pub(crate) struct AuthLog {
    last: Option<Instant>,
    reported: u64,
}

/// At most one line about failed AUTHs per this long.
const AUTH_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

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
    pub(crate) fn add_commands(&self, n: u64) {
        Self::add(&self.commands, n)
    }

    /// Counts bytes read.
    #[inline]
    pub(crate) fn add_input(&self, n: usize) {
        Self::add(&self.input, n as u64)
    }

    /// Counts bytes written.
    #[inline]
    pub(crate) fn add_output(&self, n: usize) {
        Self::add(&self.output, n as u64)
    }
}

/// State shared by the listener, the workers and the watchers.
pub(crate) struct ServerState {
    pub(crate) args: ServeArgs,
    pub(crate) dir: PathBuf,
    /// The queues this server has attached, by id (names are looked up in
    /// the queue headers).
    pub(crate) attachments: tvm::Attachments,
    pub(crate) limits: resp::Limits,
    /// The most bytes of one command a connection buffers (twice
    /// `--max-bulk-len`, at least 1 MiB): beyond, it is closed.
    pub(crate) query_limit: usize,
    pub(crate) password: Option<Vec<u8>>,
    pub(crate) auth_log: parking_lot::Mutex<AuthLog>,
    pub(crate) stats: Stats,
    pub(crate) shutdown: Arc<Shutdown>,
    pub(crate) waiters: Waiters,
    pub(crate) started: Instant,
    pub(crate) tcp_addr: Option<SocketAddr>,
    pub(crate) unix_path: Option<PathBuf>,
    /// The device and inode of the socket file this server bound, so that
    /// the stop removes that file only, not one another server put there.
    pub(crate) unix_id: Option<(u64, u64)>,
    pub(crate) threads: usize,
    /// One per worker.
    pub(crate) worker_stats: Vec<WorkerStats>,
    /// Connections each worker serves (for the listener's choice).
    pub(crate) worker_conns: Vec<AtomicUsize>,
    /// Serialises auto-creation inside this process (other processes are
    /// handled by creation failing with TBL_ARD_EXIST).
    pub(crate) create_lock: parking_lot::Mutex<()>,
    /// `--tls-port`: the handshake's configuration, and where it listens.
    pub(crate) tls: Option<crate::tls::Acceptor>,
    pub(crate) tls_addr: Option<SocketAddr>,
    /// Queue names -> ids, kept current; the queues this server created.
    pub(crate) index: Arc<Index>,
    /// `--max-queues` and `--max-memory` (its default worked out).
    pub(crate) budget: Budget,
    /// The size of the file of a queue `--auto-create` makes (0 without it).
    pub(crate) auto_bytes: u64,
    /// The threads that sync `always` queues for the replies waiting on them.
    pub(crate) syncers: crate::durable::Syncers,
    /// The bounded pool that runs what the workers hand over.
    pub(crate) pool: Pool,
    /// Scans of lease tables (TVMQ.LEASES), shared by equal ones waiting in
    /// line: by queue id and mapping.
    pub(crate) lease_scans: Arc<Coalesce<(u32, usize), Option<tvm::LeaseStats>>>,
    /// INFO's sections that read queue headers, shared likewise.
    pub(crate) info_scans: Arc<Coalesce<InfoScan, String>>,
}

/// An INFO section that reads queue headers (in the pool).
#[derive(Clone, Copy, Hash, PartialEq, Eq, Debug)]
pub(crate) enum InfoScan {
    /// `# Queues`.
    Queues,
    /// The per-queue lines of `# Durability`.
    Durability,
}

impl ServerState {
    /// Commands run, bytes read and written, by every worker.
    pub(crate) fn totals(&self) -> (u64, u64, u64) {
        self.worker_stats.iter().fold((0, 0, 0), |(c, i, o), w| {
            (
                c + w.commands.load(Ordering::Relaxed),
                i + w.input.load(Ordering::Relaxed),
                o + w.output.load(Ordering::Relaxed),
            )
        })
    }

    /// The queue directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Counts a wrong password from `peer`, and says so on stderr at most
    /// once a second (with the count since the last line).
    pub(crate) fn auth_failed(&self, peer: &str) {
        self.stats.auth_failures.fetch_add(1, Ordering::Relaxed);
        let mut log = self.auth_log.lock();
        if log.last.is_none_or(|t| t.elapsed() >= AUTH_LOG_EVERY) {
            let total = self.stats.auth_failures.load(Ordering::Relaxed);
            eprintln!(
                "tvmq serve: {} wrong password(s) since the last report ({total} since the start), the latest from {peer}",
                total.saturating_sub(log.reported)
            );
            log.last = Some(Instant::now());
            log.reported = total;
        }
    }
}

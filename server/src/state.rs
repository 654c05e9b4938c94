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

/// The most threads of a server thread's runtime's blocking pool
/// ([`ServerState::thread_runtime`]; tokio's default is 512).
pub(crate) const RUNTIME_BLOCKING_THREADS: usize = 4;

/// Server-wide counters, for INFO.
#[derive(Default)]
pub(crate) struct Stats {
    /// Connections open now.
    pub(crate) connected: AtomicUsize,
    /// Connections accepted since the start.
    pub(crate) total_connections: AtomicU64,
    /// Connections refused by `--maxclients`, or for want of descriptors.
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
    /// TLS connections closed unshaken: past `--tls-handshakes-per-second`.
    pub(crate) tls_handshakes_refused: AtomicU64,
    /// Connections accept(2) failed to give (out of descriptors, ...).
    pub(crate) accept_errors: AtomicU64,
}

/// What the server's lease calls did, server-wide, for INFO and the
/// metrics: counted when the library call succeeds (on an `always` queue,
/// before the sync its reply waits for), never by a scan. Leases that ran
/// out (delivered again, or moved on by the library's sweeps) are not
/// here: they are the queue's own counters (TVMQ.LEASES). So `granted` is
/// the others' sum, plus those that ran out, plus those held now.
#[derive(Default)]
pub(crate) struct LeaseCounts {
    /// Leases handed to a client (TVMQ.LEASE, blocking or not).
    pub(crate) granted: AtomicU64,
    /// Acknowledged (TVMQ.ACK).
    pub(crate) acked: AtomicU64,
    /// Put back, delivered again after their delay (TVMQ.RELEASE).
    pub(crate) released: AtomicU64,
    /// Put back, delivered again at once, because their connection ended.
    pub(crate) returned: AtomicU64,
    /// Their records moved to the queue's dead-letter queue: TVMQ.REJECT,
    /// or a TVMQ.RELEASE or a connection's end at the delivery limit.
    pub(crate) dead_lettered: AtomicU64,
    /// Their records dropped, as those calls do on a queue without a
    /// dead-letter queue.
    pub(crate) dropped: AtomicU64,
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
    /// Commands run, by the command table's order (the metrics'
    /// `tvmq_server_commands_total{command}`).
    by_command: [AtomicU64; COMMAND_KINDS],
}

/// Room for the commands of the command table (`cmd::table` checks it is enough).
pub(crate) const COMMAND_KINDS: usize = 32;

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

    /// Counts a command of kind `kind` (its place in the command table).
    #[inline]
    pub(crate) fn count_command(&self, kind: usize) {
        if let Some(c) = self.by_command.get(kind) {
            Self::add(c, 1)
        }
    }

    /// Commands of kind `kind` this worker has run.
    pub(crate) fn command_count(&self, kind: usize) -> u64 {
        self.by_command.get(kind).map_or(0, |c| c.load(Ordering::Relaxed))
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
    /// The queues this server holds open, by id, at most as many as its
    /// descriptors allow (names are looked up in the index).
    pub(crate) attachments: crate::open::OpenQueues,
    /// The soft limit of open files, raised at the start.
    pub(crate) nofile: u64,
    /// `--maxclients`, lowered to what the open-file limit allows.
    pub(crate) maxclients: usize,
    /// The connections that have not authenticated yet (with a password).
    pub(crate) unauthenticated: std::sync::Arc<crate::preauth::Unauthenticated>,
    pub(crate) limits: resp::Limits,
    /// The most bytes of one command a connection buffers (twice
    /// `--max-bulk-len`, at least 1 MiB): beyond, it is closed.
    pub(crate) query_limit: usize,
    pub(crate) password: Option<Vec<u8>>,
    pub(crate) auth_log: parking_lot::Mutex<AuthLog>,
    pub(crate) stats: Stats,
    /// What the lease calls did (each connection's leases hold it too).
    pub(crate) leases: Arc<LeaseCounts>,
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
    /// How `always` queues are synced for the replies waiting on them: the
    /// workers' rings, or the sync threads.
    pub(crate) durable: crate::durable::Commits,
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

/// A connection's place in `--maxclients` and in its worker's count, taken
/// when the listener hands it out and given back however it ends (in the
/// TLS handshakes' thread, or its worker).
pub(crate) struct Slot {
    shared: std::sync::Arc<ServerState>,
    worker: usize,
}

impl Slot {
    /// Takes a place for a connection that worker `worker` will serve.
    pub(crate) fn take(shared: &std::sync::Arc<ServerState>, worker: usize) -> Slot {
        shared.stats.connected.fetch_add(1, Ordering::Relaxed);
        shared.worker_conns[worker].fetch_add(1, Ordering::Relaxed);
        Slot { shared: shared.clone(), worker }
    }

    /// The worker that serves the connection.
    pub(crate) fn worker(&self) -> usize {
        self.worker
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
        self.shared.worker_conns[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
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

    /// A current-thread runtime for one of the server's threads (`who`);
    /// if none can be had, says so on stderr and begins the stop.
    /// Its blocking pool (durable queues closed off the worker, waits for a sync
    /// another process holds) has at most [`RUNTIME_BLOCKING_THREADS`]
    /// threads, named `tvmq-blocking`: more such jobs wait in its line.
    pub(crate) fn thread_runtime(&self, who: &str) -> Option<tokio::runtime::Runtime> {
        let mut b = tokio::runtime::Builder::new_current_thread();
        b.enable_all().max_blocking_threads(RUNTIME_BLOCKING_THREADS).thread_name("tvmq-blocking");
        match b.build() {
            Ok(rt) => Some(rt),
            Err(e) => {
                eprintln!("tvmq serve: {who} cannot start its runtime: {e}");
                self.shutdown.set();
                None
            }
        }
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

//! `tvmq serve`: tvmq's queues over the network, speaking the Redis protocol
//! (RESP2, and RESP3 after `HELLO 3`), so that redis-cli, redis-benchmark,
//! Redis client libraries and libtvm's network client use them. The wire
//! conventions (keys, FIFO order, error words) are those of
//! `docs/protocol.md`; `docs/server.md` tells how to run it.
//!
//! # Shape
//! Each module uses only modules below it in this table (the crate root
//! uses them all); no import goes upwards, so there is no cycle.
//!
//! | module | concern | uses |
//! |---|---|---|
//! | `metrics` | `--metrics-port`: the server's counters for the exposition and the dashboard, and their HTTP server (`tvmq_watch`) | `cmd`, `state`, `config` |
//! | `listener` | binding, accepting (out of descriptors too), `--maxclients`, the TLS handshakes' budget, handing connections out | `handshake`, `worker`, `state` |
//! | `handshake` | TLS handshakes on a thread of their own, then to the worker | `worker`, `preauth`, `state`, `stream` |
//! | `worker` | one thread per core, each a tokio current-thread runtime | `connection`, `local`, `keys`, `preauth`, `state`, `stream` |
//! | `connection` | read, run every complete command, write the replies once; limits | `cmd`, `input`, `local`, `keys`, `preauth`, `state`, `stream` |
//! | `input` | a connection's input buffer: pooled while served, given back while the client is idle | `local` |
//! | `cmd` | dispatch, then one file per family: `queue` (push, pop, LLEN), `blocking` (BLPOP), `admin` (DEL, LTRIM, TVMQ.REPAIR), `lease/` (the TVMQ.LEASE family: `owned`, `args`, `take`, `end`, `stats`), `keyspace` (SCAN, KEYS, DBSIZE, TYPE), `info` (INFO), `server` (the rest), `table` (the commands, COMMAND); `context` (what a command runs with), `off_worker` (what it hands to the pool) | `durable`, `keys`, `state`, `waiters`, `pool`, `reply`, `slice` |
//! | `local` | what one worker's connections share: key cache, buffer pool, stop notice, its syncs | `keys`, `durable` |
//! | `keys` | key -> queue, caches, `--auto-create`, its bounds and its id scheme | `state`, `index`, `open`, `pool`, `reply` |
//! | `state` | `ServerState`, what every thread shares: options, queues, counters, the pool | `durable`, `index`, `open`, `preauth`, `waiters`, `pool`, `shutdown`, `tls`, `config` |
//! | `durable` | `always` queues: a connection's replies waiting for a sync (`replies`), the worker's own syncs, inline or on its io_uring (`ring`, `adaptive`), the sync threads where there is none (`syncers`), the whole of it (`commits`) and its counters (`stats`) | `histogram` |
//! | `histogram` | durations in fixed buckets, in atomics (the syncs' `tvmq_durable_sync_seconds`) | - |
//! | `index` | queue name -> ids of the directory, kept current by inotify; the queues `--auto-create` made (the budget) | `shutdown` |
//! | `open` | the queues held open, at most as many as the descriptors allow, the least recently used idle one closed | - |
//! | `preauth` | connections not authenticated yet: what they may send, their bound and their time | `config` |
//! | `descriptors` | the open-file limit, raised, and shared between the server, the queues and the clients | - |
//! | `waiters` | blocked clients and the bounded pool of watcher threads that wake them | `shutdown` |
//! | `pool` | the one bounded pool of threads, with its line, for all the work taken off the workers | - |
//! | `shutdown` | the stop signal | - |
//! | `slice` | long loops on a worker cut into slices of about 1 ms, the worker's other tasks run between them | - |
//! | `stream` | TCP, unix and TLS sockets behind one trait (a TCP socket that moves between threads); the I/O steps | - |
//! | `tls` | `--tls-port`: the certificates, read at the start | `config` |
//! | `reply` | error replies in the protocol's words | - |
//! | [`config`] | the options ([`ServeArgs`]) | - |
//!
//! `scripts/check-layers.py` (part of `make lint`) reads this table: each
//! module uses exactly the modules its row names, all below it; and no
//! file uses, through any chain, a file that uses it back.
//!
//! A push goes from the read buffer straight into the shared-memory ring
//! ([`tvm::Queue::push`]) and a pop from the ring straight into the output
//! buffer; nothing is buffered in the server, so a push answered OK is in
//! the queue even if the server stops or dies the next instant.
//!
//! ```no_run
//! use tvmq_server::{ServeArgs, Server};
//!
//! let args = ServeArgs { port: 0, ..ServeArgs::default() };   // any free port
//! let server = Server::start(std::path::Path::new("/dev/shm/my-queues"), &args)?;
//! println!("serving on {:?}", server.tcp_addr());
//! server.stop();
//! # Ok::<(), tvm::Error>(())
//! ```
#![warn(missing_docs)]
// One `unsafe` block in the crate: the registration of a worker's io_uring
// eventfd with its runtime (`durable::ring`), whose contract (the
// descriptor stays open and the same) tokio cannot check.
#![deny(unsafe_code)]

mod cmd;
pub mod config;
mod connection;
mod descriptors;
mod durable;
mod handshake;
mod histogram;
mod index;
mod input;
mod keys;
mod listener;
mod local;
mod metrics;
mod open;
mod pool;
mod preauth;
mod reply;
mod shutdown;
mod slice;
mod state;
mod stream;
mod tls;
mod waiters;
mod worker;

pub use config::{AutoCreate, ServeArgs};
pub use keys::{AUTO_ID_BASE, AUTO_ID_SPAN, auto_id};

use state::{ServerState, Stats, WorkerStats};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::thread::JoinHandle;
use std::time::Instant;
use tvm::error::{BOOT_PARM_ERR, Error, SOCK_BIND_ERR, SVR_EXCEPTION};

/// A running server (threads of this process). [`stop`](Self::stop) or
/// dropping it stops it gracefully.
pub struct Server {
    shared: Arc<ServerState>,
    threads: Vec<JoinHandle<()>>,
    /// `--metrics-port`'s server.
    metrics: Option<tvmq_watch::Http>,
}

impl Server {
    /// Checks the options and the directory, raises this process's soft
    /// limit of open files to its hard limit (and lowers `--maxclients` to
    /// what it allows, with a warning on stderr), binds the sockets and
    /// starts the acceptor, the workers and, with `--tls-port`, the TLS
    /// handshakes' threads. The password is `--requirepass`, else
    /// `--requirepass-file`'s, else `$TVMQ_REQUIREPASS`'s. Errors:
    /// `BOOT_PARM_ERR` (a password of fewer than 8 bytes or more than 16 KiB,
    /// an unreadable password file,
    /// protected mode's refusal, nothing to listen on, a TLS certificate or
    /// key file that cannot be read or used), those of
    /// [`tvm::check_queue_dir`] (a directory this process cannot use; it
    /// must be writable with `--auto-create`), `SOCK_BIND_ERR` (address in
    /// use, bad unix socket path), `SVR_EXCEPTION` (threads or runtimes
    /// that cannot start). With `--metrics-port`: `BOOT_PARM_ERR` (protected
    /// mode's refusal of a `--metrics-bind` off loopback without a password),
    /// `SOCK_BIND_ERR` (its port in use).
    pub fn start(dir: &Path, args: &ServeArgs) -> Result<Server, Error> {
        if args.no_tcp && args.unixsocket.is_none() && args.tls_port.is_none() {
            return Err(Error::new(BOOT_PARM_ERR, "--no-tcp needs --unixsocket or --tls-port: nothing to listen on"));
        }
        let env = std::env::var_os(config::PASSWORD_ENV);
        if let Some(refusal) = args.protected_mode_refusal(env.as_deref()) {
            return Err(Error::new(BOOT_PARM_ERR, refusal));
        }
        let password = args.password(env).map_err(|e| Error::new(BOOT_PARM_ERR, e))?;
        tvm::check_queue_dir(dir, args.auto_create.is_some())?;
        let tls = tls::acceptor(args)?;
        let (budget, auto_bytes) = auto_create_bounds(dir, args)?;
        let index = Arc::new(index::Index::start(dir));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start a runtime: {e}")))?;
        let addr = (!args.no_tcp).then(|| SocketAddr::new(args.bind, args.port));
        let tls_at = args.tls_port.map(|port| SocketAddr::new(args.bind, port));
        let listeners = listener::bind(&rt, addr, args.unixsocket.as_deref(), args.unixsocketperm, tls_at)
            .map_err(|e| Error::new(SOCK_BIND_ERR, e.to_string()))?;
        let tcp_addr = listeners.tcp.as_ref().and_then(|l| l.local_addr().ok());
        let tls_addr = listeners.tls.as_ref().and_then(|l| l.local_addr().ok());
        let threads = args.worker_threads();
        // The workers, the acceptor, the TLS handshakes' thread and `run`'s signals.
        let fds = fd_plan(threads + 3, args);
        let limits = resp::Limits { max_bulk_len: args.max_bulk_len, ..resp::Limits::default() };
        let shared = Arc::new(ServerState {
            args: args.clone(),
            dir: dir.to_path_buf(),
            attachments: open::OpenQueues::new(dir.to_path_buf(), fds.open_queues),
            nofile: fds.limit,
            maxclients: fds.maxclients,
            unauthenticated: preauth::Unauthenticated::new(max_unauthenticated(args, fds.maxclients)),
            limits,
            query_limit: args.max_bulk_len.saturating_mul(2).max(1 << 20),
            password,
            auth_log: parking_lot::Mutex::default(),
            stats: Stats::default(),
            leases: Arc::default(),
            shutdown: Arc::default(),
            waiters: waiters::Waiters::new(),
            started: Instant::now(),
            tcp_addr,
            unix_path: args.unixsocket.clone(),
            unix_id: listeners.unix_id,
            threads,
            worker_stats: (0..threads).map(|_| WorkerStats::default()).collect(),
            worker_conns: (0..threads).map(|_| AtomicUsize::new(0)).collect(),
            create_lock: parking_lot::Mutex::new(()),
            tls,
            tls_addr,
            index: index.clone(),
            budget,
            auto_bytes,
            durable: durable::Commits::default(),
            pool: pool::Pool::new(args.pool_threads),
            lease_scans: pool::Coalesce::new(),
            info_scans: pool::Coalesce::new(),
        });
        let metrics = metrics::start(&shared)?;
        let mut server = Server { shared: shared.clone(), threads: Vec::new(), metrics };
        let indexer = index::spawn(index, shared.shutdown.clone())
            .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start the index thread: {e}")))?;
        server.threads.push(indexer);
        let mut senders = Vec::with_capacity(threads);
        for i in 0..threads {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            senders.push(tx);
            let handle = worker::spawn(shared.clone(), i, rx)
                .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start a worker thread: {e}")))?;
            server.threads.push(handle);
        }
        let (handshakes, tls_threads) = handshake::spawn(&shared, &senders)
            .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start the TLS handshakes' thread: {e}")))?;
        server.threads.extend(tls_threads);
        let acceptor_shared = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name("tvmq-accept".into())
            .spawn(move || listener::accept_loop(rt, listeners, acceptor_shared, senders, handshakes))
            .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start the acceptor thread: {e}")))?;
        server.threads.push(acceptor);
        Ok(server)
    }

    /// The TCP address it listens on (the port is the real one when
    /// `--port 0` asked for any).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.shared.tcp_addr
    }

    /// The TLS address it listens on (`--tls-port`; the real port when 0
    /// asked for any).
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.shared.tls_addr
    }

    /// The address of `--metrics-port` (the real port when 0 asked for any).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(tvmq_watch::Http::local_addr)
    }

    /// The unix socket it listens on.
    pub fn unix_path(&self) -> Option<&Path> {
        self.shared.unix_path.as_deref()
    }

    /// The queue directory.
    pub fn dir(&self) -> &Path {
        self.shared.dir()
    }

    /// Clients blocked in BLPOP/BRPOP now.
    pub fn blocked_clients(&self) -> usize {
        self.shared.stats.blocked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Connections open now.
    pub fn connected_clients(&self) -> usize {
        self.shared.stats.connected.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Has the stop begun (a worker that could not start begins it)?
    pub fn is_stopping(&self) -> bool {
        self.shared.shutdown.is_set()
    }

    /// Stops gracefully: no more connections are accepted; every connection
    /// answers the commands it has read, then closes; blocked clients are
    /// answered with an error; returns when every thread has ended.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        if let Some(m) = self.metrics.take() {
            m.stop();
        }
        self.shared.shutdown.set();
        self.shared.waiters.wake_everyone();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // What the workers handed over and nobody waits for any more (leases
        // of closed connections given back, ...) runs before the stop ends.
        self.shared.pool.stop();
        listener::remove_socket(self.shared.unix_path.as_deref(), self.shared.unix_id);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            self.stop_inner();
        }
    }
}

/// `--max-unauthenticated`, or half of `maxclients` (in effect), at least 1;
/// one not below `maxclients` gets a warning (such connections could then
/// fill it).
fn max_unauthenticated(args: &ServeArgs, maxclients: usize) -> usize {
    if args.max_unauthenticated == 0 {
        return (maxclients / 2).max(1);
    }
    if args.max_unauthenticated >= maxclients && args.authenticates_clients(None) {
        eprintln!(
            "tvmq serve: warning: --max-unauthenticated {} is not below --maxclients {maxclients}: connections \
             that never authenticate can fill every slot",
            args.max_unauthenticated
        );
    }
    args.max_unauthenticated
}

/// Raises the open-file limit and shares it out ([`descriptors::plan`]),
/// saying on stderr what it lowered.
fn fd_plan(runtimes: usize, args: &ServeArgs) -> descriptors::Plan {
    let (limit, stuck) = descriptors::raise_limit();
    let plan = descriptors::plan(limit, runtimes, metrics::descriptors(args), args.maxclients, args.max_open_queues);
    for warning in stuck.iter().chain(&plan.warnings) {
        eprintln!("tvmq serve: warning: {warning}");
    }
    plan
}

/// Checks `--auto-create`'s geometry as queue creation will (a refusal at
/// start rather than at every push), works out `--max-memory`'s default,
/// and checks that one queue fits it. Creates the queue directory if it is
/// missing (mode 0700), as the first creation would, so that it can be
/// watched. Returns the bounds and the size of an auto-created queue's file.
fn auto_create_bounds(dir: &Path, args: &ServeArgs) -> Result<(index::Budget, u64), Error> {
    use tvm::error::MQUE_CRTE_BIG;
    if !dir.exists() {
        let mut b = std::fs::DirBuilder::new();
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.recursive(true).create(dir).map_err(|e| {
            Error::new(tvm::error::SHM_ERR_ACCES, format!("cannot create queue directory {}: {e}", dir.display()))
        })?;
    }
    let fs_size = tvm::filesystem_size(dir);
    let (num, den) = config::DEFAULT_MAX_MEMORY_SHARE;
    let max_bytes = args.max_memory.unwrap_or_else(|| fs_size.map_or(u64::MAX, |s| s / den * num));
    let budget = index::Budget { max_queues: args.max_queues, max_bytes };
    let Some(a) = args.auto_create else { return Ok((budget, 0)) };
    let bytes = tvm::Spec::new(a.rows, a.size)
        .checked_file_size()
        .map_err(|e| Error::new(e.code(), format!("--auto-create {}x{}: {}", a.rows, a.size, e.what())))?;
    if bytes > max_bytes {
        let whence = match args.max_memory {
            Some(_) => String::new(),
            None => {
                format!(" (the default: half of the {}-byte filesystem of {})", fs_size.unwrap_or(0), dir.display())
            }
        };
        return Err(Error::new(
            MQUE_CRTE_BIG,
            format!(
                "--auto-create {}x{}: each queue's file takes {bytes} bytes, more than --max-memory {max_bytes}{whence}",
                a.rows, a.size
            ),
        ));
    }
    Ok((budget, bytes))
}

/// `tvmq serve`: runs the server until SIGINT or SIGTERM, then stops it
/// gracefully. Errors: those of [`Server::start`].
pub fn run(dir: &Path, args: &ServeArgs) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot start a runtime: {e}")))?;
    // Handlers first, so that a signal right after the start is not lost.
    let (mut int, mut term) = rt
        .block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            Ok::<_, std::io::Error>((signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?))
        })
        .map_err(|e| Error::new(SVR_EXCEPTION, format!("cannot handle signals: {e}")))?;
    let server = Server::start(dir, args)?;
    let mut on = Vec::new();
    if let Some(a) = server.tcp_addr() {
        on.push(a.to_string());
    }
    if let Some(p) = server.unix_path() {
        on.push(p.display().to_string());
    }
    if let Some(a) = server.tls_addr() {
        on.push(format!("{a} (TLS{})", if args.tls_client_certs_required() { ", client certificates" } else { "" }));
    }
    if let Some(a) = server.metrics_addr() {
        on.push(format!("http://{a}/ (metrics, dashboard)"));
    }
    println!(
        "tvmq serve: listening on {}; queues in {}; {} worker thread{}{}",
        on.join(" and "),
        dir.display(),
        server.shared.threads,
        if server.shared.threads == 1 { "" } else { "s" },
        match args.auto_create {
            Some(a) => format!("; missing queues created with {} records of {} bytes", a.rows, a.size),
            None => String::new(),
        }
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    rt.block_on(async {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
            _ = async { while !server.is_stopping() { tokio::time::sleep(std::time::Duration::from_millis(100)).await } } => {}
        }
    });
    server.stop();
    Ok(())
}

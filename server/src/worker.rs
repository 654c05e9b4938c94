//! Worker threads: each runs a tokio current-thread runtime and serves the
//! connections the listener hands it, start to end, so that a connection's
//! commands run on one core with no locking and no task migration.

use crate::connection;
use crate::keys::WorkerKeys;
use crate::local::{Pool, WorkerLocal};
use crate::state::ServerState;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// How often a worker lets go of the queues dropped meanwhile.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// A connection accepted by the listener, for a worker to serve.
pub(crate) enum Accepted {
    Tcp(std::net::TcpStream, SocketAddr),
    Unix(std::os::unix::net::UnixStream),
    /// From `--tls-port`: the handshake is still to do.
    Tls(std::net::TcpStream, SocketAddr),
}

/// Starts worker `index`.
pub(crate) fn spawn(
    shared: Arc<ServerState>,
    index: usize,
    rx: UnboundedReceiver<Accepted>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(format!("tvmq-worker-{index}")).spawn(move || main(shared, index, rx))
}

fn main(shared: Arc<ServerState>, index: usize, mut rx: UnboundedReceiver<Accepted>) {
    // A sweep run here (inside a pop or a lease) leaves the records it
    // dooms for the server's pool to move to their dead-letter queue (that
    // push may open the queue and sync it): see `cmd::off_worker::move_dead_letters`.
    tvm::Queue::sweeps_move_dead_letters(false);
    // Work nobody waits for (leases of closed connections given back, ...)
    // goes to the pool from here.
    shared.pool.enter();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tvmq serve: worker {index}: cannot start its runtime: {e}");
            shared.shutdown.set();
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    let worker = Rc::new(WorkerLocal {
        index,
        keys: WorkerKeys::default(),
        pool: Pool::default(),
        connections: Cell::new(0),
        stop: tokio::sync::Notify::new(),
    });
    local.block_on(&rt, async {
        let mut purge = tokio::time::interval(PURGE_EVERY);
        purge.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = shared.shutdown.wait() => break,
                c = rx.recv() => match c {
                    Some(c) => start(&shared, &worker, c),
                    None => break,
                },
                _ = purge.tick() => {
                    worker.keys.purge_dropped(&shared);
                    if index == 0 {
                        shared.waiters.purge_dropped();
                    }
                }
            }
        }
        worker.stop.notify_waiters();
        // Connections answer what they have read and close; a write to a
        // client that does not read is given up at its stall timeout.
        let deadline = tokio::time::Instant::now() + shared.args.write_stall() + Duration::from_secs(1);
        while worker.connections.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    // Dropping `local` cancels what is left (nothing, unless a write stalled).
}

/// Counts a connection out however it ends.
struct Counted {
    worker: Rc<WorkerLocal>,
    shared: Arc<ServerState>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.worker.connections.set(self.worker.connections.get() - 1);
        self.shared.stats.connected.fetch_sub(1, Ordering::Relaxed);
        self.shared.worker_conns[self.worker.index].fetch_sub(1, Ordering::Relaxed);
    }
}

fn start(shared: &Arc<ServerState>, worker: &Rc<WorkerLocal>, c: Accepted) {
    worker.connections.set(worker.connections.get() + 1);
    let counted = Counted { worker: worker.clone(), shared: shared.clone() };
    let (shared, worker) = (shared.clone(), worker.clone());
    tokio::task::spawn_local(async move {
        let _counted = counted;
        match c {
            Accepted::Tcp(s, peer) => match tokio::net::TcpStream::from_std(s) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    connection::serve(s, shared, worker, peer.to_string()).await
                }
                Err(e) => eprintln!("tvmq serve: cannot register a connection: {e}"),
            },
            Accepted::Unix(s) => match tokio::net::UnixStream::from_std(s) {
                Ok(s) => connection::serve(s, shared, worker, "unix".to_string()).await,
                Err(e) => eprintln!("tvmq serve: cannot register a connection: {e}"),
            },
            Accepted::Tls(s, peer) => match tokio::net::TcpStream::from_std(s) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let Some(acceptor) = shared.tls.clone() else { return };
                    // Bounded: a client that opens the connection and sends
                    // nothing (or too little) holds its --maxclients slot
                    // no longer than --tls-handshake-timeout.
                    let limit = shared.args.tls_handshake();
                    let handshake = tokio::select! {
                        biased;
                        // The stop does not wait for handshakes.
                        _ = shared.shutdown.wait() => return,
                        r = tokio::time::timeout(limit, acceptor.accept(s)) => r,
                    };
                    match handshake {
                        Ok(Ok(s)) => connection::serve(s, shared, worker, peer.to_string()).await,
                        Ok(Err(e)) => handshake_failed(&shared, &peer, &e.to_string()),
                        Err(_) => handshake_failed(&shared, &peer, &format!("no handshake within {limit:?}")),
                    }
                }
                Err(e) => eprintln!("tvmq serve: cannot register a connection: {e}"),
            },
        }
    });
}

/// Counts a failed TLS handshake and says why on stderr, at most once a
/// second for the whole server (a port scan or a flood of bad clients
/// must not flood the log).
fn handshake_failed(shared: &ServerState, peer: &SocketAddr, why: &str) {
    let failures = shared.stats.tls_handshake_failures.fetch_add(1, Ordering::Relaxed) + 1;
    let now = shared.started.elapsed().as_secs();
    let last = shared.stats.tls_failure_logged.load(Ordering::Relaxed);
    if (failures == 1 || now > last)
        && shared.stats.tls_failure_logged.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        eprintln!("tvmq serve: TLS handshake with {peer} failed: {why} ({failures} failures so far)");
    }
}

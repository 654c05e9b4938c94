//! Worker threads: each runs a tokio current-thread runtime and serves the
//! connections the listener hands it, start to end, so that a connection's
//! commands run on one core with no locking and no task migration.

use crate::connection;
use crate::keys::WorkerKeys;
use crate::local::{Pool, WorkerLocal};
use crate::preauth::Pending;
use crate::state::{ServerState, Slot};
use crate::stream::Movable;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// How often a worker lets go of the queues dropped meanwhile.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// A connection accepted by the listener, for a worker to serve.
pub(crate) enum Accepted {
    Tcp(std::net::TcpStream, SocketAddr),
    Unix(std::os::unix::net::UnixStream),
    /// From `--tls-port`, its handshake made (by [`crate::handshake`]); its
    /// socket parked, to be registered with the worker's runtime.
    Tls(Box<tokio_rustls::server::TlsStream<Movable>>, SocketAddr),
}

/// A connection handed to a worker, with its place in `--maxclients` and,
/// when a password is set, among the unauthenticated connections.
pub(crate) struct Incoming {
    pub(crate) conn: Accepted,
    pub(crate) slot: Slot,
    pub(crate) pending: Option<Pending>,
}

/// Starts worker `index`.
pub(crate) fn spawn(
    shared: Arc<ServerState>,
    index: usize,
    rx: UnboundedReceiver<Incoming>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(format!("tvmq-worker-{index}")).spawn(move || main(shared, index, rx))
}

fn main(shared: Arc<ServerState>, index: usize, mut rx: UnboundedReceiver<Incoming>) {
    // A sweep run here (inside a pop or a lease) leaves the records it
    // dooms for the server's pool to move to their dead-letter queue (that
    // push may open the queue and sync it): see `cmd::off_worker::move_dead_letters`.
    tvm::Queue::sweeps_move_dead_letters(false);
    // Work nobody waits for (leases of closed connections given back, ...)
    // goes to the pool from here.
    shared.pool.enter();
    let Some(rt) = shared.thread_runtime(&format!("worker {index}")) else { return };
    let local = tokio::task::LocalSet::new();
    // The worker's own syncs of `always` queues (their task on this
    // worker's loop), or none: the sync threads.
    let syncs = {
        let _rt = rt.enter();
        let _local = local.enter();
        shared.durable.for_worker()
    };
    let worker = Rc::new(WorkerLocal {
        index,
        keys: WorkerKeys::default(),
        pool: Pool::default(),
        connections: Cell::new(0),
        stop: tokio::sync::Notify::new(),
        syncs,
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

/// Counts a connection out of its worker however it ends (its
/// [`Slot`] counts it out of the server's).
struct Counted {
    worker: Rc<WorkerLocal>,
    _slot: Slot,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.worker.connections.set(self.worker.connections.get() - 1);
    }
}

fn start(shared: &Arc<ServerState>, worker: &Rc<WorkerLocal>, c: Incoming) {
    let Incoming { conn, slot, pending } = c;
    worker.connections.set(worker.connections.get() + 1);
    let counted = Counted { worker: worker.clone(), _slot: slot };
    let (shared, worker) = (shared.clone(), worker.clone());
    tokio::task::spawn_local(async move {
        let _counted = counted;
        match conn {
            Accepted::Tcp(s, peer) => match tokio::net::TcpStream::from_std(s) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    connection::serve(s, shared, worker, peer.to_string(), pending).await
                }
                Err(e) => eprintln!("tvmq serve: cannot register a connection: {e}"),
            },
            Accepted::Unix(s) => match tokio::net::UnixStream::from_std(s) {
                Ok(s) => connection::serve(s, shared, worker, "unix".to_string(), pending).await,
                Err(e) => eprintln!("tvmq serve: cannot register a connection: {e}"),
            },
            Accepted::Tls(mut s, peer) => match s.get_mut().0.unpark() {
                Ok(()) => connection::serve(*s, shared, worker, peer.to_string(), pending).await,
                Err(e) => eprintln!("tvmq serve: cannot register a connection: {e}"),
            },
        }
    });
}

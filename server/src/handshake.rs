//! TLS handshakes, off the workers: on a small pool of threads of their own
//! (one for every two workers, at least one), each a tokio current-thread
//! runtime, run at a lower priority (nice 10) than the workers, so that a
//! flood of handshakes (an RSA-4096 key costs about 5 ms of CPU each)
//! takes the processor only when the workers leave it. The acceptor begins
//! at most `--tls-handshakes-per-second` a second (the rest are closed at
//! once). A finished handshake's connection, rustls's state with it, moves
//! to the worker the acceptor chose for it, which serves it as any other.

use crate::preauth::{self, Pending};
use crate::state::{ServerState, Slot};
use crate::stream::Movable;
use crate::worker::{Accepted, Incoming};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How much lower the handshakes' threads run than the workers (a nice value).
const NICE: i32 = 10;

/// A connection whose handshake is to be made.
struct Job {
    tcp: std::net::TcpStream,
    peer: SocketAddr,
    slot: Slot,
    pending: Option<Pending>,
}

/// The acceptor's side of the pool.
pub(crate) struct Handshakes {
    threads: Vec<UnboundedSender<Job>>,
    next: usize,
}

impl Handshakes {
    /// Hands a TLS connection to a thread of the pool (in turn).
    pub(crate) fn begin(&mut self, s: tokio::net::TcpStream, peer: SocketAddr, slot: Slot, pending: Option<Pending>) {
        let Ok(tcp) = s.into_std() else { return };
        if self.threads.is_empty() {
            return;
        }
        self.next = (self.next + 1) % self.threads.len();
        // A thread gone: the server is stopping.
        let _ = self.threads[self.next].send(Job { tcp, peer, slot, pending });
    }
}

/// Starts the pool when the server has a TLS port (else no thread).
pub(crate) fn spawn(
    shared: &Arc<ServerState>,
    workers: &[UnboundedSender<Incoming>],
) -> std::io::Result<(Handshakes, Vec<std::thread::JoinHandle<()>>)> {
    let n = if shared.tls.is_some() { (shared.threads / 2).max(1) } else { 0 };
    let mut senders = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let (tx, rx) = unbounded_channel();
        let (shared, workers) = (shared.clone(), workers.to_vec());
        handles
            .push(std::thread::Builder::new().name(format!("tvmq-tls-{i}")).spawn(move || main(shared, workers, rx))?);
        senders.push(tx);
    }
    Ok((Handshakes { threads: senders, next: 0 }, handles))
}

fn main(shared: Arc<ServerState>, workers: Vec<UnboundedSender<Incoming>>, mut rx: UnboundedReceiver<Job>) {
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), NICE) {
        eprintln!("tvmq serve: cannot lower the priority of the TLS handshakes' thread: {e}");
    }
    let Some(rt) = shared.thread_runtime("the TLS handshakes' thread") else { return };
    let workers = Rc::new(workers);
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async {
        loop {
            tokio::select! {
                biased;
                _ = shared.shutdown.wait() => break,
                job = rx.recv() => match job {
                    Some(job) => drop(tokio::task::spawn_local(handshake(shared.clone(), workers.clone(), job))),
                    None => break,
                },
            }
        }
    });
    // Dropping `local` ends the handshakes in progress (the stop does not wait for them).
}

/// Makes the handshake of `job`, within `--tls-handshake-timeout` and the
/// connection's time to authenticate, then hands the connection to its worker.
async fn handshake(shared: Arc<ServerState>, workers: Rc<Vec<UnboundedSender<Incoming>>>, job: Job) {
    let Job { tcp, peer, slot, pending } = job;
    let Some(acceptor) = shared.tls.clone() else { return };
    let s = match tokio::net::TcpStream::from_std(tcp) {
        Ok(s) => s,
        Err(e) => return eprintln!("tvmq serve: cannot register a connection: {e}"),
    };
    let _ = s.set_nodelay(true);
    let limit = shared.args.tls_handshake();
    let shaken = tokio::select! {
        biased;
        _ = shared.shutdown.wait() => return,
        why = preauth::closed(pending.as_ref()) => {
            return handshake_failed(&shared, &peer, &String::from_utf8_lossy(why.reply()));
        }
        r = tokio::time::timeout(limit, acceptor.accept(Movable::Live(s))) => r,
    };
    let mut tls = match shaken {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => return handshake_failed(&shared, &peer, &e.to_string()),
        Err(_) => return handshake_failed(&shared, &peer, &format!("no handshake within {limit:?}")),
    };
    if let Err(e) = tls.get_mut().0.park() {
        return eprintln!("tvmq serve: cannot hand a TLS connection over: {e}");
    }
    // Its worker gone: the server is stopping.
    let _ = workers[slot.worker()].send(Incoming { conn: Accepted::Tls(Box::new(tls), peer), slot, pending });
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

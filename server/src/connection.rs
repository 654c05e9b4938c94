//! One client connection: read what the client sent, run every complete
//! command in it, write all their replies at once, again.
//!
//! Memory per connection is bounded: the input buffer holds the unparsed
//! rest of one command plus one read (a command's size is bounded by
//! `--max-bulk-len` and the codec's limits), the output buffer is written
//! out whenever it passes [`FLUSH_AT`] (a reply is at most
//! [`MAX_POP_REPLY`](crate::cmd::queue::MAX_POP_REPLY) bytes of records, or
//! one record), and while a write waits for the client nothing more is read
//! from it; a client that reads none of its replies for `--write-timeout`
//! is closed. Between batches an idle connection holds no buffer at all
//! (buffers come from, and go back to, the worker's pool), nor a queue.
//!
//! A long command (a million arguments) is parsed as it arrives, and the
//! worker serves its other connections between two of its reads; the
//! commands whose arguments are checked in a loop run it in slices
//! ([`crate::slice`]), so one client's huge command never holds the others.
//!
//! Until it has authenticated (when a password is required), a connection
//! may send only small commands ([`PREAUTH_LIMITS`], at most
//! [`PREAUTH_QUERY_LIMIT`] bytes in all), checked on their length headers
//! before the bytes they announce are read, and a partial one waits in a
//! mapping of its own size; it is closed at `--auth-timeout`, or when newer
//! unauthenticated connections push it out ([`crate::preauth`]); a wrong
//! password is answered after [`AUTH_FAILURE_DELAY`] (this connection's
//! task sleeps, the worker serves the others), and the
//! [`MAX_AUTH_FAILURES`]th closes the connection.

use crate::cmd::blocking::Blocked;
use crate::cmd::{self, Client, Ctx, Flow};
use crate::input::Input;
use crate::local::{FLUSH_AT, POOL_MAX, Pool, READ_SIZE, WorkerLocal};
use crate::preauth::{
    self, AUTH_FAILURE_DELAY, Closed, MAX_AUTH_FAILURES, PREAUTH_LIMITS, PREAUTH_QUERY_LIMIT, Pending,
};
use crate::state::{ServerState, WorkerStats};
use crate::stream::{self, Stream};
use resp::{Request, Status};
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;
use tokio::sync::futures::Notified;

/// Input read while blocked in BLPOP beyond which reading pauses.
const BLOCKED_INPUT_MAX: usize = 64 * 1024;
/// Why a connection ends.
enum End {
    Eof,
    Close,
    Stop,
    Timeout,
    /// It did not authenticate in time, or was pushed out by newer
    /// unauthenticated connections: this error is sent, then the close.
    Unauthenticated(Closed),
    Error(io::Error),
}

/// Serves one connection until it closes, the client QUITs, the protocol is
/// broken, or the server stops.
pub(crate) async fn serve<S: Stream>(
    mut s: S,
    shared: Arc<ServerState>,
    worker: Rc<WorkerLocal>,
    peer: String,
    pending: Option<Pending>,
) {
    let id = shared.stats.next_client_id.fetch_add(1, Ordering::Relaxed) + 1;
    let mut client = Client::new(id, shared.password.is_none(), peer, shared.leases.clone());
    client.unsynced = worker.unsynced_replies();
    let end = run(&mut s, &shared, &worker, &mut client, pending).await;
    if let End::Unauthenticated(why) = end {
        let mut out = Vec::new();
        resp::error(&mut out, why.reply());
        let _ = stream::write_all(&mut s, &mut out, Duration::from_secs(1)).await;
        return;
    }
    if let End::Error(e) = end {
        // UnexpectedEof: a TLS client gone without its close notice (as
        // redis-cli goes), an EOF like any other.
        if !matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::UnexpectedEof
        ) {
            eprintln!("tvmq serve: client {} ({}): {e}", client.id, client.peer);
        }
    }
}

async fn run<S: Stream>(
    s: &mut S,
    shared: &Arc<ServerState>,
    worker: &Rc<WorkerLocal>,
    client: &mut Client,
    mut pending: Option<Pending>,
) -> End {
    let stop = worker.stop.notified();
    tokio::pin!(stop);
    stop.as_mut().enable();
    let idle = shared.args.idle_timeout();
    let stall = shared.args.write_stall();
    let pool = &worker.pool;
    let stats = &shared.worker_stats[worker.index];
    let mut req = Request::new();
    let mut input = Input::new();
    let mut out: Vec<u8> = Vec::new();
    let mut needed = 0;
    loop {
        // Wait for bytes, holding no pooled buffer meanwhile (unless a long
        // command is arriving), nor a queue.
        input.release(pool, client.authed);
        if !input.is_pooled() {
            pool.give_output(std::mem::take(&mut out));
            if req.capacity() > 1024 {
                req = Request::new();
            }
            client.last.forget();
            if let Err(end) = wait_readable(s, shared, stop.as_mut(), idle, pending.as_ref()).await {
                return end;
            }
        }
        // A long command arriving (a million arguments: 8 MB and more) is
        // parsed as it comes, read by read (each at most a few MB: a few
        // ms to parse); between two reads the worker serves its other
        // connections, which the socket's bytes, always ready, would
        // otherwise keep waiting until the whole command had been read.
        if input.len() > READ_SIZE {
            tokio::task::yield_now().await;
        }
        input.make_room(pool, needed);
        let n = match read_some(s, shared, stop.as_mut(), idle, pending.as_ref(), input.space()).await {
            Ok(n) => n,
            Err(end) => return end,
        };
        input.filled(n);
        stats.add_input(n);
        if out.capacity() == 0 {
            out = pool.take_output();
        }

        // Run every complete command, replies into `out`.
        let mut commands = 0u64;
        let mut end = None;
        let mut blocked: Option<Blocked> = None;
        // Times the command at the front asked for queues to be created.
        let mut creations = 0;
        loop {
            let data = input.pending();
            let authed = client.authed;
            let limits = if authed { &shared.limits } else { &PREAUTH_LIMITS };
            match resp::parse_request(data, limits, &mut req) {
                Ok(Status::Complete { consumed }) => {
                    let failures = client.auth_failures;
                    if !authed && req.len() > PREAUTH_LIMITS.max_args {
                        // An inline command (its arguments are not counted as it is parsed).
                        preauth_refusal(shared, &mut out, b"ERR Protocol error: unauthenticated multibulk length");
                        end = Some(End::Close);
                        break;
                    }
                    if !req.is_empty() {
                        commands += 1;
                        let mut ctx = Ctx { shared, keys: &worker.keys, client: &mut *client, stats };
                        match cmd::execute(&mut ctx, data, &req, &mut out).await {
                            Flow::Next => {}
                            Flow::Close => end = Some(End::Close),
                            Flow::Block(b) => blocked = Some(b),
                            Flow::LeaseOffWorker(d) => {
                                blocked = cmd::blocking::lease_durable(d, shared, client, &mut out).await;
                            }
                            Flow::DeadLetter(d) => {
                                cmd::lease::dead_letter_off_worker(&shared.pool, d, client, &mut out).await
                            }
                            Flow::OffWorker(job) => cmd::off_worker::run(&shared.pool, job, &mut out).await,
                            Flow::LeaseStats(scan) => cmd::lease::stats_off_worker(scan, shared, &mut out).await,
                            Flow::Info(rest) => cmd::info::info_off_worker(rest, shared, &mut out).await,
                            Flow::Create(keys) => {
                                // Made off the worker; then the command runs
                                // again (not consumed). A queue dropped again
                                // at once, thrice: given up.
                                creations += 1;
                                if creations > 3 {
                                    resp::error(&mut out, b"ERR the queue was created but dropped again at once");
                                } else {
                                    match crate::keys::create_off_worker(shared.clone(), keys).await {
                                        Ok(()) => {
                                            commands -= 1;
                                            continue;
                                        }
                                        Err((key, e)) => cmd::key_error(&mut out, &key, &e),
                                    }
                                }
                            }
                        }
                    }
                    creations = 0;
                    input.consume(consumed);
                    needed = 0;
                    if client.authed {
                        pending = None;
                    }
                    if client.auth_failures != failures {
                        if let Err(end) = pause(shared, stop.as_mut(), pending.as_ref(), AUTH_FAILURE_DELAY).await {
                            return end;
                        }
                        if client.auth_failures >= MAX_AUTH_FAILURES {
                            resp::error(&mut out, b"ERR too many wrong passwords: closing the connection");
                            end = Some(End::Close);
                        }
                    }
                    if end.is_some() {
                        break;
                    }
                    if let Some(b) = blocked.take() {
                        if let Err(e) = flush(s, &mut out, client, shared, stats, stall).await {
                            return End::Error(e);
                        }
                        // The arguments' places of a long command (a BLPOP
                        // of a million keys: 16 MB) are not kept while it
                        // waits.
                        if req.capacity() > 1024 {
                            req = Request::new();
                        }
                        match wait_blocked(s, shared, b, client, &mut input, &mut out, pool).await {
                            Ok(()) => {}
                            Err(end) => {
                                let _ = flush(s, &mut out, client, shared, stats, stall).await;
                                return end;
                            }
                        }
                    }
                    if out.len() >= FLUSH_AT {
                        if let Err(e) = flush(s, &mut out, client, shared, stats, stall).await {
                            return End::Error(e);
                        }
                    }
                }
                Ok(Status::Incomplete { needed: more }) => {
                    needed = more;
                    let limit = if authed { shared.query_limit } else { PREAUTH_QUERY_LIMIT };
                    if input.len().saturating_add(more) > limit {
                        if authed {
                            resp::error(&mut out, b"ERR Protocol error: query buffer limit reached");
                        } else {
                            preauth_refusal(shared, &mut out, b"ERR Protocol error: unauthenticated request too big");
                        }
                        end = Some(End::Close);
                    }
                    break;
                }
                Err(e) => {
                    match (authed, preauth_text(e, data, &shared.limits)) {
                        (false, Some(text)) => preauth_refusal(shared, &mut out, text),
                        _ => e.write_reply(&mut out),
                    }
                    end = Some(End::Close);
                    break;
                }
            }
        }
        stats.add_commands(commands);
        if !out.is_empty() {
            if let Err(e) = flush(s, &mut out, client, shared, stats, stall).await {
                return End::Error(e);
            }
        }
        if out.capacity() > POOL_MAX {
            out = Vec::new();
        }
        if let Some(end) = end {
            return end;
        }
        // Answer what has been read, then stop.
        if shared.shutdown.is_set() {
            return End::Stop;
        }
    }
}

/// The reply to a protocol error of an unauthenticated client that only
/// [`PREAUTH_LIMITS`] make an error (the same bytes parse, or wait for
/// more, under the server's own limits): Redis's words for it.
#[cold]
fn preauth_text(e: resp::ProtocolError, data: &[u8], limits: &resp::Limits) -> Option<&'static [u8]> {
    use resp::ProtocolError as P;
    if resp::parse_request(data, limits, &mut Request::new()) == Err(e) {
        return None;
    }
    Some(match e {
        P::InvalidMultibulkLength => b"ERR Protocol error: unauthenticated multibulk length",
        P::InvalidBulkLength => b"ERR Protocol error: unauthenticated bulk length",
        _ => b"ERR Protocol error: unauthenticated request too big",
    })
}

/// Writes `text` as the last reply to an unauthenticated client that sent
/// too much, and counts it.
#[cold]
fn preauth_refusal(shared: &ServerState, out: &mut Vec<u8>, text: &[u8]) {
    shared.stats.unauthenticated_closed.fetch_add(1, Ordering::Relaxed);
    resp::error(out, text);
}

/// Sleeps `d` (a wrong password's delay), unless the server stops or the
/// connection's time to authenticate runs out.
async fn pause(
    shared: &ServerState,
    stop: Pin<&mut Notified<'_>>,
    pending: Option<&Pending>,
    d: Duration,
) -> Result<(), End> {
    tokio::select! {
        biased;
        _ = stop => Err(End::Stop),
        _ = shared.shutdown.wait() => Err(End::Stop),
        why = preauth::closed(pending) => Err(End::Unauthenticated(why)),
        _ = tokio::time::sleep(d) => Ok(()),
    }
}

/// Waits until the client has sent something (or closed, or failed), unless
/// the server stops, the worker tells its connections to stop, the
/// connection has been idle for `idle`, or, not authenticated yet, it must
/// close (`pending`).
async fn wait_readable<S: Stream>(
    s: &S,
    shared: &ServerState,
    stop: Pin<&mut Notified<'_>>,
    idle: Option<Duration>,
    pending: Option<&Pending>,
) -> Result<(), End> {
    if shared.shutdown.is_set() {
        return Err(End::Stop);
    }
    tokio::select! {
        biased;
        _ = stop => Err(End::Stop),
        why = preauth::closed(pending) => Err(End::Unauthenticated(why)),
        r = s.ready_to_read() => r.map_err(End::Error),
        _ = sleep_or_never(idle) => Err(End::Timeout),
    }
}

/// Reads into `buf` what the client sent, waiting as [`wait_readable`] does
/// while nothing is there; the bytes read, never 0 (the EOF is `End::Eof`).
async fn read_some<S: Stream>(
    s: &mut S,
    shared: &ServerState,
    mut stop: Pin<&mut Notified<'_>>,
    idle: Option<Duration>,
    pending: Option<&Pending>,
    buf: &mut [u8],
) -> Result<usize, End> {
    loop {
        match stream::try_read(s, buf).await {
            Poll::Ready(Ok(0)) => return Err(End::Eof),
            Poll::Ready(Ok(n)) => return Ok(n),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Poll::Ready(Err(e)) => return Err(End::Error(e)),
            Poll::Pending => wait_readable(s, shared, stop.as_mut(), idle, pending).await?,
        }
    }
}

/// Writes the replies in `out` (counting their bytes), then clears it;
/// first waits (this task only) until the syncs that replies of durable
/// queues wait for have completed (see [`crate::durable`]).
async fn flush<S: Stream>(
    s: &mut S,
    out: &mut Vec<u8>,
    client: &mut Client,
    shared: &ServerState,
    stats: &WorkerStats,
    stall: Duration,
) -> io::Result<()> {
    if !client.unsynced.is_empty() {
        client.unsynced.settle(&shared.durable, out).await;
    }
    stats.add_output(out.len());
    stream::write_all(s, out, stall).await
}

async fn sleep_or_never(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Waits until the blocked client gets a record, times out, its queue is
/// dropped (an error reply), the server stops (an error reply, then the
/// end), or the client goes away. Bytes the client sends meanwhile are kept
/// for after (up to [`BLOCKED_INPUT_MAX`]).
async fn wait_blocked<S: Stream>(
    s: &mut S,
    shared: &Arc<ServerState>,
    mut b: Blocked,
    client: &mut Client,
    input: &mut Input,
    out: &mut Vec<u8>,
    pool: &Pool,
) -> Result<(), End> {
    let proto = client.proto;
    let deadline = b.deadline.map(tokio::time::Instant::from_std);
    // A blocked client holds no pooled buffer: its pending commands move to
    // a buffer of their size, its (empty) output buffer goes back.
    input.release(pool, true);
    pool.give_output(std::mem::take(out));
    // Counted once on the lists (blocked_clients, and what tests wait for).
    b.register(shared);
    shared.stats.blocked.fetch_add(1, Ordering::Relaxed);
    let _unblock = Unblock(shared);
    loop {
        b.register(shared);
        // An `always` queue's leases are taken off the worker.
        let got = match b.durable_lease() {
            Some((q, args)) => cmd::lease::take_durable(&shared.pool, &q, args, client, out).await,
            None => b.try_pop(client, out),
        };
        if got {
            return Ok(());
        }
        if shared.shutdown.is_set() {
            resp::error(out, b"ERR server is shutting down");
            return Err(End::Stop);
        }
        let notify = b.notify.clone();
        let reading = input.len() < BLOCKED_INPUT_MAX;
        tokio::select! {
            biased;
            _ = shared.shutdown.wait() => {
                resp::error(out, b"ERR server is shutting down");
                return Err(End::Stop);
            }
            // A push, a lease event (records released, or whose lease ran
            // out: see `crate::waiters`), the queue dropped, the stop.
            _ = notify.notified() => {}
            _ = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => {
                b.timed_out(proto, out);
                return Ok(());
            }
            // Bytes (or the EOF) while blocked: kept for after, in a buffer
            // of their size, so that a blocked client holds no pooled buffer.
            r = s.ready_to_read(), if reading => {
                r.map_err(End::Error)?;
                input.make_room(pool, 0);
                let got = stream::try_read(s, input.space()).await;
                match got {
                    Poll::Ready(Ok(0)) => return Err(End::Eof),
                    Poll::Ready(Ok(n)) => input.filled(n),
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                    Poll::Ready(Err(e)) => return Err(End::Error(e)),
                    Poll::Pending => {}
                }
                input.release(pool, true);
            }
        }
    }
}

/// Counts a client out of `blocked_clients` however its wait ends.
struct Unblock<'a>(&'a ServerState);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        self.0.stats.blocked.fetch_sub(1, Ordering::Relaxed);
    }
}

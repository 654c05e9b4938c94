//! Listening: the sockets are bound before anything starts (so that a port
//! in use fails the start), then one acceptor thread hands each connection
//! to the worker serving the fewest, refusing those beyond `--maxclients`
//! as Redis does, until the stop. TLS connections go through the
//! handshakes' thread first, within `--tls-handshakes-per-second`. Out of
//! descriptors, accept(2) fails: the acceptor then gives up a spare one to
//! refuse the waiting connection with a reply (on the TLS port, with the
//! close alone, as beyond `--maxclients`), logs at most a line a second,
//! and never spins.

use crate::handshake::Handshakes;
use crate::state::{ServerState, Slot};
use crate::worker::{Accepted, Incoming};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// The listening sockets, bound.
pub(crate) struct Listeners {
    pub(crate) tcp: Option<tokio::net::TcpListener>,
    pub(crate) unix: Option<tokio::net::UnixListener>,
    /// The device and inode of the unix socket's file.
    pub(crate) unix_id: Option<(u64, u64)>,
    /// `--tls-port`: TCP too, the handshake done by the worker.
    pub(crate) tls: Option<tokio::net::TcpListener>,
}

/// Binds what the options ask for, inside `rt`; the unix socket's file
/// gets mode `perm`.
pub(crate) fn bind(
    rt: &tokio::runtime::Runtime,
    addr: Option<SocketAddr>,
    unix: Option<&Path>,
    perm: u32,
    tls: Option<SocketAddr>,
) -> io::Result<Listeners> {
    rt.block_on(async {
        let tcp = addr.map(bind_tcp).transpose()?;
        let tls = tls.map(bind_tcp).transpose()?;
        let (unix, unix_id) = match unix {
            Some(path) => {
                remove_stale_socket(path)?;
                let (l, id) = bind_unix(path, perm)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot bind {}: {e}", path.display())))?;
                (Some(l), Some(id))
            }
            None => (None, None),
        };
        Ok(Listeners { tcp, unix, unix_id, tls })
    })
}

/// Binds a unix socket at `path` whose file has mode `perm` from the
/// moment it appears: the socket's mode is set before the bind (Linux
/// gives the file that mode, narrowed by the umask), then the file's
/// exactly. Returns the file's device and inode.
fn bind_unix(path: &Path, perm: u32) -> io::Result<(tokio::net::UnixListener, (u64, u64))> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let socket = tokio::net::UnixSocket::new_stream()?;
    let mode = std::fs::Permissions::from_mode(perm);
    std::fs::File::from(socket.as_fd().try_clone_to_owned()?).set_permissions(mode.clone())?;
    socket.bind(path)?;
    let id =
        std::fs::set_permissions(path, mode).and_then(|()| std::fs::symlink_metadata(path)).map(|m| (m.dev(), m.ino()));
    let id = match id {
        Ok(id) => id,
        Err(e) => {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
    };
    match socket.listen(1024) {
        Ok(l) => Ok((l, id)),
        Err(e) => {
            let _ = std::fs::remove_file(path);
            Err(e)
        }
    }
}

/// Binds a TCP listener at `addr` (plain TCP and the TLS port).
fn bind_tcp(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr).map_err(|e| io::Error::new(e.kind(), format!("cannot bind {addr}: {e}")))?;
    socket.listen(1024)
}

/// Removes a socket file a previous server left (as Redis does); refuses
/// to remove anything else, or a socket a live server answers on.
fn remove_stale_socket(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("{}: a server is listening there", path.display()),
                ));
            }
            std::fs::remove_file(path)
        }
        Ok(_) => {
            Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} exists and is not a socket", path.display())))
        }
        Err(_) => Ok(()),
    }
}

/// A connection as accept(2) gave it.
enum Raw {
    Tcp(tokio::net::TcpStream, SocketAddr),
    Unix(tokio::net::UnixStream),
    Tls(tokio::net::TcpStream, SocketAddr),
}

/// Which listener.
#[derive(Clone, Copy)]
enum Kind {
    Tcp,
    Unix,
    Tls,
}

/// What the acceptor keeps between connections.
struct Acceptor {
    shared: Arc<ServerState>,
    workers: Vec<UnboundedSender<Incoming>>,
    handshakes: Handshakes,
    /// A descriptor kept open to be closed when accept(2) finds none left,
    /// so that the connection waiting can be told why it is refused (a TLS
    /// one: closed) instead of being left without a reply.
    spare: Option<std::fs::File>,
    /// When an accept error was last logged, and the count then.
    logged: Option<(Instant, u64)>,
    /// TLS handshakes that may still begin this second.
    tls_budget: Budget,
}

/// Accepts until the stop, on the runtime `rt` the listeners were bound in.
pub(crate) fn accept_loop(
    rt: tokio::runtime::Runtime,
    listeners: Listeners,
    shared: Arc<ServerState>,
    workers: Vec<UnboundedSender<Incoming>>,
    handshakes: Handshakes,
) {
    let rate = shared.args.tls_handshakes_per_second;
    let mut a = Acceptor { shared, workers, handshakes, spare: spare(), logged: None, tls_budget: Budget::new(rate) };
    rt.block_on(async {
        let Listeners { tcp, unix, tls, .. } = listeners;
        loop {
            let (kind, accepted) = tokio::select! {
                biased;
                _ = a.shared.shutdown.wait() => break,
                r = async { match &tcp { Some(l) => l.accept().await, None => std::future::pending().await } } => {
                    (Kind::Tcp, r.map(|(s, peer)| Raw::Tcp(s, peer)))
                }
                r = async { match &unix { Some(l) => l.accept().await, None => std::future::pending().await } } => {
                    (Kind::Unix, r.map(|(s, _)| Raw::Unix(s)))
                }
                r = async { match &tls { Some(l) => l.accept().await, None => std::future::pending().await } } => {
                    (Kind::Tls, r.map(|(s, peer)| Raw::Tls(s, peer)))
                }
            };
            match accepted {
                Ok(c) => a.dispatch(c),
                Err(e) => {
                    let freed = match kind {
                        Kind::Tcp => a.make_room(tcp.as_ref(), &e).await,
                        Kind::Unix => a.make_room(unix.as_ref(), &e).await,
                        Kind::Tls => a.make_room(tls.as_ref().map(TlsPort).as_ref(), &e).await,
                    };
                    a.log_accept_error(&e);
                    if !freed {
                        // No spare to give up, or not for want of one: wait
                        // rather than spin on a listener that stays readable.
                        tokio::time::sleep(ACCEPT_RETRY).await;
                    }
                }
            }
        }
    });
}

/// How long the acceptor waits after an accept error it could not act on.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// At most this many connections refused for want of descriptors at a
/// time: then the acceptor looks at the stop and its other listeners.
const REFUSE_AT_ONCE: usize = 64;
/// At most one line about accept errors per this long.
const LOG_EVERY: Duration = Duration::from_secs(1);

/// The spare descriptor (see [`Acceptor::spare`]).
fn spare() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

/// A listener the acceptor can take one connection from at once.
trait Listen {
    type Conn: Refuse;
    fn poll_one(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Self::Conn>>;
}

impl Listen for tokio::net::TcpListener {
    type Conn = tokio::net::TcpStream;
    fn poll_one(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Self::Conn>> {
        self.poll_accept(cx).map_ok(|(s, _)| s)
    }
}

/// The TLS port's listener, whose connections are refused unshaken.
struct TlsPort<'a>(&'a tokio::net::TcpListener);

impl Listen for TlsPort<'_> {
    type Conn = Unshaken;
    fn poll_one(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Self::Conn>> {
        self.0.poll_accept(cx).map_ok(|(s, _)| Unshaken(s))
    }
}

impl Listen for tokio::net::UnixListener {
    type Conn = tokio::net::UnixStream;
    fn poll_one(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<Self::Conn>> {
        self.poll_accept(cx).map_ok(|(s, _)| s)
    }
}

impl Acceptor {
    /// Out of descriptors: closes the spare, takes the connections that
    /// are waiting and refuses them (so that they get a reply, or on the
    /// TLS port the close, not silence), then takes the spare back. True
    /// if it did.
    ///
    /// It takes them until the listener has none left (at most
    /// [`REFUSE_AT_ONCE`]): that look, failing with `EAGAIN`, is what clears
    /// the listener's readiness. With the spare back and the readiness
    /// left set, the next accept(2) would fail again with `EMFILE` (Linux
    /// takes the descriptor before it looks for a connection): a second
    /// error for each refusal.
    async fn make_room<L: Listen>(&mut self, listener: Option<&L>, e: &io::Error) -> bool {
        let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
        let (Some(l), true) = (listener, out_of_fds) else { return false };
        if self.spare.take().is_none() {
            self.spare = spare();
            return false;
        }
        for _ in 0..REFUSE_AT_ONCE {
            match std::future::poll_fn(|cx| std::task::Poll::Ready(l.poll_one(cx))).await {
                std::task::Poll::Ready(Ok(c)) => {
                    self.shared.stats.rejected.fetch_add(1, Ordering::Relaxed);
                    c.refuse();
                }
                // None waiting (the readiness cleared), or no descriptor
                // even so: the caller's next accept(2) tells.
                _ => break,
            }
        }
        self.spare = spare();
        true
    }

    /// Counts an accept error, and says so on stderr at most once a second.
    fn log_accept_error(&mut self, e: &io::Error) {
        let errors = self.shared.stats.accept_errors.fetch_add(1, Ordering::Relaxed) + 1;
        if self.logged.is_some_and(|(at, _)| at.elapsed() < LOG_EVERY) {
            return;
        }
        let since = errors - self.logged.map_or(0, |(_, n)| n);
        eprintln!(
            "tvmq serve: accept: {e} ({since} error(s) since the last report, {errors} since the start; \
             a connection refused for want of descriptors is told so, a TLS one closed)"
        );
        self.logged = Some((Instant::now(), errors));
    }

    /// Hands `c` to the worker with the fewest connections (a TLS one
    /// through the handshakes' thread), or refuses it.
    fn dispatch(&mut self, c: Raw) {
        let shared = &self.shared;
        let st = &shared.stats;
        st.total_connections.fetch_add(1, Ordering::Relaxed);
        if st.connected.load(Ordering::Relaxed) >= shared.maxclients {
            st.rejected.fetch_add(1, Ordering::Relaxed);
            match c {
                Raw::Tcp(s, _) => s.refuse(),
                Raw::Unix(s) => s.refuse(),
                Raw::Tls(s, _) => Unshaken(s).refuse(),
            }
            return;
        }
        if matches!(c, Raw::Tls(..)) && !self.tls_budget.take() {
            st.tls_handshakes_refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some((i, _)) = shared.worker_conns.iter().enumerate().min_by_key(|(_, n)| n.load(Ordering::Relaxed)) else {
            return;
        };
        let slot = Slot::take(shared, i);
        let pending = shared.password.is_some().then(|| shared.unauthenticated.admit(shared.args.auth_limit()));
        let conn = match c {
            Raw::Tcp(s, peer) => s.into_std().map(|s| Accepted::Tcp(s, peer)),
            Raw::Unix(s) => s.into_std().map(Accepted::Unix),
            Raw::Tls(s, peer) => {
                self.handshakes.begin(s, peer, slot, pending);
                return;
            }
        };
        match conn {
            // A worker gone: the server is stopping.
            Ok(conn) => drop(self.workers[i].send(Incoming { conn, slot, pending })),
            Err(e) => eprintln!("tvmq serve: cannot hand a connection over: {e}"),
        }
    }
}

/// A connection that can be refused: with Redis's reply, or (TLS) with
/// the close alone.
trait Refuse {
    fn refuse(self);
}

/// A connection of the TLS port, its handshake not begun: a client in its
/// handshake would read Redis's reply as a broken TLS record, so a refusal
/// only closes it.
struct Unshaken(tokio::net::TcpStream);

impl Refuse for Unshaken {
    fn refuse(self) {
        drop(self.0);
    }
}

// The socket is new and non-blocking: the reply fits its buffer. (Written
// by the system call itself: tokio's `try_write` would wait for a
// readiness event the reactor has not seen yet.)
impl Refuse for tokio::net::TcpStream {
    fn refuse(self) {
        let _ = self.into_std().and_then(|mut s| std::io::Write::write(&mut s, REFUSAL));
    }
}

impl Refuse for tokio::net::UnixStream {
    fn refuse(self) {
        let _ = self.into_std().and_then(|mut s| std::io::Write::write(&mut s, REFUSAL));
    }
}

/// Redis's reply to a client beyond maxclients, before the close.
const REFUSAL: &[u8] = b"-ERR max number of clients reached\r\n";

/// A per-second budget: `rate` a second, as many at once at most.
struct Budget {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Budget {
    fn new(rate: u32) -> Budget {
        Budget { rate: f64::from(rate), tokens: f64::from(rate), at: Instant::now() }
    }

    /// Takes one, if there is one left.
    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.at).as_secs_f64() * self.rate).min(self.rate);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return true;
        }
        false
    }
}

/// Removes the unix socket file when the server stops, if it is still the
/// file this server bound (`id`: its device and inode): another server may
/// have replaced a socket it found dead, or someone put a file there.
pub(crate) fn remove_socket(path: Option<&Path>, id: Option<(u64, u64)>) {
    use std::os::unix::fs::MetadataExt;
    if let (Some(p), Some(id)) = (path, id) {
        if std::fs::symlink_metadata(p).is_ok_and(|m| (m.dev(), m.ino()) == id) {
            let _ = std::fs::remove_file(p);
        }
    }
}

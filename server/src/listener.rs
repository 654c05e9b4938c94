//! Listening: the sockets are bound before anything starts (so that a port
//! in use fails the start), then one acceptor thread hands each connection
//! to the worker serving the fewest, refusing those beyond `--maxclients`
//! as Redis does, until the stop.

use crate::state::ServerState;
use crate::worker::Accepted;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
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

/// Accepts until the stop, on the runtime `rt` the listeners were bound in.
pub(crate) fn accept_loop(
    rt: tokio::runtime::Runtime,
    listeners: Listeners,
    shared: Arc<ServerState>,
    workers: Vec<UnboundedSender<Accepted>>,
) {
    rt.block_on(async {
        let Listeners { tcp, unix, tls, .. } = listeners;
        loop {
            let accepted = tokio::select! {
                biased;
                _ = shared.shutdown.wait() => break,
                r = async { match &tcp { Some(l) => l.accept().await, None => std::future::pending().await } } => {
                    r.and_then(|(s, peer)| Ok(Accepted::Tcp(s.into_std()?, peer)))
                }
                r = async { match &unix { Some(l) => l.accept().await, None => std::future::pending().await } } => {
                    r.and_then(|(s, _)| Ok(Accepted::Unix(s.into_std()?)))
                }
                r = async { match &tls { Some(l) => l.accept().await, None => std::future::pending().await } } => {
                    r.and_then(|(s, peer)| Ok(Accepted::Tls(s.into_std()?, peer)))
                }
            };
            match accepted {
                Ok(c) => dispatch(&shared, &workers, c),
                Err(e) => {
                    // Out of descriptors (or a connection reset before it
                    // was accepted): say so, and give the others time to close.
                    eprintln!("tvmq serve: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
}

/// Hands `c` to the worker with the fewest connections, or refuses it.
fn dispatch(shared: &ServerState, workers: &[UnboundedSender<Accepted>], c: Accepted) {
    let st = &shared.stats;
    st.total_connections.fetch_add(1, Ordering::Relaxed);
    if st.connected.load(Ordering::Relaxed) >= shared.args.maxclients {
        st.rejected.fetch_add(1, Ordering::Relaxed);
        refuse(c);
        return;
    }
    let Some((i, _)) = shared.worker_conns.iter().enumerate().min_by_key(|(_, n)| n.load(Ordering::Relaxed)) else {
        return;
    };
    st.connected.fetch_add(1, Ordering::Relaxed);
    shared.worker_conns[i].fetch_add(1, Ordering::Relaxed);
    if let Err(back) = workers[i].send(c) {
        // The worker is gone (the server is stopping).
        drop(back);
        st.connected.fetch_sub(1, Ordering::Relaxed);
        shared.worker_conns[i].fetch_sub(1, Ordering::Relaxed);
    }
}

/// Redis's reply to a client beyond maxclients, then the close (a TLS
/// client, which would read the reply as a broken record, is only closed).
fn refuse(c: Accepted) {
    use std::io::Write;
    const TEXT: &[u8] = b"-ERR max number of clients reached\r\n";
    // The socket is new and non-blocking: the reply fits its buffer.
    let _ = match c {
        Accepted::Tcp(mut s, _) => s.write(TEXT),
        Accepted::Unix(mut s) => s.write(TEXT),
        Accepted::Tls(..) => Ok(0),
    };
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

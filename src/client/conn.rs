//! One connection to one server: a TCP or unix stream socket, the bytes
//! waiting to be written, and a read buffer from which replies are parsed
//! in place. Blocking I/O with the timeouts of `SO_RCVTIMEO`/`SO_SNDTIMEO`;
//! writes use `MSG_NOSIGNAL`, so a server gone away never raises SIGPIPE in
//! the C program.

use crate::error::*;
use resp::{Limits, Reply};
use std::fmt;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// Where a server listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Addr {
    /// A host name or address, and a port.
    Tcp { host: String, port: u16 },
    /// A unix socket path.
    Unix(PathBuf),
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Tcp { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            Addr::Tcp { host, port } => write!(f, "{host}:{port}"),
            Addr::Unix(path) => write!(f, "{}", path.display()),
        }
    }
}

/// How long to wait for the reply at the front of a connection's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplyWait {
    /// The connection's timeout.
    Normal,
    /// No limit (a blocking pop without timeout).
    Forever,
    /// The connection's timeout plus this much (a blocking pop with a timeout).
    Extra(Duration),
}

/// The socket.
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// Initial size of the read buffer; it grows for replies that do not fit.
const READ_BUF: usize = 64 * 1024;

/// A connection to one server.
pub(crate) struct Conn {
    sock: Sock,
    fd: RawFd,
    /// Read buffer: bytes `rstart..rend` are received and not yet parsed.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// The timeout currently set on the socket for reads (None: none).
    read_timeout: Option<Duration>,
    /// The connection's timeout (lTvmConnect's timeout_secs; None: none).
    timeout: Option<Duration>,
    /// Encoded commands not yet written.
    pub(crate) wbuf: Vec<u8>,
    limits: Limits,
}

/// The error of a failed socket call: `code` and what was being done.
fn io_error(code: u32, what: &str, addr: &Addr, e: &std::io::Error) -> Error {
    Error::new(code, format!("{what} {addr}: {e}"))
}

impl Conn {
    /// Connects to `addr`. `timeout` bounds the connection (TCP; a unix
    /// socket connects at once or fails) and is the default for every
    /// reply and write afterwards.
    /// Errors: SOCK_CONN_ERR (refused, no such host or socket file),
    /// SOCK_CONN_TMO (no answer within the timeout), SOCK_ERR_CRTE (no
    /// socket could be created: descriptors exhausted).
    pub(crate) fn open(addr: &Addr, timeout: Option<Duration>) -> Result<Conn> {
        let sock = match addr {
            Addr::Unix(path) => Sock::Unix(UnixStream::connect(path).map_err(|e| connect_error(addr, &e))?),
            Addr::Tcp { host, port } => {
                let targets = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(|e| Error::new(SOCK_CONN_ERR, format!("cannot resolve {addr}: {e}")))?;
                let mut last = Error::new(SOCK_CONN_ERR, format!("{addr}: the name has no address"));
                let mut stream = None;
                for target in targets {
                    let r = match timeout {
                        Some(t) => TcpStream::connect_timeout(&target, t),
                        None => TcpStream::connect(target),
                    };
                    match r {
                        Ok(s) => {
                            stream = Some(s);
                            break;
                        }
                        Err(e) => last = connect_error(addr, &e),
                    }
                }
                let stream = stream.ok_or(last)?;
                // Commands are written whole, one batch per call: never delay them.
                stream.set_nodelay(true).map_err(|e| io_error(SOCK_CONN_ERR, "setting TCP_NODELAY on", addr, &e))?;
                Sock::Tcp(stream)
            }
        };
        let fd = match &sock {
            Sock::Tcp(s) => s.as_raw_fd(),
            Sock::Unix(s) => s.as_raw_fd(),
        };
        let mut conn = Conn {
            sock,
            fd,
            rbuf: vec![0; READ_BUF],
            rstart: 0,
            rend: 0,
            read_timeout: None,
            timeout,
            wbuf: Vec::with_capacity(16 * 1024),
            limits: Limits::default(),
        };
        let set = match &conn.sock {
            Sock::Tcp(s) => s.set_write_timeout(timeout).and_then(|()| s.set_read_timeout(timeout)),
            Sock::Unix(s) => s.set_write_timeout(timeout).and_then(|()| s.set_read_timeout(timeout)),
        };
        set.map_err(|e| io_error(SOCK_CONN_ERR, "setting timeouts on", addr, &e))?;
        conn.read_timeout = timeout;
        Ok(conn)
    }

    /// Sets the socket's read timeout for a reply awaited with `wait`
    /// (a system call only when it changes).
    fn set_wait(&mut self, wait: ReplyWait) -> Result<()> {
        let want = match wait {
            ReplyWait::Normal => self.timeout,
            ReplyWait::Forever => None,
            ReplyWait::Extra(d) => self.timeout.map(|t| t.saturating_add(d)),
        };
        if want == self.read_timeout {
            return Ok(());
        }
        let r = match &self.sock {
            Sock::Tcp(s) => s.set_read_timeout(want),
            Sock::Unix(s) => s.set_read_timeout(want),
        };
        r.map_err(|e| Error::new(SOCK_READ_ERR, format!("cannot set the read timeout: {e}")))?;
        self.read_timeout = want;
        Ok(())
    }

    /// Writes every byte of `wbuf` (then empties it).
    /// Errors: SOCK_SEND_TMO (the server took nothing for the timeout),
    /// SOCK_IO_RESET (the connection was closed or reset), SOCK_SEND_ERR.
    /// After an error the connection is unusable (part of a command may
    /// have been written).
    pub(crate) fn flush(&mut self) -> Result<()> {
        let mut off = 0;
        while off < self.wbuf.len() {
            let rest = &self.wbuf[off..];
            // SAFETY: `rest` is a live slice of `rest.len()` readable bytes; fd
            // is the socket `self.sock` owns, open while self lives.
            let n = unsafe { libc::send(self.fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                let code = match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => SOCK_SEND_TMO,
                    Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => SOCK_IO_RESET,
                    _ => SOCK_SEND_ERR,
                };
                self.wbuf.clear();
                return Err(Error::new(code, format!("cannot send to the server: {e}")));
            }
            off += n as usize;
        }
        self.wbuf.clear();
        Ok(())
    }

    /// Reads what the socket has into the read buffer: waits (up to the read
    /// timeout) when `block`, else takes only what is there. Returns whether
    /// bytes came.
    /// Errors: SOCK_READ_TMO, SOCK_IO_RESET (closed by the server or reset),
    /// SOCK_READ_ERR.
    fn fill(&mut self, block: bool) -> Result<bool> {
        if self.rstart == self.rend {
            (self.rstart, self.rend) = (0, 0);
        } else if self.rbuf.len() - self.rend < 4096 {
            if self.rstart > 0 {
                self.rbuf.copy_within(self.rstart..self.rend, 0);
                (self.rstart, self.rend) = (0, self.rend - self.rstart);
            }
            if self.rbuf.len() - self.rend < 4096 {
                let len = self.rbuf.len() * 2;
                self.rbuf.resize(len, 0);
            }
        }
        let flags = if block { 0 } else { libc::MSG_DONTWAIT };
        loop {
            let room = &mut self.rbuf[self.rend..];
            // SAFETY: `room` is a live, writable slice of `room.len()` bytes; fd
            // is the socket `self.sock` owns, open while self lives.
            let n = unsafe { libc::recv(self.fd, room.as_mut_ptr().cast(), room.len(), flags) };
            if n > 0 {
                self.rend += n as usize;
                return Ok(true);
            }
            if n == 0 {
                return Err(Error::new(SOCK_IO_RESET, "the server closed the connection"));
            }
            let e = std::io::Error::last_os_error();
            let code = match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) if !block => return Ok(false),
                Some(libc::EAGAIN) => {
                    return Err(Error::new(SOCK_READ_TMO, "no reply from the server within the timeout"));
                }
                Some(libc::ECONNRESET | libc::EPIPE | libc::ENOTCONN) => SOCK_IO_RESET,
                _ => SOCK_READ_ERR,
            };
            return Err(Error::new(code, format!("cannot read from the server: {e}")));
        }
    }

    /// The next reply if the read buffer holds all of it, given to `f`.
    /// Errors: SOCK_COM_EXCP (the bytes are not RESP: the stream cannot be
    /// trusted any more).
    pub(crate) fn buffered<R>(&mut self, f: impl FnOnce(Reply<'_>) -> R) -> Result<Option<R>> {
        match resp::parse_reply(&self.rbuf[self.rstart..self.rend], &self.limits) {
            Ok(Some((reply, used))) => {
                let out = f(reply);
                self.rstart += used;
                Ok(Some(out))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(Error::new(SOCK_COM_EXCP, format!("the server's reply is not RESP: {e}"))),
        }
    }

    /// Reads more bytes: waits for them (the timeout of `wait`) when
    /// `block`. Returns whether bytes came. Errors: as [`Conn::fill`].
    pub(crate) fn receive(&mut self, block: bool, wait: ReplyWait) -> Result<bool> {
        if block {
            self.set_wait(wait)?;
        }
        self.fill(block)
    }

    /// Waits for the next reply (the timeout of `wait`) and gives it to `f`.
    pub(crate) fn reply<R>(&mut self, wait: ReplyWait, mut f: impl FnMut(Reply<'_>) -> R) -> Result<R> {
        loop {
            if let Some(r) = self.buffered(&mut f)? {
                return Ok(r);
            }
            self.receive(true, wait)?;
        }
    }
}

/// The error of a failed connection attempt.
fn connect_error(addr: &Addr, e: &std::io::Error) -> Error {
    let code = match e.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => SOCK_ERR_CRTE,
        Some(libc::ETIMEDOUT | libc::EAGAIN | libc::EINPROGRESS) => SOCK_CONN_TMO,
        _ if e.kind() == std::io::ErrorKind::TimedOut => SOCK_CONN_TMO,
        _ => SOCK_CONN_ERR,
    };
    io_error(code, "connecting to", addr, e)
}

//! One connection to one server: a TCP or unix stream socket (TCP possibly
//! with TLS), the bytes waiting to be written, and a read buffer from which
//! replies are parsed in place. Blocking I/O with the timeouts of
//! `SO_RCVTIMEO`/`SO_SNDTIMEO`; writes use `MSG_NOSIGNAL`, so a server gone
//! away never raises SIGPIPE in the C program. TLS goes through the same
//! socket calls (rustls encrypts into, and decrypts from, buffers).

use super::tls::FdIo;
use super::{Auth, Dial};
use crate::error::*;
use resp::{Limits, Reply};
use rustls::ClientConnection;
use std::fmt;
use std::io::{Read, Write};
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
    /// The TLS session, when the connection has one (boxed: it is large,
    /// and plain connections need not carry it).
    tls: Option<Box<ClientConnection>>,
}

/// The error of a failed socket call: `code` and what was being done.
fn io_error(code: u32, what: &str, addr: &Addr, e: &std::io::Error) -> Error {
    Error::new(code, format!("{what} {addr}: {e}"))
}

/// The code of a failed `send`.
fn send_code(e: &std::io::Error) -> u32 {
    match e.raw_os_error() {
        Some(libc::EAGAIN) => SOCK_SEND_TMO,
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN) => SOCK_IO_RESET,
        _ => SOCK_SEND_ERR,
    }
}

/// The code of a failed blocking `recv`.
fn recv_code(e: &std::io::Error) -> u32 {
    match e.raw_os_error() {
        Some(libc::EAGAIN) => SOCK_READ_TMO,
        Some(libc::ECONNRESET | libc::EPIPE | libc::ENOTCONN) => SOCK_IO_RESET,
        _ => SOCK_READ_ERR,
    }
}

/// A TLS failure: the session cannot go on (a certificate refused by
/// either side, a record that does not decrypt, a peer that is no TLS).
fn tls_error(addr: &Addr, e: &rustls::Error) -> Error {
    Error::new(SOCK_COM_EXCP, format!("TLS with {addr}: {e}"))
}

impl Conn {
    /// Connects to `addr`. `timeout` bounds the connection (TCP; a unix
    /// socket connects at once or fails) and is the default for every
    /// reply and write afterwards.
    /// With `dial.tls`, the handshake is done here, within the same
    /// timeout; with `dial.auth`, AUTH is sent and its answer awaited.
    /// Errors: SOCK_CONN_ERR (refused, no such host or socket file),
    /// SOCK_CONN_TMO (no answer within the timeout, handshake included),
    /// SOCK_ERR_CRTE (no socket could be created: descriptors exhausted);
    /// with TLS: SOCK_COM_EXCP (the handshake failed: a certificate not
    /// trusted or not for this name, a server that does not speak TLS),
    /// RMT_NOT_SUPPT (a unix socket), BOOT_PARM_ERR (a host that is no
    /// name to verify); with AUTH: SOCK_COM_EXCP (the server refused the
    /// credentials), the read errors.
    pub(crate) fn open(addr: &Addr, timeout: Option<Duration>, dial: &Dial) -> Result<Conn> {
        let session = match (dial.tls.as_deref(), addr) {
            (None, _) => None,
            (Some(t), Addr::Tcp { host, .. }) => Some(t.session(host)?),
            (Some(_), Addr::Unix(_)) => {
                return Err(Error::new(RMT_NOT_SUPPT, format!("{addr}: TLS is for TCP, not unix sockets")));
            }
        };
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
            tls: None,
        };
        let set = match &conn.sock {
            Sock::Tcp(s) => s.set_write_timeout(timeout).and_then(|()| s.set_read_timeout(timeout)),
            Sock::Unix(s) => s.set_write_timeout(timeout).and_then(|()| s.set_read_timeout(timeout)),
        };
        set.map_err(|e| io_error(SOCK_CONN_ERR, "setting timeouts on", addr, &e))?;
        conn.read_timeout = timeout;
        if let Some(session) = session {
            conn.tls = Some(Box::new(handshake(conn.fd, session, addr)?));
        }
        if let Some(auth) = &dial.auth {
            conn.authenticate(auth, addr)?;
        }
        Ok(conn)
    }

    /// Sends `AUTH [user] password` and awaits `+OK`.
    fn authenticate(&mut self, auth: &Auth, addr: &Addr) -> Result<()> {
        match &auth.user {
            Some(user) => resp::command(&mut self.wbuf, &[b"AUTH", user, &auth.password]),
            None => resp::command(&mut self.wbuf, &[b"AUTH", &auth.password]),
        }
        self.flush()?;
        let refused =
            self.reply(ReplyWait::Normal, |r| r.error_text().map(|t| String::from_utf8_lossy(t).into_owned()))?;
        match refused {
            None => Ok(()),
            Some(text) => Err(Error::new(SOCK_COM_EXCP, format!("{addr} refused the credentials: {text}"))),
        }
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
        if self.tls.is_some() {
            return self.flush_tls();
        }
        let mut off = 0;
        while off < self.wbuf.len() {
            let rest = &self.wbuf[off..];
            // SAFETY: `rest` is a live slice of `rest.len()` readable bytes; fd
            // is the socket `self.sock` owns, open while self lives.
            let n = unsafe { libc::send(self.fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                self.wbuf.clear();
                return Err(Error::new(send_code(&e), format!("cannot send to the server: {e}")));
            }
            off += n as usize;
        }
        self.wbuf.clear();
        Ok(())
    }

    /// [`Conn::flush`] through TLS: `wbuf` encrypted (as much as rustls
    /// buffers at a time), then sent.
    fn flush_tls(&mut self) -> Result<()> {
        let Some(tls) = self.tls.as_deref_mut() else { return Ok(()) };
        let mut off = 0;
        let r = loop {
            if let Err(e) = send_tls(self.fd, tls) {
                break Err(e);
            }
            if off == self.wbuf.len() {
                break Ok(());
            }
            match tls.writer().write(&self.wbuf[off..]) {
                Ok(n) => off += n,
                Err(e) => break Err(Error::new(SOCK_SEND_ERR, format!("TLS: cannot encrypt: {e}"))),
            }
        };
        self.wbuf.clear();
        r
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
        if self.tls.is_some() {
            return self.fill_tls(flags);
        }
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

    /// [`Conn::fill`] through TLS: what rustls has decrypted, else what the
    /// socket has, decrypted.
    fn fill_tls(&mut self, flags: libc::c_int) -> Result<bool> {
        let Some(tls) = self.tls.as_deref_mut() else { return Ok(false) };
        loop {
            match tls.reader().read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Err(Error::new(SOCK_IO_RESET, "the server closed the connection")),
                Ok(n) => {
                    self.rend += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(Error::new(SOCK_IO_RESET, format!("the server closed the connection: {e}"))),
            }
            match tls.read_tls(&mut FdIo { fd: self.fd, flags }) {
                Ok(0) => return Err(Error::new(SOCK_IO_RESET, "the server closed the connection")),
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && flags != 0 => return Ok(false),
                Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => {
                    return Err(Error::new(SOCK_READ_TMO, "no reply from the server within the timeout"));
                }
                Err(e) => return Err(Error::new(recv_code(&e), format!("cannot read from the server: {e}"))),
            }
            if let Err(e) = tls.process_new_packets() {
                // Tell the server why (the alert rustls queued), then give up.
                let _ = send_tls(self.fd, tls);
                return Err(Error::new(SOCK_COM_EXCP, format!("TLS: {e}")));
            }
            // Anything the session must answer (a key update).
            send_tls(self.fd, tls)?;
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

impl Drop for Conn {
    /// TLS: tells the server the stream ends here (its close notice), if
    /// the socket takes it at once.
    fn drop(&mut self) {
        if let Some(tls) = self.tls.as_deref_mut() {
            tls.send_close_notify();
            let _ = tls.write_tls(&mut FdIo { fd: self.fd, flags: libc::MSG_DONTWAIT });
        }
    }
}

/// Sends every TLS byte the session has ready.
/// Errors: as [`Conn::flush`].
fn send_tls(fd: RawFd, tls: &mut ClientConnection) -> Result<()> {
    while tls.wants_write() {
        if let Err(e) = tls.write_tls(&mut FdIo { fd, flags: 0 }) {
            return Err(Error::new(send_code(&e), format!("cannot send to the server: {e}")));
        }
    }
    Ok(())
}

/// The TLS handshake on the connected socket `fd` (its timeouts set).
/// Errors: as [`Conn::open`]'s TLS ones; a timeout is SOCK_CONN_TMO.
fn handshake(fd: RawFd, mut tls: ClientConnection, addr: &Addr) -> Result<ClientConnection> {
    let timed_out = |e: &std::io::Error| e.raw_os_error() == Some(libc::EAGAIN);
    while tls.is_handshaking() {
        if let Err(e) = send_tls(fd, &mut tls) {
            let code = if e.code() == SOCK_SEND_TMO { SOCK_CONN_TMO } else { SOCK_CONN_ERR };
            return Err(Error::new(code, format!("TLS handshake with {addr}: {e}")));
        }
        if !tls.is_handshaking() {
            break;
        }
        match tls.read_tls(&mut FdIo { fd, flags: 0 }) {
            Ok(0) => {
                return Err(Error::new(
                    SOCK_COM_EXCP,
                    format!("TLS handshake with {addr}: the server closed the connection"),
                ));
            }
            Ok(_) => {}
            Err(e) if timed_out(&e) => {
                return Err(Error::new(
                    SOCK_CONN_TMO,
                    format!("TLS handshake with {addr}: no answer within the timeout"),
                ));
            }
            Err(e) => return Err(io_error(SOCK_CONN_ERR, "TLS handshake with", addr, &e)),
        }
        if let Err(e) = tls.process_new_packets() {
            let _ = send_tls(fd, &mut tls);
            return Err(tls_error(addr, &e));
        }
    }
    // The client's last handshake message goes now, not with the first command.
    send_tls(fd, &mut tls).map_err(|e| Error::new(SOCK_CONN_ERR, format!("TLS handshake with {addr}: {e}")))?;
    Ok(tls)
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

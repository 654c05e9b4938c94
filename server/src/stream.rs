//! The three kinds of connection (TCP, unix socket, TLS over TCP) behind one
//! trait, used generically (no dynamic dispatch: the plain ones run the
//! code they ran before TLS existed), and the I/O steps of a connection:
//! read what is there, wait for readability, write a batch of replies.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A client connection.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + 'static {
    /// Completes when the socket may be read (or has an error or EOF).
    fn ready_to_read(&self) -> impl Future<Output = io::Result<()>>;
}

impl Stream for tokio::net::TcpStream {
    fn ready_to_read(&self) -> impl Future<Output = io::Result<()>> {
        self.readable()
    }
}

impl Stream for tokio::net::UnixStream {
    fn ready_to_read(&self) -> impl Future<Output = io::Result<()>> {
        self.readable()
    }
}

/// TLS: rustls may hold decrypted bytes the socket no longer shows (a
/// read shorter than what one record decrypted to), or a close notice;
/// then a read is due at once. Otherwise the socket says.
impl Stream for tokio_rustls::server::TlsStream<Movable> {
    fn ready_to_read(&self) -> impl Future<Output = io::Result<()>> {
        let (tcp, tls) = self.get_ref();
        // After the handshake, rustls wants to read unless it holds
        // plaintext or has been told the stream ends.
        let buffered = !tls.wants_read();
        async move { if buffered { Ok(()) } else { tcp.live()?.readable().await } }
    }
}

/// A TCP socket that moves between runtimes: registered with the runtime of
/// the thread using it, or parked (no runtime) while it is handed over. A
/// TLS connection's handshake is made on the handshakes' thread, then the
/// connection, rustls's state with it, moves to its worker.
pub(crate) enum Movable {
    Live(tokio::net::TcpStream),
    Parked(std::net::TcpStream),
    /// Only while it changes state.
    Moving,
}

impl Movable {
    /// Takes the socket out of this thread's runtime.
    pub(crate) fn park(&mut self) -> io::Result<()> {
        if let Movable::Live(t) = std::mem::replace(self, Movable::Moving) {
            *self = Movable::Parked(t.into_std()?);
        }
        Ok(())
    }

    /// Registers the socket with this thread's runtime.
    pub(crate) fn unpark(&mut self) -> io::Result<()> {
        if let Movable::Parked(s) = std::mem::replace(self, Movable::Moving) {
            *self = Movable::Live(tokio::net::TcpStream::from_std(s)?);
        }
        Ok(())
    }

    fn live(&self) -> io::Result<&tokio::net::TcpStream> {
        match self {
            Movable::Live(t) => Ok(t),
            _ => Err(io::Error::new(io::ErrorKind::NotConnected, "the socket is being handed over")),
        }
    }

    fn live_mut(&mut self) -> io::Result<Pin<&mut tokio::net::TcpStream>> {
        match self {
            Movable::Live(t) => Ok(Pin::new(t)),
            _ => Err(io::Error::new(io::ErrorKind::NotConnected, "the socket is being handed over")),
        }
    }
}

impl AsyncRead for Movable {
    fn poll_read(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().live_mut() {
            Ok(t) => t.poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for Movable {
    fn poll_write(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut().live_mut() {
            Ok(t) => t.poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().live_mut() {
            Ok(t) => t.poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().live_mut() {
            Ok(t) => t.poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().live_mut() {
            Ok(t) => t.poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// One read attempt into `buf`: `Ready(Ok(0))` at EOF, `Pending` when
/// nothing is there (the task is then woken when something arrives). A
/// read shorter than `buf` makes tokio forget readiness, so the next
/// attempt waits for the kernel instead of making a system call that finds
/// nothing.
pub(crate) async fn try_read<S: Stream>(s: &mut S, buf: &mut [u8]) -> Poll<io::Result<usize>> {
    std::future::poll_fn(|cx| {
        let mut rb = ReadBuf::new(buf);
        Poll::Ready(match Pin::new(&mut *s).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(rb.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        })
    })
    .await
}

/// Writes all of `out`, then clears it. A write that makes no progress for
/// `stall` (a client that does not read its replies) fails with `TimedOut`.
pub(crate) async fn write_all<S: Stream>(s: &mut S, out: &mut Vec<u8>, stall: Duration) -> io::Result<()> {
    let mut done = 0;
    while done < out.len() {
        let rest = &out[done..];
        // Most writes complete at once: try without arming a timer.
        let attempt = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *s).poll_write(cx, rest))).await;
        let n = match attempt {
            Poll::Ready(r) => r?,
            Poll::Pending => {
                let write = std::future::poll_fn(|cx| Pin::new(&mut *s).poll_write(cx, rest));
                match tokio::time::timeout(stall, write).await {
                    Ok(r) => r?,
                    Err(_) => return Err(io::Error::new(io::ErrorKind::TimedOut, "the client reads no replies")),
                }
            }
        };
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        done += n;
    }
    out.clear();
    // TLS keeps what the socket did not take (a no-op on plain sockets).
    let flushed = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *s).poll_flush(cx))).await;
    match flushed {
        Poll::Ready(r) => r,
        Poll::Pending => {
            let flush = std::future::poll_fn(|cx| Pin::new(&mut *s).poll_flush(cx));
            match tokio::time::timeout(stall, flush).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "the client reads no replies")),
            }
        }
    }
}

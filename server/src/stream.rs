//! The two kinds of connection (TCP, unix socket) behind one trait, used
//! generically (no dynamic dispatch), and the I/O steps of a connection:
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
    Ok(())
}

//! Connections that have not authenticated yet (when a password is set):
//! at most `--max-unauthenticated` of them, apart from `--maxclients`, and
//! each for at most `--auth-timeout`.
//!
//! Past the bound, the oldest is closed to make room, rather than the new
//! one refused: so idle connections cannot keep the password holder out
//! (to push its connection out before it sends AUTH, an attacker would
//! have to open the bound's worth of connections within that round trip),
//! and since the bound is below `--maxclients`, they cannot fill that
//! either.

use crate::config::PREAUTH_MAX_ARG_LEN;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// What a client that has not authenticated may send, close to Redis's
/// bounds: at most 10 arguments a command, each at most 16 KiB, a line
/// (inline command, length header) at most 16 KiB. Beyond: an error reply
/// (`-ERR Protocol error: unauthenticated multibulk length`, `... bulk
/// length`), then the connection is closed.
pub(crate) const PREAUTH_LIMITS: resp::Limits =
    resp::Limits { max_bulk_len: PREAUTH_MAX_ARG_LEN, max_args: 10, max_inline_len: PREAUTH_MAX_ARG_LEN, max_depth: 1 };
/// The most bytes of one command an unauthenticated connection buffers:
/// room for the longest it has reason to send, `AUTH` (or `HELLO 3 AUTH
/// ... SETNAME ...`) with a 16 KiB user name and a 16 KiB password. Beyond:
/// `-ERR Protocol error: unauthenticated request too big`, then the close.
/// So 2,000 connections holding a partial command hold at most 68 MiB.
pub(crate) const PREAUTH_QUERY_LIMIT: usize = 2 * (PREAUTH_MAX_ARG_LEN + 32) + 1024;
/// How long a wrong password waits for its answer.
pub(crate) const AUTH_FAILURE_DELAY: Duration = Duration::from_millis(100);
/// Wrong passwords after which a connection is closed.
pub(crate) const MAX_AUTH_FAILURES: u32 = 10;

/// The unauthenticated connections, oldest first.
pub(crate) struct Unauthenticated {
    max: usize,
    waiting: Mutex<BTreeMap<u64, Arc<Notify>>>,
    next: AtomicU64,
    /// Connections closed to make room for newer ones.
    pub(crate) evicted: AtomicU64,
    /// Connections closed at `--auth-timeout`.
    pub(crate) timed_out: AtomicU64,
}

/// Why an unauthenticated connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// It did not authenticate within `--auth-timeout`.
    TimedOut,
    /// It was the oldest when the bound was reached.
    Evicted,
}

impl Closed {
    /// The error the client is sent before the close.
    pub(crate) fn reply(self) -> &'static [u8] {
        match self {
            Closed::TimedOut => b"ERR authentication timeout: closing the connection",
            Closed::Evicted => b"ERR too many unauthenticated connections: closing the oldest (this one) to make room",
        }
    }
}

/// A connection's place among the unauthenticated ones, until it
/// authenticates (dropped then) or ends.
pub(crate) struct Pending {
    all: Arc<Unauthenticated>,
    id: u64,
    evict: Arc<Notify>,
    deadline: Option<tokio::time::Instant>,
}

impl Unauthenticated {
    /// At most `max` (at least 1) connections at once.
    pub(crate) fn new(max: usize) -> Arc<Unauthenticated> {
        Arc::new(Unauthenticated {
            max: max.max(1),
            waiting: Mutex::default(),
            next: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        })
    }

    /// Counts in a new connection, which must authenticate within `limit`;
    /// past the bound, the oldest is told to close.
    pub(crate) fn admit(self: &Arc<Self>, limit: Option<Duration>) -> Pending {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        let mut waiting = self.waiting.lock();
        waiting.insert(id, evict.clone());
        while waiting.len() > self.max {
            let Some((_, oldest)) = waiting.pop_first() else { break };
            // A permit if it is not waiting right now: it sees it at its next wait.
            oldest.notify_one();
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        drop(waiting);
        let deadline = limit.map(|d| tokio::time::Instant::now() + d);
        Pending { all: self.clone(), id, evict, deadline }
    }

    /// Unauthenticated connections now, and the bound.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.waiting.lock().len(), self.max)
    }
}

impl Pending {
    /// Completes when the connection must close: its time is up, or it was
    /// pushed out by newer ones. (Must be polled inside a runtime.)
    pub(crate) async fn closed(&self) -> Closed {
        let timeout = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = self.evict.notified() => Closed::Evicted,
            _ = timeout => {
                self.all.timed_out.fetch_add(1, Ordering::Relaxed);
                Closed::TimedOut
            }
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.all.waiting.lock().remove(&self.id);
    }
}

/// `closed()` of a connection that may be pending: never, once it has
/// authenticated (or when no password is set).
pub(crate) async fn closed(p: Option<&Pending>) -> Closed {
    match p {
        Some(p) => p.closed().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_is_pushed_out_and_the_newest_stays() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let all = Unauthenticated::new(2);
            let first = all.admit(None);
            let second = all.admit(None);
            let third = all.admit(None);
            assert_eq!(all.counts(), (2, 2));
            assert_eq!(first.closed().await, Closed::Evicted);
            let quiet = tokio::time::timeout(Duration::from_millis(20), second.closed()).await;
            assert!(quiet.is_err(), "the second stays");
            // One that authenticates leaves room.
            drop(second);
            let _fourth = all.admit(None);
            assert!(tokio::time::timeout(Duration::from_millis(20), third.closed()).await.is_err());
            assert_eq!(all.evicted.load(Ordering::Relaxed), 1);
            let late = all.admit(Some(Duration::from_millis(10)));
            drop(third);
            assert_eq!(late.closed().await, Closed::TimedOut);
        });
    }
}

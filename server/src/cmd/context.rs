//! What a command runs with: the connection's state ([`Client`]), the
//! server's and the worker's ([`Ctx`]), its key's queue ([`Ctx::queue`],
//! [`key_error`]), and how integer arguments are read.

use super::lease::owned::OwnedLeases;
use crate::durable::UnsyncedReplies;
use crate::keys::{KeyError, LastKey, WorkerKeys};
use crate::reply;
use crate::state::{LeaseCounts, ServerState, WorkerStats};
use resp::Proto;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tvm::Queue;

/// One connection's state, as the commands see it.
pub(crate) struct Client {
    /// CLIENT ID.
    pub(crate) id: u64,
    /// RESP2, or RESP3 after HELLO 3.
    pub(crate) proto: Proto,
    /// AUTH passed (or no password is required).
    pub(crate) authed: bool,
    /// Wrong passwords this connection gave.
    pub(crate) auth_failures: u32,
    /// CLIENT SETNAME.
    pub(crate) name: Option<Vec<u8>>,
    /// CLIENT SETINFO LIB-NAME / LIB-VER.
    pub(crate) lib: [Option<Vec<u8>>; 2],
    /// The peer, for CLIENT INFO.
    pub(crate) peer: String,
    /// The queue of the last key used.
    pub(crate) last: LastKey,
    /// When the connection was accepted.
    pub(crate) since: Instant,
    /// The leases it holds (TVMQ.LEASE), released when it ends.
    pub(crate) leases: OwnedLeases,
    /// Replies in the output buffer that wait for a sync of an `always`
    /// queue before they may be written.
    pub(crate) unsynced: UnsyncedReplies,
    /// Queues the command just run needs `--auto-create` to make (it wrote
    /// no reply: it runs again once they are made).
    pub(crate) create: Option<Vec<Vec<u8>>>,
}

impl Client {
    /// A new client; `authed` when no password is required; what its lease
    /// calls do is counted in `lease_counts`.
    pub(crate) fn new(id: u64, authed: bool, peer: String, lease_counts: Arc<LeaseCounts>) -> Client {
        Client {
            id,
            proto: Proto::Resp2,
            authed,
            auth_failures: 0,
            name: None,
            lib: [None, None],
            peer,
            last: LastKey::default(),
            since: Instant::now(),
            leases: OwnedLeases::new(lease_counts),
            unsynced: UnsyncedReplies::default(),
            create: None,
        }
    }
}

/// What a command needs: the server, the worker, the client.
pub(crate) struct Ctx<'a> {
    pub(crate) shared: &'a ServerState,
    pub(crate) keys: &'a WorkerKeys,
    pub(crate) client: &'a mut Client,
    /// The worker's counters.
    pub(crate) stats: &'a WorkerStats,
}

impl Ctx<'_> {
    /// The queue of `key` (never created), writing the error reply if there
    /// is none.
    pub(crate) fn queue(&mut self, key: &[u8], out: &mut Vec<u8>) -> Option<Arc<Queue>> {
        match self.client.last.resolve(self.shared, self.keys, key) {
            Ok(q) => Some(q.clone()),
            Err(e) => {
                key_error(out, key, &e);
                None
            }
        }
    }
}

/// The reply for a key that names no usable queue.
pub(crate) fn key_error(out: &mut Vec<u8>, key: &[u8], e: &KeyError) {
    match e {
        KeyError::NoSuchQueue => reply::no_such_queue(out, key),
        KeyError::Queue(e) => reply::plain_error(out, e),
        KeyError::InvalidName(why) => reply::invalid_key(out, key, why),
    }
}

/// Milliseconds given as an argument: 0 or more.
pub(crate) fn millis(arg: &[u8]) -> Option<Duration> {
    parse_int(arg).and_then(|v| u64::try_from(v).ok()).map(Duration::from_millis)
}

/// A lease time or a release delay given as an argument: 0 to
/// [`tvm::MAX_LEASE_MS`] milliseconds (a year; longer would park a record
/// for good).
pub(crate) fn lease_millis(arg: &[u8]) -> Option<Duration> {
    millis(arg).filter(|d| d.as_millis() <= u128::from(tvm::MAX_LEASE_MS))
}

/// An integer as Redis's `string2ll` reads one (no `+`, no leading zero,
/// no blank, within i64).
pub(crate) fn parse_int(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = match s {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, s),
    };
    match digits {
        [b'0'] if !neg => return Some(0),
        [b'1'..=b'9', ..] => {}
        _ => return None,
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(d - b'0');
    }
    i64::try_from(if neg { -v } else { v }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_redis_reads_them() {
        assert_eq!(parse_int(b"0"), Some(0));
        assert_eq!(parse_int(b"-5"), Some(-5));
        assert_eq!(parse_int(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_int(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"-0",
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"1a",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_int(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}

//! The arguments of the lease commands: TVMQ.LEASE's options
//! ([`LeaseArgs`]) and TVMQ.RELEASE's delay, with their error replies.

use super::super::context::{lease_millis, millis, parse_int};
use crate::reply;
use std::time::Duration;

/// The refusal of a FOR beyond [`tvm::MAX_LEASE_MS`] (its digits are
/// checked by a unit test).
pub(crate) const FOR_RANGE: &[u8] = b"ERR FOR must be 0 to 31536000000 milliseconds (a year)";
/// The refusal of a DELAY beyond [`tvm::MAX_LEASE_MS`].
pub(crate) const DELAY_RANGE: &[u8] = b"ERR DELAY must be 0 to 31536000000 milliseconds (a year)";
/// The refusal of TVMQ.EXTEND's time beyond [`tvm::MAX_LEASE_MS`].
pub(crate) const EXTEND_RANGE: &[u8] = b"ERR the lease time must be 0 to 31536000000 milliseconds (a year)";

/// What a TVMQ.LEASE asks for (kept while its client is blocked).
#[derive(Clone, Copy)]
pub(crate) struct LeaseArgs {
    /// Leases at most (COUNT; 1 without).
    pub(crate) count: usize,
    /// FOR: how long each lease runs (zero: the queue's lease time).
    pub(crate) lease_time: Duration,
    /// Reply with an array of entries (COUNT given), else one entry.
    pub(crate) array: bool,
}

/// TVMQ.LEASE key [COUNT n] [BLOCK ms] [FOR ms]'s options (from argument
/// 2): what it asks for and how long it blocks (`None`: no BLOCK;
/// `Some(None)`: BLOCK 0, forever). `None` with the error reply written
/// when one is wrong.
pub(crate) fn lease_args(
    buf: &[u8],
    req: &resp::Request,
    out: &mut Vec<u8>,
) -> Option<(LeaseArgs, Option<Option<Duration>>)> {
    let mut args = LeaseArgs { count: 1, lease_time: Duration::ZERO, array: false };
    let mut block = None;
    let mut i = 2;
    while i < req.len() {
        let opt = req.arg(buf, i);
        let Some(val) = req.get(buf, i + 1) else {
            reply::syntax_error(out);
            return None;
        };
        if opt.eq_ignore_ascii_case(b"COUNT") {
            match parse_int(val) {
                Some(n) if n > 0 => args.count = n as usize,
                _ => {
                    resp::error(out, b"ERR COUNT must be a positive integer");
                    return None;
                }
            }
            args.array = true;
        } else if opt.eq_ignore_ascii_case(b"BLOCK") {
            match millis(val) {
                Some(d) => block = Some(d),
                None => {
                    resp::error(out, b"ERR BLOCK must be 0 or more milliseconds");
                    return None;
                }
            }
        } else if opt.eq_ignore_ascii_case(b"FOR") {
            match lease_millis(val) {
                Some(d) => args.lease_time = d,
                None => {
                    resp::error(out, FOR_RANGE);
                    return None;
                }
            }
        } else {
            reply::syntax_error(out);
            return None;
        }
        i += 2;
    }
    // BLOCK 0: forever.
    Some((args, block.map(|d: Duration| (!d.is_zero()).then_some(d))))
}

/// TVMQ.RELEASE key id [DELAY ms]'s delay (zero without). `None` with the
/// error reply written when it is wrong.
pub(crate) fn release_delay(buf: &[u8], req: &resp::Request, out: &mut Vec<u8>) -> Option<Duration> {
    match (req.get(buf, 3), req.get(buf, 4), req.len()) {
        (None, _, 3) => Some(Duration::ZERO),
        (Some(opt), Some(v), 5) if opt.eq_ignore_ascii_case(b"DELAY") => {
            let delay = lease_millis(v);
            if delay.is_none() {
                resp::error(out, DELAY_RANGE);
            }
            delay
        }
        _ => {
            reply::syntax_error(out);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusals_name_the_library_s_maximum() {
        let most = tvm::MAX_LEASE_MS.to_string();
        for text in [FOR_RANGE, DELAY_RANGE, EXTEND_RANGE] {
            assert!(String::from_utf8_lossy(text).contains(&format!(" 0 to {most} milliseconds")));
        }
        assert_eq!(lease_millis(most.as_bytes()), Some(Duration::from_millis(tvm::MAX_LEASE_MS)));
        assert_eq!(lease_millis((tvm::MAX_LEASE_MS + 1).to_string().as_bytes()), None);
        assert_eq!(lease_millis(b"9223372036854775807"), None);
        assert_eq!(lease_millis(b"-1"), None);
    }
}

//! What becomes of a reply: a synchronous caller's answer ([`Answer`]),
//! the tally of asynchronous pushes ([`Tally`]), a Redis Cluster's
//! redirection or slot map; and the error an error reply means.

use super::slot::{Redirect, SLOTS, parse_redirect};
use crate::error::*;
use parking_lot::Mutex;
use resp::Reply;
use std::sync::Arc;

/// A reply, owned.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    /// A simple string (`+OK`).
    Ok,
    /// An integer (a list's new length).
    Int(i64),
    /// A null: no value.
    Nil,
    /// A bulk string.
    Value(Vec<u8>),
    /// An array of bulk strings (LPOP with a count, BLPOP's key and value).
    Values(Vec<Vec<u8>>),
    /// tvmq serve's lease entry `[id, deliveries, record]` (TVMQ.LEASE).
    Lease(Vec<u8>, i64, Vec<u8>),
    /// Another array whose first item is a string (ROLE: `master`, ...): that string.
    Head(Vec<u8>),
    /// Anything else.
    Other,
}

/// The result of one synchronous command.
pub(crate) type Outcome = Result<Answer>;

/// The asynchronous pushes of one handle: how many are unanswered, how many
/// went in, and the first failure. Shared between the handle and the
/// commands in flight.
#[derive(Default)]
pub(crate) struct Tally(Mutex<TallyState>);

#[derive(Default)]
struct TallyState {
    outstanding: usize,
    confirmed: usize,
    first: Option<Error>,
}

impl Tally {
    /// Unanswered asynchronous pushes.
    pub(crate) fn outstanding(&self) -> usize {
        self.0.lock().outstanding
    }

    /// The first failure not yet collected.
    pub(crate) fn failure(&self) -> Option<Error> {
        self.0.lock().first.clone()
    }

    pub(crate) fn sent(&self) {
        self.0.lock().outstanding += 1;
    }

    pub(super) fn answered(&self, result: std::result::Result<(), Error>) {
        let mut t = self.0.lock();
        t.outstanding = t.outstanding.saturating_sub(1);
        match result {
            Ok(()) => t.confirmed += 1,
            Err(e) => {
                if t.first.is_none() {
                    t.first = Some(e);
                }
            }
        }
    }

    /// Collects the result since the last collection: records that went in,
    /// and the first failure. Call only when nothing is outstanding.
    pub(crate) fn collect(&self) -> (usize, Option<Error>) {
        let mut t = self.0.lock();
        (std::mem::take(&mut t.confirmed), t.first.take())
    }
}

/// What a command in flight is for.
pub(crate) enum Kind {
    /// A synchronous call's command: its answer goes to [`Router::take_answer`].
    Sync(u64),
    /// An asynchronous push of the handle owning the tally.
    Async(Arc<Tally>),
    /// `ASKING` before a command redirected with ASK (its `+OK` is ignored).
    Asking,
    /// `CLUSTER SLOTS` refreshing the slot map.
    Slots,
}

/// What a reply means to the router (owned: the read buffer moves on).
pub(super) enum Parsed {
    Answer(Answer),
    Failed(Error),
    Redirect(Redirect),
    /// `TRYAGAIN` (a multi-key command during a migration) or `CLUSTERDOWN`:
    /// send it again a little later.
    Retry(Error),
    Slots(Vec<(u16, u16, String, u16)>),
}

/// Maps an error reply to a code, as docs/protocol.md says: a first word
/// that is an STVM code name gives that code; `ERR no such queue` gives
/// TBL_NOT_FOUND; anything else SVR_EXCEPTION, with the text as detail.
pub(crate) fn server_error(text: &[u8]) -> Error {
    let text = String::from_utf8_lossy(text);
    let word = text.split(' ').next().unwrap_or("");
    let code = match CODES.iter().position(|(name, _)| *name == word) {
        Some(code) if code > 0 => code as u32,
        _ if text.starts_with("ERR no such queue") => TBL_NOT_FOUND,
        _ => SVR_EXCEPTION,
    };
    Error::new(code, format!("the server answered: {text}"))
}

fn answer(reply: Reply<'_>) -> Answer {
    match reply {
        Reply::Simple(_) => Answer::Ok,
        Reply::Integer(v) => Answer::Int(v),
        Reply::Null => Answer::Nil,
        Reply::Bulk(b) => Answer::Value(b.to_vec()),
        Reply::Array(items) => {
            if let [Reply::Bulk(id), Reply::Integer(d), Reply::Bulk(r)] = items.as_slice() {
                return Answer::Lease(id.to_vec(), *d, r.to_vec());
            }
            let mut values = Vec::with_capacity(items.len());
            for item in &items {
                match item {
                    Reply::Bulk(b) => values.push(b.to_vec()),
                    _ => {
                        return match items.first() {
                            Some(Reply::Bulk(b) | Reply::Simple(b)) => Answer::Head(b.to_vec()),
                            _ => Answer::Other,
                        };
                    }
                }
            }
            Answer::Values(values)
        }
        _ => Answer::Other,
    }
}

/// Parses a `CLUSTER SLOTS` reply: (first slot, last slot, host, port) of each range's master.
pub(super) fn slot_ranges(reply: &Reply<'_>) -> Option<Vec<(u16, u16, String, u16)>> {
    let mut out = Vec::new();
    for range in reply.as_array()? {
        let items = range.as_array()?;
        let first = u16::try_from(items.first()?.as_int()?).ok()?;
        let last = u16::try_from(items.get(1)?.as_int()?).ok()?;
        let master = items.get(2)?.as_array()?;
        let host = String::from_utf8_lossy(master.first()?.as_bytes()?).into_owned();
        let port = u16::try_from(master.get(1)?.as_int()?).ok()?;
        if usize::from(last) >= SLOTS || first > last {
            return None;
        }
        out.push((first, last, host, port));
    }
    Some(out)
}

pub(super) fn parse(kind: &Kind, reply: Reply<'_>) -> Parsed {
    if let Some(text) = reply.error_text() {
        if let Some(r) = parse_redirect(text) {
            return Parsed::Redirect(r);
        }
        if text.starts_with(b"TRYAGAIN") || text.starts_with(b"CLUSTERDOWN") {
            return Parsed::Retry(server_error(text));
        }
        return Parsed::Failed(server_error(text));
    }
    match kind {
        Kind::Async(_) => Parsed::Answer(Answer::Ok),
        Kind::Slots => match slot_ranges(&reply) {
            Some(r) => Parsed::Slots(r),
            None => Parsed::Failed(Error::new(SOCK_COM_EXCP, "unreadable CLUSTER SLOTS reply")),
        },
        _ => Parsed::Answer(answer(reply)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_words_map_to_codes() {
        assert_eq!(server_error(b"DATA_SPC_FULL queue 21 is full: no space").code(), DATA_SPC_FULL);
        assert_eq!(server_error(b"RECD_TOO_LONG value of 400 bytes").code(), RECD_TOO_LONG);
        assert_eq!(server_error(b"SHM_ERR_EIDRM queue 21 was dropped").code(), SHM_ERR_EIDRM);
        assert_eq!(server_error(b"ERR no such queue 'mylist'").code(), TBL_NOT_FOUND);
        assert_eq!(server_error(b"WRONGTYPE Operation against a key").code(), SVR_EXCEPTION);
        assert_eq!(server_error(b"ERR unknown command 'FOO'").code(), SVR_EXCEPTION);
        assert_eq!(server_error(b"TVM_DONE_SUCC oddly").code(), SVR_EXCEPTION);
        assert_eq!(server_error(b"").code(), SVR_EXCEPTION);
        assert_eq!(server_error(b"\xff DATA").code(), SVR_EXCEPTION);
        assert!(server_error(b"OOM command not allowed").detail().contains("OOM command not allowed"));
    }

    #[test]
    fn cluster_slots_replies() {
        let mut wire = Vec::new();
        resp::array_header(&mut wire, 2);
        for (a, b, port) in [(0, 8191, 7000), (8192, 16383, 7001)] {
            resp::array_header(&mut wire, 4);
            resp::integer(&mut wire, a);
            resp::integer(&mut wire, b);
            resp::array_header(&mut wire, 3);
            resp::bulk(&mut wire, b"127.0.0.1");
            resp::integer(&mut wire, port);
            resp::bulk(&mut wire, b"0123456789abcdef");
            resp::array_header(&mut wire, 2); // a replica
            resp::bulk(&mut wire, b"127.0.0.1");
            resp::integer(&mut wire, port + 100);
        }
        let (reply, _) = resp::parse_reply(&wire, &resp::Limits::default()).unwrap().unwrap();
        assert_eq!(
            slot_ranges(&reply).unwrap(),
            [(0, 8191, "127.0.0.1".to_owned(), 7000), (8192, 16383, "127.0.0.1".to_owned(), 7001)]
        );
        // Malformed: a slot beyond the last, a missing port.
        for bad in
            [&b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n"[..], b"*1\r\n*3\r\n:0\r\n:5\r\n*1\r\n$1\r\nh\r\n"]
        {
            let (reply, _) = resp::parse_reply(bad, &resp::Limits::default()).unwrap().unwrap();
            assert_eq!(slot_ranges(&reply), None);
        }
    }

    #[test]
    fn replies_become_answers() {
        let limits = resp::Limits::default();
        let one = |wire: &[u8]| {
            let (r, _) = resp::parse_reply(wire, &limits).unwrap().unwrap();
            match parse(&Kind::Sync(0), r) {
                Parsed::Answer(a) => Ok(a),
                Parsed::Failed(e) | Parsed::Retry(e) => Err(e.code()),
                Parsed::Redirect(_) => Err(u32::MAX),
                Parsed::Slots(_) => Err(0),
            }
        };
        assert_eq!(one(b":7\r\n"), Ok(Answer::Int(7)));
        assert_eq!(one(b"$-1\r\n"), Ok(Answer::Nil));
        assert_eq!(one(b"*-1\r\n"), Ok(Answer::Nil));
        assert_eq!(one(b"$3\r\nabc\r\n"), Ok(Answer::Value(b"abc".to_vec())));
        assert_eq!(one(b"*2\r\n$2\r\n21\r\n$1\r\nx\r\n"), Ok(Answer::Values(vec![b"21".to_vec(), b"x".to_vec()])));
        assert_eq!(one(b"*1\r\n:1\r\n"), Ok(Answer::Other));
        assert_eq!(one(b"-DATA_SPC_FULL full\r\n"), Err(DATA_SPC_FULL));
        assert_eq!(one(b"-TRYAGAIN later\r\n"), Err(SVR_EXCEPTION));
        assert_eq!(one(b"-MOVED 1 h:1\r\n"), Err(u32::MAX));
    }
}

//! The commands of one client in flight: which server (node) each goes to,
//! the replies awaited on each connection in order, redirections of a
//! Redis Cluster, and what becomes of each reply (a synchronous caller's
//! answer, or the tally of asynchronous pushes).
//!
//! A router is used by one thread at a time: a handle's own, or the flusher
//! of a shared connection ([`super::pipeline`]).

use super::Dial;
use super::conn::{Addr, Conn, ReplyWait};
use super::slot::{Redirect, SLOTS, key_slot, parse_redirect};
use crate::error::*;
use parking_lot::Mutex;
use resp::Reply;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

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

    fn answered(&self, result: std::result::Result<(), Error>) {
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

/// A command whose reply is awaited.
struct Inflight {
    kind: Kind,
    wait: ReplyWait,
    /// Its slot and bytes, kept in cluster mode to send it again when redirected.
    slot: u16,
    cmd: Option<Box<[u8]>>,
    /// Redirections so far.
    hops: u8,
}

/// A server (a Redis Cluster has several).
struct Node {
    addr: Addr,
    conn: Option<Conn>,
    inflight: VecDeque<Inflight>,
}

/// What kind of server the client talks to (found at connect time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// A Redis without cluster mode (`CLUSTER SLOTS`: cluster support disabled).
    Redis,
    /// A Redis Cluster node.
    Cluster,
    /// Anything else answering RESP (tvmq serve: `CLUSTER` is an unknown command).
    Other,
}

/// Redirections after which a command fails.
const MAX_HOPS: u8 = 16;
/// No node known for a slot.
const NO_NODE: u16 = u16::MAX;

/// The commands of one client and the connections they go through.
pub(crate) struct Router {
    timeout: Option<Duration>,
    /// TLS for every node's connection (the seed's configuration).
    /// TLS and AUTH for every connection.
    dial: Dial,
    flavor: Flavor,
    nodes: Vec<Node>,
    /// Cluster: slot -> index in `nodes` (NO_NODE: unknown). Empty otherwise.
    slots: Vec<u16>,
    /// A `CLUSTER SLOTS` refresh is in flight.
    refreshing: bool,
    /// Answers of synchronous commands, by ticket.
    answers: Vec<(u64, Outcome)>,
}

/// What a reply means to the router (owned: the read buffer moves on).
enum Parsed {
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
fn slot_ranges(reply: &Reply<'_>) -> Option<Vec<(u16, u16, String, u16)>> {
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

fn parse(kind: &Kind, reply: Reply<'_>) -> Parsed {
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

impl Router {
    /// Connects to `seed` and finds out what it is: a Redis Cluster node
    /// (then the slot map is read and every command goes to the node owning
    /// its key), a plain Redis, or another RESP server (tvmq serve).
    /// Every connection (to the seed, to the other nodes of a cluster) is
    /// made with the TLS and AUTH of `dial`.
    pub(crate) fn connect(seed: &Addr, timeout: Option<Duration>, dial: Dial) -> Result<Router> {
        let mut conn = Conn::open(seed, timeout, &dial)?;
        resp::command(&mut conn.wbuf, &[b"CLUSTER", b"SLOTS"]);
        conn.flush()?;
        // Ok(flavor) of a server without cluster mode, Err(slot map) of a cluster node.
        let probe = conn.reply(ReplyWait::Normal, |r| match r.error_text() {
            Some(text) if String::from_utf8_lossy(text).contains("cluster support disabled") => Some(Ok(Flavor::Redis)),
            Some(_) => Some(Ok(Flavor::Other)),
            None => slot_ranges(&r).map(Err),
        })?;
        let probe = probe.ok_or_else(|| Error::new(SOCK_COM_EXCP, "unreadable CLUSTER SLOTS reply"))?;
        let mut router = Router {
            timeout,
            dial,
            flavor: Flavor::Other,
            nodes: vec![Node { addr: seed.clone(), conn: Some(conn), inflight: VecDeque::new() }],
            slots: Vec::new(),
            refreshing: false,
            answers: Vec::new(),
        };
        match probe {
            Ok(flavor) => router.flavor = flavor,
            Err(ranges) => {
                router.flavor = Flavor::Cluster;
                router.slots = vec![NO_NODE; SLOTS];
                router.apply_slots(ranges, 0);
            }
        }
        Ok(router)
    }

    pub(crate) fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// The index of the node at host:port (an empty host: that of node
    /// `asked`), added if new.
    fn node_at(&mut self, host: &str, port: u16, asked: usize) -> usize {
        let host = if host.is_empty() || host == "?" {
            match &self.nodes[asked].addr {
                Addr::Tcp { host, .. } => host.clone(),
                Addr::Unix(_) => "127.0.0.1".to_owned(),
            }
        } else {
            host.to_owned()
        };
        let addr = Addr::Tcp { host, port };
        if let Some(i) = self.nodes.iter().position(|n| n.addr == addr) {
            return i;
        }
        self.nodes.push(Node { addr, conn: None, inflight: VecDeque::new() });
        self.nodes.len() - 1
    }

    fn apply_slots(&mut self, ranges: Vec<(u16, u16, String, u16)>, asked: usize) {
        for (first, last, host, port) in ranges {
            let i = self.node_at(&host, port, asked);
            let i = u16::try_from(i).unwrap_or(NO_NODE);
            for s in first..=last {
                self.slots[usize::from(s)] = i;
            }
        }
    }

    /// The node that owns `slot` (node 0 when not a cluster, or unknown).
    fn route(&self, slot: u16) -> usize {
        match self.slots.get(usize::from(slot)) {
            Some(&i) if i != NO_NODE => usize::from(i),
            _ => 0,
        }
    }

    /// Node `i`'s connection, opened if it has none (after an error, or new).
    fn conn(&mut self, i: usize) -> Result<&mut Conn> {
        let node = &mut self.nodes[i];
        if node.conn.is_none() {
            node.conn = Some(Conn::open(&node.addr, self.timeout, &self.dial)?);
        }
        node.conn.as_mut().ok_or_else(|| Error::new(SVR_EXCEPTION, "no connection to the server"))
    }

    /// Appends a command for key `key` (written by `encode`) to the
    /// connection of the node owning the key; it is written by the next
    /// [`Router::flush`]. When that node cannot be connected, `kind` is told
    /// of the failure (as for any failed command) and the error returned.
    pub(crate) fn enqueue(
        &mut self,
        key: &[u8],
        kind: Kind,
        wait: ReplyWait,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<()> {
        let cluster = self.flavor == Flavor::Cluster;
        let slot = if cluster { key_slot(key) } else { 0 };
        let i = self.route(slot);
        if let Err(e) = self.conn(i) {
            // A node that cannot be reached may have been replaced (a
            // failover): ask another node for the map again, now, so that
            // the next command goes to the new owner.
            if cluster {
                self.refresh_now(i);
            }
            self.fail(kind, e.clone());
            return Err(e);
        }
        let Some(conn) = self.nodes[i].conn.as_mut() else {
            self.fail(kind, Error::new(SVR_EXCEPTION, "no connection to the server"));
            return Err(Error::new(SVR_EXCEPTION, "no connection to the server"));
        };
        let start = conn.wbuf.len();
        encode(&mut conn.wbuf);
        let cmd = cluster.then(|| conn.wbuf[start..].into());
        self.nodes[i].inflight.push_back(Inflight { kind, wait, slot, cmd, hops: 0 });
        Ok(())
    }

    /// Bytes waiting to be written, over every connection.
    pub(crate) fn unwritten(&self) -> usize {
        self.nodes.iter().filter_map(|n| n.conn.as_ref()).map(|c| c.wbuf.len()).sum()
    }

    /// Tells `kind` that its command failed with `e`.
    pub(crate) fn fail(&mut self, kind: Kind, e: Error) {
        match kind {
            Kind::Sync(id) => self.answers.push((id, Err(e))),
            Kind::Async(t) => t.answered(Err(e)),
            Kind::Asking => {}
            Kind::Slots => self.refreshing = false,
        }
    }

    /// Closes node `i`'s connection after `e`: every command awaiting a
    /// reply there fails with `e` (they may or may not have been executed).
    /// The next command for that node connects again.
    fn break_node(&mut self, i: usize, e: &Error) {
        self.nodes[i].conn = None;
        while let Some(f) = self.nodes[i].inflight.pop_front() {
            self.fail(f.kind, e.clone());
        }
    }

    /// Writes what every connection has waiting. A connection that fails is
    /// closed (its commands fail).
    pub(crate) fn flush(&mut self) {
        for i in 0..self.nodes.len() {
            let Some(conn) = self.nodes[i].conn.as_mut() else { continue };
            if conn.wbuf.is_empty() {
                continue;
            }
            if let Err(e) = conn.flush() {
                self.break_node(i, &e);
            }
        }
    }

    /// Processes the replies of node `i` that are in its read buffer, then
    /// reads: once and without waiting unless `block`, in which case it
    /// waits for at least one reply. After a redirection it reads every
    /// reply awaited on that node, so that the commands it sends again keep
    /// their order ahead of any command sent later.
    fn read_node(&mut self, i: usize, block: bool) {
        let mut progress = false;
        let mut drain = false;
        loop {
            let node = &mut self.nodes[i];
            let Some(front) = node.inflight.front() else { return };
            let wait = front.wait;
            let Some(conn) = node.conn.as_mut() else { return };
            match conn.buffered(|r| parse(&front.kind, r)) {
                Ok(Some(parsed)) => {
                    progress = true;
                    drain |= self.complete(i, parsed);
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    self.break_node(i, &e);
                    return;
                }
            }
            let must = drain || (block && !progress);
            if must {
                self.flush();
            }
            let Some(conn) = self.nodes[i].conn.as_mut() else { return };
            match conn.receive(must, wait) {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => {
                    self.break_node(i, &e);
                    return;
                }
            }
        }
    }

    /// Applies a reply to the command at the front of node `i`. Returns
    /// whether the command was redirected.
    fn complete(&mut self, i: usize, parsed: Parsed) -> bool {
        let Some(f) = self.nodes[i].inflight.pop_front() else { return false };
        match parsed {
            Parsed::Answer(a) => {
                match f.kind {
                    Kind::Sync(id) => self.answers.push((id, Ok(a))),
                    Kind::Async(t) => t.answered(Ok(())),
                    Kind::Asking | Kind::Slots => {}
                }
                false
            }
            Parsed::Failed(e) => {
                self.fail(f.kind, e);
                false
            }
            Parsed::Slots(ranges) => {
                self.refreshing = false;
                if self.flavor == Flavor::Cluster {
                    self.apply_slots(ranges, i);
                }
                false
            }
            Parsed::Retry(e) if f.cmd.is_none() || f.hops >= MAX_HOPS => {
                self.fail(f.kind, e);
                false
            }
            Parsed::Retry(_) => {
                std::thread::sleep(Duration::from_millis(10));
                let to = self.route(f.slot);
                self.resend(to, f, false);
                true
            }
            Parsed::Redirect(r) if f.cmd.is_none() || f.hops >= MAX_HOPS || self.flavor != Flavor::Cluster => {
                let text = format!("redirected too often or outside cluster mode: {r:?}");
                self.fail(f.kind, Error::new(SVR_EXCEPTION, text));
                false
            }
            Parsed::Redirect(Redirect::Moved { slot, host, port }) => {
                let to = self.node_at(&host, port, i);
                self.slots[usize::from(slot)] = u16::try_from(to).unwrap_or(NO_NODE);
                self.refresh(to);
                self.resend(to, f, false);
                true
            }
            Parsed::Redirect(Redirect::Ask { host, port, .. }) => {
                let to = self.node_at(&host, port, i);
                self.resend(to, f, true);
                true
            }
        }
    }

    /// Sends a redirected command again, to node `to` (after `ASKING` if `ask`).
    fn resend(&mut self, to: usize, mut f: Inflight, ask: bool) {
        f.hops += 1;
        let Some(cmd) = f.cmd.as_deref() else { return };
        let conn = match self.conn(to) {
            Ok(c) => c,
            Err(e) => return self.fail(f.kind, e),
        };
        if ask {
            resp::command(&mut conn.wbuf, &[b"ASKING"]);
        }
        conn.wbuf.extend_from_slice(cmd);
        let node = &mut self.nodes[to];
        if ask {
            node.inflight.push_back(Inflight {
                kind: Kind::Asking,
                wait: ReplyWait::Normal,
                slot: 0,
                cmd: None,
                hops: 0,
            });
        }
        node.inflight.push_back(f);
    }

    /// Asks node `at` for the whole slot map (once at a time); the answer
    /// is applied when it comes, without waiting for it.
    fn refresh(&mut self, at: usize) {
        if self.refreshing {
            return;
        }
        let Ok(conn) = self.conn(at) else { return };
        resp::command(&mut conn.wbuf, &[b"CLUSTER", b"SLOTS"]);
        self.nodes[at].inflight.push_back(Inflight {
            kind: Kind::Slots,
            wait: ReplyWait::Normal,
            slot: 0,
            cmd: None,
            hops: 0,
        });
        self.refreshing = true;
    }

    /// Asks a node other than `except` (connected, or connecting to each
    /// known one in turn) for the slot map and applies it before returning.
    fn refresh_now(&mut self, except: usize) {
        let mut order: Vec<usize> = (0..self.nodes.len()).filter(|&j| j != except).collect();
        order.sort_by_key(|&j| self.nodes[j].conn.is_none());
        for j in order {
            if self.conn(j).is_err() {
                continue;
            }
            self.refreshing = false;
            self.refresh(j);
            self.flush();
            while self.refreshing && self.nodes[j].conn.is_some() {
                self.read_node(j, true);
            }
            if !self.refreshing {
                return;
            }
        }
        self.refreshing = false;
    }

    /// The answer of ticket `id`, if it came.
    pub(crate) fn take_answer(&mut self, id: u64) -> Option<Outcome> {
        let pos = self.answers.iter().position(|a| a.0 == id)?;
        Some(self.answers.swap_remove(pos).1)
    }

    /// Every answer that came.
    pub(crate) fn drain_answers(&mut self) -> impl Iterator<Item = (u64, Outcome)> + '_ {
        self.answers.drain(..)
    }

    /// Writes what is waiting and reads replies until ticket `id` has its
    /// answer (left in the router: [`Router::take_answer`]). Replies before
    /// it (asynchronous pushes) are processed on the way.
    pub(crate) fn wait_for(&mut self, id: u64) {
        while !self.step(Some(id)) {}
    }

    /// Writes what is waiting, then reads once (waiting for at least one
    /// reply) on the node where ticket `id` is awaited, or (None) on the
    /// first node awaiting anything. Returns true when there is nothing to
    /// wait for: the answer of `id` is in (or was lost: then it says so),
    /// or (None) nothing is awaited.
    pub(crate) fn step(&mut self, id: Option<u64>) -> bool {
        if let Some(id) = id {
            if self.answers.iter().any(|a| a.0 == id) {
                return true;
            }
        }
        self.flush();
        let at = match id {
            Some(id) => self
                .nodes
                .iter()
                .position(|n| n.inflight.iter().rev().any(|f| matches!(f.kind, Kind::Sync(x) if x == id))),
            None => self.nodes.iter().position(|n| !n.inflight.is_empty()),
        };
        match (at, id) {
            (Some(i), _) => {
                self.read_node(i, true);
                false
            }
            (None, Some(id)) => {
                if !self.answers.iter().any(|a| a.0 == id) {
                    self.answers.push((id, Err(Error::new(SVR_EXCEPTION, "the command's reply was lost"))));
                }
                true
            }
            (None, None) => true,
        }
    }

    /// Runs one command for key `key` and returns its answer.
    pub(crate) fn call(&mut self, id: u64, key: &[u8], wait: ReplyWait, encode: impl FnOnce(&mut Vec<u8>)) -> Outcome {
        if self.enqueue(key, Kind::Sync(id), wait, encode).is_ok() {
            self.wait_for(id);
        }
        self.take_answer(id).unwrap_or_else(|| Err(Error::new(SVR_EXCEPTION, "the command's reply was lost")))
    }

    /// Processes the replies that have arrived, without waiting.
    pub(crate) fn pump(&mut self) {
        for i in 0..self.nodes.len() {
            if !self.nodes[i].inflight.is_empty() {
                self.read_node(i, false);
            }
        }
    }

    /// Writes everything and reads replies until `done()` holds or nothing
    /// is awaited any more.
    pub(crate) fn settle_until(&mut self, mut done: impl FnMut() -> bool) {
        loop {
            self.flush();
            if done() {
                return;
            }
            let Some(i) = self.nodes.iter().position(|n| !n.inflight.is_empty()) else { return };
            self.read_node(i, true);
        }
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

//! The commands of one client in flight: which server (node) each goes to,
//! the replies awaited on each connection in order, and redirections of a
//! Redis Cluster (what becomes of each reply: `reply`).
//!
//! A router is used by one thread at a time: a handle's own, or the flusher
//! of a shared connection ([`super::pipeline`]).

use super::Dial;
use super::conn::{Addr, Conn, ReplyWait};
use super::reply::{Kind, Outcome, Parsed, parse, slot_ranges};
use super::slot::{Redirect, SLOTS, key_slot};
use crate::error::*;
use std::collections::VecDeque;
use std::time::Duration;

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

    /// Runs one command for each of `keys` (the `j`-th written by
    /// `encode(j, ..)`, ticket `first + j`), every one written before any
    /// reply is awaited: one round trip for them all, the nodes they live
    /// on answering at the same time. Their answers, in the order of `keys`.
    pub(crate) fn call_all(
        &mut self,
        first: u64,
        keys: &[&[u8]],
        wait: ReplyWait,
        encode: impl Fn(usize, &mut Vec<u8>),
    ) -> Vec<Outcome> {
        let ids = (first..).take(keys.len());
        let queued: Vec<bool> = ids
            .clone()
            .zip(keys)
            .enumerate()
            .map(|(j, (id, key))| self.enqueue(key, Kind::Sync(id), wait, |w| encode(j, w)).is_ok())
            .collect();
        for (id, ok) in ids.clone().zip(&queued) {
            if *ok {
                self.wait_for(id);
            }
        }
        ids.map(|id| {
            self.take_answer(id).unwrap_or_else(|| Err(Error::new(SVR_EXCEPTION, "the command's reply was lost")))
        })
        .collect()
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

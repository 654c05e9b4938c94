//! The lease cells of `make bench-net` (alone: `tvmq bench --net --only
//! leases`): acknowledged consumption over the network, one client (this
//! module's, plain RESP over TCP) against both servers, with the same
//! pipelining:
//!
//! - tvmq serve: `TVMQ.LEASE key COUNT k`, then `TVMQ.ACK key id ...` of
//!   those k, sent in the same write as the next `TVMQ.LEASE`: one round
//!   trip per k records;
//! - redis-server: Redis's reliable-queue pattern, k `BLMOVE key processing
//!   LEFT RIGHT timeout` (to a processing list of the consumer's), then k
//!   `LREM processing 1 value`, sent in the same write as the next k
//!   `BLMOVE`: one round trip per k records;
//! - beside them, plain `LPOP key k` on both (one round trip per k): what
//!   the acknowledgement costs.
//!
//! 1 and 10 consumers, each on a connection of its own, share a queue
//! filled beforehand (untimed) with unique records of 304 bytes; a run ends
//! when they have consumed them all, and is checked: every record exactly
//! once, the queue and the processing lists empty, no lease in flight.

use crate::ctx::Ctx;
use crate::net_servers::{REDIS, TVMQ, Target, measuring};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The section of the cells in the table.
pub(crate) const SECTION: &str = "leases over the network, TCP";
/// Records a consumer takes per round trip.
pub(crate) const K: usize = 16;
/// tvmq's queue with leases (found by its name, `mylease`).
const LEASE_ID: u32 = 900_002;
const KEY: &str = "mylease";

/// A reply, as much of it as the cells need.
#[derive(Debug)]
enum R {
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Arr(Vec<R>),
    Simple,
}

/// A minimal blocking RESP client.
struct Client {
    r: BufReader<TcpStream>,
    w: TcpStream,
    out: Vec<u8>,
}

impl Client {
    fn connect(port: u16) -> Result<Client, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let w = s.try_clone().map_err(|e| e.to_string())?;
        Ok(Client { r: BufReader::with_capacity(1 << 16, s), w, out: Vec::new() })
    }

    fn queue(&mut self, args: &[&[u8]]) {
        self.out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
    }

    fn send(&mut self) -> Result<(), String> {
        self.w.write_all(&self.out).map_err(|e| format!("write: {e}"))?;
        self.out.clear();
        Ok(())
    }

    fn line(&mut self) -> Result<Vec<u8>, String> {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l).map_err(|e| format!("read: {e}"))?;
        if l.len() < 3 {
            return Err("the server closed the connection".into());
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }

    fn read(&mut self) -> Result<R, String> {
        let l = self.line()?;
        let num = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|s| s.parse::<i64>().ok()).ok_or("bad number");
        match l.first() {
            Some(b'+') => Ok(R::Simple),
            Some(b'-') => Err(format!("error reply: {}", String::from_utf8_lossy(&l[1..]))),
            Some(b':') => Ok(R::Int(num(&l[1..])?)),
            Some(b'_') => Ok(R::Nil),
            Some(b'$') => {
                let n = num(&l[1..])?;
                if n < 0 {
                    return Ok(R::Nil);
                }
                let mut b = vec![0u8; n as usize + 2];
                std::io::Read::read_exact(&mut self.r, &mut b).map_err(|e| format!("read: {e}"))?;
                b.truncate(n as usize);
                Ok(R::Bulk(b))
            }
            Some(b'*') => {
                let n = num(&l[1..])?;
                if n < 0 {
                    return Ok(R::Nil);
                }
                (0..n).map(|_| self.read()).collect::<Result<Vec<_>, _>>().map(R::Arr)
            }
            _ => Err(format!("unreadable reply {:?}", String::from_utf8_lossy(&l))),
        }
    }

    fn cmd(&mut self, args: &[&[u8]]) -> Result<R, String> {
        self.queue(args);
        self.send()?;
        self.read()
    }
}

/// The record of number `i`: unique, 304 bytes.
fn record(i: u64) -> Vec<u8> {
    let mut r = format!("{i:020}").into_bytes();
    r.resize(304, b'.');
    r
}

fn number(r: &[u8]) -> Result<u64, String> {
    std::str::from_utf8(r.get(..20).ok_or("short record")?).ok().and_then(|s| s.parse().ok()).ok_or("bad record".into())
}

/// Fills the queue with `n` records (untimed): tvmq's made anew with
/// leases, redis's list and processing lists deleted.
fn fill(t: &Target, dir: &Path, n: u64, consumers: usize) -> Result<(), String> {
    let mut c = Client::connect(t.port)?;
    if t.name == TVMQ {
        let _ = tvm::Queue::drop_queue(dir, LEASE_ID);
        let mut spec = tvm::Spec::new(n + 1024, 304);
        spec.name = KEY.into();
        spec.leases = Some(tvm::LeaseSpec { max_leases: 4 * (K * consumers.max(1)) as u64 + 64, ..Default::default() });
        tvm::Queue::create(dir, LEASE_ID, &spec).map_err(|e| e.to_string())?;
    } else {
        let mut args: Vec<Vec<u8>> = vec![b"DEL".to_vec(), KEY.into()];
        args.extend((0..consumers).map(|i| format!("{KEY}:processing:{i}").into_bytes()));
        let a: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        c.cmd(&a)?;
    }
    let mut i = 0;
    while i < n {
        let end = (i + 1000).min(n);
        let recs: Vec<Vec<u8>> = (i..end).map(record).collect();
        let mut a: Vec<&[u8]> = vec![b"RPUSH", KEY.as_bytes()];
        a.extend(recs.iter().map(Vec::as_slice));
        c.cmd(&a)?;
        i = end;
    }
    Ok(())
}

/// How the consumers take records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    /// TVMQ.LEASE + TVMQ.ACK, or BLMOVE + LREM.
    Acked,
    /// LPOP key k.
    Pop,
}

/// One consumer: takes records until `left` runs out; the numbers it took.
fn consume(t: &Target, me: usize, way: Way, left: &AtomicU64) -> Result<Vec<u64>, String> {
    let mut c = Client::connect(t.port)?;
    let mut got = Vec::new();
    let k = K.to_string();
    let processing = format!("{KEY}:processing:{me}");
    // What the previous round took and is to be acknowledged with the next write.
    let mut pending: Vec<Vec<u8>> = Vec::new();
    let mut idle = 0;
    loop {
        let redis = t.name == REDIS;
        // Acknowledge the previous round's records, in the same write as the next take.
        let acks = match (way, redis, pending.is_empty()) {
            (Way::Acked, false, false) => {
                let mut a: Vec<&[u8]> = vec![b"TVMQ.ACK", KEY.as_bytes()];
                a.extend(pending.iter().map(Vec::as_slice));
                c.queue(&a);
                1
            }
            (Way::Acked, true, false) => {
                for v in &pending {
                    c.queue(&[b"LREM", processing.as_bytes(), b"1", v]);
                }
                pending.len()
            }
            _ => 0,
        };
        let done = left.load(Ordering::Relaxed) == 0;
        let takes = if done {
            0
        } else {
            match (way, redis) {
                (Way::Acked, false) => {
                    c.queue(&[b"TVMQ.LEASE", KEY.as_bytes(), b"COUNT", k.as_bytes()]);
                    1
                }
                (Way::Acked, true) => {
                    for _ in 0..K {
                        c.queue(&[b"BLMOVE", KEY.as_bytes(), processing.as_bytes(), b"LEFT", b"RIGHT", b"0.001"]);
                    }
                    K
                }
                (Way::Pop, _) => {
                    c.queue(&[b"LPOP", KEY.as_bytes(), k.as_bytes()]);
                    1
                }
            }
        };
        if acks + takes == 0 {
            return Ok(got);
        }
        c.send()?;
        let acked = pending.len();
        pending.clear();
        let mut confirmed = 0;
        for _ in 0..acks {
            match c.read()? {
                R::Int(n) => confirmed += n as usize,
                r => return Err(format!("acknowledgement answered {r:?}")),
            }
        }
        if confirmed != acked {
            return Err(format!("{confirmed} of {acked} acknowledged"));
        }
        let mut round = 0u64;
        for _ in 0..takes {
            match c.read()? {
                R::Nil => {}
                R::Bulk(v) => {
                    got.push(number(&v)?);
                    pending.push(v);
                    round += 1;
                }
                R::Arr(items) => {
                    for it in items {
                        match it {
                            R::Arr(e) if e.len() == 3 => {
                                if let (R::Bulk(id), R::Bulk(v)) = (&e[0], &e[2]) {
                                    got.push(number(v)?);
                                    pending.push(id.clone());
                                    round += 1;
                                }
                            }
                            R::Bulk(v) => {
                                got.push(number(&v)?);
                                round += 1;
                            }
                            r => return Err(format!("unexpected entry {r:?}")),
                        }
                    }
                }
                r => return Err(format!("unexpected reply {r:?}")),
            }
        }
        if way == Way::Pop {
            pending.clear();
        }
        if round > 0 {
            idle = 0;
            let _ = left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(l.saturating_sub(round)));
        } else if !done {
            idle += 1;
            if idle > 2000 {
                return Err("the queue stayed empty before every record was taken".into());
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// One timed run of `consumers` consumers on `t`: its milliseconds, after
/// checking that every record was taken exactly once and nothing is left.
fn run(t: &Target, dir: &Path, n: u64, consumers: usize, way: Way) -> Result<f64, String> {
    fill(t, dir, n, consumers)?;
    let left = Arc::new(AtomicU64::new(n));
    let started = Instant::now();
    let results: Vec<Result<Vec<u64>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..consumers)
            .map(|me| {
                let left = left.clone();
                s.spawn(move || consume(t, me, way, &left))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a consumer panicked".into()))).collect()
    });
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let mut seen = HashSet::with_capacity(n as usize);
    for r in results {
        for i in r? {
            if !seen.insert(i) {
                return Err(format!("{}: record {i} taken twice", t.name));
            }
        }
    }
    if seen.len() as u64 != n {
        return Err(format!("{}: {} of {n} records taken", t.name, seen.len()));
    }
    let mut c = Client::connect(t.port)?;
    if let R::Int(l) = c.cmd(&[b"LLEN", KEY.as_bytes()])? {
        if l != 0 {
            return Err(format!("{}: {l} records left", t.name));
        }
    }
    if t.name == TVMQ && way == Way::Acked {
        if let R::Arr(stats) = c.cmd(&[b"TVMQ.LEASES", KEY.as_bytes()])? {
            if let Some(R::Int(f)) = stats.get(1) {
                if *f != 0 {
                    return Err(format!("tvmq: {f} leases in flight after the run"));
                }
            }
        }
    }
    if t.name == REDIS && way == Way::Acked {
        for me in 0..consumers {
            if let R::Int(l) = c.cmd(&[b"LLEN", format!("{KEY}:processing:{me}").as_bytes()])? {
                if l != 0 {
                    return Err(format!("redis: {l} records left in a processing list"));
                }
            }
        }
    }
    Ok(ms)
}

/// The test name of a cell.
pub(crate) fn test_name(way: &str, consumers: usize) -> String {
    format!("{way}, {consumers} consumer{}", if consumers == 1 { "" } else { "s" })
}

/// The lease cells: 1 and 10 consumers, lease + ack and plain pop, on both servers.
pub(crate) fn cells(ctx: &mut Ctx, both: [&Target; 2], dir: &Path) {
    let n = if ctx.args.smoke { 4096 } else { 200_000 };
    for consumers in [1usize, 10] {
        let acked = test_name("lease + ack", consumers);
        let pop = test_name("pop", consumers);
        let tests = [(acked.as_str(), TVMQ), (acked.as_str(), REDIS), (pop.as_str(), TVMQ), (pop.as_str(), REDIS)];
        measuring(SECTION, "");
        ctx.measure_group(SECTION, &tests, "", n, 304, |_| {
            let mut ms = Vec::new();
            for way in [Way::Acked, Way::Pop] {
                for t in both {
                    ms.push(run(t, dir, n, consumers, way)?);
                }
            }
            Ok(ms)
        });
    }
    let _ = tvm::Queue::drop_queue(dir, LEASE_ID);
}

//! Many small queues (`--only many`): 10, 1,000 and 10,000 queues of 100
//! records x 64 bytes. What they cost: /dev/shm used, the memory a process
//! gains by attaching them all, a push + pop through the C ABI while all are
//! attached (one hot queue, and round-robin over all of them), creating a
//! queue and listing them; beside it, redis-server holding as many lists of
//! 100 values of 64 bytes (its `used_memory`, and LPUSH then RPOP
//! round-robin over the keys, pipelined over the loopback).
//!
//! The queues are made in the bench's scratch directory, cumulatively
//! (10, then 990 more, then 8,990 more), and dropped at the end. Listing is
//! O(n) by nature (a header read a queue): the figure to compare across
//! counts is its time per queue.

use crate::ctx::Ctx;
use crate::inproc::Handle;
use crate::net_servers::start_redis;
use std::ffi::c_void;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use tvm::ffi;

const ROWS: u64 = 100;
const SIZE: usize = 64;
/// The first queue id of the part (clear of the other parts' ids).
const BASE: u32 = 100_000;

/// One column of the table: the figures at one queue count.
#[derive(Default)]
struct Column {
    queues: usize,
    /// du of the queue files, bytes.
    shm_bytes: u64,
    /// RSS gained by attaching every queue, bytes.
    rss_bytes: u64,
    /// ns per call (push or pop) on one queue with only it attached, then
    /// with all attached, then round-robin over all.
    hot_alone_ns: f64,
    hot_all_ns: f64,
    round_robin_ns: f64,
    /// Queue::create in this process, us per queue, with `queues` in the directory.
    create_us: f64,
    /// `tvmq create` (a process), ms per command.
    create_cmd_ms: f64,
    /// `tvmq list`: ms for the command, and us per queue.
    list_ms: f64,
    redis_used: Option<u64>,
    redis_lpush_rps: Option<f64>,
    redis_rpop_rps: Option<f64>,
    error: Option<String>,
}

/// du of the queue files `ids` in `dir`, bytes (the directory also holds
/// the other parts' queues, which are not counted).
fn du(dir: &Path, ids: impl Iterator<Item = u32>) -> u64 {
    use std::os::unix::fs::MetadataExt;
    ids.filter_map(|id| std::fs::metadata(tvm::queue_path(dir, id)).ok()).map(|m| m.blocks() * 512).sum()
}

/// This process's resident memory, bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn spec() -> tvm::Spec {
    tvm::Spec::new(ROWS, SIZE as u64)
}

/// ns per call of `pairs` pushes and pops through the C ABI, queue
/// `ids[k % ids.len()]` for pair `k`: the best of three runs.
fn pushpop_ns(ids: &[u32], pairs: usize) -> Result<f64, String> {
    let mut buf = [b'x'; SIZE];
    let mut out = [0u8; SIZE];
    let h = Handle::new(ids[0], buf.as_mut_ptr().cast::<c_void>(), SIZE);
    let mut best = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for k in 0..pairs {
            // SAFETY: our handle (see Handle).
            unsafe { (*h.0).tblName = ids[k % ids.len()] };
            h.push()?;
            h.pop(out.as_mut_ptr().cast())?;
        }
        best = best.min(start.elapsed().as_secs_f64() * 1e9 / (2 * pairs) as f64);
    }
    Ok(best)
}

/// Detaches queues `ids` from the process.
fn detach(ids: &[u32]) {
    let h = Handle::new(ids[0], std::ptr::null_mut(), 0);
    for &id in ids {
        // SAFETY: our handle.
        unsafe { ffi::vTblDisconnect(h.0, id) };
    }
}

/// Runs `f` on a thread of its own (whose attachment cache goes with it).
fn on_thread<T: Send + 'static>(f: impl FnOnce() -> Result<T, String> + Send + 'static) -> Result<T, String> {
    std::thread::spawn(f).join().map_err(|_| "measuring thread panicked".to_string())?
}

/// On a thread of its own: attaches the queues `touch`, uses each once,
/// then measures the call on queue `hot` and round-robin over `touch`;
/// detaches them all after. Returns the RSS the attachments added, the
/// hot call's ns (the better of two measures) and the round-robin's. The
/// same code measures the call with one queue attached and with all of
/// them. On a loaded 2-core VM the hot call's time still moves by up to
/// 1.7x between measures (as often one way as the other): the number of
/// instructions a call runs is the steadier figure (README, "Many queues").
fn session(touch: Vec<u32>, hot: u32, pairs: usize) -> Result<(u64, f64, f64), String> {
    let ids = touch.clone();
    let r = on_thread(move || {
        let before = rss();
        for &id in &ids {
            crate::inproc::attach(id)?;
        }
        pushpop_ns(&ids, ids.len())?;
        let grown = rss().saturating_sub(before);
        let first = pushpop_ns(&[hot], pairs)?;
        let rr = pushpop_ns(&ids, pairs.max(ids.len()))?;
        Ok((grown, first.min(pushpop_ns(&[hot], pairs)?), rr))
    });
    detach(&touch);
    r
}

/// The figures of `ids` attached: the call on the last queue with it alone
/// attached (measured before and after the others, the better of the two)
/// and with all of them, round-robin over all, and the RSS they add.
fn attached_figures(ids: &[u32], pairs: usize, col: &mut Column) -> Result<(), String> {
    // The hot queue is the last one attached (the worst place for a lookup
    // that would scan the attachments in order).
    let hot = ids[ids.len() - 1];
    let (_, before, _) = session(vec![hot], hot, pairs)?;
    let (grown, all, rr) = session(ids.to_vec(), hot, pairs)?;
    let (_, after, _) = session(vec![hot], hot, pairs)?;
    (col.rss_bytes, col.hot_alone_ns, col.hot_all_ns, col.round_robin_ns) = (grown, before.min(after), all, rr);
    Ok(())
}

/// Creation and listing with `n` queues in `dir`: Queue::create of 20 more
/// (us each, then dropped), `tvmq create` of 3 more (ms each), `tvmq list`.
fn create_list_figures(dir: &Path, n: u32, col: &mut Column) -> Result<(), String> {
    let extra: Vec<u32> = (0..20).map(|k| BASE + 500_000 + k).collect();
    let start = Instant::now();
    for &id in &extra {
        tvm::Queue::create(dir, id, &spec()).map_err(|e| e.to_string())?;
    }
    col.create_us = start.elapsed().as_secs_f64() * 1e6 / extra.len() as f64;
    for &id in &extra {
        let _ = tvm::Queue::drop_queue(dir, id);
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let tvmq = |args: &[&str]| -> Result<f64, String> {
        let start = Instant::now();
        let out = Command::new(&exe).arg("--dir").arg(dir).args(args).output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("tvmq {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(start.elapsed().as_secs_f64() * 1000.0)
    };
    let mut cmd_ms = f64::MAX;
    for k in 0..3 {
        let id = (BASE + 600_000 + k).to_string();
        cmd_ms = cmd_ms.min(tvmq(&["create", &id, "--rows", "100", "--size", "64"])?);
        let _ = tvm::Queue::drop_queue(dir, BASE + 600_000 + k);
    }
    col.create_cmd_ms = cmd_ms;
    let mut list = f64::MAX;
    for _ in 0..2 {
        list = list.min(tvmq(&["list"])?);
    }
    col.list_ms = list;
    let _ = n;
    Ok(())
}

/// A pipelined RESP connection to redis-server.
struct Redis {
    s: TcpStream,
    /// Bytes read and not parsed yet: `buf[pos..]`.
    buf: Vec<u8>,
    pos: usize,
}

impl Redis {
    fn connect(port: u16) -> Result<Redis, String> {
        let s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
        let _ = s.set_nodelay(true);
        Ok(Redis { s, buf: Vec::new(), pos: 0 })
    }

    fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
        let _ = write!(out, "*{}\r\n", args.len());
        for a in args {
            let _ = write!(out, "${}\r\n", a.len());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// Sends `bytes` and reads `n` replies; the last one's text.
    fn exchange(&mut self, bytes: &[u8], n: usize) -> Result<String, String> {
        self.s.write_all(bytes).map_err(|e| e.to_string())?;
        let mut last = String::new();
        for _ in 0..n {
            last = self.reply()?;
        }
        Ok(last)
    }

    fn fill(&mut self) -> Result<(), String> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        let mut chunk = [0u8; 65536];
        let n = self.s.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("redis-server closed the connection".into());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    fn line(&mut self) -> Result<String, String> {
        loop {
            if let Some(p) = self.buf[self.pos..].iter().position(|&b| b == b'\n') {
                let end = self.pos + p;
                let line =
                    String::from_utf8_lossy(&self.buf[self.pos..end.saturating_sub(1).max(self.pos)]).into_owned();
                self.pos = end + 1;
                return Ok(line);
            }
            self.fill()?;
        }
    }

    /// One reply (simple, integer, error or bulk): its text.
    fn reply(&mut self) -> Result<String, String> {
        let line = self.line()?;
        match line.as_bytes().first() {
            Some(b'-') => Err(format!("redis-server: {line}")),
            Some(b'$') => {
                let len: i64 = line[1..].parse().map_err(|_| format!("bad reply {line}"))?;
                if len < 0 {
                    return Ok(String::new());
                }
                let need = len as usize + 2;
                while self.buf.len() - self.pos < need {
                    self.fill()?;
                }
                let body = String::from_utf8_lossy(&self.buf[self.pos..self.pos + len as usize]).into_owned();
                self.pos += need;
                Ok(body)
            }
            _ => Ok(line),
        }
    }

    /// Runs `commands(k)` for k in 0..n, pipelined 200 at a time: requests per second.
    fn rate(&mut self, n: usize, commands: impl Fn(usize, &mut Vec<u8>)) -> Result<f64, String> {
        let start = Instant::now();
        let mut out = Vec::new();
        let mut k = 0;
        while k < n {
            let batch = 200.min(n - k);
            out.clear();
            (k..k + batch).for_each(|i| commands(i, &mut out));
            self.exchange(&out, batch)?;
            k += batch;
        }
        Ok(n as f64 / start.elapsed().as_secs_f64())
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("q:{i}").into_bytes()
}

/// redis-server with `n` lists of 100 values of 64 bytes: its used_memory
/// (less an empty server's), LPUSH then RPOP round-robin over the keys.
fn redis_figures(scratch: &Path, n: usize, ops: usize, col: &mut Column) -> Result<(), String> {
    let server = start_redis(scratch, None)?;
    let mut r = Redis::connect(server.port)?;
    let used = |r: &mut Redis| -> Result<u64, String> {
        let mut out = Vec::new();
        Redis::command(&mut out, &[b"INFO", b"memory"]);
        let info = r.exchange(&out, 1)?;
        info.lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| "no used_memory in INFO".to_string())
    };
    let empty = used(&mut r)?;
    let value = [b'x'; SIZE];
    let mut values: Vec<&[u8]> = vec![b"RPUSH", b""];
    values.extend(std::iter::repeat_n(&value[..], ROWS as usize));
    r.rate(n, |i, out| {
        let k = key(i);
        let mut args = values.clone();
        args[1] = &k;
        Redis::command(out, &args);
    })?;
    col.redis_used = Some(used(&mut r)?.saturating_sub(empty));
    let ops = ops.max(n);
    col.redis_lpush_rps = Some(r.rate(ops, |i, out| Redis::command(out, &[b"LPUSH", &key(i % n), &value]))?);
    col.redis_rpop_rps = Some(r.rate(ops, |i, out| Redis::command(out, &[b"RPOP", &key(i % n)]))?);
    Ok(())
}

fn measure(ctx: &Ctx, dir: &Path, made: &mut u32, n: u32) -> Column {
    let pairs = if ctx.args.smoke { 10_000 } else { 300_000 };
    let mut col = Column { queues: n as usize, ..Column::default() };
    let run = |col: &mut Column, made: &mut u32| -> Result<(), String> {
        ctx.progress(&format!("many queues: creating {n}"));
        while *made < n {
            tvm::Queue::create(dir, BASE + *made, &spec()).map_err(|e| e.to_string())?;
            *made += 1;
        }
        col.shm_bytes = du(dir, (0..n).map(|k| BASE + k));
        ctx.progress(&format!("many queues: {n} attached"));
        let ids: Vec<u32> = (0..n).map(|k| BASE + k).collect();
        attached_figures(&ids, pairs, col)?;
        ctx.progress(&format!("many queues: create and list at {n}"));
        create_list_figures(dir, n, col)?;
        ctx.progress(&format!("many queues: redis-server with {n} lists"));
        if let Err(e) = redis_figures(&ctx.dir, n as usize, pairs, col) {
            eprintln!("{}many queues: redis-server: {e}", crate::ctx::clear_line());
        }
        Ok(())
    };
    if let Err(e) = run(&mut col, made) {
        col.error = Some(e);
    }
    col
}

/// The part: measures, then returns its table (for the report).
pub(crate) fn run(ctx: &mut Ctx) -> String {
    let counts: &[u32] = if ctx.args.smoke { &[10, 100] } else { &[10, 1_000, 10_000] };
    // A directory of its own (the scratch directory holds the other parts'
    // queues and redis's socket), the C ABI's too: TVMDBD is the scratch
    // directory, so the queues go there, with ids of their own.
    let dir = ctx.dir.clone();
    let mut made = 0;
    let cols: Vec<Column> = counts.iter().map(|&n| measure(ctx, &dir, &mut made, n)).collect();
    for k in 0..made {
        let _ = tvm::Queue::drop_queue(&dir, BASE + k);
    }
    table(&cols)
}

fn table(cols: &[Column]) -> String {
    let mut s = String::from(
        "\nmany queues of 100 records x 64 bytes (one run; C ABI calls from one thread; redis over the loopback, \
         200 commands a write)\n",
    );
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1 << 20) as f64);
    let _ = write!(s, "  {:<54}", "queues");
    cols.iter().for_each(|c| {
        let _ = write!(s, "| {:>14} ", c.queues);
    });
    s.push('\n');
    let row = |s: &mut String, name: &str, f: &dyn Fn(&Column) -> String| {
        let _ = write!(s, "  {name:<54}");
        for c in cols {
            let v = if c.error.is_some() { "error".to_string() } else { f(c) };
            let _ = write!(s, "| {v:>14} ");
        }
        s.push('\n');
    };
    row(&mut s, "/dev/shm used (du)", &|c| mib(c.shm_bytes));
    row(&mut s, "  per queue", &|c| format!("{:.1} KiB", c.shm_bytes as f64 / 1024.0 / c.queues as f64));
    row(&mut s, "RSS gained by attaching them all", &|c| mib(c.rss_bytes));
    row(&mut s, "  per queue", &|c| format!("{:.1} KiB", c.rss_bytes as f64 / 1024.0 / c.queues as f64));
    row(&mut s, "push or pop, last queue, it alone attached (ns)", &|c| format!("{:.0}", c.hot_alone_ns));
    row(&mut s, "push or pop, last queue, all attached (ns)", &|c| format!("{:.0}", c.hot_all_ns));
    row(&mut s, "  all attached / alone", &|c| format!("{:.2}x", c.hot_all_ns / c.hot_alone_ns));
    row(&mut s, "push or pop, round-robin over all (ns)", &|c| format!("{:.0}", c.round_robin_ns));
    row(&mut s, "Queue::create with that many in the dir (us)", &|c| format!("{:.0}", c.create_us));
    row(&mut s, "tvmq create with that many in the dir (ms)", &|c| format!("{:.1}", c.create_cmd_ms));
    row(&mut s, "tvmq list (ms)", &|c| format!("{:.1}", c.list_ms));
    row(&mut s, "  per queue (us)", &|c| format!("{:.1}", c.list_ms * 1000.0 / c.queues as f64));
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    row(&mut s, "redis-server used_memory, as many lists of 100 x 64 B", &|c| opt(c.redis_used.map(mib)));
    row(&mut s, "  per list", &|c| {
        opt(c.redis_used.map(|b| format!("{:.1} KiB", b as f64 / 1024.0 / c.queues as f64)))
    });
    row(&mut s, "redis LPUSH round-robin, pipelined (ns per request)", &|c| {
        opt(c.redis_lpush_rps.map(|r| format!("{:.0}", 1e9 / r)))
    });
    row(&mut s, "redis RPOP round-robin, pipelined (ns per request)", &|c| {
        opt(c.redis_rpop_rps.map(|r| format!("{:.0}", 1e9 / r)))
    });
    for c in cols {
        if let Some(e) = &c.error {
            let _ = writeln!(s, "  {} queues: error: {e}", c.queues);
        }
    }
    s
}

//! `tvmq bench --only durable`: durable queues on this machine's disk (a
//! directory under `--disk-dir`, `target` by default), side by side with
//! redis-server started on a loopback port with `appendonly yes` and
//! `appendfsync always` in the same directory, driven by redis-benchmark.
//!
//! Cells (304-byte records, the safe Rust API, one queue handle shared by
//! the threads; each cell's runs alternate with its peer's, so that the
//! machine's drift hits both alike):
//! * `interval=1000` against a plain queue in the same directory: push then
//!   pop, 1 and 4 threads (5 fills and emptyings per run); and sustained,
//!   the ring filled and emptied 20 times in a row (so that the flusher's
//!   syncs fall inside it);
//! * `always`: push then pop at 1, 4 and 10 threads, beside LPUSH of
//!   redis-benchmark with as many clients (`-c N`, one request in flight
//!   per client, as a producer that waits for its acknowledgement);
//! * `always`: push from 4 and 10 processes (this program started again
//!   with `--durable-child`, released together; the wall time of them all);
//! * `always` with leases: `pop_lease` + `ack` of each record (a lease saved
//!   and synced, then its acknowledgement synced) at 1, 4 and 10 threads,
//!   beside the `always` queue's plain pop and the seed's Q4M dequeue rate.
//!
//! The summary after the table states each target of the durable queues
//! with the ratio measured, and the seed's Q4M figures (with sync, on a hard
//! disk) beside ours.

use crate::cell::{self, Cell};
use crate::ctx::Ctx;
use crate::harness::{KillOnDrop, Server, ask, free_port, redis_benchmark, start_server};
use crate::inproc::threads;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use tvm::{Durability, LeaseSpec, Queue, Spec, Wait};

const SIZE: usize = 304;
const SECTION: &str = "durable";
const PLAIN: &str = "plain (disk)";
/// A second plain queue in the same directory, measured in the same runs:
/// the control that shows what ratio two identical queues reach here.
const PLAIN_AGAIN: &str = "plain again (control)";
const INTERVAL: &str = "interval=1000";
const ALWAYS: &str = "always";
const ALWAYS_LEASED: &str = "always + leases";
const LEASE_ACK: &str = "lease+ack";
const REDIS: &str = "redis appendfsync always";
/// Fills and emptyings of the ring in one run of the push and pop cells
/// (each timed apart).
const BURSTS: u64 = 5;
/// Fills and emptyings of the ring in one run of the sustained cells.
const SUSTAINED: u64 = 20;
const SUSTAINED_TEST: &str = "push+pop, ring cycled 20 times";
/// The seed's Q4M figures, with sync, on a hard disk (seed 003).
const Q4M_PUSH: f64 = 5301.0;
const Q4M_POP: f64 = 2876.0;

/// Queue ids in the benchmark's directory.
const PLAIN_ID: u32 = 31;
const INTERVAL_ID: u32 = 32;
const PLAIN_AGAIN_ID: u32 = 35;
const ALWAYS_ID: u32 = 33;
const LEASED_ID: u32 = 34;

/// `n` threads each pushing (or popping) `per` records on `q`.
fn run_queue(q: &Arc<Queue>, n: usize, per: u64, pop: bool) -> Result<f64, String> {
    let q = q.clone();
    threads(n, move |i| {
        let mut buf = [b'x'; SIZE];
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        for _ in 0..per {
            if pop {
                q.pop(&mut buf, Wait::Forever).map_err(|e| format!("pop: {e}"))?;
            } else {
                q.push(&buf).map_err(|e| format!("push: {e}"))?;
            }
        }
        Ok(())
    })
}

/// `n` threads each taking `per` records of `q` with `pop_lease` and
/// acknowledging each (the record copied out first, as a consumer must).
fn run_lease_ack(q: &Arc<Queue>, n: usize, per: u64) -> Result<f64, String> {
    let q = q.clone();
    threads(n, move |_| {
        let mut buf = [0u8; SIZE];
        for _ in 0..per {
            let (_, lease) =
                q.pop_lease(&mut buf, Wait::Forever, Duration::ZERO).map_err(|e| format!("pop_lease: {e}"))?;
            std::hint::black_box(&buf);
            q.ack(&lease).map_err(|e| format!("ack: {e}"))?;
        }
        Ok(())
    })
}

/// A fresh queue `id` in `dir`, opened.
fn fresh(dir: &Path, id: u32, rows: u64, durability: Option<Durability>) -> Result<Arc<Queue>, String> {
    fresh_spec(dir, id, rows, durability, None)
}

/// A fresh queue `id` in `dir`, with leases if `leases`, opened.
fn fresh_spec(
    dir: &Path,
    id: u32,
    rows: u64,
    durability: Option<Durability>,
    leases: Option<LeaseSpec>,
) -> Result<Arc<Queue>, String> {
    let _ = Queue::drop_queue(dir, id);
    let mut spec = Spec::new(rows, SIZE as u64);
    spec.durability = durability;
    spec.leases = leases;
    Queue::create(dir, id, &spec).map_err(|e| e.to_string())?;
    Queue::open(dir, id).map(Arc::new).map_err(|e| e.to_string())
}

/// The child of the process cells: opens the queue, says "ready", waits
/// for a line on stdin, pushes, exits. `spec` is `DIR:ID:COUNT`.
pub(crate) fn child(spec: &str) -> Result<(), String> {
    let mut parts = spec.rsplitn(3, ':');
    let count: u64 = parts.next().and_then(|c| c.parse().ok()).ok_or("bad --durable-child count")?;
    let id: u32 = parts.next().and_then(|c| c.parse().ok()).ok_or("bad --durable-child id")?;
    let dir = PathBuf::from(parts.next().ok_or("bad --durable-child dir")?);
    let q = Queue::open(&dir, id).map_err(|e| e.to_string())?;
    let mut buf = [b'p'; SIZE];
    buf[..4].copy_from_slice(&std::process::id().to_le_bytes());
    println!("ready");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).map_err(|e| e.to_string())?;
    for _ in 0..count {
        q.push(&buf).map_err(|e| format!("push: {e}"))?;
    }
    Ok(())
}

/// `n` processes each pushing `per` records on queue `id` of `dir`,
/// released together; milliseconds until the last one exits.
fn run_processes(dir: &Path, id: u32, n: usize, per: u64) -> Result<f64, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Killed on every way out; those waited for below are gone already.
    let mut kids: Vec<KillOnDrop> = Vec::new();
    for _ in 0..n {
        let child = Command::new(&exe)
            .arg("bench")
            .arg("--durable-child")
            .arg(format!("{}:{id}:{per}", dir.display()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start a child: {e}"))?;
        kids.push(KillOnDrop(child));
    }
    for k in kids.iter_mut() {
        let mut line = String::new();
        let read = k.stdout.take().map(|o| BufReader::new(o).read_line(&mut line));
        if !matches!(read, Some(Ok(_))) || line.trim() != "ready" {
            return Err("a child did not get ready".into());
        }
    }
    let start = Instant::now();
    for k in kids.iter_mut() {
        if let Some(mut i) = k.stdin.take() {
            let _ = i.write_all(b"go\n");
        }
    }
    let mut failed = None;
    for k in kids.iter_mut() {
        match k.wait() {
            Ok(s) if s.success() => {}
            other => failed = Some(format!("a child failed: {other:?}")),
        }
    }
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    failed.map_or(Ok(ms), Err)
}

/// redis-server with `appendonly yes`, `appendfsync always`, its files in `dir`.
fn start_redis(dir: &Path) -> Result<Server, String> {
    let port = free_port()?;
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
        .args(["--appendonly", "yes", "--appendfsync", "always", "--dir"])
        .arg(dir);
    let child = start_server(cmd, "redis-server", " (apt-get install redis-server)", port)?;
    Ok(Server { port, _child: child })
}

/// redis-benchmark LPUSH, `clients` connections, `n` values of 304 bytes: milliseconds.
fn redis_lpush(r: &Server, clients: usize, n: u64) -> Result<f64, String> {
    ask(r.port, "DEL mylist")?;
    let rps = redis_benchmark(
        Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &r.port.to_string(), "-t", "lpush", "--csv", "-d", "304"])
            .args(["-c", &clients.to_string(), "-n", &n.to_string()]),
        "LPUSH",
    )?;
    Ok(n as f64 / rps * 1000.0)
}

/// The benchmark's directory on the disk: refuses tmpfs (the figures would
/// not be a disk's).
fn disk_dir(ctx: &Ctx) -> Result<PathBuf, String> {
    let dir = ctx.args.disk_dir.join(format!("tvmq-bench-durable-{}", std::process::id()));
    crate::scratch::remember(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(dir)
}

/// `r`'s value, or `None` once its error is said.
fn or_say<T>(r: Result<T, String>) -> Option<T> {
    r.map_err(|e| eprintln!("durable: {e}")).ok()
}

/// Runs the durable cells.
pub(crate) fn run(ctx: &mut Ctx) {
    let Some(dir) = or_say(disk_dir(ctx)) else { return };
    cells(ctx, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    crate::scratch::forget(&dir);
}

fn cells(ctx: &mut Ctx, dir: &Path) {
    let smoke = ctx.args.smoke;
    // 1. interval=1000 against a plain queue in the same directory.
    let records = if smoke { 20_000 } else { ctx.records().min(1_000_000) };
    // Each run of the push and pop cells fills and empties the ring BURSTS
    // times (pushes and pops timed apart): one fill of a million records
    // takes about 30 ms, too short a measure here (with one fill per run,
    // plain pops at 1 thread spread over 17.7-30.3 M/s in 5 runs, hiding
    // any difference of 10 %).
    let bursts = if smoke { 1 } else { BURSTS };
    // The sustained cells fill and empty it SUSTAINED times in a row, so
    // that the flusher's syncs fall inside the measurement; one figure for
    // the pushes and pops together.
    let rounds = if smoke { 2 } else { SUSTAINED };
    for (sustained, n) in [(false, 1usize), (false, 4), (true, 1), (true, 4)] {
        // A fresh pair of queue files for each group (a group takes 3-12 s
        // here): once a file has been dirty for 30 s (the kernel's
        // dirty_expire), the kernel writes its live pages back every few
        // seconds, which cleans them (a TLB shootdown per page) and makes
        // the next store to each fault again; a fill or emptying it falls
        // on ran 5-15 times slower (2.5-8.0 M records/s against about 38 M
        // here). It strikes the plain and the interval queue alike but at
        // random, and would decide the ratio.
        // docs/durability.md states it as a cost of queue files on disk.
        // And a second plain queue, the control: the ratio of two plain
        // queues in the same runs is the resolution of this measurement
        // (what a ratio of interval to plain can be told from 1.0 by).
        let queues = fresh(dir, PLAIN_ID, records, None).and_then(|p| {
            let i = fresh(dir, INTERVAL_ID, records, Some(Durability::Interval(1000)))?;
            Ok((p, i, fresh(dir, PLAIN_AGAIN_ID, records, None)?))
        });
        let Some((plain, interval, again)) = or_say(queues) else { break };
        // Before a plain queue's run, the interval queue's pending sync is
        // finished (not timed): its writes would slow the plain queue's
        // threads in this process too.
        let settle = |q: &Arc<Queue>| -> Result<(), String> {
            if Arc::ptr_eq(q, &interval) { Ok(()) } else { interval.sync().map_err(|e| format!("sync: {e}")) }
        };
        let per = records / n as u64;
        let (tests, ops) = if sustained {
            let tests = vec![(SUSTAINED_TEST, PLAIN), (SUSTAINED_TEST, INTERVAL), (SUSTAINED_TEST, PLAIN_AGAIN)];
            (tests, 2 * per * n as u64 * rounds)
        } else {
            let mut tests = vec![("push", PLAIN), ("pop", PLAIN), ("push", INTERVAL), ("pop", INTERVAL)];
            tests.extend([("push", PLAIN_AGAIN), ("pop", PLAIN_AGAIN)]);
            (tests, per * n as u64 * bursts)
        };
        // One queue's figures of a run: its push and pop times, or (sustained)
        // their sum over all the rounds.
        let one = |q: &Arc<Queue>| -> Result<Vec<f64>, String> {
            settle(q)?;
            let (mut push, mut pop) = (0.0, 0.0);
            for _ in 0..if sustained { rounds } else { bursts } {
                push += run_queue(q, n, per, false)?;
                pop += run_queue(q, n, per, true)?;
            }
            Ok(if sustained { vec![push + pop] } else { vec![push, pop] })
        };
        let mut round = 0;
        ctx.measure_group(SECTION, &tests, &n.to_string(), ops, SIZE as u64, |_| {
            // The order turns each run (plain, interval, control; then
            // interval, control, plain; ...), so that none always goes first.
            let order = [&plain, &interval, &again];
            let mut got: [Vec<f64>; 3] = Default::default();
            for k in 0..3 {
                let at = (round + k) % 3;
                got[at] = one(order[at])?;
            }
            round += 1;
            Ok(got.concat())
        });
    }
    for id in [PLAIN_ID, INTERVAL_ID, PLAIN_AGAIN_ID] {
        let _ = Queue::drop_queue(dir, id);
    }

    // 2. always, threads, beside redis appendfsync always with as many clients.
    let redis = start_redis(dir);
    if let Err(e) = &redis {
        eprintln!("durable: {e}");
    }
    let base: u64 = if smoke { 100 } else { 1000 };
    for n in [1usize, 4, 10] {
        let per = base;
        let total = per * n as u64;
        let Some(q) = or_say(fresh(dir, ALWAYS_ID, total, Some(Durability::Always))) else { return };
        let tests = [("push", ALWAYS), ("pop", ALWAYS), ("push", REDIS)];
        ctx.measure_group(SECTION, &tests, &n.to_string(), total, SIZE as u64, |_| {
            let mut v = vec![run_queue(&q, n, per, false)?, run_queue(&q, n, per, true)?];
            let r = redis.as_ref().map_err(|e| e.clone())?;
            v.push(redis_lpush(r, n, total)?);
            Ok(v)
        });
    }
    // 3. always, processes (each cell's queue emptied after each run).
    for n in [4usize, 10] {
        let per = base;
        let total = per * n as u64;
        let Some(q) = or_say(fresh(dir, ALWAYS_ID, total, Some(Durability::Always))) else { return };
        let tests = [("push, processes", ALWAYS)];
        ctx.measure_group(SECTION, &tests, &n.to_string(), total, SIZE as u64, |_| {
            let ms = run_processes(dir, ALWAYS_ID, n, per)?;
            // Empty it (one thread; not measured) and check the count.
            let mut buf = [0u8; SIZE];
            for k in 0..total {
                q.pop(&mut buf, Wait::NoWait).map_err(|e| format!("after {k} of {total} records: {e}"))?;
            }
            Ok(vec![ms])
        });
    }
    let _ = Queue::drop_queue(dir, ALWAYS_ID);
    // 4. always with leases: each run pushes the records (not measured),
    // then leases and acknowledges every one.
    for n in [1usize, 4, 10] {
        let per = base;
        let total = per * n as u64;
        let Some(q) = or_say(fresh_spec(dir, LEASED_ID, total, Some(Durability::Always), Some(LeaseSpec::default())))
        else {
            return;
        };
        let tests = [(LEASE_ACK, ALWAYS_LEASED)];
        ctx.measure_group(SECTION, &tests, &n.to_string(), total, SIZE as u64, |_| {
            match q.push_many(&vec![b'l'; SIZE * total as usize], SIZE) {
                (k, None) if k as u64 == total => {}
                (k, e) => return Err(format!("push_many: {k} of {total} records pushed, {e:?}")),
            }
            Ok(vec![run_lease_ack(&q, n, per)?])
        });
    }
    let _ = Queue::drop_queue(dir, LEASED_ID);
}

/// The median rate of the durable cell `test`, `param`, `subject`.
fn rate(cells: &[Cell], test: &str, param: &str, subject: &str) -> Option<f64> {
    cell::rate(cells, SECTION, test, param, subject)
}

/// The rate of `subject` over the plain queue's in each run of the durable
/// cell `test`, `param` (the runs of a group measure both).
fn run_ratios(cells: &[Cell], test: &str, param: &str, subject: &str) -> Vec<f64> {
    let ms = |s: &str| cell::find(cells, SECTION, test, param, s).filter(|c| c.error.is_none()).map(|c| c.ms.clone());
    match (ms(subject), ms(PLAIN)) {
        // Same records a run: the rate ratio is the inverse time ratio.
        (Some(a), Some(p)) => a.iter().zip(&p).map(|(a, p)| p / a.max(1e-9)).collect(),
        _ => Vec::new(),
    }
}

/// The durable queues' targets with what this run measured (empty without durable cells).
pub(crate) fn summary(cells: &[Cell]) -> String {
    use std::fmt::Write as _;
    if !cells.iter().any(|c| c.section == SECTION) {
        return String::new();
    }
    let mut t = String::from("\nDurable queues: targets (median rates of this run)\n");
    let k = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.1} K/s", r / 1e3));
    let mut line = |what: String, ours: Option<f64>, theirs: Option<f64>, target: f64| {
        let verdict = match (ours, theirs) {
            (Some(a), Some(b)) if b > 0.0 => {
                let x = a / b;
                format!("{x:.2}x (target >= {target}x: {})", if x >= target { "met" } else { "MISSED" })
            }
            _ => "-".into(),
        };
        let _ = writeln!(t, "  {what:<44} {:>11} vs {:>11}  {verdict}", k(ours), k(theirs));
    };
    let mut per_run = Vec::new();
    for n in ["1", "4"] {
        for test in ["push", "pop", SUSTAINED_TEST] {
            let what = if test == SUSTAINED_TEST { "sustained" } else { test };
            line(
                format!("interval=1000 {what} {n} thr. vs plain"),
                rate(cells, test, n, INTERVAL),
                rate(cells, test, n, PLAIN),
                0.9,
            );
            per_run.push((
                format!("{what} {n} thr."),
                run_ratios(cells, test, n, INTERVAL),
                run_ratios(cells, test, n, PLAIN_AGAIN),
            ));
        }
    }
    line(
        "always push 1 thr. vs redis -c 1".into(),
        rate(cells, "push", "1", ALWAYS),
        rate(cells, "push", "1", REDIS),
        1.2,
    );
    for n in ["4", "10"] {
        line(
            format!("always push {n} thr. vs redis -c {n}"),
            rate(cells, "push", n, ALWAYS),
            rate(cells, "push", n, REDIS),
            2.0,
        );
        line(
            format!("always push {n} proc. vs redis -c {n}"),
            rate(cells, "push, processes", n, ALWAYS),
            rate(cells, "push", n, REDIS),
            2.0,
        );
    }
    let _ = writeln!(
        t,
        "  Q4M with sync on a hard disk (seed): {} pushes/s, {} pops/s; ours (always, 1 thread): {} push, {} pop",
        Q4M_PUSH,
        Q4M_POP,
        k(rate(cells, "push", "1", ALWAYS)),
        k(rate(cells, "pop", "1", ALWAYS))
    );
    for n in ["1", "4", "10"] {
        let _ = writeln!(
            t,
            "  always + leases, lease+ack {n:>2} thr.: {} (Q4M with sync: {} dequeues/s; always pop here: {})",
            k(rate(cells, LEASE_ACK, n, ALWAYS_LEASED)),
            Q4M_POP,
            k(rate(cells, "pop", n, ALWAYS))
        );
    }
    let mut runs = String::new();
    let _ = writeln!(
        runs,
        "  interval=1000 / plain run by run (the lowest of the runs; target: none below 0.9x), beside the\n  \
         control, a second plain queue / plain in the same runs (what two identical queues differ by here):"
    );
    for (what, interval, control) in per_run {
        let low = |r: &[f64]| r.iter().copied().reduce(f64::min).map_or("-".into(), |x| format!("{x:.2}x"));
        let below = interval.iter().filter(|&&x| x < 0.9).count();
        let _ = writeln!(
            runs,
            "    {what:<16} interval lowest {:>6} ({below} of {} runs below 0.9x)   control lowest {:>6} ({} below 0.9x)",
            low(&interval),
            interval.len(),
            low(&control),
            control.iter().filter(|&&x| x < 0.9).count()
        );
    }
    t.push_str(&runs);
    t
}

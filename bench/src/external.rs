//! Cells that run compiled programs: the seed programs (unchanged), tvmq's C
//! driver and the Boost.Interprocess driver. The queue directory reaches
//! them through `TVMDBD`, set by the harness for the whole run.

use crate::ctx::Ctx;
use crate::harness::fresh_queue;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a single program may run before the cell is declared failed.
const TIMEOUT: Duration = Duration::from_secs(180);

/// Seed programs' queue id and record size.
const SEED_QUEUE: u32 = 21;
const SEED_SIZE: u64 = 304;

fn spawn(program: &Path, args: &[String]) -> Result<Child, String> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))
}

/// Waits for a child, failing on timeout, a non-zero status or any stderr output.
fn finish(mut child: Child, what: &str) -> Result<String, String> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what}: still running after {} s, killed", TIMEOUT.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(format!("{what}: {e}")),
        }
    }
    let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !stderr.trim().is_empty() {
        return Err(format!("{what}: {} {}", out.status, stderr.trim()));
    }
    Ok(stdout)
}

/// Runs programs at once; returns the wall time from the first start to the
/// last exit, and their outputs.
fn run_together(programs: &[(&Path, Vec<String>)]) -> Result<(f64, Vec<String>), String> {
    let start = Instant::now();
    let mut children = Vec::new();
    for (program, args) in programs {
        match spawn(program, args) {
            Ok(c) => children.push((c, format!("{} {}", program.display(), args.join(" ")))),
            Err(e) => {
                for (mut c, _) in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        }
    }
    let mut outputs = Vec::new();
    let mut first_error = None;
    for (child, what) in children {
        match finish(child, &what) {
            Ok(out) => outputs.push(out),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    let wall = start.elapsed().as_secs_f64() * 1000.0;
    match first_error {
        Some(e) => Err(e),
        None => Ok((wall, outputs)),
    }
}

fn run_one(program: &Path, args: Vec<String>) -> Result<String, String> {
    run_together(&[(program, args)]).map(|(_, mut out)| out.remove(0))
}

/// The `N` of a seed program's `cost_time:[N]`.
fn cost_time(out: &str) -> Result<f64, String> {
    out.split("cost_time:[")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("no cost_time in output {out:?}"))
}

/// The milliseconds of a driver's `ok ms=<ms> records=<n>` line.
fn driver_ms(out: &str) -> Result<f64, String> {
    out.lines()
        .find_map(|l| l.strip_prefix("ok ms="))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|ms| ms.parse().ok())
        .ok_or_else(|| format!("no 'ok ms=' line in driver output {out:?}"))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Records divisible by every thread and process count used (1, 2, 4, 5, 10).
fn even(records: u64) -> u64 {
    (records / 20 * 20).max(20)
}

/// The seed programs' queue made anew for the cell's records (made even),
/// and the paths of push_bench and pop_bench; `None` once said why not.
fn seed_setup(ctx: &Ctx, bin: &Path) -> Option<(u64, PathBuf, PathBuf)> {
    let records = even(ctx.records());
    if let Err(e) = fresh_queue(&ctx.dir, SEED_QUEUE, records, SEED_SIZE) {
        eprintln!("seed programs: {e}");
        return None;
    }
    Some((records, bin.join("push_bench"), bin.join("pop_bench")))
}

pub(crate) fn seed_threads(ctx: &mut Ctx, bin: &Path, threads: &[usize]) {
    let Some((records, push, pop)) = seed_setup(ctx, bin) else { return };
    for &n in threads {
        let total = records / n as u64 * n as u64;
        let args = strings(&[&n.to_string(), &records.to_string()]);
        ctx.measure_group("threads", &[("push", "tvmq"), ("pop", "tvmq")], &n.to_string(), total, SEED_SIZE, |_| {
            Ok(vec![cost_time(&run_one(&push, args.clone())?)?, cost_time(&run_one(&pop, args.clone())?)?])
        });
    }
}

pub(crate) fn seed_processes(ctx: &mut Ctx, bin: &Path, procs: &[usize]) {
    let Some((records, push, pop)) = seed_setup(ctx, bin) else { return };
    for &n in procs {
        let share = (records / n as u64).to_string();
        let pushes: Vec<_> = (0..n).map(|_| (push.as_path(), strings(&["1", &share]))).collect();
        let pops: Vec<_> = (0..n).map(|_| (pop.as_path(), strings(&["1", &share]))).collect();
        ctx.measure_group(
            "processes",
            &[("push", "tvmq"), ("pop", "tvmq")],
            &n.to_string(),
            records / n as u64 * n as u64,
            SEED_SIZE,
            |_| Ok(vec![run_together(&pushes)?.0, run_together(&pops)?.0]),
        );
    }
}

pub(crate) fn seed_pushpop_processes(ctx: &mut Ctx, bin: &Path, mixes: &[(usize, usize)]) {
    let Some((records, push, pop)) = seed_setup(ctx, bin) else { return };
    for &(p, c) in mixes {
        let programs = [
            (push.as_path(), strings(&[&p.to_string(), &records.to_string()])),
            (pop.as_path(), strings(&[&c.to_string(), &records.to_string()])),
        ];
        ctx.measure_group("push+pop", &[("processes", "tvmq")], &format!("{p}+{c}"), 2 * records, SEED_SIZE, |_| {
            Ok(vec![run_together(&programs)?.0])
        });
    }
}

fn driver_args(
    queue: u32,
    op: &str,
    threads: usize,
    pop_threads: usize,
    records: u64,
    size: u64,
    batch: usize,
) -> Vec<String> {
    let mut args = strings(&["run", "--queue", &queue.to_string(), "--op", op, "--threads", &threads.to_string()]);
    if op == "pushpop" {
        args.extend(strings(&["--pop-threads", &pop_threads.to_string()]));
    }
    args.extend(strings(&["--records", &records.to_string(), "--size", &size.to_string()]));
    if batch > 0 {
        args.extend(strings(&["--batch", &batch.to_string()]));
    }
    args
}

pub(crate) fn driver_pushpop(ctx: &mut Ctx, driver: &Path, mixes: &[(usize, usize)]) {
    let records = even(ctx.records());
    if let Err(e) = fresh_queue(&ctx.dir, SEED_QUEUE, records, SEED_SIZE) {
        eprintln!("C driver: {e}");
        return;
    }
    for &(p, c) in mixes {
        let args = driver_args(SEED_QUEUE, "pushpop", p, c, records, SEED_SIZE, 0);
        ctx.measure_group("push+pop", &[("threads", "tvmq")], &format!("{p}+{c}"), 2 * records, SEED_SIZE, |_| {
            Ok(vec![driver_ms(&run_one(driver, args.clone())?)?])
        });
    }
}

pub(crate) fn driver_sizes(ctx: &mut Ctx, driver: &Path, sizes: &[u64]) {
    ctx.size_sweep(
        sizes,
        22,
        || Ok(()),
        |records, size, pop| {
            let op = if pop { "pop" } else { "push" };
            driver_ms(&run_one(driver, driver_args(22, op, 1, 0, records, size, 0))?)
        },
    );
}

pub(crate) fn driver_batches(ctx: &mut Ctx, driver: &Path) {
    let records = even(ctx.records());
    if let Err(e) = fresh_queue(&ctx.dir, 23, records, SEED_SIZE) {
        eprintln!("batches: {e}");
        return;
    }
    let runs = [
        driver_args(23, "push", 1, 0, records, SEED_SIZE, 0),
        driver_args(23, "pop", 1, 0, records, SEED_SIZE, 0),
        driver_args(23, "pushs", 1, 0, records, SEED_SIZE, 64),
        driver_args(23, "popup", 1, 0, records, SEED_SIZE, 64),
    ];
    ctx.measure_group(
        "batch",
        &[("lPush", "tvmq"), ("lPop", "tvmq"), ("lPushs x64", "tvmq"), ("lPopup x64", "tvmq")],
        "1",
        records,
        SEED_SIZE,
        |_| runs.iter().map(|a| driver_ms(&run_one(driver, a.clone())?)).collect(),
    );
    let _ = tvm::Queue::drop_queue(&ctx.dir, 23);
}

/// A Boost queue number unique to this run (Boost queues live in /dev/shm,
/// outside TVMDBD: two bench runs at once must not share one).
fn boost_queue(k: u32) -> u32 {
    std::process::id().wrapping_mul(4).wrapping_add(k)
}

/// Boost queue `queue`'s file (`boost_mq.cpp`: the queue "tvmq_bench_<Q>").
pub(crate) fn boost_file(queue: impl std::fmt::Display) -> PathBuf {
    PathBuf::from(format!("/dev/shm/tvmq_bench_{queue}"))
}

/// Runs the Boost driver's `create`, then `f`, then `remove`.
fn with_boost_queue(driver: &Path, queue: u32, capacity: u64, f: impl FnOnce()) {
    crate::scratch::remember(&boost_file(queue));
    let create =
        strings(&["create", "--queue", &queue.to_string(), "--capacity", &capacity.to_string(), "--size", "304"]);
    match run_one(driver, create) {
        Ok(_) => f(),
        Err(e) => eprintln!("Boost mq: {e}"),
    }
    let _ = run_one(driver, strings(&["remove", "--queue", &queue.to_string()]));
}

pub(crate) fn boost_threads(ctx: &mut Ctx, driver: &Path, threads: &[usize]) {
    let records = even(ctx.records());
    let q = boost_queue(1);
    with_boost_queue(driver, q, records, || {
        for &n in threads {
            let push = driver_args(q, "push", n, 0, records, SEED_SIZE, 0);
            let pop = driver_args(q, "pop", n, 0, records, SEED_SIZE, 0);
            ctx.measure_group(
                "threads",
                &[("push", "Boost mq"), ("pop", "Boost mq")],
                &n.to_string(),
                records / n as u64 * n as u64,
                SEED_SIZE,
                |_| Ok(vec![driver_ms(&run_one(driver, push.clone())?)?, driver_ms(&run_one(driver, pop.clone())?)?]),
            );
        }
    });
}

pub(crate) fn boost_processes(ctx: &mut Ctx, driver: &Path, procs: &[usize]) {
    let records = even(ctx.records());
    let q = boost_queue(2);
    with_boost_queue(driver, q, records, || {
        for &n in procs {
            let share = records / n as u64;
            let one = |op| (driver, driver_args(q, op, 1, 0, share, SEED_SIZE, 0));
            let pushes: Vec<_> = (0..n).map(|_| one("push")).collect();
            let pops: Vec<_> = (0..n).map(|_| one("pop")).collect();
            ctx.measure_group(
                "processes",
                &[("push", "Boost mq"), ("pop", "Boost mq")],
                &n.to_string(),
                share * n as u64,
                SEED_SIZE,
                |_| Ok(vec![run_together(&pushes)?.0, run_together(&pops)?.0]),
            );
        }
    });
}

pub(crate) fn boost_pushpop(ctx: &mut Ctx, driver: &Path, mixes: &[(usize, usize)]) {
    let records = even(ctx.records());
    let q = boost_queue(3);
    with_boost_queue(driver, q, records, || {
        for &(p, c) in mixes {
            let threads = driver_args(q, "pushpop", p, c, records, SEED_SIZE, 0);
            let mut procs: Vec<_> =
                (0..p).map(|_| (driver, driver_args(q, "push", 1, 0, records / p as u64, SEED_SIZE, 0))).collect();
            procs.extend((0..c).map(|_| (driver, driver_args(q, "pop", 1, 0, records / c as u64, SEED_SIZE, 0))));
            ctx.measure_group(
                "push+pop",
                &[("threads", "Boost mq"), ("processes", "Boost mq")],
                &format!("{p}+{c}"),
                2 * records,
                SEED_SIZE,
                |_| Ok(vec![driver_ms(&run_one(driver, threads.clone())?)?, run_together(&procs)?.0]),
            );
        }
    });
}

/// DPDK's rte_ring in the two modes measured: the subject's name and the
/// driver's `--mode`.
const DPDK_MODES: [(&str, &str); 2] = [("DPDK RTS", "rts"), ("DPDK MP/MC", "mpmc")];

/// Why a DPDK cell with `workers` threads (or processes) of `mode` is not
/// run, if it is not: no driver (libdpdk-dev absent when make built the
/// drivers), or a default MP/MC ring with more workers than cores.
fn dpdk_skip(driver: &Path, mode: &str, workers: usize) -> Option<String> {
    if !driver.exists() {
        return Some(format!(
            "not installed (DPDK: libdpdk-dev): no {} (make builds it when pkg-config finds libdpdk)",
            driver.display()
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (mode == "mpmc" && workers > cores).then(|| {
        format!(
            "skipped: {workers} workers > {cores} cores: a default MP/MC rte_ring makes each thread or \
             process wait, spinning, for a preempted one (minutes a run; DPDK's RTS mode is for this)"
        )
    })
}

/// Runs the DPDK driver's `create` (a ring of `mode` holding `capacity`
/// records of 304 bytes), then `f`, then `remove`.
fn with_dpdk_ring(driver: &Path, queue: u32, capacity: u64, mode: &str, f: impl FnOnce()) {
    let q = queue.to_string();
    // dpdk_ring.c's file.
    crate::scratch::remember(Path::new(&format!("/dev/shm/tvmq_bench_dpdk_{q}")));
    if driver.exists() {
        let create = strings(&["create", "--queue", &q, "--capacity", &capacity.to_string(), "--size", "304"]);
        if let Err(e) = run_one(driver, [create, strings(&["--mode", mode])].concat()) {
            eprintln!("DPDK ring: {e}");
            return;
        }
    }
    f();
    if driver.exists() {
        let _ = run_one(driver, strings(&["remove", "--queue", &q]));
    }
}

pub(crate) fn dpdk_threads(ctx: &mut Ctx, driver: &Path, threads: &[usize]) {
    let records = even(ctx.records());
    for (k, (subject, mode)) in (0u32..).zip(DPDK_MODES) {
        let q = boost_queue(1).wrapping_add(k * 8);
        with_dpdk_ring(driver, q, records, mode, || {
            for &n in threads {
                let skip = dpdk_skip(driver, mode, n);
                let push = driver_args(q, "push", n, 0, records, SEED_SIZE, 0);
                let pop = driver_args(q, "pop", n, 0, records, SEED_SIZE, 0);
                ctx.measure_group(
                    "threads",
                    &[("push", subject), ("pop", subject)],
                    &n.to_string(),
                    records / n as u64 * n as u64,
                    SEED_SIZE,
                    |_| match &skip {
                        Some(why) => Err(why.clone()),
                        None => Ok(vec![
                            driver_ms(&run_one(driver, push.clone())?)?,
                            driver_ms(&run_one(driver, pop.clone())?)?,
                        ]),
                    },
                );
            }
        });
    }
}

pub(crate) fn dpdk_processes(ctx: &mut Ctx, driver: &Path, procs: &[usize]) {
    let records = even(ctx.records());
    for (k, (subject, mode)) in (0u32..).zip(DPDK_MODES) {
        let q = boost_queue(2).wrapping_add(k * 8);
        with_dpdk_ring(driver, q, records, mode, || {
            for &n in procs {
                let skip = dpdk_skip(driver, mode, n);
                let share = records / n as u64;
                let one = |op| (driver, driver_args(q, op, 1, 0, share, SEED_SIZE, 0));
                let pushes: Vec<_> = (0..n).map(|_| one("push")).collect();
                let pops: Vec<_> = (0..n).map(|_| one("pop")).collect();
                ctx.measure_group(
                    "processes",
                    &[("push", subject), ("pop", subject)],
                    &n.to_string(),
                    share * n as u64,
                    SEED_SIZE,
                    |_| match &skip {
                        Some(why) => Err(why.clone()),
                        None => Ok(vec![run_together(&pushes)?.0, run_together(&pops)?.0]),
                    },
                );
            }
        });
    }
}

pub(crate) fn dpdk_pushpop(ctx: &mut Ctx, driver: &Path, mixes: &[(usize, usize)]) {
    let records = even(ctx.records());
    for (k, (subject, mode)) in (0u32..).zip(DPDK_MODES) {
        let q = boost_queue(3).wrapping_add(k * 8);
        with_dpdk_ring(driver, q, records, mode, || {
            for &(p, c) in mixes {
                let skip = dpdk_skip(driver, mode, p + c);
                let threads = driver_args(q, "pushpop", p, c, records, SEED_SIZE, 0);
                let one = |op, n: usize| (driver, driver_args(q, op, 1, 0, records / n as u64, SEED_SIZE, 0));
                let mut procs: Vec<_> = (0..p).map(|_| one("push", p)).collect();
                procs.extend((0..c).map(|_| one("pop", c)));
                ctx.measure_group(
                    "push+pop",
                    &[("threads", subject), ("processes", subject)],
                    &format!("{p}+{c}"),
                    2 * records,
                    SEED_SIZE,
                    |_| match &skip {
                        Some(why) => Err(why.clone()),
                        None => Ok(vec![driver_ms(&run_one(driver, threads.clone())?)?, run_together(&procs)?.0]),
                    },
                );
            }
        });
    }
}

//! The latency part of `make bench`: how long a record takes from the push
//! in one process to the return of the blocking pop in another, with a record
//! every 10 us, 100 us and 1 ms; p50 / p99 / p99.9 / max from an HDR
//! histogram. Subjects: tvmq with its default wait and spinning
//! (`TVMQ_SPIN_US=1000`), Boost.Interprocess, a pipe (the kernel's floor for
//! a wake-up), tvmq and a pipe in turn between the same two processes (even
//! records through tvmq, odd ones through the pipe: on a loaded machine the
//! load changes from one run to the next more than the two differ; in turn,
//! record by record, both meet the same load), and crossbeam's `ArrayQueue`
//! between two threads with a spinning consumer. Also the CPU a consumer
//! blocked on an idle queue uses.
//!
//! The processes are `bench/drivers/latency.c` (tvmq and the pipe) and
//! `boost_mq latency` (Boost), both on the harness of
//! `bench/drivers/latency.h`; they write one latency (ns) per record.

use crate::cell::{IdleCell, LatencyCell};
use crate::ctx::Ctx;
use crate::harness::fresh_queue;
use crossbeam_queue::ArrayQueue;
use hdrhistogram::Histogram;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const SIZE: u64 = 304;
const QUEUE: u32 = 30;

/// The Boost queue's number: unique to this run (Boost queues live in
/// /dev/shm, outside TVMDBD: two bench runs at once must not share one).
fn boost_queue() -> String {
    std::process::id().wrapping_mul(4).to_string()
}
/// The gaps between records, in microseconds.
pub(crate) const GAPS: [u64; 3] = [10, 100, 1000];
/// Spin time of the "tvmq spin" subject, in microseconds.
const SPIN_US: &str = "1000";

/// Rounds of every subject at a gap: the subjects take turns (in reverse
/// order every other round), so that a change in the machine's load falls
/// on each of them alike; a subject's histogram holds all its rounds.
const ROUNDS: usize = 4;

fn rounds(smoke: bool) -> usize {
    if smoke { 1 } else { ROUNDS }
}

/// Records of one round: 2 s of records in all (0.05 s in a smoke run).
fn records_for(gap_us: u64, smoke: bool) -> u64 {
    let seconds = if smoke { 0.05 } else { 2.0 / ROUNDS as f64 };
    ((seconds * 1e6 / gap_us as f64) as u64).max(if smoke { 50 } else { 500 })
}

fn histogram(latencies: &[u64]) -> Result<Histogram<u64>, String> {
    histogram_of(latencies, 0, 1)
}

/// The histogram of records `first`, `first + step`, ... after the warm-up
/// (the first 2 % of all records).
fn histogram_of(latencies: &[u64], first: usize, step: usize) -> Result<Histogram<u64>, String> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
    let warm = latencies.len() / 50;
    for (_, &ns) in latencies.iter().enumerate().skip(warm).filter(|(i, _)| i % step == first) {
        h.record(ns.max(1)).map_err(|e| e.to_string())?;
    }
    Ok(h)
}

fn read_latencies(path: &Path) -> Result<Vec<u64>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
}

fn run_program(mut cmd: Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() || !text.starts_with("ok") {
        return Err(format!("{}{}", text.trim(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(text)
}

/// One run of a latency driver: `program args... --records R --gap-us G --out F`.
fn driver_run(
    ctx: &Ctx,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    gap: u64,
) -> Result<Vec<Histogram<u64>>, String> {
    Ok(vec![histogram(&driver_latencies(ctx, program, args, env, gap)?)?])
}

/// The latencies of one run of a latency driver, one per record, in order.
fn driver_latencies(
    ctx: &Ctx,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    gap: u64,
) -> Result<Vec<u64>, String> {
    let out = ctx.dir.join("latencies.bin");
    let records = records_for(gap, ctx.args.smoke);
    let mut cmd = Command::new(program);
    cmd.args(args)
        .args(["--size", &SIZE.to_string(), "--records", &records.to_string(), "--gap-us", &gap.to_string()])
        .arg("--out")
        .arg(&out)
        .envs(env.iter().copied())
        .env("TVMDBD", &ctx.dir);
    run_program(cmd)?;
    let lat = read_latencies(&out)?;
    let _ = std::fs::remove_file(&out);
    if lat.len() as u64 != records {
        return Err(format!("{} latencies for {records} records", lat.len()));
    }
    Ok(lat)
}

/// Crossbeam's queue between two threads: a paced producer, a spinning consumer.
fn crossbeam_run(gap_us: u64, records: u64) -> Result<Vec<Histogram<u64>>, String> {
    // Room for every record: a consumer that falls behind shows as latency, not as an error.
    let q = Arc::new(ArrayQueue::<(Instant, [u8; SIZE as usize - 16])>::new(records as usize));
    let consumer = {
        let q = q.clone();
        std::thread::spawn(move || {
            let mut lat = Vec::with_capacity(records as usize);
            while (lat.len() as u64) < records {
                match q.pop() {
                    Some((sent, _)) => lat.push(sent.elapsed().as_nanos() as u64),
                    None => std::hint::spin_loop(),
                }
            }
            lat
        })
    };
    let gap = Duration::from_micros(gap_us);
    let mut next = Instant::now() + Duration::from_millis(20);
    for _ in 0..records {
        next += gap;
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        q.push((Instant::now(), [7u8; SIZE as usize - 16])).map_err(|_| "crossbeam: full".to_string())?;
    }
    let lat = consumer.join().map_err(|_| "consumer panicked".to_string())?;
    Ok(vec![histogram(&lat)?])
}

/// One way of measuring subjects: a run at a gap (microseconds), giving a
/// histogram for each of the subjects it is listed with.
type Subject = Box<dyn Fn(&Ctx, u64) -> Result<Vec<Histogram<u64>>, String>>;

/// The subjects of the run in turn: tvmq's records (the even ones) and the pipe's.
pub(crate) const TVMQ_IN_TURN: &str = "tvmq, in turn with a pipe";
pub(crate) const PIPE_IN_TURN: &str = "pipe, in turn with tvmq";

/// Runs the latency part: every subject at every gap, then the idle test.
pub(crate) fn run(ctx: &mut Ctx, driver: Option<&Path>, boost: Option<&Path>) {
    let mut subjects: Vec<(&'static [&'static str], Subject)> = Vec::new();
    if let Some(d) = driver {
        let q = QUEUE.to_string();
        let (d1, d2, d3, q1, q2) = (d.to_path_buf(), d.to_path_buf(), d.to_path_buf(), q.clone(), q.clone());
        subjects.push((
            &["tvmq"],
            Box::new(move |ctx, gap| {
                driver_run(ctx, &d1, &["run", "--transport", "tvmq", "--queue", &q1], &[("TVMQ_SPIN_US", "")], gap)
            }),
        ));
        subjects.push((
            &["tvmq spin 1 ms"],
            Box::new(move |ctx, gap| {
                driver_run(ctx, &d2, &["run", "--transport", "tvmq", "--queue", &q2], &[("TVMQ_SPIN_US", SPIN_US)], gap)
            }),
        ));
        subjects.push((
            &["pipe"],
            Box::new(move |ctx, gap| driver_run(ctx, &d3, &["run", "--transport", "pipe"], &[], gap)),
        ));
        let (d4, q4) = (d.to_path_buf(), q.clone());
        subjects.push((
            &[TVMQ_IN_TURN, PIPE_IN_TURN],
            Box::new(move |ctx, gap| {
                let args = ["run", "--transport", "alternate", "--queue", &q4];
                let lat = driver_latencies(ctx, &d4, &args, &[("TVMQ_SPIN_US", "")], gap)?;
                Ok(vec![histogram_of(&lat, 0, 2)?, histogram_of(&lat, 1, 2)?])
            }),
        ));
    }
    if let Some(b) = boost {
        let (b, q) = (b.to_path_buf(), boost_queue());
        subjects.push((
            &["Boost mq"],
            Box::new(move |ctx, gap| driver_run(ctx, &b, &["latency", "--queue", &q], &[], gap)),
        ));
    }
    subjects.push((
        &["crossbeam (threads, spinning)"],
        Box::new(|ctx, gap| crossbeam_run(gap, records_for(gap, ctx.args.smoke))),
    ));
    let n = rounds(ctx.args.smoke);
    for gap in GAPS {
        // The cells of each run, in the order of `subjects`.
        let mut cells: Vec<Vec<LatencyCell>> = subjects
            .iter()
            .map(|&(names, _)| {
                names.iter().map(|&subject| LatencyCell { subject, gap_us: gap, hist: None, error: None }).collect()
            })
            .collect();
        for round in 0..n {
            // Fresh queues each round: a consumer killed in a failed round
            // (Boost's condition variable keeps a dead waiter) harms no other.
            if let Err(e) = prepare(ctx, boost) {
                eprintln!("latency: {e}");
                return;
            }
            let order: Vec<usize> =
                if round % 2 == 0 { (0..subjects.len()).collect() } else { (0..subjects.len()).rev().collect() };
            for k in order {
                let (names, run) = &subjects[k];
                let mine = &mut cells[k];
                if mine.iter().any(|c| c.error.is_some()) {
                    continue;
                }
                let subject = names.join(" / ");
                ctx.progress(&format!("latency, a record every {gap} us: {subject}, round {}/{n}", round + 1));
                match run(ctx, gap) {
                    Ok(hists) => {
                        for (cell, h) in mine.iter_mut().zip(hists) {
                            match &mut cell.hist {
                                Some(all) => {
                                    if let Err(e) = all.add(&h) {
                                        cell.error = Some(e.to_string());
                                    }
                                }
                                None => cell.hist = Some(h),
                            }
                        }
                    }
                    Err(e) => {
                        eprintln!("latency {subject} {gap} us: {e}");
                        for cell in mine.iter_mut() {
                            cell.error = Some(e.clone());
                        }
                    }
                }
            }
        }
        for mut cell in cells.into_iter().flatten() {
            if cell.error.is_some() {
                cell.hist = None;
            }
            ctx.latency.push(cell);
        }
    }
    let secs = if ctx.args.smoke { "1" } else { "2" };
    let q = QUEUE.to_string();
    let mut idle: Vec<(&'static str, Command)> = Vec::new();
    if let Some(d) = driver {
        for (name, spin) in [("tvmq", ""), ("tvmq spin 1 ms", SPIN_US), ("tvmq spin forever (-1)", "-1")] {
            let mut c = Command::new(d);
            c.args(["idle", "--transport", "tvmq", "--queue", &q, "--size", "304", "--seconds", secs])
                .env("TVMQ_SPIN_US", spin);
            idle.push((name, c));
        }
        let mut c = Command::new(d);
        c.args(["idle", "--transport", "pipe", "--size", "304", "--seconds", secs]);
        idle.push(("pipe", c));
    }
    if let Some(b) = boost {
        let mut c = Command::new(b);
        c.args(["idle", "--queue", &boost_queue(), "--size", "304", "--seconds", secs]);
        idle.push(("Boost mq", c));
    }
    for (subject, mut cmd) in idle {
        ctx.progress(&format!("idle consumer: {subject}"));
        cmd.env("TVMDBD", &ctx.dir);
        let (cpu_pct, error) = match run_program(cmd).and_then(|out| {
            out.trim()
                .strip_prefix("ok cpu_pct=")
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or_else(|| format!("unexpected output {out:?}"))
        }) {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        };
        ctx.idle.push(IdleCell { subject, cpu_pct, error });
    }
    if let Some(b) = boost {
        let _ = Command::new(b).args(["remove", "--queue", &boost_queue()]).output();
    }
    let _ = tvm::Queue::drop_queue(&ctx.dir, QUEUE);
}

/// The queues, tvmq's and Boost's, made anew with room for every record of
/// a round: a consumer that falls behind (a loaded machine) shows as
/// latency, not as a full queue.
fn prepare(ctx: &Ctx, boost: Option<&Path>) -> Result<(), String> {
    let room = GAPS.iter().map(|&g| records_for(g, ctx.args.smoke)).max().unwrap_or(1024);
    fresh_queue(&ctx.dir, QUEUE, room, SIZE)?;
    if let Some(b) = boost {
        crate::scratch::remember(&crate::external::boost_file(boost_queue()));
        let mut c = Command::new(b);
        c.args(["create", "--queue", &boost_queue(), "--capacity", &room.to_string(), "--size", "304"]);
        let out = c.output().map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("boost_mq create: {}", String::from_utf8_lossy(&out.stderr)));
        }
    }
    Ok(())
}

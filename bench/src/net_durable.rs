//! The durable cells of `tvmq bench --net`: an `always` queue served by
//! `tvmq serve` against redis-server with `appendonly yes` and
//! `appendfsync always`, both on the disk (`--disk-dir`, `target` by
//! default), driven by redis-benchmark LPUSH with 304-byte values at
//! `-c 1`, `-c 10`, `-c 50` and `-c 10 -P 16`. Each server gets servers of
//! its own (so the other cells keep theirs without persistence); tvmq's
//! queue `mylist` is made anew before each run with room for the run's
//! pushes, redis's list deleted. `tvmq bench --net --only durable` runs
//! these cells alone.
//!
//! Beside them, measured in the same run, the two bounds on what any
//! durable server can reach here, so that a missed target can be told out
//! of reach or not:
//! - the client's ceiling: each cell again (same options, values and
//!   requests) against a plain queue `mylist` (not durable) on the same
//!   tvmq serve, subject [`PLAIN`]: a durable server cannot beat it, so
//!   when plain tvmq over redis `always` is below the target, no durable
//!   server meets it with redis-benchmark on this machine;
//! - the design ceilings: each cell again against three lean servers
//!   ([`crate::lean_server`]: the least a single-threaded server can do to
//!   answer LPUSH once its value is on the disk, with tvmq's commit),
//!   subjects `lean server inline`, `ring` and `gather`, one a design ([`Design`]): Redis's loop (`inline`), the write
//!   on an io_uring (`ring`), and Redis's loop gathering every client into
//!   one write (`gather`). When none reaches a target, no server of those
//!   designs does here (tvmq serve follows the first two);
//! - one commit on this disk ([`crate::disk_commit`]): the latency of a
//!   sync of one record in place (msync, as `always` files of earlier
//!   versions sync), of tvmq's blocking image write (`O_DIRECT | O_DSYNC`,
//!   `always` and `interval`; tvmq serve's inline syncs; its ring's write
//!   with `O_DIRECT` alone, then `fdatasync`) and of redis's `appendfsync always` (append +
//!   fdatasync); at
//!   `-c 1` each request waits for one commit at least, so a server that
//!   commits like tvmq answers at most one request per median commit.

use crate::cell::{Cell, rate};
use crate::ctx::Ctx;
use crate::disk_commit::{self, Commit, Way};
use crate::harness::ask;
use crate::lean_server::Design;
use crate::net_servers::{
    REDIS, TVMQ, Target, Via, benchmark, kilo, measuring, start_lean, start_redis_aof, start_tvmq_on,
};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The section of these cells in the table.
pub(crate) const SECTION: &str = "always queue on disk vs redis appendfsync always, TCP";
/// The subject of the client's ceiling: each cell against a plain queue
/// on the same tvmq serve (no comma: results.csv does not quote).
pub(crate) const PLAIN: &str = "tvmq serve (plain queue)";
/// The id of the queue `mylist` (`always`, or plain for [`PLAIN`]) in the
/// durable server's directory.
const ID: u32 = 900_002;
/// The section of the commit timings in results.csv.
const COMMIT_SECTION: &str = "one commit on the disk (--disk-dir)";
/// Commits timed of each way (the smoke run's: 50).
const COMMITS: usize = 500;

/// The cells: (redis-benchmark options, the table's parameter, requests
/// a run, the smoke run's). The test is LPUSH. `-c 1` runs about 2 s (at
/// 4,000 requests, under a second, three runs of one build read 1.36x,
/// 1.39x and 1.08x redis: the disk's speed drifts within seconds).
const CELLS: [(&[&str], &str, u64, u64); 4] = [
    (&["-c", "1"], "-c 1", 10_000, 200),
    (&["-c", "10"], "-c 10", 20_000, 500),
    (&["-c", "50"], "-c 50", 40_000, 1_000),
    (&["-c", "10", "-P", "16"], "-c 10 -P 16", 100_000, 2_000),
];

/// The goal of a row (tvmq's rate over redis's), by its parameter: issue
/// 35's targets (-c 1: 1.2x, -c 10: 2x, -c 50: 1.5x, -c 10 -P 16: 2x).
fn goal(param: &str) -> f64 {
    match param {
        "-c 1" => 1.2,
        "-c 50" => 1.5,
        _ => 2.0,
    }
}

/// The target of a row (tvmq's rate over redis's), by its parameter.
pub(crate) fn target(param: &str, ratio: f64) -> String {
    let goal = goal(param);
    let check = if ratio >= goal { "met" } else { "MISSED" };
    format!(">= {goal}x redis: {check} ({ratio:.2}x)")
}

/// What the client's ceiling says of a row's target, given plain tvmq's
/// rate over redis `always`'s.
pub(crate) fn ceiling(param: &str, ratio: f64) -> String {
    let goal = goal(param);
    if ratio >= goal {
        format!("{goal}x within this client's reach ({ratio:.2}x)")
    } else {
        format!("{goal}x OUT OF REACH with this client ({ratio:.2}x)")
    }
}

/// The parameter under which the CPU figures of a cell's plain runs are
/// noted (apart from its durable runs on the same server).
pub(crate) fn plain_param(param: &str) -> String {
    format!("{param} plain")
}

/// What a lean server's rate over redis `always`'s says of a row's target.
pub(crate) fn design(param: &str, ratio: f64) -> String {
    let goal = goal(param);
    let reached = if ratio >= goal { "reaches" } else { "does NOT reach" };
    format!("this design at its leanest {reached} {goal}x ({ratio:.2}x)")
}

/// Makes `mylist` anew on `t`: tvmq's queue (`always` when `durable`) with
/// room for `rows` records, redis's list deleted.
fn fresh(t: &Target, dir: &Path, rows: u64, durable: bool) -> Result<(), String> {
    if t.name == TVMQ {
        let _ = tvm::Queue::drop_queue(dir, ID);
        let mut spec = tvm::Spec::new(rows, 304);
        spec.name = "mylist".into();
        if durable {
            spec.durability = Some(tvm::Durability::Always);
        }
        tvm::Queue::create(dir, ID, &spec).map_err(|e| e.to_string())
    } else {
        ask(t.port, "DEL mylist").map(|_| ())
    }
}

/// What bounds the durable cells, measured in the run: the commit timings
/// (the plain cells are in the run's cells), and where they were taken.
pub(crate) struct Bounds {
    pub(crate) commits: Vec<Commit>,
    pub(crate) dir: PathBuf,
}

/// Runs the cells, the servers' files under `--disk-dir`, their sockets in
/// `scratch`, then times one commit of each way there.
pub(crate) fn cells(ctx: &mut Ctx, scratch: &Path) -> Result<Bounds, String> {
    let root = ctx.args.disk_dir.join(format!("tvmq-bench-net-durable-{}", std::process::id()));
    let (qdir, rdir) = (root.join("tvmq"), root.join("redis"));
    crate::scratch::remember(&root);
    for d in [&qdir, &rdir] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let result = run_cells(ctx, scratch, &qdir, &rdir).map(|()| {
        let samples = if ctx.args.smoke { 50 } else { COMMITS };
        ctx.progress(&format!("one commit on the disk: {samples} of each way"));
        Bounds { commits: disk_commit::measure(&root, samples), dir: ctx.args.disk_dir.clone() }
    });
    let _ = std::fs::remove_dir_all(&root);
    crate::scratch::forget(&root);
    result
}

fn run_cells(ctx: &mut Ctx, scratch: &Path, qdir: &Path, rdir: &Path) -> Result<(), String> {
    let smoke = ctx.args.smoke;
    let tvmq = start_tvmq_on(qdir, &scratch.join("tvmq-durable.sock"))?;
    let redis = start_redis_aof(rdir, &scratch.join("redis-durable.sock"))?;
    // A lean server that cannot start (no io_uring here, for `ring`) leaves
    // its rows out, said on stderr; the cells go on.
    let mut leans = Vec::new();
    for design in Design::ALL {
        let (name, subject) = (design.name(), design.subject());
        match start_lean(subject, name, &qdir.with_file_name(format!("lean-{name}.log"))) {
            Ok(t) => leans.push(t),
            Err(e) => eprintln!("{}tvmq bench: no {subject} rows: {e}", crate::ctx::clear_line()),
        }
    }
    let both = [&tvmq, &redis];
    // Warm up (connections, the first faults and syncs of each file).
    for t in both {
        fresh(t, qdir, 2000, true)?;
        benchmark(t, Via::Tcp, "lpush", "LPUSH", 500, &["-c", "10", "-d", "304"])?;
    }
    for t in &leans {
        benchmark(t, Via::Tcp, "lpush", "LPUSH", 500, &["-c", "10", "-d", "304"])?;
    }
    for (opts, param, full, small) in CELLS {
        let n = if smoke { small } else { full };
        let mut extra = opts.to_vec();
        extra.extend(["-d", "304"]);
        let mut tests = vec![("LPUSH", TVMQ), ("LPUSH", REDIS), ("LPUSH", PLAIN)];
        tests.extend(leans.iter().map(|t| ("LPUSH", t.name)));
        ctx.measure_group(SECTION, &tests, param, n, 304, |_| {
            let mut ms = Vec::new();
            measuring(SECTION, param);
            for t in both {
                fresh(t, qdir, n + 1000, true)?;
                ms.push(benchmark(t, Via::Tcp, "lpush", "LPUSH", n, &extra)?);
            }
            // The client's ceiling: the same requests to a plain queue.
            measuring(SECTION, &plain_param(param));
            fresh(&tvmq, qdir, n + 1000, false)?;
            ms.push(benchmark(&tvmq, Via::Tcp, "lpush", "LPUSH", n, &extra)?);
            // The design ceilings: the same requests to each lean server.
            measuring(SECTION, param);
            for lean in &leans {
                ms.push(benchmark(lean, Via::Tcp, "lpush", "LPUSH", n, &extra)?);
            }
            Ok(ms)
        });
    }
    let _ = tvm::Queue::drop_queue(qdir, ID);
    Ok(())
}

/// The block under the section: one commit of each way on the disk, and
/// the `-c 1` bound they give with redis's `-c 1` rate of `cells`.
pub(crate) fn notes(bounds: &Bounds, cells: &[Cell]) -> String {
    let mut t = String::new();
    let samples = bounds.commits.iter().filter_map(|c| c.timings.as_ref().ok()).map(|t| t.us.len()).max();
    let _ = writeln!(
        t,
        "one commit on the disk of {} ({} timed of each way, microseconds): p50 / p90",
        bounds.dir.display(),
        samples.unwrap_or(0)
    );
    for c in &bounds.commits {
        let figure = match &c.timings {
            Ok(t) => format!("{:>5.0} / {:.0}", t.p50(), t.p90()),
            Err(e) => format!("error: {}", e.chars().take(80).collect::<String>()),
        };
        let _ = writeln!(t, "  ({}) {:<80} {figure}", c.way.letter(), c.way.describe());
    }
    let _ = writeln!(t, "{}", bound_line(bounds, cells));
    t
}

/// The `-c 1` bound in one line: with one client, each request waits for
/// one commit at least, so a server committing with (b), tvmq's (or (a)),
/// answers at most one request per median commit: that rate over redis's.
/// (An earlier bound, redis's time a request less the commit saved,
/// assumed the rest of a request costs as much in tvmq as in redis; a run
/// measured 1.42x where it said at most 1.00x.)
fn bound_line(bounds: &Bounds, cells: &[Cell]) -> String {
    let p50 = |way: Way| bounds.commits.iter().find(|c| c.way == way)?.timings.as_ref().ok().map(|t| t.p50());
    let Some(redis) = rate(cells, SECTION, "LPUSH", "-c 1", REDIS) else {
        return "-c 1 bound: no redis -c 1 figure".into();
    };
    let bound = |way: Way| -> Option<(f64, f64)> {
        let us = p50(way).filter(|&us| us > 0.0)?;
        Some((us, 1e6 / us / redis))
    };
    let goal = goal("-c 1");
    let reach = |ratio: f64| if ratio >= goal { "within reach" } else { "OUT OF REACH" };
    let mut line = format!("-c 1 bound: each request waits for one commit at least; redis {}", kilo(redis));
    match bound(Way::Direct) {
        Some((us, ratio)) => {
            let _ = write!(
                line,
                "; one (b), tvmq's, a request ({us:.0} us) allows at most {}: {ratio:.2}x redis, the {goal}x target {}",
                kilo(1e6 / us),
                reach(ratio)
            );
        }
        None => line.push_str("; no (b) timing"),
    }
    if let Some((_, ratio)) = bound(Way::Msync) {
        let _ = write!(line, "; with (a): at most {ratio:.2}x");
    }
    line
}

/// The commit timings as rows of results.csv (its columns: section, test,
/// param, subject, records, record_bytes, runs, median_ms, min_ms, max_ms,
/// median_per_s, error): one row for p50 and one for p90 of each way, the
/// quantile in `param` and its value in `median_ms`, the samples in `runs`.
pub(crate) fn csv_rows(bounds: &Bounds) -> String {
    let mut s = String::new();
    for c in &bounds.commits {
        let (way, bytes) = (c.way.test(), c.way.bytes());
        match &c.timings {
            Ok(t) => {
                for (q, us) in [("p50", t.p50()), ("p90", t.p90())] {
                    let _ = writeln!(
                        s,
                        "{COMMIT_SECTION},{way},{q},disk,1,{bytes},{},{:.4},{:.4},{:.4},{:.0},",
                        t.us.len(),
                        us / 1e3,
                        t.min() / 1e3,
                        t.max() / 1e3,
                        1e6 / us
                    );
                }
            }
            Err(e) => {
                let _ = writeln!(s, "{COMMIT_SECTION},{way},,disk,1,{bytes},0,,,,,{}", e.replace([',', '\n'], ";"));
            }
        }
    }
    s
}

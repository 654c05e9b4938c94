//! The durable cells of `tvmq bench --net`: an `always` queue served by
//! `tvmq serve` against redis-server with `appendonly yes` and
//! `appendfsync always`, both on the disk (`--disk-dir`, `target` by
//! default), driven by redis-benchmark LPUSH with 304-byte values at
//! `-c 1`, `-c 10`, `-c 50` and `-c 10 -P 16`. Each server gets servers of
//! its own (so the other cells keep theirs without persistence); tvmq's
//! queue `mylist` is made anew before each run with room for the run's
//! pushes, redis's list deleted. `tvmq bench --net --only durable` runs
//! these cells alone.

use crate::ctx::Ctx;
use crate::harness::ask;
use crate::net_servers::{REDIS, TVMQ, Target, Via, benchmark, measuring, start_redis_aof, start_tvmq_on};
use std::path::Path;

/// The section of these cells in the table.
pub(crate) const SECTION: &str = "always queue on disk vs redis appendfsync always, TCP";
/// The id of the `always` queue `mylist` in the durable server's directory.
const ID: u32 = 900_002;

/// The cells: (redis-benchmark options, the table's parameter, requests
/// a run, the smoke run's). The test is LPUSH.
const CELLS: [(&[&str], &str, u64, u64); 4] = [
    (&["-c", "1"], "-c 1", 4_000, 200),
    (&["-c", "10"], "-c 10", 20_000, 500),
    (&["-c", "50"], "-c 50", 40_000, 1_000),
    (&["-c", "10", "-P", "16"], "-c 10 -P 16", 100_000, 2_000),
];

/// The target of a row (tvmq's rate over redis's), by its parameter.
pub(crate) fn target(param: &str, ratio: f64) -> String {
    let goal = match param {
        "-c 1" => 1.2,
        _ => 2.0,
    };
    let check = if ratio >= goal { "met" } else { "MISSED" };
    format!(">= {goal}x redis: {check} ({ratio:.2}x)")
}

/// Makes `mylist` anew on `t`: tvmq's `always` queue with room for `rows`
/// records, redis's list deleted.
fn fresh(t: &Target, dir: &Path, rows: u64) -> Result<(), String> {
    if t.name == TVMQ {
        let _ = tvm::Queue::drop_queue(dir, ID);
        let mut spec = tvm::Spec::new(rows, 304);
        spec.name = "mylist".into();
        spec.durability = Some(tvm::Durability::Always);
        tvm::Queue::create(dir, ID, &spec).map_err(|e| e.to_string())
    } else {
        ask(t.port, "DEL mylist").map(|_| ())
    }
}

/// Runs the cells, the servers' files under `--disk-dir`, their sockets in
/// `scratch`.
pub(crate) fn cells(ctx: &mut Ctx, scratch: &Path) -> Result<(), String> {
    let root = ctx.args.disk_dir.join(format!("tvmq-bench-net-durable-{}", std::process::id()));
    let (qdir, rdir) = (root.join("tvmq"), root.join("redis"));
    for d in [&qdir, &rdir] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    let result = run_cells(ctx, scratch, &qdir, &rdir);
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn run_cells(ctx: &mut Ctx, scratch: &Path, qdir: &Path, rdir: &Path) -> Result<(), String> {
    let smoke = ctx.args.smoke;
    let tvmq = start_tvmq_on(qdir, &scratch.join("tvmq-durable.sock"))?;
    let redis = start_redis_aof(rdir, &scratch.join("redis-durable.sock"))?;
    let both = [&tvmq, &redis];
    // Warm up (connections, the first faults and syncs of each file).
    for t in both {
        fresh(t, qdir, 2000)?;
        benchmark(t, Via::Tcp, "lpush", "LPUSH", 500, &["-c", "10", "-d", "304"])?;
    }
    for (opts, param, full, small) in CELLS {
        let n = if smoke { small } else { full };
        measuring(SECTION, param);
        ctx.measure_group(SECTION, &[("LPUSH", TVMQ), ("LPUSH", REDIS)], param, n, 304, |_| {
            let mut ms = Vec::new();
            for t in both {
                fresh(t, qdir, n + 1000)?;
                let mut extra = opts.to_vec();
                extra.extend(["-d", "304"]);
                ms.push(benchmark(t, Via::Tcp, "lpush", "LPUSH", n, &extra)?);
            }
            Ok(ms)
        });
    }
    let _ = tvm::Queue::drop_queue(qdir, ID);
    Ok(())
}

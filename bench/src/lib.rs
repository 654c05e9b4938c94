//! `tvmq bench`: the seed article's benchmark matrix, with its peers measured
//! in the same run.
//!
//! Cells that run C programs (the seed programs, our C driver, the Boost
//! and DPDK drivers) are given by `make bench`; without them, `tvmq bench` measures
//! what needs no compiler: tvmq through its C ABI called from Rust,
//! crossbeam's `ArrayQueue`, the bare ring loop, and setup costs.
//!
//! # Shape
//! Each module uses only modules below it in this table (the crate root
//! uses them all); no import goes upwards, so there is no cycle.
//!
//! | module | concern | uses |
//! |---|---|---|
//! | `net` | `--net`: tvmq serve against redis-server, its table, CSV and chart | `report`, `net_redis`, `net_client`, `net_lease`, `net_durable`, `lean_server`, `net_servers`, `chart`, `cell`, `ctx`, `harness`, `scratch` |
//! | `report` | the matrix's table, CSV, JSON and charts | `durable`, `chart`, `latency`, `args`, `cell`, `ctx` |
//! | `net_redis` | the C client on Redis beyond one machine: the lease script beside BLMOVE + LREM by hand, pushes waiting for a replica | `net_client`, `net_servers`, `cell`, `ctx`, `harness` |
//! | `net_client` | the C client's cells of `--net` (`bench/drivers/net_driver.c`) | `net_servers`, `cell`, `ctx`, `harness` |
//! | `net_lease` | the lease cells of `--net`: acknowledged consumption over the network, one RESP client against both servers | `net_servers`, `ctx` |
//! | `net_durable` | the durable cells of `--net`: an `always` queue on disk beside redis-server `appendfsync always`, and their bounds (the client's ceiling, the design ceilings, one commit on the disk) | `lean_server`, `net_servers`, `disk_commit`, `cell`, `ctx`, `harness`, `scratch` |
//! | `lean_server` | the durable cells' design ceilings: lean durable servers (Redis's loop, a write on an io_uring, a loop gathering every client), each a child process of the bench (`--lean-server`) | - |
//! | `net_servers` | the servers under test, redis-benchmark against them, their CPU per request | `harness` |
//! | `disk_commit` | one commit on the disk timed alone: msync of a mapping, an `O_DIRECT` write, an append + fdatasync | - |
//! | `durable` | durable queues on the disk beside redis appendfsync always | `inproc`, `cell`, `ctx`, `harness`, `scratch` |
//! | `leases` | `lPopLease` + `lAck` beside plain `lPop` | `inproc`, `ctx`, `harness` |
//! | `watch` | a metrics scrape of 10,000 queues, a metrics reader beside a push/pop loop | `ctx` |
//! | `many` | 10 to 10,000 small queues: memory, call cost, create and list, beside redis-server lists | `net_servers`, `inproc`, `ctx` |
//! | `chart` | chart.png, latency.png, and the drawing pieces `net` shares | `latency`, `cell` |
//! | `latency` | push-to-pop latency across processes, idle consumers' CPU | `external`, `cell`, `ctx`, `harness`, `scratch` |
//! | `external` | cells that run C programs: the seed programs, the C, Boost and DPDK drivers | `ctx`, `harness`, `scratch` |
//! | `inproc` | cells measured in this process: the C ABI, crossbeam, the bare ring, setup; the thread launcher | `ctx`, `harness` |
//! | `ctx` | what a run carries from cell to cell, and how a group of cells is measured | `args`, `cell`, `harness` |
//! | `scratch` | what a stopped run leaves: its files and child processes, removed and killed on SIGINT and SIGTERM | - |
//! | `harness` | fresh queues, child processes killed on drop, a free port, `ask`, servers started, redis-benchmark run and read | - |
//! | `cell` | what is measured: throughput, latency and idle cells; a cell's figure | - |
//! | `args` | the options ([`BenchArgs`], [`Part`]) | - |

mod args;
mod cell;
mod chart;
mod ctx;
mod disk_commit;
mod durable;
mod external;
mod harness;
mod inproc;
mod latency;
mod lean_server;
mod leases;
mod many;
mod net;
mod net_client;
mod net_durable;
mod net_lease;
mod net_redis;
mod net_servers;
mod report;
mod scratch;
mod watch;

pub use args::{BenchArgs, Part};

use ctx::{Ctx, clear_line};
use std::path::Path;
use std::time::Instant;
use tvm::error::{Error, SHM_ERR_ACCES};

/// Runs the benchmark in a queue directory of its own, made under `base`
/// (`--dir` or `$TVMDBD`; `/dev/shm` when `None`) and removed at the end,
/// also when SIGINT or SIGTERM stops it (with its peers' files and its
/// child processes).
pub fn run(args: &BenchArgs, base: Option<&Path>) -> Result<(), Error> {
    if let Some(spec) = &args.durable_child {
        return durable::child(spec).map_err(|e| Error::new(tvm::error::SVR_EXCEPTION, e));
    }
    if let Some(spec) = &args.lean_server {
        return lean_server::run(spec).map_err(|e| Error::new(tvm::error::SVR_EXCEPTION, e));
    }
    scratch::catch_signals().map_err(|e| Error::new(tvm::error::SVR_EXCEPTION, e))?;
    let dir = base.unwrap_or(Path::new("/dev/shm")).join(format!("tvmq-bench-{}", std::process::id()));
    scratch::remember(&dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::new(SHM_ERR_ACCES, format!("cannot create {}: {e}", dir.display())))?;
    // The C ABI (called in-process) and the programs started below find their
    // queues through TVMDBD.
    // SAFETY: set before this process starts any thread (but the signal
    // thread, which reads no environment).
    unsafe { std::env::set_var("TVMDBD", &dir) };
    let mut ctx = Ctx {
        args: args.clone(),
        dir: dir.clone(),
        cells: Vec::new(),
        latency: Vec::new(),
        idle: Vec::new(),
        many: String::new(),
        started: Instant::now(),
    };
    eprintln!("tvmq bench: queues in {} (removed at the end, also on Ctrl-C)", dir.display());
    let result = if args.net { net::run(&mut ctx) } else { run_matrix(&mut ctx) };
    let _ = std::fs::remove_dir_all(&dir);
    scratch::forget(&dir);
    eprint!("{}", clear_line());
    result?;
    if args.net {
        return Ok(());
    }
    report::write(&ctx, ctx.started.elapsed().as_secs_f64())
}

fn run_matrix(ctx: &mut Ctx) -> Result<(), Error> {
    let args = ctx.args.clone();
    let (seed, c_driver, boost, dpdk) = (&args.seed_bin, &args.c_driver, &args.boost_driver, &args.dpdk_driver);

    if args.wants(Part::Setup) {
        inproc::setup_costs(ctx);
    }

    // 1. The seed programs (or tvmq's C ABI from Rust), push then pop, at 1, 2, 4, 10 threads.
    let threads = [1usize, 2, 4, 10];
    if args.wants(Part::Threads) {
        match seed {
            Some(bin) => external::seed_threads(ctx, bin, &threads),
            None => inproc::tvmq_threads(ctx, &threads),
        }
        if let Some(b) = boost {
            external::boost_threads(ctx, b, &threads);
        }
        if let Some(d) = dpdk {
            external::dpdk_threads(ctx, d, &threads);
        }
        inproc::crossbeam_threads(ctx, &threads);
        inproc::bare_ring(ctx);
    }

    // 2. Processes instead of threads.
    let procs = [2usize, 4, 5];
    if args.wants(Part::Processes) {
        if let Some(bin) = seed {
            external::seed_processes(ctx, bin, &procs);
        }
        if let Some(b) = boost {
            external::boost_processes(ctx, b, &procs);
        }
        if let Some(d) = dpdk {
            external::dpdk_processes(ctx, d, &procs);
        }
    }

    // 3. Push and pop at the same time.
    let mixes = [(1usize, 1usize), (2, 1), (2, 2)];
    if args.wants(Part::Pushpop) {
        match c_driver {
            Some(d) => external::driver_pushpop(ctx, d, &mixes),
            None => inproc::tvmq_pushpop(ctx, &mixes),
        }
        if let Some(bin) = seed {
            external::seed_pushpop_processes(ctx, bin, &mixes);
        }
        if let Some(b) = boost {
            external::boost_pushpop(ctx, b, &mixes);
        }
        if let Some(d) = dpdk {
            external::dpdk_pushpop(ctx, d, &mixes);
        }
        inproc::crossbeam_pushpop(ctx, &mixes);
    }

    // 4. Record sizes, 5. batches.
    let sizes = [20u64, 100, 512, 1024, 2048, 5120, 10240, 20480];
    match c_driver {
        Some(d) => {
            if args.wants(Part::Sizes) {
                external::driver_sizes(ctx, d, &sizes);
            }
            if args.wants(Part::Batches) {
                external::driver_batches(ctx, d);
            }
        }
        None => {
            if args.wants(Part::Sizes) {
                inproc::tvmq_sizes(ctx, &sizes);
            }
            if args.wants(Part::Batches) {
                inproc::tvmq_batches(ctx);
            }
        }
    }

    // 6. Latency across processes.
    if args.wants(Part::Latency) {
        latency::run(ctx, args.latency_driver.as_deref(), boost.as_deref());
    }

    // 7. Durable queues on the disk.
    if args.wants(Part::Durable) {
        durable::run(ctx);
    }

    // 8. Acknowledged consumption beside plain pops.
    if args.wants(Part::Leases) {
        leases::run(ctx, &threads);
    }

    // 9. Many small queues.
    if args.wants(Part::Many) {
        ctx.many = many::run(ctx);
    }

    // 10. Watching them: a metrics scrape, a reader beside a push/pop loop.
    if args.wants(Part::Metrics) {
        let text = watch::run(ctx);
        ctx.many.push_str(&text);
    }
    Ok(())
}

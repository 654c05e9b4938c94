//! `tvmq bench`: the seed article's benchmark matrix, with its peers measured
//! in the same run.
//!
//! Cells that run C programs (the seed programs, our C driver, the Boost
//! driver) are given by `make bench`; without them, `tvmq bench` measures
//! what needs no compiler: tvmq through its C ABI called from Rust,
//! crossbeam's `ArrayQueue`, the bare ring loop, and setup costs.

mod chart;
mod durable;
mod external;
mod inproc;
mod latency;
mod leases;
mod net;
mod net_client;
mod report;

use clap::{Args, ValueEnum};
use std::path::{Path, PathBuf};
use std::time::Instant;
use tvm::error::{Error, SHM_ERR_ACCES};

#[derive(Args, Clone)]
pub struct BenchArgs {
    /// Records per cell (the seed's default is 4,000,000)
    #[arg(long, default_value_t = 4_000_000)]
    records: u64,
    /// Runs per cell; the table shows the median and the min-max
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Where results.csv, results.json, chart.png and table.txt go
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Directory holding the seed programs push_bench and pop_bench, compiled unchanged
    #[arg(long)]
    seed_bin: Option<PathBuf>,
    /// tvmq's C driver (bench/drivers/tvmq_driver.c, compiled)
    #[arg(long)]
    c_driver: Option<PathBuf>,
    /// The Boost.Interprocess message_queue driver (bench/drivers/boost_mq.cpp, compiled)
    #[arg(long)]
    boost_driver: Option<PathBuf>,
    /// The latency driver (bench/drivers/latency.c, compiled): tvmq and a pipe across processes
    #[arg(long)]
    latency_driver: Option<PathBuf>,
    /// The network client's driver (bench/drivers/net_driver.c, compiled):
    /// adds tvm.h's network calls to --net
    #[arg(long)]
    net_driver: Option<PathBuf>,
    /// A quick run of every cell with small counts (keeps `make bench` from rotting)
    #[arg(long)]
    smoke: bool,
    /// The network matrix instead (make bench-net): tvmq serve against a
    /// redis-server it starts, driven by redis-benchmark; --out target/bench-net
    #[arg(long)]
    net: bool,
    /// Run only these parts of the matrix (repeat or separate with commas; default: all)
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Part>,
    /// Where the durable part puts its queues and redis's append-only file:
    /// a directory on a disk (not tmpfs)
    #[arg(long, value_name = "DIR", default_value = "target")]
    disk_dir: PathBuf,
    /// (Internal) a child process of the durable part: DIR:ID:COUNT
    #[arg(long, hide = true, value_name = "DIR:ID:COUNT")]
    durable_child: Option<String>,
}

/// The parts of the matrix, in the order they run.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// Time to create and attach a queue, and first-touch faults
    Setup,
    /// Push then pop at 1, 2, 4, 10 threads (with every peer)
    Threads,
    /// 2, 4, 5 processes
    Processes,
    /// Push and pop at once: 1+1, 2+1, 2+2
    Pushpop,
    /// Record sizes from 20 B to 20 KB
    Sizes,
    /// lPushs / lPopup, 64 a call
    Batches,
    /// Push-to-pop latency across processes at a record every 10 us, 100 us, 1 ms; idle consumers' CPU
    Latency,
    /// Durable queues on the disk (--disk-dir): interval=1000 against plain, always against
    /// redis-server appendfsync always
    Durable,
    /// Acknowledged consumption: lPopLease + lAck beside plain lPop (and lPush), 1, 2, 4, 10 threads
    Leases,
}

impl BenchArgs {
    /// Is `part` to be run?
    fn wants(&self, part: Part) -> bool {
        self.only.is_empty() || self.only.contains(&part)
    }
}

/// One measured cell: a subject doing a test with a parameter, several runs.
#[derive(Clone, Debug)]
pub struct Cell {
    /// "threads", "processes", "push+pop", "record size", "batch", "setup".
    pub section: &'static str,
    /// "push", "pop", "1+1", "20 B push", "create", ...
    pub test: String,
    /// Threads or processes ("1", "2+1"), or "" when it does not apply.
    pub param: String,
    /// "tvmq", "Boost mq", "crossbeam", "bare ring".
    pub subject: &'static str,
    /// Records moved by one run (pushes plus pops); 0 for setup cells.
    pub records: u64,
    /// Bytes per record.
    pub record_bytes: u64,
    /// Milliseconds of each run.
    pub ms: Vec<f64>,
    /// Why the cell has no figure.
    pub error: Option<String>,
}

impl Cell {
    pub fn median_ms(&self) -> Option<f64> {
        let mut v = self.ms.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 })
    }

    /// Records per second at the median, and at the slowest and fastest run.
    pub fn rates(&self) -> Option<(f64, f64, f64)> {
        let med = self.median_ms()?;
        let min = self.ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.ms.iter().copied().fold(0.0, f64::max);
        let r = |ms: f64| self.records as f64 / (ms.max(1e-3) / 1000.0);
        Some((r(med), r(max), r(min)))
    }
}

/// What a run of the whole matrix needs.
pub struct Ctx {
    pub args: BenchArgs,
    /// Scratch queue directory (a fresh one under /dev/shm).
    pub dir: PathBuf,
    pub cells: Vec<Cell>,
    /// The latency part's results.
    pub latency: Vec<latency::LatencyCell>,
    pub idle: Vec<latency::IdleCell>,
    started: Instant,
}

impl Ctx {
    /// Records per cell.
    pub fn records(&self) -> u64 {
        if self.args.smoke { self.args.records.min(20_000) } else { self.args.records }
    }

    pub fn runs(&self) -> usize {
        if self.args.smoke { 1 } else { self.args.runs.max(1) }
    }

    /// Shows what is being measured on one self-overwriting line.
    pub fn progress(&self, what: &str) {
        use std::io::IsTerminal;
        let line = format!("[{:>4.0} s] {what}", self.started.elapsed().as_secs_f64());
        if std::io::stderr().is_terminal() {
            eprint!("{}{line}", clear_line());
        } else {
            eprintln!("{line}");
        }
    }

    /// Measures cells that are run together (e.g. a push that fills the
    /// queue and the pop that empties it): `run` returns one duration in
    /// milliseconds per `(test, subject)`, and is called `runs` times.
    pub fn measure_group(
        &mut self,
        section: &'static str,
        tests: &[(&str, &'static str)],
        param: &str,
        records: u64,
        record_bytes: u64,
        mut run: impl FnMut(&Ctx) -> Result<Vec<f64>, String>,
    ) {
        let mut cells: Vec<Cell> = tests
            .iter()
            .map(|&(test, subject)| Cell {
                section,
                test: test.to_string(),
                param: param.to_string(),
                subject,
                records,
                record_bytes,
                ms: Vec::new(),
                error: None,
            })
            .collect();
        let names = tests.iter().map(|(t, s)| format!("{s} {t}")).collect::<Vec<_>>().join(", ");
        for i in 0..self.runs() {
            self.progress(&format!("{section} {param}: {names}, run {}/{}", i + 1, self.runs()));
            match run(self) {
                Ok(ms) if ms.len() == cells.len() => cells.iter_mut().zip(ms).for_each(|(c, ms)| c.ms.push(ms)),
                result => {
                    let e = result.err().unwrap_or_else(|| "internal: wrong number of figures".into());
                    eprintln!("{}{section} {param}: {names}: {e}", clear_line());
                    cells.iter_mut().for_each(|c| c.error = Some(e.clone()));
                    break;
                }
            }
        }
        self.cells.extend(cells);
    }
}

/// Erases the progress line on a terminal (nothing otherwise).
fn clear_line() -> &'static str {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) { "\r\x1b[2K" } else { "" }
}

pub fn run(args: &BenchArgs) -> Result<(), Error> {
    if let Some(spec) = &args.durable_child {
        return durable::child(spec).map_err(|e| Error::new(tvm::error::SVR_EXCEPTION, e));
    }
    let dir = PathBuf::from(format!("/dev/shm/tvmq-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Error::new(SHM_ERR_ACCES, format!("cannot create {}: {e}", dir.display())))?;
    // The C ABI (called in-process) and the programs started below find their
    // queues through TVMDBD.
    // SAFETY: set before this process starts any thread.
    unsafe { std::env::set_var("TVMDBD", &dir) };
    let mut ctx = Ctx {
        args: args.clone(),
        dir: dir.clone(),
        cells: Vec::new(),
        latency: Vec::new(),
        idle: Vec::new(),
        started: Instant::now(),
    };
    if args.net {
        let result = net::run(&mut ctx);
        let _ = std::fs::remove_dir_all(&dir);
        eprint!("{}", clear_line());
        return result;
    }
    let result = run_matrix(&mut ctx);
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    eprint!("{}", clear_line());
    report::write(&ctx, ctx.started.elapsed().as_secs_f64())
}

fn run_matrix(ctx: &mut Ctx) -> Result<(), Error> {
    let args = ctx.args.clone();
    let (seed, c_driver, boost) = (&args.seed_bin, &args.c_driver, &args.boost_driver);

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
    Ok(())
}

/// Records for a record-size cell: the cell's count, capped so that a run
/// moves about 1.2 GB (20 KB records would otherwise need 80 GB).
pub fn records_for_size(records: u64, size: u64) -> u64 {
    records.min((1_200_000_000 / tvm::slot_stride(size)).max(1000))
}

/// A fresh queue `id` in `dir` for `rows` records of `size` bytes.
pub fn fresh_queue(dir: &Path, id: u32, rows: u64, size: u64) -> Result<(), String> {
    let _ = tvm::Queue::drop_queue(dir, id);
    tvm::Queue::create(dir, id, &tvm::Spec::new(rows, size)).map_err(|e| e.to_string())
}

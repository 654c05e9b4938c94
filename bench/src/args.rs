//! The options of `tvmq bench`, and the parts of the matrix they choose.

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Args, Clone)]
pub struct BenchArgs {
    /// Records per cell (the seed's default is 4,000,000)
    #[arg(long, value_name = "N", default_value_t = 4_000_000)]
    pub(crate) records: u64,
    /// Runs per cell; the table shows the median and the min-max
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(crate) runs: usize,
    /// Where table.txt, results.csv, results.json, chart.png (and, after the
    /// latency part, latency.csv and latency.png) go; with --net, table.txt,
    /// results.csv and chart.png
    #[arg(long, value_name = "DIR", default_value = "target/bench")]
    pub(crate) out: PathBuf,
    /// Directory holding the seed programs push_bench and pop_bench, compiled unchanged
    #[arg(long, value_name = "DIR")]
    pub(crate) seed_bin: Option<PathBuf>,
    /// tvmq's C driver (bench/drivers/tvmq_driver.c, compiled)
    #[arg(long, value_name = "PATH")]
    pub(crate) c_driver: Option<PathBuf>,
    /// The Boost.Interprocess message_queue driver (bench/drivers/boost_mq.cpp, compiled)
    #[arg(long, value_name = "PATH")]
    pub(crate) boost_driver: Option<PathBuf>,
    /// The DPDK rte_ring driver (bench/drivers/dpdk_ring.c, compiled); when the
    /// file is absent (no libdpdk-dev), the DPDK cells say "not installed"
    #[arg(long, value_name = "PATH")]
    pub(crate) dpdk_driver: Option<PathBuf>,
    /// The latency driver (bench/drivers/latency.c, compiled): tvmq and a pipe across processes
    #[arg(long, value_name = "PATH")]
    pub(crate) latency_driver: Option<PathBuf>,
    /// The network client's driver (bench/drivers/net_driver.c, compiled):
    /// adds tvm.h's network calls to --net
    #[arg(long, value_name = "PATH")]
    pub(crate) net_driver: Option<PathBuf>,
    /// A quick run of every cell with small counts (keeps `make bench` from rotting)
    #[arg(long)]
    pub(crate) smoke: bool,
    /// The network matrix instead (make bench-net): tvmq serve against a
    /// redis-server it starts, driven by redis-benchmark (make bench-net gives it
    /// --out target/bench-net)
    #[arg(long)]
    pub(crate) net: bool,
    /// Run only these parts of the matrix (repeat or separate with commas; default: all)
    #[arg(long, value_name = "PARTS", value_enum, value_delimiter = ',')]
    pub(crate) only: Vec<Part>,
    /// Where the durable part puts its queues and redis's append-only file:
    /// a directory on a disk (not tmpfs)
    #[arg(long, value_name = "DIR", default_value = "target")]
    pub(crate) disk_dir: PathBuf,
    /// (Internal) a child process of the durable part: DIR:ID:COUNT
    #[arg(long, hide = true, value_name = "DIR:ID:COUNT")]
    pub(crate) durable_child: Option<String>,
    /// (Internal) a lean durable server of the durable net cells: PORT:DESIGN:FILE
    #[arg(long, hide = true, value_name = "PORT:DESIGN:FILE")]
    pub(crate) lean_server: Option<String>,
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
    /// 10, 1,000 and 10,000 small queues: /dev/shm, memory, call cost, create and list, beside redis-server lists
    Many,
    /// A metrics scrape of 10,000 small queues (time, bytes), and a metrics reader beside a push/pop loop
    Metrics,
    /// --net: the C client on Redis beyond one machine (lease script beside BLMOVE + LREM, pushes waiting for a replica)
    Redis,
}

impl BenchArgs {
    /// Is `part` to be run?
    pub(crate) fn wants(&self, part: Part) -> bool {
        self.only.is_empty() || self.only.contains(&part)
    }
}

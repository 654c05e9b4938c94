//! What a run of the matrix carries from cell to cell ([`Ctx`]): the
//! options, the scratch directory, the cells measured so far; and how a
//! group of cells is measured.

use crate::args::BenchArgs;
use crate::cell::{Cell, IdleCell, LatencyCell};
use crate::harness::{fresh_queue, records_for_size};
use std::path::PathBuf;
use std::time::Instant;

/// What a run of the whole matrix needs.
pub(crate) struct Ctx {
    pub(crate) args: BenchArgs,
    /// Scratch queue directory (a fresh one under /dev/shm).
    pub(crate) dir: PathBuf,
    pub(crate) cells: Vec<Cell>,
    /// The latency part's results.
    pub(crate) latency: Vec<LatencyCell>,
    pub(crate) idle: Vec<IdleCell>,
    /// The many-queues part's table and the metrics part's (empty when they did not run).
    pub(crate) many: String,
    /// When the run began.
    pub(crate) started: Instant,
}

impl Ctx {
    /// Records per cell.
    pub(crate) fn records(&self) -> u64 {
        if self.args.smoke { self.args.records.min(20_000) } else { self.args.records }
    }

    pub(crate) fn runs(&self) -> usize {
        if self.args.smoke { 1 } else { self.args.runs.max(1) }
    }

    /// Shows what is being measured on one self-overwriting line.
    pub(crate) fn progress(&self, what: &str) {
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
    pub(crate) fn measure_group(
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

    /// The record-size sweep of tvmq, one thread: for each of `sizes`,
    /// queue `queue` made anew for the records a cell of that size moves
    /// and readied by `ready`, then a push and a pop cell, `run(records,
    /// size, pop)` giving a run's milliseconds; the queue is dropped after.
    pub(crate) fn size_sweep(
        &mut self,
        sizes: &[u64],
        queue: u32,
        ready: impl Fn() -> Result<(), String>,
        run: impl Fn(u64, u64, bool) -> Result<f64, String>,
    ) {
        for &size in sizes {
            let records = records_for_size(self.records(), size);
            if let Err(e) = fresh_queue(&self.dir, queue, records, size).and_then(|()| ready()) {
                eprintln!("record size {size}: {e}");
                continue;
            }
            let tests = [("push", "tvmq"), ("pop", "tvmq")];
            self.measure_group("record size", &tests, &format!("{size} B"), records, size, |_| {
                Ok(vec![run(records, size, false)?, run(records, size, true)?])
            });
        }
        let _ = tvm::Queue::drop_queue(&self.dir, queue);
    }
}

/// Erases the progress line on a terminal (nothing otherwise).
pub(crate) fn clear_line() -> &'static str {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) { "\r\x1b[2K" } else { "" }
}

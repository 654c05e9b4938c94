//! What a run measures: throughput cells ([`Cell`]), and the latency
//! part's [`LatencyCell`] and [`IdleCell`]; finding a cell's figure.

use hdrhistogram::Histogram;

/// One measured cell: a subject doing a test with a parameter, several runs.
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    /// "threads", "processes", "push+pop", "record size", "batch", "setup".
    pub(crate) section: &'static str,
    /// "push", "pop", "1+1", "20 B push", "create", ...
    pub(crate) test: String,
    /// Threads or processes ("1", "2+1"), or "" when it does not apply.
    pub(crate) param: String,
    /// "tvmq", "Boost mq", "crossbeam", "bare ring".
    pub(crate) subject: &'static str,
    /// Records moved by one run (pushes plus pops); 0 for setup cells.
    pub(crate) records: u64,
    /// Bytes per record.
    pub(crate) record_bytes: u64,
    /// Milliseconds of each run.
    pub(crate) ms: Vec<f64>,
    /// Why the cell has no figure.
    pub(crate) error: Option<String>,
}

impl Cell {
    pub(crate) fn median_ms(&self) -> Option<f64> {
        let mut v = self.ms.clone();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        Some(if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 })
    }

    /// Records per second at the median, and at the slowest and fastest run.
    pub(crate) fn rates(&self) -> Option<(f64, f64, f64)> {
        let med = self.median_ms()?;
        let min = self.ms.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.ms.iter().copied().fold(0.0, f64::max);
        let r = |ms: f64| self.records as f64 / (ms.max(1e-3) / 1000.0);
        Some((r(med), r(max), r(min)))
    }
}

/// The latencies of one subject at one gap.
pub(crate) struct LatencyCell {
    pub(crate) subject: &'static str,
    pub(crate) gap_us: u64,
    /// Nanoseconds; the first 2 % of the records (warm-up) are left out.
    pub(crate) hist: Option<Histogram<u64>>,
    pub(crate) error: Option<String>,
}

impl LatencyCell {
    /// (p50, p99, p99.9, max) in microseconds.
    pub(crate) fn percentiles(&self) -> Option<[f64; 4]> {
        let h = self.hist.as_ref()?;
        let us = |ns: u64| ns as f64 / 1000.0;
        Some([
            us(h.value_at_quantile(0.50)),
            us(h.value_at_quantile(0.99)),
            us(h.value_at_quantile(0.999)),
            us(h.max()),
        ])
    }
}

/// The CPU a consumer blocked on an empty queue used.
pub(crate) struct IdleCell {
    pub(crate) subject: &'static str,
    pub(crate) cpu_pct: Option<f64>,
    pub(crate) error: Option<String>,
}

/// The cell of `section` with `test`, `param` and `subject`, if measured.
pub(crate) fn find<'a>(cells: &'a [Cell], section: &str, test: &str, param: &str, subject: &str) -> Option<&'a Cell> {
    cells.iter().find(|c| c.section == section && c.test == test && c.param == param && c.subject == subject)
}

/// That cell's median rate (records per second), unless it failed.
pub(crate) fn rate(cells: &[Cell], section: &str, test: &str, param: &str, subject: &str) -> Option<f64> {
    find(cells, section, test, param, subject).filter(|c| c.error.is_none()).and_then(|c| c.rates()).map(|r| r.0)
}

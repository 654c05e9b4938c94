//! A histogram of durations in fixed buckets, kept in atomics (one
//! increment an observation, no lock), read as Prometheus's histogram
//! type: cumulative counts by upper bound, the sum and the count.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The buckets' upper bounds, in microseconds: 100 us to 1 s (a sync to a
/// disk takes a few hundred microseconds to tens of milliseconds).
pub(crate) const BOUNDS_US: [u64; 13] =
    [100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000];

/// See the module documentation.
#[derive(Default)]
pub(crate) struct Histogram {
    /// Observations per bucket (not cumulative); the last is above every bound.
    buckets: [AtomicU64; BOUNDS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts one duration.
    pub(crate) fn observe(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        let i = BOUNDS_US.iter().position(|&b| us <= b).unwrap_or(BOUNDS_US.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Cumulative counts for each bound (in seconds) then +Inf, and the
    /// sum in seconds: the `_bucket`, `_sum` and `_count` of the exposition.
    pub(crate) fn read(&self) -> (Vec<(f64, u64)>, u64, f64) {
        let mut total = 0;
        let mut cumulative = Vec::with_capacity(BOUNDS_US.len());
        for (i, b) in self.buckets.iter().enumerate() {
            total += b.load(Ordering::Relaxed);
            if let Some(&bound) = BOUNDS_US.get(i) {
                cumulative.push((bound as f64 / 1e6, total));
            }
        }
        (cumulative, total, self.sum_us.load(Ordering::Relaxed) as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_by_upper_bound() {
        let h = Histogram::default();
        for us in [50, 100, 101, 3_000, 2_000_000] {
            h.observe(Duration::from_micros(us));
        }
        let (buckets, count, sum) = h.read();
        assert_eq!(count, 5);
        assert!((sum - 2.003251).abs() < 1e-9);
        assert_eq!(buckets[0], (0.0001, 2), "50 us and 100 us: a bound is inclusive");
        assert_eq!(buckets[1], (0.00025, 3));
        assert_eq!(buckets[4], (0.0025, 3));
        assert_eq!(buckets[5], (0.005, 4));
        assert_eq!(buckets.last().unwrap(), &(1.0, 4), "2 s is above every bound: only in +Inf (the count)");
    }
}

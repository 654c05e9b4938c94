//! Rates from counters: a [`Window`] keeps the counters of the last few
//! samples (three numbers a queue, not the samples themselves) and gives
//! each queue's pushes, pops and redeliveries per second between a sample
//! and the newest kept one at least [`Window::span`] older.

use crate::collect::Sample;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Per-second rates of one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    /// Records pushed per second.
    pub push: f64,
    /// Records popped (or leased) per second.
    pub pop: f64,
    /// Records delivered again per second.
    pub redelivered: f64,
}

/// The counters of one sample: ids ascending, and for each its pushed,
/// popped and redelivered counts.
struct Counts {
    at: Instant,
    ids: Vec<u32>,
    counts: Vec<[u64; 3]>,
}

impl Counts {
    fn of(s: &Sample) -> Counts {
        Counts {
            at: s.at,
            ids: s.queues.iter().map(|q| q.id).collect(),
            counts: s.queues.iter().map(|q| [q.snap.pushed, q.snap.popped, q.snap.redelivered]).collect(),
        }
    }
}

/// The counters of recent samples, for rates over about [`span`](Self::span).
pub struct Window {
    span: Duration,
    kept: VecDeque<Counts>,
}

impl Window {
    /// Rates over at least `span` (once samples that old exist; until then
    /// over what there is).
    pub fn new(span: Duration) -> Window {
        Window { span, kept: VecDeque::new() }
    }

    /// The span rates are taken over.
    pub fn span(&self) -> Duration {
        self.span
    }

    /// Keeps the counters of `s` (taken after every sample kept so far).
    /// Samples older than needed are let go: of those at least a span older
    /// than `s`, the newest one stays.
    pub fn add(&mut self, s: &Sample) {
        self.kept.push_back(Counts::of(s));
        while self.kept.len() >= 2 && s.at.duration_since(self.kept[1].at) >= self.span {
            self.kept.pop_front();
        }
    }

    /// The rates of each queue of `s` (in its order) since the newest kept
    /// sample at least a span before it (else the oldest kept before it),
    /// and the time between the two; None for all when no sample came
    /// before. A queue the earlier sample lacks (new), or whose counters
    /// went down (dropped and made again), has no rates.
    pub fn rates(&self, s: &Sample) -> (Vec<Option<Rates>>, Option<Duration>) {
        let base = self
            .kept
            .iter()
            .rev()
            .find(|c| c.at < s.at && s.at.duration_since(c.at) >= self.span)
            .or_else(|| self.kept.iter().find(|c| c.at < s.at));
        let Some(base) = base else { return (vec![None; s.queues.len()], None) };
        let dt = s.at.duration_since(base.at);
        let secs = dt.as_secs_f64();
        let rates = s
            .queues
            .iter()
            .map(|q| {
                let i = base.ids.binary_search(&q.id).ok()?;
                let [p0, o0, r0] = base.counts[i];
                let per = |now: u64, then: u64| now.checked_sub(then).map(|d| d as f64 / secs);
                Some(Rates {
                    push: per(q.snap.pushed, p0)?,
                    pop: per(q.snap.popped, o0)?,
                    redelivered: per(q.snap.redelivered, r0)?,
                })
            })
            .collect();
        (rates, Some(dt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::QueueSample;
    use tvm::Snapshot;

    fn sample(at: Instant, queues: &[(u32, u64, u64)]) -> Sample {
        Sample {
            queues: queues
                .iter()
                .map(|&(id, pushed, popped)| QueueSample {
                    id,
                    name: "q".into(),
                    snap: Snapshot { pushed, popped, ..Snapshot::default() },
                    leases_read: None,
                })
                .collect(),
            ..Sample::empty(at)
        }
    }

    #[test]
    fn rates_over_the_span_per_queue() {
        let t0 = Instant::now();
        let s = |ms: u64, q: &[(u32, u64, u64)]| sample(t0 + Duration::from_millis(ms), q);
        let mut w = Window::new(Duration::from_secs(1));
        let first = s(0, &[(1, 0, 0), (2, 100, 100)]);
        assert_eq!(w.rates(&first).1, None, "nothing before the first sample");
        w.add(&first);
        // Half a second later: over what there is.
        let half = s(500, &[(1, 50, 10), (2, 100, 100), (3, 5, 0)]);
        let (r, dt) = w.rates(&half);
        assert_eq!(dt, Some(Duration::from_millis(500)));
        assert_eq!(r[0], Some(Rates { push: 100.0, pop: 20.0, redelivered: 0.0 }));
        assert_eq!(r[1], Some(Rates::default()));
        assert_eq!(r[2], None, "a queue the base lacks has no rate yet");
        w.add(&half);
        // At 1.6 s the base is the sample at 0.5 s (the newest a span older).
        let later = s(1600, &[(1, 160, 120), (2, 90, 90)]);
        let (r, dt) = w.rates(&later);
        assert_eq!(dt, Some(Duration::from_millis(1100)));
        assert!((r[0].unwrap().push - 100.0).abs() < 1e-9);
        assert!((r[0].unwrap().pop - 100.0).abs() < 1e-9);
        assert_eq!(r[1], None, "counters that went down: made again, no rate");
        w.add(&later);
        assert_eq!(w.kept.len(), 2, "the sample at 0 s is no longer needed");
    }
}

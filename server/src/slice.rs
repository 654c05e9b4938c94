//! Long work on a worker, cut into slices: a command with a huge argument
//! list (a BLPOP naming a million keys, a DEL of a million ids) checks its
//! arguments in a loop that calls [`Slicer::tick`] once per argument, which
//! lets the worker's other tasks run (`tokio::task::yield_now`) whenever
//! [`SLICE`] has passed since the last time, so that another client's PING
//! waits at most about one slice. Where it checks arguments, the command's
//! effect is not visible yet (its keys being looked up, before anything is
//! popped, dropped or registered), so the results are those of one run.
//! Two commands also apply their effect in slices, and say so: a push of
//! many values (its records visible as they go in, as they are to other
//! processes and workers while any push runs) and an ACK of many ids.

use std::time::{Duration, Instant};

/// The longest a sliced loop runs before it lets the worker's other tasks run.
pub(crate) const SLICE: Duration = Duration::from_millis(1);
/// Steps between two readings of the clock.
const STEPS_PER_LOOK: u32 = 256;

/// Cuts a loop into slices of about [`SLICE`].
pub(crate) struct Slicer {
    since: Instant,
    steps: u32,
}

impl Slicer {
    pub(crate) fn new() -> Slicer {
        Slicer { since: Instant::now(), steps: 0 }
    }

    /// One step of the loop: every [`STEPS_PER_LOOK`] steps the clock is
    /// read, and past [`SLICE`] the task yields to the worker's others.
    #[inline]
    pub(crate) async fn tick(&mut self) {
        self.steps += 1;
        if self.steps < STEPS_PER_LOOK {
            return;
        }
        self.steps = 0;
        self.due().await;
    }

    /// Yields to the worker's other tasks if [`SLICE`] has passed since the
    /// last time (for a loop whose steps are long: the clock is read at
    /// each call).
    pub(crate) async fn due(&mut self) {
        if self.since.elapsed() >= SLICE {
            tokio::task::yield_now().await;
            self.since = Instant::now();
        }
    }
}

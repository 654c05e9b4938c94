//! Bounded busy-waiting: [`Backoff`].

use crate::atomics::{spin_hint, yield_now};

/// Spin, then yield: bounded busy-waiting for the rare moments when one
/// thread waits for another's in-flight step.
pub(crate) struct Backoff {
    step: u32,
}

#[cfg(not(loom))]
const SPIN_LIMIT: u32 = 6;
#[cfg(not(loom))]
const YIELD_LIMIT: u32 = 10;
#[cfg(loom)]
const SPIN_LIMIT: u32 = 0;
#[cfg(loom)]
const YIELD_LIMIT: u32 = 1;

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { step: 0 }
    }

    /// A backoff whose first waits are already `step` doublings long.
    pub(crate) fn starting_at(step: u32) -> Backoff {
        Backoff { step: step.min(SPIN_LIMIT) }
    }

    /// After a lost CAS: a short exponential spin.
    pub(crate) fn spin(&mut self) {
        for _ in 0..1u32 << self.step.min(SPIN_LIMIT) {
            spin_hint();
        }
        if self.step <= SPIN_LIMIT {
            self.step += 1;
        }
    }

    /// While waiting for another thread: spin, then yield the CPU.
    pub(crate) fn snooze(&mut self) {
        if self.step <= SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                spin_hint();
            }
        } else {
            yield_now();
        }
        if self.step <= YIELD_LIMIT {
            self.step += 1;
        }
    }

    /// Spinning and yielding are exhausted: time to ask the [`Stall`](super::Stall) policy.
    pub(crate) fn is_completed(&self) -> bool {
        self.step > YIELD_LIMIT
    }
}

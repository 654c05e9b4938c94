//! How a worker runs the syncs its replies wait for ([`Mode`]), and the
//! default's choice between its two ways, sync by sync ([`Adaptive`]).
//!
//! `hybrid` (the default) syncs on the worker itself, as Redis's event
//! loop does, when that is cheap and nothing else waits: the disk's recent
//! syncs were fast, no sync of the worker is in flight on its ring, and
//! the loop has run every task that was ready (it is about to sleep).
//! Otherwise the sync goes to the worker's io_uring, which never holds the
//! worker. A request arriving during an inline sync waits for it: one sync
//! at most, of a disk whose last syncs all took under [`SLOW_US`]. A slow
//! sync (inline or on the ring) sends the next [`RING_AFTER_SLOW`] syncs to
//! the ring, twice as many after each inline sync that was slow again (up
//! to [`RING_AFTER_SLOW_MAX`]: on a disk that stays slow, the inline syncs
//! that find it so are rare), and a server starts on the ring (its first
//! [`WARM_UP`] syncs), so that a disk that is slow from the start is never
//! waited for on the worker.

use std::cell::Cell;

/// How the syncs are run (`TVMQ_SERVE_SYNC`; where io_uring is not
/// available, or with `threads`, the sync threads run them instead).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `ring`: always on the worker's io_uring.
    Ring,
    /// `inline`: always on the worker, waiting for the disk (a measurement
    /// aid: it stalls the worker's other connections during every sync).
    Inline,
    /// `hybrid`: inline when the worker is idle and the disk fast, on the
    /// ring otherwise (see the module's documentation).
    Hybrid,
}

impl Mode {
    /// The mode `TVMQ_SERVE_SYNC` names (`threads` is not a worker's mode:
    /// the caller handles it); the default for anything else.
    pub(crate) fn named(v: Option<&str>) -> Mode {
        match v {
            Some("ring") => Mode::Ring,
            Some("inline") => Mode::Inline,
            _ => Mode::Hybrid,
        }
    }
}

/// A sync that took longer than this (microseconds) is slow: it sends the
/// next syncs to the ring.
pub(crate) const SLOW_US: u64 = 1000;
/// Syncs sent to the ring after a slow one (after a fast inline one).
pub(crate) const RING_AFTER_SLOW: u32 = 64;
/// At most, after slow inline syncs one after another.
pub(crate) const RING_AFTER_SLOW_MAX: u32 = 4096;
/// Syncs a worker runs on its ring before its first inline one.
pub(crate) const WARM_UP: u32 = 4;

/// A worker's choice, sync by sync, between inline and its ring (`hybrid`).
pub(crate) struct Adaptive {
    /// Syncs still to run on the ring before an inline one may.
    ring_left: Cell<u32>,
    /// Syncs the last slow inline sync sent to the ring (0: the last
    /// inline sync was fast).
    backoff: Cell<u32>,
}

impl Default for Adaptive {
    fn default() -> Adaptive {
        Adaptive { ring_left: Cell::new(WARM_UP), backoff: Cell::new(0) }
    }
}

impl Adaptive {
    /// May the next sync run inline (the caller checked that the worker
    /// is idle and has no sync in flight)?
    pub(crate) fn inline_ok(&self) -> bool {
        self.ring_left.get() == 0
    }

    /// A sync took `us` microseconds, `inline` or on the ring.
    pub(crate) fn took(&self, us: u64, inline: bool) {
        let b = self.backoff.get();
        match (us > SLOW_US, inline) {
            (true, true) => {
                let b = if b == 0 { RING_AFTER_SLOW } else { (b * 2).min(RING_AFTER_SLOW_MAX) };
                self.backoff.set(b);
                self.ring_left.set(b);
            }
            (true, false) => self.ring_left.set(b.max(RING_AFTER_SLOW)),
            (false, true) => self.backoff.set(0),
            (false, false) => self.ring_left.set(self.ring_left.get().saturating_sub(1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ring syncs until the next inline one may run.
    fn ring_syncs_before_inline(a: &Adaptive, us: u64) -> u32 {
        let mut n = 0;
        while !a.inline_ok() {
            a.took(us, false);
            n += 1;
            assert!(n <= 10 * RING_AFTER_SLOW_MAX, "never inline again");
        }
        n
    }

    /// The first syncs go to the ring; fast ones then allow inline; one
    /// slow sync sends the next ones to the ring, and a disk that stays
    /// slow keeps them there; inline syncs that find the disk slow again
    /// and again come ever more rarely, until one finds it fast.
    #[test]
    fn slow_syncs_keep_the_worker_off_the_disk() {
        let a = Adaptive::default();
        for _ in 0..WARM_UP {
            assert!(!a.inline_ok(), "inline before the disk was measured");
            a.took(300, false);
        }
        assert!(a.inline_ok());
        a.took(100, true);
        assert!(a.inline_ok());
        a.took(SLOW_US + 1, false);
        assert_eq!(ring_syncs_before_inline(&a, 100), RING_AFTER_SLOW);
        // The ring's syncs stay slow: never inline.
        a.took(SLOW_US + 1, true);
        for _ in 0..3 * RING_AFTER_SLOW_MAX {
            a.took(800_000, false);
            assert!(!a.inline_ok());
        }
        // Slow inline syncs one after another: twice the ring each time.
        let mut gaps = Vec::new();
        for _ in 0..8 {
            gaps.push(ring_syncs_before_inline(&a, 100));
            a.took(SLOW_US + 1, true);
        }
        assert_eq!(gaps, [RING_AFTER_SLOW, 128, 256, 512, 1024, 2048, 4096, 4096]);
        // A fast inline sync: back to the first bound.
        ring_syncs_before_inline(&a, 100);
        a.took(100, true);
        a.took(SLOW_US + 1, true);
        assert_eq!(ring_syncs_before_inline(&a, 100), RING_AFTER_SLOW);
        assert_eq!(Mode::named(Some("ring")), Mode::Ring);
        assert_eq!(Mode::named(Some("inline")), Mode::Inline);
        assert_eq!(Mode::named(None), Mode::Hybrid);
        assert_eq!(Mode::named(Some("hybrid")), Mode::Hybrid);
    }
}

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
//! the ring, and a server starts on the ring (its first [`WARM_UP`]
//! syncs), so that a disk that is slow from the start is never waited for
//! on the worker.

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
/// Syncs sent to the ring after a slow one.
pub(crate) const RING_AFTER_SLOW: u32 = 64;
/// Syncs a worker runs on its ring before its first inline one.
pub(crate) const WARM_UP: u32 = 4;

/// A worker's choice, sync by sync, between inline and its ring (`hybrid`).
pub(crate) struct Adaptive {
    /// Syncs still to run on the ring before an inline one may.
    ring_left: Cell<u32>,
}

impl Default for Adaptive {
    fn default() -> Adaptive {
        Adaptive { ring_left: Cell::new(WARM_UP) }
    }
}

impl Adaptive {
    /// May the next sync run inline (the caller checked that the worker
    /// is idle and has no sync in flight)?
    pub(crate) fn inline_ok(&self) -> bool {
        self.ring_left.get() == 0
    }

    /// A sync (inline or on the ring) took `us` microseconds.
    pub(crate) fn took(&self, us: u64) {
        if us > SLOW_US {
            self.ring_left.set(RING_AFTER_SLOW);
        } else {
            self.ring_left.set(self.ring_left.get().saturating_sub(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first syncs go to the ring; fast ones then allow inline; one
    /// slow sync sends the next ones to the ring, and a disk that stays
    /// slow keeps them there.
    #[test]
    fn slow_syncs_keep_the_worker_off_the_disk() {
        let a = Adaptive::default();
        for _ in 0..WARM_UP {
            assert!(!a.inline_ok(), "inline before the disk was measured");
            a.took(300);
        }
        assert!(a.inline_ok());
        a.took(SLOW_US + 1);
        for _ in 0..RING_AFTER_SLOW - 1 {
            assert!(!a.inline_ok());
            a.took(100);
        }
        // The ring's syncs stay slow: never inline.
        for _ in 0..3 * RING_AFTER_SLOW {
            a.took(800_000);
            assert!(!a.inline_ok());
        }
        for _ in 0..RING_AFTER_SLOW {
            a.took(100);
        }
        assert!(a.inline_ok());
        assert_eq!(Mode::named(Some("ring")), Mode::Ring);
        assert_eq!(Mode::named(Some("inline")), Mode::Inline);
        assert_eq!(Mode::named(None), Mode::Hybrid);
        assert_eq!(Mode::named(Some("hybrid")), Mode::Hybrid);
    }
}

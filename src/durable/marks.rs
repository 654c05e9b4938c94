//! The consumed watermark's two copies in the control block (every
//! position below it was consumed): each written with a generation and a
//! checksum, alternately, so that a torn write leaves the other; the valid
//! copy with the higher generation counts (as LMDB keeps its meta pages).

use crate::file::layout::{Control, Mark, fnv1a};
use std::sync::atomic::Ordering;

/// Writes one copy of the watermark: its words, then its checksum.
pub(crate) fn write_watermark_copy(
    m: &Mark,
    generation: u64,
    consumed: u64,
    pushed: u64,
    synced_ns: u64,
    created_ns: u64,
) {
    m.check.store(0, Ordering::Relaxed);
    m.generation.store(generation, Ordering::Relaxed);
    m.consumed.store(consumed, Ordering::Relaxed);
    m.pushed.store(pushed, Ordering::Relaxed);
    m.synced_ns.store(synced_ns, Ordering::Relaxed);
    m.check.store(mark_check(generation, consumed, pushed, synced_ns, created_ns), Ordering::Release);
}

/// The checksum of a copy's words (the queue's creation time included, so
/// that another queue's copy never passes).
fn mark_check(generation: u64, consumed: u64, pushed: u64, synced_ns: u64, created_ns: u64) -> u64 {
    let mut b = [0u8; 40];
    for (i, v) in [generation, consumed, pushed, synced_ns, created_ns].iter().enumerate() {
        b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
    }
    fnv1a(&b)
}

/// Is copy `m` whole and of the queue created at `created_ns`?
pub(super) fn mark_valid(m: &Mark, created_ns: u64) -> bool {
    let g = m.generation.load(Ordering::Acquire);
    g != 0
        && m.check.load(Ordering::Acquire)
            == mark_check(
                g,
                m.consumed.load(Ordering::Relaxed),
                m.pushed.load(Ordering::Relaxed),
                m.synced_ns.load(Ordering::Relaxed),
                created_ns,
            )
}

/// The valid watermark copy with the higher generation: `(generation,
/// consumed, synced_ns)`.
pub(crate) fn best_mark(control: &Control, created_ns: u64) -> Option<(u64, u64, u64)> {
    control
        .marks
        .iter()
        .filter(|m| mark_valid(m, created_ns))
        .map(|m| {
            (
                m.generation.load(Ordering::Relaxed),
                m.consumed.load(Ordering::Relaxed),
                m.synced_ns.load(Ordering::Relaxed),
            )
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_watermark_copy_leaves_the_other() {
        let c = Control::default();
        write_watermark_copy(&c.marks[0], 1, 10, 20, 5, 99);
        write_watermark_copy(&c.marks[1], 2, 15, 25, 6, 99);
        assert_eq!(best_mark(&c, 99), Some((2, 15, 6)));
        c.marks[1].consumed.store(16, Ordering::Relaxed);
        assert_eq!(best_mark(&c, 99), Some((1, 10, 5)), "torn copy ignored");
        assert_eq!(best_mark(&c, 98), None, "another queue's marks");
    }
}

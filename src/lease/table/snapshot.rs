//! Copies of the table's records for inspection ([`LeaseTable::snapshot`]).

use super::LeaseTable;
use crate::lease::state::Word;
use std::sync::atomic::Ordering;

/// A leased or waiting record as [`LeaseTable::snapshot`] copies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub(crate) entry: usize,
    pub(crate) word: Word,
    pub(crate) pos: u64,
    pub(crate) deadline_ns: u64,
    pub(crate) leased_ns: u64,
    pub(crate) record: Vec<u8>,
}

impl LeaseTable {
    /// Copies every entry that holds a record (leased, waiting, bound for
    /// the dead-letter queue), for inspection: an entry that changes while it
    /// is copied is left out, never shown torn.
    pub(crate) fn snapshot(&self, max: usize) -> Vec<Snapshot> {
        let mut out = Vec::new();
        for i in 0..self.count {
            if out.len() >= max {
                break;
            }
            let e = self.entry(i);
            let w = e.word();
            if !w.state().holds_record() {
                continue;
            }
            let len = (e.len.load(Ordering::Relaxed) as usize).min(self.record_size);
            let (pos, deadline_ns, leased_ns) = (
                e.pos.load(Ordering::Relaxed),
                e.deadline_ns.load(Ordering::Relaxed),
                e.leased_ns.load(Ordering::Relaxed),
            );
            let mut record = vec![0u8; len];
            let src = self.data(i);
            for (k, b) in record.iter_mut().enumerate() {
                // SAFETY: k < len <= record_size, inside entry i's record; a
                // volatile read of bytes another process may be writing, as
                // a snapshot is taken (validated by the state word below).
                *b = unsafe { std::ptr::read_volatile(src.add(k)) };
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if e.word() == w && len > 0 {
                out.push(Snapshot { entry: i, word: w, pos, deadline_ns, leased_ns, record });
            }
        }
        out
    }
}

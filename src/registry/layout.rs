//! How the process table lies in a queue file: its entries (a head and a
//! page of intent words each), in the two layouts ([`TableLayout`]).

use crate::shm::{SharedRef, ShmSafe};
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Entries in the table: at most this many processes announce at once.
pub(crate) const MAX_PROCS: usize = 256;

/// Intent words per entry: threads of one process that can announce.
pub(crate) const INTENTS: usize = 32;

/// One intent word on cache lines of its own: its thread writes it on every
/// push and pop, and words sharing a line would make threads of one process
/// slow each other down (false sharing).
#[repr(C, align(128))]
pub(crate) struct IntentWord(pub AtomicU64);

/// One process's intent words: a page (4,096 bytes) of its own.
#[repr(C)]
pub(crate) struct IntentPage {
    /// One word per announcing thread: an intent word (see
    /// [`crate::ring::intent_word`]), [`IDLE`] when it announces nothing.
    pub(crate) words: [IntentWord; INTENTS],
}

/// What attach, recovery and the waiter count read of one process's entry
/// (64 bytes: one cache line).
#[repr(C, align(64))]
pub(crate) struct ProcHead {
    /// Pid of the holder, for display (0: never held or left cleanly).
    /// Whether it is alive is decided by the lock, never by this pid.
    pub(crate) pid: AtomicU32,
    /// Bumped by each new holder (0: the entry was never taken).
    pub(crate) generation: AtomicU32,
    /// The holder's threads currently counted in the queue's waiter count.
    pub(crate) waiters: AtomicU32,
    /// The holder's threads that use the queue without an intent word (more
    /// than [`INTENTS`]): while non-zero, this process may hold any position.
    pub(crate) anonymous: AtomicU32,
    /// When the holder registered, nanoseconds since the Unix epoch.
    pub(crate) since_ns: AtomicU64,
    _reserved: [u64; 5],
}

/// One process's entry in a layout version 1 file (4,224 bytes): its head,
/// then its intent words.
#[repr(C)]
pub(crate) struct ProcEntryV1 {
    pub(crate) head: ProcHead,
    _reserved: [u64; 8],
    pub(crate) intents: IntentPage,
}

const _: () = assert!(std::mem::size_of::<ProcHead>() == 64);
const _: () = assert!(std::mem::size_of::<IntentPage>() == 4096);
const _: () = assert!(std::mem::size_of::<ProcEntryV1>() == 128 + INTENTS * 128);

// SAFETY: atomics, and reserved integers nobody writes: any bits are a value.
unsafe impl ShmSafe for IntentWord {}
// SAFETY: as above.
unsafe impl ShmSafe for IntentPage {}
// SAFETY: as above.
unsafe impl ShmSafe for ProcHead {}
// SAFETY: as above.
unsafe impl ShmSafe for ProcEntryV1 {}

/// Bytes reserved for the process table in the file, in both layouts.
pub(crate) const TABLE_BYTES: usize = MAX_PROCS * std::mem::size_of::<ProcEntryV1>();

/// Layout version 2: bytes of the heads, all together at the table's start
/// (attach and recovery read these only, 4 pages).
pub(crate) const HEADS_BYTES: usize = MAX_PROCS * std::mem::size_of::<ProcHead>();

/// Layout version 2: offset of the intent pages from the table's start. Entry
/// `i`'s page is at `INTENTS_AT + i * 4096`; it is written only by a process
/// that takes entry `i`, and read only while one holds it, so in a sparse
/// file the pages of entries nobody took are never allocated.
pub(crate) const INTENTS_AT: usize = HEADS_BYTES;

const _: () = assert!(INTENTS_AT + MAX_PROCS * std::mem::size_of::<IntentPage>() <= TABLE_BYTES);

/// How the process table lies in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TableLayout {
    /// Layout version 1: 256 entries of 4,224 bytes, each a head and its
    /// intent words (1,056 KiB, every page read by attach).
    Interleaved,
    /// Layout version 2: 256 heads of 64 bytes (16 KiB), then 256 intent
    /// pages (one per entry, untouched until an entry is taken).
    Split,
}

impl TableLayout {
    /// Offset from the table's start of the byte whose lock is entry
    /// `index`'s (the first byte of its head).
    pub(super) fn lock_at(self, index: usize) -> usize {
        match self {
            TableLayout::Interleaved => index * std::mem::size_of::<ProcEntryV1>(),
            TableLayout::Split => index * std::mem::size_of::<ProcHead>(),
        }
    }

    /// Offset from the table's start of entry `index`'s intent page.
    pub(crate) fn intents_at(self, index: usize) -> usize {
        match self {
            TableLayout::Interleaved => index * std::mem::size_of::<ProcEntryV1>() + 128,
            TableLayout::Split => INTENTS_AT + index * std::mem::size_of::<IntentPage>(),
        }
    }
}

/// The table's memory, in either layout.
pub(super) enum Table {
    Interleaved(SharedRef<[ProcEntryV1; MAX_PROCS]>),
    Split { heads: SharedRef<[ProcHead; MAX_PROCS]>, pages: SharedRef<[IntentPage; MAX_PROCS]> },
}

//! The process table of a queue file: which processes are attached, and the
//! proof that the holder of a stuck position is dead.
//!
//! Each attaching process takes an entry of the table by locking one byte of
//! the queue file (an open-file-description lock, `F_OFD_SETLK`). The kernel
//! drops that lock when the process dies, however it dies, so "the byte is
//! not locked" is positive proof that the entry's last holder is gone.
//!
//! Each thread of the process that uses the queue gets one of the entry's
//! intent words, where the ring announces the position it is about to claim
//! before claiming it, and idles the word when done (see
//! [`crate::ring::Announce`]). The holder of a stuck position is therefore
//! alive exactly when a live entry announces that position: if none does, it
//! is proven dead. Threads beyond [`INTENTS`] per process, and processes
//! beyond [`MAX_PROCS`], cannot announce; their claims make the answer
//! "unknown", which the queue settles with its unblock timeout.
//!
//! The entry also counts the process's threads asleep in a blocking pop, so
//! that the sleepers of a killed process can be taken off the queue's waiter
//! count ([`Registry::reconcile`]).
//!
//! Two layouts ([`TableLayout`]): files of layout version 1 keep each entry's
//! head (pid, generation, waiter count) and its 32 intent words together,
//! 4,224 bytes an entry; attach and recovery read every head, so every page
//! of the 1,056 KiB table is touched (allocated on tmpfs, mapped into each
//! attached process). Version 2 puts the 256 heads together (64 bytes each,
//! 16 KiB) and gives each entry an intent page of its own (4 KiB), written
//! only by the process that takes the entry and read only while one holds
//! it: a queue used by a few processes costs the heads and a page per
//! process, and the rest of the table stays a hole in the file.

use crate::error::{Error, LEASE_LIMIT, SHM_ERR_NOMEM};
use crate::ring::{Holder, IDLE, covers};
use crate::shm::{SharedMap, SharedRef, ShmSafe};
use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
    /// Liveness is decided by the lock, never by this pid.
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
    fn lock_at(self, index: usize) -> usize {
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
enum Table {
    Interleaved(SharedRef<[ProcEntryV1; MAX_PROCS]>),
    Split { heads: SharedRef<[ProcHead; MAX_PROCS]>, pages: SharedRef<[IntentPage; MAX_PROCS]> },
}

/// Is the holder of a position alive?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Proven dead: no live process announces the position.
    Dead,
    /// A live process announces it.
    Alive,
    /// Cannot be told: a live process has threads that cannot announce, or a
    /// process is attached without an entry, or a lock check failed.
    Unknown,
}

/// This process's intent words of one entry, handed out to its threads.
#[derive(Default)]
pub(crate) struct IntentSlots {
    /// Bit i set: intent word i belongs to a thread.
    used: AtomicU64,
}

impl IntentSlots {
    /// A free word's index, if any.
    pub(crate) fn acquire(&self) -> Option<usize> {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            let free = (!used).trailing_zeros() as usize;
            if free >= INTENTS {
                return None;
            }
            match self.used.compare_exchange_weak(used, used | 1 << free, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(free),
                Err(now) => used = now,
            }
        }
    }

    /// Gives word `index` back (its thread is gone).
    pub(crate) fn release(&self, index: usize) {
        self.used.fetch_and(!(1 << index), Ordering::AcqRel);
    }
}

/// This process's view of a queue file's process table.
pub(crate) struct Registry {
    table: Table,
    /// File offset of the table: entry `i`'s lock byte is at
    /// `table_offset + layout.lock_at(i)`.
    table_offset: u64,
    /// The queue file, whose open file description holds our entry's lock.
    file: Arc<File>,
    mine: Option<Mine>,
    /// Why [`register`](Self::register) found no entry, when it was not
    /// that every entry is held: the error that reserving one gave (no room
    /// on the file system).
    no_room: Option<i32>,
}

#[derive(Clone, Copy)]
struct Mine {
    index: usize,
    pid: u32,
    /// The entry's registration number (`generation`) we took it with.
    generation: u32,
}

impl Registry {
    /// A view of the table at `table_offset` in `map`, a mapping of `file`,
    /// laid out as `layout`, without registering. `None` if the table does
    /// not fit in the mapping. Nothing of the table is touched.
    pub(crate) fn new(map: &SharedMap, table_offset: usize, file: Arc<File>, layout: TableLayout) -> Option<Registry> {
        let table = match layout {
            TableLayout::Interleaved => Table::Interleaved(map.view(table_offset)?),
            TableLayout::Split => {
                Table::Split { heads: map.view(table_offset)?, pages: map.view(table_offset.checked_add(INTENTS_AT)?)? }
            }
        };
        Some(Registry { table, table_offset: table_offset as u64, file, mine: None, no_room: None })
    }

    fn layout(&self) -> TableLayout {
        match self.table {
            Table::Interleaved(_) => TableLayout::Interleaved,
            Table::Split { .. } => TableLayout::Split,
        }
    }

    #[inline]
    fn entry(&self, index: usize) -> &ProcHead {
        match &self.table {
            Table::Interleaved(t) => &t[index].head,
            Table::Split { heads, .. } => &heads[index],
        }
    }

    #[inline]
    fn intents(&self, index: usize) -> &[IntentWord; INTENTS] {
        match &self.table {
            Table::Interleaved(t) => &t[index].intents.words,
            Table::Split { pages, .. } => &pages[index].words,
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn lock_offset(&self, index: usize) -> i64 {
        (self.table_offset + self.layout().lock_at(index) as u64) as i64
    }

    /// Reserves the storage of entry `index`'s intent page (a hole in a
    /// sparse file), so that a full file system fails here rather than with
    /// a SIGBUS at the first write. `Err(errno)`: no room (`ENOSPC`, `EIO`).
    /// A file system without `fallocate` is left to allocate on write.
    fn reserve_intents(&self, index: usize) -> std::result::Result<(), i32> {
        if self.layout() == TableLayout::Interleaved {
            return Ok(()); // written whole when the file was made
        }
        let at = (self.table_offset + self.layout().intents_at(index) as u64) as libc::off_t;
        #[cfg(test)]
        if NO_ROOM.with(std::cell::Cell::get) {
            return Err(libc::ENOSPC);
        }
        // SAFETY: fallocate (mode 0: allocate, inside the file's size) on an fd we own.
        let rc = unsafe { libc::fallocate(self.fd(), 0, at, std::mem::size_of::<IntentPage>() as libc::off_t) };
        match std::io::Error::last_os_error().raw_os_error() {
            Some(e) if rc != 0 && (e == libc::ENOSPC || e == libc::EIO) => Err(e),
            _ => Ok(()),
        }
    }

    /// Takes a free entry (needs the file open for writing). Returns whether
    /// it got one (false when every entry is held by a live process) and how
    /// many sleepers of the entry's dead previous holder were taken off the
    /// waiter count.
    pub(crate) fn register(&mut self, global_waiters: &AtomicU32) -> (bool, u32) {
        if self.mine.is_some() {
            return (true, 0);
        }
        for index in 0..MAX_PROCS {
            if !lock(self.fd(), self.lock_offset(index)) {
                continue;
            }
            // The lock was free: whoever held this entry before is gone, and
            // so are its announcements.
            if let Err(e) = self.reserve_intents(index) {
                unlock(self.fd(), self.lock_offset(index));
                self.no_room = Some(e);
                return (false, 0);
            }
            let entry = self.entry(index);
            let reconciled = take_waiters(entry, global_waiters);
            let generation = entry.generation.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
            self.intents(index).iter().for_each(|w| w.0.store(IDLE, Ordering::SeqCst));
            entry.anonymous.store(0, Ordering::SeqCst);
            let pid = std::process::id();
            entry.pid.store(pid, Ordering::SeqCst);
            entry.since_ns.store(crate::clock::now_ns(), Ordering::Relaxed);
            self.mine = Some(Mine { index, pid, generation });
            return (true, reconciled);
        }
        (false, 0)
    }

    /// Clears every entry (after a machine restart, when nobody can be
    /// attached: what the table holds is from before it). The intent pages
    /// of entries never taken (generation 0) are left untouched: nothing was
    /// ever announced there, and they are cleared when taken.
    pub(crate) fn reset_all(&self) {
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            entry.pid.store(0, Ordering::SeqCst);
            entry.waiters.store(0, Ordering::SeqCst);
            entry.anonymous.store(0, Ordering::SeqCst);
            if self.layout() == TableLayout::Interleaved || entry.generation.load(Ordering::SeqCst) != 0 {
                self.intents(index).iter().for_each(|w| w.0.store(IDLE, Ordering::SeqCst));
            }
        }
    }

    /// Why this process has no entry (it cannot hold leases): every entry
    /// held by a live process (`LEASE_LIMIT`), or no room on the file system
    /// of the queue file at `path` to reserve one (`SHM_ERR_NOMEM`, with the
    /// system's error: the disk's error, not a limit's).
    pub(crate) fn no_entry_error(&self, path: &std::path::Path) -> Error {
        match self.no_room {
            Some(errno) => Error::new(
                SHM_ERR_NOMEM,
                format!(
                    "{}: no room for this process's entry in the queue's process table ({}): it cannot hold \
                     leases until it attaches the queue again with room on its file system",
                    path.display(),
                    std::io::Error::from_raw_os_error(errno)
                ),
            ),
            None => {
                Error::new(LEASE_LIMIT, "this process has no entry in the queue's process table: it cannot hold leases")
            }
        }
    }

    /// This process's entry and the registration number it took it with
    /// (None if not registered): how lease entries name their holder.
    pub(crate) fn me(&self) -> Option<(usize, u32)> {
        self.mine.map(|m| (m.index, m.generation))
    }

    /// Is the process that took entry `index` as its registration whose
    /// number ends in the 8 bits `low8` still attached? `Some(false)` is
    /// proof of its end (the entry's lock is free, or the entry has been
    /// taken again since); `None`: cannot tell. One `fcntl` (none for this
    /// process's own entry).
    pub(crate) fn registration_alive(&self, index: usize, low8: u32) -> Option<bool> {
        if index >= MAX_PROCS {
            return Some(false);
        }
        let generation = match self.mine {
            Some(m) if m.index == index => m.generation,
            _ => self.entry(index).generation.load(Ordering::Acquire),
        };
        if generation & 0xff != low8 & 0xff {
            return Some(false);
        }
        if self.mine.is_some_and(|m| m.index == index) {
            return Some(true);
        }
        held(self.fd(), self.lock_offset(index))
    }

    /// Intent word `slot` of this process's entry (None if not registered).
    #[inline]
    pub(crate) fn intent_word(&self, slot: usize) -> Option<&AtomicU64> {
        self.mine.map(|m| &self.intents(m.index)[slot % INTENTS].0)
    }

    /// Notes that a thread of this process uses the queue without an intent
    /// word: from now on, stalls on positions nobody announces are "unknown".
    pub(crate) fn add_anonymous(&self) {
        if let Some(m) = self.mine {
            self.entry(m.index).anonymous.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Is the `role` holder of position number `at` alive? One `fcntl` per
    /// registered entry. `unregistered`: processes are attached without an
    /// entry (they cannot announce).
    pub(crate) fn holder(&self, role: Holder, at: u64, unregistered: bool) -> Liveness {
        let mut unknown = unregistered;
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            let mine = self.mine.is_some_and(|m| m.index == index);
            if !mine {
                if entry.pid.load(Ordering::Acquire) == 0 {
                    continue; // never held, or left cleanly (a new holder announces nothing yet)
                }
                match held(self.fd(), self.lock_offset(index)) {
                    Some(true) => {}
                    Some(false) => continue, // dead: its announcements do not count
                    // Cannot tell: its announcements still count (a holder
                    // that announces is never robbed), the rest is unknown.
                    None => unknown = true,
                }
            }
            // Only a held (or our own) entry's page is read: its holder
            // cleared it when it took the entry.
            if self.intents(index).iter().any(|w| covers(w.0.load(Ordering::Acquire), role, at)) {
                return Liveness::Alive;
            }
            if entry.anonymous.load(Ordering::Acquire) > 0 {
                unknown = true;
            }
        }
        if unknown { Liveness::Unknown } else { Liveness::Dead }
    }

    /// Counts one of our threads into the waiter count before it sleeps. The
    /// global count goes first, so that a kill between the two steps leaves it
    /// too high (a spare wake-up), never too low (a missed one).
    pub(crate) fn enter_wait(&self, global_waiters: &AtomicU32) {
        global_waiters.fetch_add(1, Ordering::SeqCst);
        if let Some(m) = self.mine {
            self.entry(m.index).waiters.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Undoes [`enter_wait`](Self::enter_wait), in the opposite order. The
    /// global count never goes below zero (a repair may have reset it).
    pub(crate) fn leave_wait(&self, global_waiters: &AtomicU32) {
        if let Some(m) = self.mine {
            self.entry(m.index).waiters.fetch_sub(1, Ordering::SeqCst);
        }
        let _ = global_waiters.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |g| Some(g.saturating_sub(1)));
    }

    /// This process's threads counted as asleep.
    pub(crate) fn own_waiters(&self) -> u32 {
        self.mine.map_or(0, |m| self.entry(m.index).waiters.load(Ordering::SeqCst))
    }

    /// Takes the sleepers of dead processes off the waiter count. Returns how
    /// many were removed. Costs one `fcntl` per entry that has sleepers.
    pub(crate) fn reconcile(&self, global_waiters: &AtomicU32) -> u32 {
        let mut removed = 0;
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            if entry.waiters.load(Ordering::Relaxed) == 0 {
                continue;
            }
            if self.mine.is_some_and(|m| m.index == index) {
                continue;
            }
            if held(self.fd(), self.lock_offset(index)) == Some(false) {
                removed += take_waiters(entry, global_waiters);
            }
        }
        removed
    }

    /// Processes that died without detaching (their entry still names a pid
    /// but nobody holds its lock): `(index, pid)`. One `fcntl` per named entry.
    pub(crate) fn unclean_deaths(&self) -> Vec<(usize, u32)> {
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_none_or(|m| m.index != i))
            .filter_map(|i| {
                let pid = self.entry(i).pid.load(Ordering::Relaxed);
                (pid != 0 && held(self.fd(), self.lock_offset(i)) == Some(false)).then_some((i, pid))
            })
            .collect()
    }

    /// Marks dead entries as dealt with (after a repair), if still unheld.
    pub(crate) fn forget(&self, deaths: &[(usize, u32)]) {
        for &(index, pid) in deaths {
            let _ = self.entry(index).pid.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::Relaxed);
        }
    }

    /// Live processes other than this one.
    pub(crate) fn others_alive(&self) -> usize {
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_none_or(|m| m.index != i) && held(self.fd(), self.lock_offset(i)) == Some(true))
            .count()
    }

    /// Live entries: `(index, pid, since_ns, waiters)`; one `fcntl` each.
    pub(crate) fn live(&self) -> Vec<(usize, u32, u64, u32)> {
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_some_and(|m| m.index == i) || held(self.fd(), self.lock_offset(i)) == Some(true))
            .map(|i| {
                let e = self.entry(i);
                (
                    i,
                    e.pid.load(Ordering::Relaxed),
                    e.since_ns.load(Ordering::Relaxed),
                    e.waiters.load(Ordering::Relaxed),
                )
            })
            .collect()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        // Leave cleanly (the lock itself goes with the file descriptor). A
        // forked child holds a copy of its parent's registration: not its own.
        if let Some(m) = self.mine {
            if m.pid == std::process::id() {
                self.entry(m.index).pid.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// Moves an entry's waiters off the global count; exclusive by the swap.
fn take_waiters(entry: &ProcHead, global_waiters: &AtomicU32) -> u32 {
    let n = entry.waiters.swap(0, Ordering::SeqCst);
    if n > 0 {
        let _ = global_waiters.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |g| Some(g.saturating_sub(n)));
    }
    n
}

fn flock_at(kind: libc::c_int, offset: i64) -> libc::flock {
    // SAFETY: flock is plain data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = offset as libc::off_t;
    fl.l_len = 1;
    fl
}

/// Takes the write lock on one byte for our open file description.
fn lock(fd: RawFd, offset: i64) -> bool {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) == 0 }
}

/// Releases our lock on one byte.
fn unlock(fd: RawFd, offset: i64) {
    let mut fl = flock_at(libc::F_UNLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) };
}

/// Does another open file description hold the byte? `None` if unknown.
fn held(fd: RawFd, offset: i64) -> Option<bool> {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

#[cfg(test)]
thread_local! {
    /// (Tests.) Reserving an entry's intent page fails with `ENOSPC` on
    /// this thread, as on a full file system.
    pub(crate) static NO_ROOM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::intent_word;
    use crate::test_support::TempDir;
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    /// A file holding only a process table, and its mapping.
    fn table(dir: &TempDir) -> (SharedMap, std::path::PathBuf) {
        let path = dir.path().join("table");
        let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
        f.set_len(TABLE_BYTES as u64).unwrap();
        (SharedMap::map(&f, TABLE_BYTES, true).unwrap(), path)
    }

    /// A new open file description of the file: the registry of another "process".
    fn process(map: &SharedMap, path: &Path, layout: TableLayout) -> Registry {
        let f = Arc::new(std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap());
        Registry::new(map, 0, f, layout).unwrap()
    }

    const LAYOUTS: [TableLayout; 2] = [TableLayout::Interleaved, TableLayout::Split];

    #[test]
    fn a_table_that_does_not_fit_is_refused() {
        let dir = TempDir::new("registry", "fit");
        let (map, path) = table(&dir);
        let f = Arc::new(std::fs::File::open(&path).unwrap());
        for layout in LAYOUTS {
            assert!(Registry::new(&map, 0, f.clone(), layout).is_some());
            assert!(Registry::new(&map, 8, f.clone(), layout).is_none());
            assert!(Registry::new(&map, 4, f.clone(), layout).is_none());
        }
        assert!(Registry::new(&map, 4096, f.clone(), TableLayout::Interleaved).is_none());
        assert!(Registry::new(&map, 4096, f, TableLayout::Split).is_some(), "the split table needs 1,040 KiB");
    }

    #[test]
    fn a_live_process_announcing_a_position_is_alive_and_nobody_else_is() {
        LAYOUTS.iter().for_each(|&l| a_live_process_announcing_a_position_is_alive_and_nobody_else_is_in(l));
    }

    fn a_live_process_announcing_a_position_is_alive_and_nobody_else_is_in(layout: TableLayout) {
        let dir = TempDir::new(&format!("registry-{layout:?}"), "alive");
        let (map, path) = table(&dir);
        let waiters = AtomicU32::new(0);
        let (mut me, mut other) = (process(&map, &path, layout), process(&map, &path, layout));
        assert_eq!(me.register(&waiters), (true, 0));
        assert_eq!(other.register(&waiters), (true, 0));
        assert_ne!(me.mine.unwrap().index, other.mine.unwrap().index);
        assert_eq!(me.live().len(), 2);
        assert_eq!(me.others_alive(), 1);

        other.intent_word(0).unwrap().store(intent_word(Holder::Producer, 100), Ordering::SeqCst);
        assert_eq!(me.holder(Holder::Producer, 100, false), Liveness::Alive);
        assert_eq!(me.holder(Holder::Producer, 163, false), Liveness::Alive, "a claim covers 64 positions");
        assert_eq!(me.holder(Holder::Producer, 164, false), Liveness::Dead);
        assert_eq!(me.holder(Holder::Producer, 99, false), Liveness::Dead);
        assert_eq!(me.holder(Holder::Consumer, 100, false), Liveness::Dead, "the role counts");
        assert_eq!(me.holder(Holder::Producer, 200, true), Liveness::Unknown, "unregistered processes");
        other.add_anonymous();
        assert_eq!(me.holder(Holder::Producer, 200, false), Liveness::Unknown, "threads without a word");
        // Our own announcements count too.
        me.intent_word(3).unwrap().store(intent_word(Holder::Consumer, 7), Ordering::SeqCst);
        assert_eq!(other.holder(Holder::Consumer, 7, false), Liveness::Alive);
    }

    #[test]
    fn a_dead_process_is_proven_dead_and_its_sleepers_uncounted() {
        LAYOUTS.iter().for_each(|&l| a_dead_process_is_proven_dead_and_its_sleepers_uncounted_in(l));
    }

    fn a_dead_process_is_proven_dead_and_its_sleepers_uncounted_in(layout: TableLayout) {
        let dir = TempDir::new(&format!("registry-{layout:?}"), "dead");
        let (map, path) = table(&dir);
        let waiters = AtomicU32::new(0);
        let mut me = process(&map, &path, layout);
        me.register(&waiters);
        let mut other = process(&map, &path, layout);
        other.register(&waiters);
        other.enter_wait(&waiters);
        other.enter_wait(&waiters);
        other.intent_word(0).unwrap().store(intent_word(Holder::Producer, 5), Ordering::SeqCst);
        assert_eq!(waiters.load(Ordering::SeqCst), 2);
        assert_eq!(me.holder(Holder::Producer, 5, false), Liveness::Alive);
        assert_eq!(me.reconcile(&waiters), 0, "a live process's sleepers stay counted");

        // It dies: its lock goes with its file description; its entry stays as it was.
        let index = other.mine.unwrap().index;
        drop(other);
        me.entry(index).pid.store(4_000_000, Ordering::SeqCst);
        assert_eq!(me.holder(Holder::Producer, 5, false), Liveness::Dead);
        let deaths = me.unclean_deaths();
        assert_eq!(deaths, vec![(index, 4_000_000)]);
        assert_eq!(me.reconcile(&waiters), 2);
        assert_eq!(waiters.load(Ordering::SeqCst), 0);
        me.forget(&deaths);
        assert!(me.unclean_deaths().is_empty());
        assert_eq!(me.others_alive(), 0);

        // A newcomer takes the free entry and finds nothing of the dead one's.
        let mut next = process(&map, &path, layout);
        assert_eq!(next.register(&waiters), (true, 0));
        assert_eq!(next.mine.unwrap().index, index);
        assert!(next.intents(index).iter().all(|w| w.0.load(Ordering::SeqCst) == IDLE));
    }

    #[test]
    fn leaving_cleanly_clears_the_pid() {
        LAYOUTS.iter().for_each(|&l| leaving_cleanly_clears_the_pid_in(l));
    }

    fn leaving_cleanly_clears_the_pid_in(layout: TableLayout) {
        let dir = TempDir::new(&format!("registry-{layout:?}"), "leave");
        let (map, path) = table(&dir);
        let waiters = AtomicU32::new(0);
        let me = process(&map, &path, layout);
        let mut other = process(&map, &path, layout);
        other.register(&waiters);
        let index = other.mine.unwrap().index;
        assert_eq!(me.entry(index).pid.load(Ordering::SeqCst), std::process::id());
        drop(other);
        assert_eq!(me.entry(index).pid.load(Ordering::SeqCst), 0);
        assert!(me.unclean_deaths().is_empty(), "a clean leave is no death");
    }

    #[test]
    fn a_full_table_refuses_the_next_process() {
        LAYOUTS.iter().for_each(|&l| a_full_table_refuses_the_next_process_in(l));
    }

    fn a_full_table_refuses_the_next_process_in(layout: TableLayout) {
        let dir = TempDir::new(&format!("registry-{layout:?}"), "full");
        let (map, path) = table(&dir);
        let waiters = AtomicU32::new(0);
        let mut all: Vec<Registry> = (0..MAX_PROCS).map(|_| process(&map, &path, layout)).collect();
        for r in &mut all {
            assert_eq!(r.register(&waiters), (true, 0));
        }
        let mut late = process(&map, &path, layout);
        assert_eq!(late.register(&waiters), (false, 0));
        assert!(late.intent_word(0).is_none(), "no entry, no intent words");
        all.pop();
        assert_eq!(late.register(&waiters), (true, 0), "an entry freed by a leaving process is taken");
    }

    #[test]
    fn the_split_table_touches_only_the_heads_and_the_pages_of_taken_entries() {
        let dir = TempDir::new("registry", "sparse");
        let (map, path) = table(&dir);
        let waiters = AtomicU32::new(0);
        let (mut a, mut b) = (process(&map, &path, TableLayout::Split), process(&map, &path, TableLayout::Split));
        assert_eq!(a.register(&waiters), (true, 0));
        assert_eq!(b.register(&waiters), (true, 0));
        b.intent_word(31).unwrap().store(intent_word(Holder::Consumer, 9), Ordering::SeqCst);
        assert_eq!(a.holder(Holder::Consumer, 9, false), Liveness::Alive);
        assert_eq!(a.holder(Holder::Producer, 9, false), Liveness::Dead);
        assert!(a.unclean_deaths().is_empty());
        assert_eq!(a.reconcile(&waiters), 0);
        assert_eq!((a.others_alive(), a.live().len()), (1, 2));
        a.reset_all();
        let used = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(used <= (HEADS_BYTES + 2 * 4096) as u64, "{used} bytes allocated (the heads and two intent pages)");
        assert_eq!(a.layout().intents_at(1), HEADS_BYTES + 4096);
    }

    #[test]
    fn intent_words_are_handed_out_once_each() {
        let slots = IntentSlots::default();
        let mut got: Vec<usize> = (0..INTENTS).map(|_| slots.acquire().unwrap()).collect();
        assert_eq!(slots.acquire(), None);
        got.sort_unstable();
        assert_eq!(got, (0..INTENTS).collect::<Vec<_>>());
        slots.release(5);
        assert_eq!(slots.acquire(), Some(5));
        assert_eq!(slots.acquire(), None);
    }
}

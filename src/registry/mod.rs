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
//!
//! By concern: `layout` (the entries and the two layouts), `locks` (the
//! entries' byte locks), `announce` (intent words and the judgement of a
//! position's holder), `waiters` (the waiter count by process), `alive`
//! (which processes are attached); this file: [`Registry`], taking an
//! entry and leaving it.

mod alive;
mod announce;
mod layout;
mod locks;
#[cfg(test)]
mod tests;
mod waiters;

pub(crate) use announce::{HolderIs, IntentSlots, NUMBERED_THREADS};
pub(crate) use layout::*;
pub(crate) use locks::LockFile;

use crate::error::{Error, LEASE_LIMIT, SHM_ERR_NOMEM};
use crate::ring::IDLE;
use crate::shm::SharedMap;
use layout::{IntentPage, IntentWord, ProcHead, Table};
use locks::{Locks, lock, unlock};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use waiters::take_waiters;

/// This process's view of a queue file's process table.
pub(crate) struct Registry {
    table: Table,
    /// File offset of the table: entry `i`'s lock byte is at
    /// `table_offset + layout.lock_at(i)`.
    table_offset: u64,
    /// The file of the locks (the mapped one), whose open file description
    /// holds our entry's lock; closed for a detached view, which never
    /// registers.
    file: LockFile,
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
    pub(crate) fn new(map: &SharedMap, table_offset: usize, file: LockFile, layout: TableLayout) -> Option<Registry> {
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

    fn lock_offset(&self, index: usize) -> i64 {
        (self.table_offset + self.layout().lock_at(index) as u64) as i64
    }

    /// What looks at the entries' locks ([`Self::held`]); a detached view's
    /// opens its file again at the first look.
    fn locks(&self) -> Locks<'_> {
        Locks::new(&self.file)
    }

    /// Does another open file description hold entry `index`'s lock? `None`
    /// if unknown. One `fcntl`.
    fn held(&self, locks: &mut Locks<'_>, index: usize) -> Option<bool> {
        locks.held(self.lock_offset(index))
    }

    /// Reserves the storage of entry `index`'s intent page (a hole in a
    /// sparse file), so that a full file system fails here rather than with
    /// a SIGBUS at the first write. `Err(errno)`: no room (`ENOSPC`, `EIO`).
    /// A file system without `fallocate` is left to allocate on write.
    fn reserve_intents(&self, fd: RawFd, index: usize) -> std::result::Result<(), i32> {
        if self.layout() == TableLayout::Interleaved {
            return Ok(()); // written whole when the file was made
        }
        let at = (self.table_offset + self.layout().intents_at(index) as u64) as libc::off_t;
        #[cfg(test)]
        if NO_ROOM.with(std::cell::Cell::get) {
            return Err(libc::ENOSPC);
        }
        // SAFETY: fallocate (mode 0: allocate, inside the file's size) on an fd we own.
        let rc = unsafe { libc::fallocate(fd, 0, at, std::mem::size_of::<IntentPage>() as libc::off_t) };
        match std::io::Error::last_os_error().raw_os_error() {
            Some(e) if rc != 0 && (e == libc::ENOSPC || e == libc::EIO) => Err(e),
            _ => Ok(()),
        }
    }

    /// Takes a free entry (needs the file open for writing). Returns whether
    /// it got one (false when every entry is held by a live process, or the
    /// file is not held open) and how many sleepers of the entry's dead
    /// previous holder were taken off the waiter count.
    pub(crate) fn register(&mut self, global_waiters: &AtomicU32) -> (bool, u32) {
        if self.mine.is_some() {
            return (true, 0);
        }
        let Some(fd) = self.file.held().map(AsRawFd::as_raw_fd) else { return (false, 0) };
        for index in 0..MAX_PROCS {
            if !lock(fd, self.lock_offset(index)) {
                continue;
            }
            // The lock was free: whoever held this entry before is gone, and
            // so are its announcements.
            if let Err(e) = self.reserve_intents(fd, index) {
                unlock(fd, self.lock_offset(index));
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

#[cfg(test)]
thread_local! {
    /// (Tests.) Reserving an entry's intent page fails with `ENOSPC` on
    /// this thread, as on a full file system.
    pub(crate) static NO_ROOM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

//! The process table of a queue file: which processes are attached, and the
//! proof that the holder of a stuck slot is dead.
//!
//! Each attaching process takes an entry of the table by locking one byte of
//! the queue file (an open-file-description lock, `F_OFD_SETLK`). The kernel
//! drops that lock when the process dies, however it dies, so "the byte is
//! not locked" is positive proof that the entry's last holder is gone. The
//! entry's generation, bumped by every new holder, tells an old token from the
//! current holder's. A token is `(entry + 1) << 16 | generation & 0xffff`; it is
//! what a process writes into a slot's `owner` while it holds the slot.
//!
//! The entry also counts the process's threads asleep in a blocking pop, so
//! that the sleepers of a killed process can be taken off the queue's waiter
//! count ([`Registry::reconcile`]).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

// Tokens leave bit 31 to the ring's role bit.
const _: () = assert!((MAX_PROCS as u32) < 1 << 15);

/// Entries in the table: at most this many processes hold a token at once;
/// later ones still work, with token 0 (their stalls recover by timeout only).
pub const MAX_PROCS: usize = 1024;

/// One process's entry (32 bytes, in the queue file).
#[repr(C)]
pub struct ProcEntry {
    /// Pid of the holder, for display (0: never held or left cleanly).
    /// Liveness is decided by the lock, never by this pid.
    pub pid: AtomicU32,
    /// Bumped by each new holder.
    pub generation: AtomicU32,
    /// The holder's threads currently counted in the queue's waiter count.
    pub waiters: AtomicU32,
    _reserved: u32,
    /// When the holder registered, nanoseconds since the Unix epoch.
    pub since_ns: AtomicU64,
    _reserved2: u64,
}

/// Size of the table in the file.
pub const TABLE_BYTES: usize = MAX_PROCS * std::mem::size_of::<ProcEntry>();

/// Is a token's process alive?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// Proven dead: its lock is gone, or its entry has a new holder.
    Dead,
    /// Its lock is held under the token's generation.
    Alive,
    /// No token (0), a malformed one, or the check failed.
    Unknown,
}

/// This process's view of a queue file's process table.
pub struct Registry {
    table: *const ProcEntry,
    /// File offset of entry 0: entry `i`'s lock byte is `table_offset + 32 i`.
    table_offset: u64,
    fd: RawFd,
    mine: Option<Mine>,
}

#[derive(Clone, Copy)]
struct Mine {
    index: usize,
    token: u32,
    pid: u32,
}

// SAFETY: the table is atomics in a shared mapping that outlives the
// Registry (the owning queue keeps both); the fd is only used for fcntl.
unsafe impl Send for Registry {}
// SAFETY: as above; every access is atomic or a system call.
unsafe impl Sync for Registry {}

impl Registry {
    /// A view of the table at `table` (file offset `table_offset`) of the file
    /// open as `fd`, without registering.
    ///
    /// # Safety
    /// `table` points to `MAX_PROCS` entries (8-aligned) inside a mapping of
    /// that file that stays mapped, and `fd` stays open, while the Registry lives.
    pub unsafe fn new(table: *const ProcEntry, table_offset: u64, fd: RawFd) -> Registry {
        Registry { table, table_offset, fd, mine: None }
    }

    fn entry(&self, index: usize) -> &ProcEntry {
        assert!(index < MAX_PROCS);
        // SAFETY: index < MAX_PROCS, and `new`'s contract keeps the table mapped.
        unsafe { &*self.table.add(index) }
    }

    fn lock_offset(&self, index: usize) -> i64 {
        (self.table_offset + (index * std::mem::size_of::<ProcEntry>()) as u64) as i64
    }

    /// Takes a free entry (needs the file open for writing). Returns the
    /// token (0 when every entry is held by a live process) and how many
    /// sleepers of the entry's dead previous holder were taken off the
    /// waiter count.
    pub fn register(&mut self, global_waiters: &AtomicU32) -> (u32, u32) {
        if let Some(m) = self.mine {
            return (m.token, 0);
        }
        for index in 0..MAX_PROCS {
            if !lock(self.fd, self.lock_offset(index)) {
                continue;
            }
            // The lock was free: whoever held this entry before is gone.
            let entry = self.entry(index);
            let reconciled = take_waiters(entry, global_waiters);
            let generation = entry.generation.fetch_add(1, Ordering::SeqCst).wrapping_add(1);
            let pid = std::process::id();
            entry.pid.store(pid, Ordering::Relaxed);
            entry.since_ns.store(crate::queue_file::now_ns(), Ordering::Relaxed);
            let token = ((index as u32 + 1) << 16) | (generation & 0xffff);
            self.mine = Some(Mine { index, token, pid });
            return (token, reconciled);
        }
        (0, 0)
    }

    /// This process's token (0 if not registered).
    pub fn token(&self) -> u32 {
        self.mine.map_or(0, |m| m.token)
    }

    /// Is the process behind `token` alive? One `fcntl` call at most.
    pub fn liveness(&self, token: u32) -> Liveness {
        let index = (token >> 16) as usize;
        if index == 0 || index > MAX_PROCS {
            return Liveness::Unknown;
        }
        let index = index - 1;
        if let Some(m) = self.mine {
            if m.token == token {
                return Liveness::Alive;
            }
        }
        match held(self.fd, self.lock_offset(index)) {
            None => Liveness::Unknown,
            Some(false) => Liveness::Dead,
            Some(true) if self.entry(index).generation.load(Ordering::SeqCst) & 0xffff != token & 0xffff => {
                Liveness::Dead
            }
            Some(true) => Liveness::Alive,
        }
    }

    /// Counts one of our threads into the waiter count before it sleeps. The
    /// global count goes first, so that a kill between the two steps leaves it
    /// too high (a spare wake-up), never too low (a missed one).
    pub fn enter_wait(&self, global_waiters: &AtomicU32) {
        global_waiters.fetch_add(1, Ordering::SeqCst);
        if let Some(m) = self.mine {
            self.entry(m.index).waiters.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Undoes [`enter_wait`](Self::enter_wait), in the opposite order.
    pub fn leave_wait(&self, global_waiters: &AtomicU32) {
        if let Some(m) = self.mine {
            self.entry(m.index).waiters.fetch_sub(1, Ordering::SeqCst);
        }
        global_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Takes the sleepers of dead processes off the waiter count. Returns how
    /// many were removed. Costs one `fcntl` per entry that has sleepers.
    pub fn reconcile(&self, global_waiters: &AtomicU32) -> u32 {
        let mut removed = 0;
        for index in 0..MAX_PROCS {
            let entry = self.entry(index);
            if entry.waiters.load(Ordering::Relaxed) == 0 {
                continue;
            }
            if self.mine.is_some_and(|m| m.index == index) {
                continue;
            }
            if held(self.fd, self.lock_offset(index)) == Some(false) {
                removed += take_waiters(entry, global_waiters);
            }
        }
        removed
    }

    /// Processes that died without detaching (their entry still names a pid
    /// but nobody holds its lock): `(index, pid)`. One `fcntl` per named entry.
    pub fn unclean_deaths(&self) -> Vec<(usize, u32)> {
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_none_or(|m| m.index != i))
            .filter_map(|i| {
                let pid = self.entry(i).pid.load(Ordering::Relaxed);
                (pid != 0 && held(self.fd, self.lock_offset(i)) == Some(false)).then_some((i, pid))
            })
            .collect()
    }

    /// Marks dead entries as dealt with (after a repair), if still unheld.
    pub fn forget(&self, deaths: &[(usize, u32)]) {
        for &(index, pid) in deaths {
            let _ = self.entry(index).pid.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::Relaxed);
        }
    }

    /// Live processes other than this one.
    pub fn others_alive(&self) -> usize {
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_none_or(|m| m.index != i) && held(self.fd, self.lock_offset(i)) == Some(true))
            .count()
    }

    /// Live entries: `(index, pid, since_ns, waiters)`; one `fcntl` each.
    pub fn live(&self) -> Vec<(usize, u32, u64, u32)> {
        (0..MAX_PROCS)
            .filter(|&i| self.mine.is_some_and(|m| m.index == i) || held(self.fd, self.lock_offset(i)) == Some(true))
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
fn take_waiters(entry: &ProcEntry, global_waiters: &AtomicU32) -> u32 {
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

/// Does another open file description hold the byte? `None` if unknown.
fn held(fd: RawFd, offset: i64) -> Option<bool> {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}

//! The byte locks of the entries (open-file-description locks: the kernel
//! drops one when its holder dies, however it dies).

use std::os::fd::RawFd;

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
pub(super) fn lock(fd: RawFd, offset: i64) -> bool {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) == 0 }
}

/// Releases our lock on one byte.
pub(super) fn unlock(fd: RawFd, offset: i64) {
    let mut fl = flock_at(libc::F_UNLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl) };
}

/// Does another open file description hold the byte? `None` if unknown.
pub(super) fn held(fd: RawFd, offset: i64) -> Option<bool> {
    let mut fl = flock_at(libc::F_WRLCK, offset);
    // SAFETY: fcntl with a valid flock pointer; the kernel validates the fd.
    if unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut fl) } != 0 {
        return None;
    }
    Some(fl.l_type != libc::F_UNLCK as libc::c_short)
}
